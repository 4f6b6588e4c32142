"""What a synthesized stack declares for its Slurm VMs, read from the recorded resources (no copy of stack logic).

From `fleet synth` (in-process, `fleet.synth.run.synth_file`): every `gcp:compute/instance:Instance`
(controller, login) and every `gcp:compute/instanceTemplate:InstanceTemplate` (a pool's nodes) with its
metadata (the script is its `startup-script` key), its service account, zone and attached persistent
disks (`gcp:compute/disk:Disk`, by device name); the system subnet's CIDR; Secret Manager secrets and the
IAM members granted `secretAccessor` on each.  Node names come from the stack's `clusters.*.nodesets` output.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field
from typing import Any

INSTANCE = "gcp:compute/instance:Instance"
DISK = "gcp:compute/disk:Disk"
TEMPLATE = "gcp:compute/instanceTemplate:InstanceTemplate"
SUBNET = "gcp:compute/subnetwork:Subnetwork"
SECRET = "gcp:secretmanager/secret:Secret"
SECRET_IAM = "gcp:secretmanager/secretIamMember:SecretIamMember"
ACCESSOR = "roles/secretmanager.secretAccessor"


@dataclass
class DeclaredVm:
    """One VM as GCE would create it from the declared instance or template."""

    name: str
    zone: str
    service_account: str
    metadata: dict[str, str]
    machine_type: str
    network_ip: str | None = None  # a reserved address, when the stack gives one
    pool: str | None = None  # None for the controller / login VMs
    disks: dict[str, str] = field(default_factory=dict)  # device name -> name of the attached persistent disk


@dataclass
class Declared:
    project: str
    subnet: ipaddress.IPv4Network
    vms: dict[str, DeclaredVm]
    secrets: dict[str, set[str]] = field(default_factory=dict)  # secret id -> accessor members
    outputs: dict[str, Any] = field(default_factory=dict)

    def controller(self, cluster: str) -> DeclaredVm:
        return self.vms[self.outputs["clusters"][cluster]["controller"]]

    def nodes(self, cluster: str, pool: str) -> list[DeclaredVm]:
        return [vm for vm in self.vms.values() if vm.pool == f"{cluster}/{pool}"]


def _expand(hostlist: str) -> list[str]:
    """`fb-mega-[0-1]` / `fb-ultra-0` -> names (the simple forms the renderer writes)."""
    m = re.fullmatch(r"(.*)\[(\d+)-(\d+)\]", hostlist)
    if not m:
        return [hostlist]
    return [f"{m[1]}{i}" for i in range(int(m[2]), int(m[3]) + 1)]


def _metadata(inputs: dict[str, Any]) -> dict[str, str]:
    md = {k: str(v) for k, v in (inputs.get("metadata") or {}).items()}
    if "metadataStartupScript" in inputs:
        md["startup-script"] = inputs["metadataStartupScript"]
    return md


def declared(synthesis: Any) -> Declared:
    """Read a `fleet.synth.run.Synthesis` of a single-fleet stack."""
    res = synthesis.result.resources
    out = synthesis.result.outputs
    systems = [r for r in res if r.type == SUBNET and r.inputs.get("privateIpGoogleAccess")]
    if len(systems) != 1:
        raise ValueError(f"expected one system subnet (privateIpGoogleAccess), found {len(systems)}")
    project = systems[0].inputs["project"]
    vms: dict[str, DeclaredVm] = {}
    disks = {r.inputs["name"] for r in res if r.type == DISK}
    for r in res:
        if r.type == INSTANCE:
            nics = r.inputs.get("networkInterfaces") or [{}]
            attached = {a["deviceName"]: str(a["source"]).rsplit("/", 1)[-1] for a in r.inputs.get("attachedDisks", [])}
            unknown = set(attached.values()) - disks
            if unknown:
                raise ValueError(f"{r.inputs['name']}: attached disks {sorted(unknown)} are not declared")
            vms[r.inputs["name"]] = DeclaredVm(
                name=r.inputs["name"],
                zone=r.inputs["zone"],
                service_account=r.inputs["serviceAccount"]["email"],
                metadata=_metadata(r.inputs),
                machine_type=r.inputs["machineType"],
                network_ip=nics[0].get("networkIp"),
                disks=attached,
            )
    templates = {r.inputs["labels"]["gpu-fleet-pool"]: r for r in res if r.type == TEMPLATE}
    migs = [r for r in res if r.type == "gcp:compute/instanceGroupManager:InstanceGroupManager"]
    for cluster, info in out["clusters"].items():
        for nodeset in info["nodesets"]:
            stem = f"{cluster}-{nodeset['name']}"
            tpl = templates[stem]
            zone = next(m.inputs["zone"] for m in migs if m.inputs["name"].startswith(f"{stem}-"))
            for node in _expand(nodeset["nodes"]):
                vms[node] = DeclaredVm(
                    name=node,
                    zone=zone,
                    service_account=tpl.inputs["serviceAccount"]["email"],
                    metadata=_metadata(tpl.inputs),
                    machine_type=tpl.inputs["machineType"],
                    pool=f"{cluster}/{nodeset['name']}",
                )
    secrets: dict[str, set[str]] = {r.inputs["secretId"]: set() for r in res if r.type == SECRET}
    for r in res:
        if r.type == SECRET_IAM and r.inputs["role"] == ACCESSOR:
            secrets.setdefault(r.inputs["secretId"], set()).add(r.inputs["member"])
    return Declared(project, ipaddress.ip_network(systems[0].inputs["ipCidrRange"]), vms, secrets, out)
