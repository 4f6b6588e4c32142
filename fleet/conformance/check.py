"""Check a synthesized GCP stack (`fleet synth --json` output) against `reference.yaml`.

Pure: takes the JSON document `fleet.synth` produces and returns one line per violation, naming the
resource, the fact, what the stack has and what the reference (and its source file) says.  Only
machine types the reference knows are checked in detail; every stack is checked for its images, its
RoCE firewall, its reservation pools' placement and its slurm.conf keys.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

import yaml

from autoscaler.kube.source import pools_for
from fleet.spec.kube import GKE_NODEPOOL_LABEL

JSON = dict[str, Any]


@dataclass(frozen=True)
class Reference:
    raw: JSON

    def source(self, key: str) -> str:
        return self.raw["sources"].get(key, key)


@cache
def load_reference() -> Reference:
    return Reference(yaml.safe_load(resources.files("fleet.conformance").joinpath("reference.yaml").read_text()))


def _of(doc: JSON, suffix: str) -> list[JSON]:
    return [r for r in doc["resources"] if r["type"].endswith(suffix)]


def _conf_settings(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#") and " " not in line and "=" in line:
            key, _, value = line.partition("=")
            out[key] = value
    return out


def _fields(line: str) -> dict[str, str]:
    return dict(item.split("=", 1) for item in line.split() if "=" in item)


def _networks(doc: JSON) -> dict[str, JSON]:
    """Network resources by the self link components put in NICs (…/global/networks/<name>)."""
    return {r["inputs"]["name"]: r for r in _of(doc, "compute/network:Network")}


def _net_name(link: str) -> str:
    return link.rstrip("/").rsplit("/", 1)[-1]


def check_stack(doc: JSON, ref: Reference | None = None) -> list[str]:
    """Every way `doc` departs from the reference (empty: conforms)."""
    ref = ref or load_reference()
    errors: list[str] = []
    nets = _networks(doc)
    templates = _of(doc, "compute/instanceTemplate:InstanceTemplate")
    controllers = [r for r in _of(doc, "compute/instance:Instance") if "slurm-conf" in r["inputs"].get("metadata", {})]
    confs = {r["inputs"]["metadata"]["slurm-conf"] for r in controllers} | {
        t["inputs"]["metadata"]["slurm-conf"] for t in templates if "slurm-conf" in t["inputs"].get("metadata", {})
    }
    errors += _check_images(templates, ref)
    errors += _check_roce(doc, nets, ref)
    errors += _check_reservations(templates)
    errors += _check_controller(doc, ref)
    errors += _check_lustre_firewall(doc, ref)
    for tpl in templates:
        machine = tpl["inputs"]["machineType"]
        facts = ref.raw["machines"].get(machine)
        if facts:
            errors += _check_machine(tpl, facts, nets, ref)
    for conf in confs:
        errors += _check_slurm_conf(conf, templates, ref)
    for vm in controllers:
        if str(vm["inputs"].get("name", "")).endswith("-controller"):
            errors += _check_accounting(vm, ref)
    if _of(doc, "storage/bucket:Bucket"):
        for tpl in templates:
            errors += _check_checkpoint_mount(tpl, ref)
    errors += _check_gke_fabric(doc, ref)
    return errors


def _runs_on(daemonset: JSON | None, pool: str) -> bool:
    """Whether `daemonset` (None: absent) schedules on the nodes of GKE node pool `pool`, which carry its name in
    GKE's node-pool label (the daemon's own selector matching: `autoscaler.kube.source.pools_for`)."""
    if daemonset is None:
        return False
    selected = pools_for(daemonset["spec"]["template"]["spec"], {pool: {GKE_NODEPOOL_LABEL: pool}})
    return selected is None or pool in selected


def _mounts(spec: JSON, container: JSON) -> dict[str, str]:
    """node path -> container path of a container's hostPath mounts."""
    host = {v["name"]: v["hostPath"]["path"] for v in spec.get("volumes", []) if "hostPath" in v}
    return {host[m["name"]]: m["mountPath"] for m in container.get("volumeMounts", []) if m["name"] in host}


def _check_gke_fabric(doc: JSON, ref: Reference) -> list[str]:
    """Every GKE node pool of a GPUDirect machine type gets its fabric's installer (and the device injector where
    the fabric needs it), doing what Google's manifest does: image, mounts, script steps in order."""
    facts = ref.raw["gke_fabric"]
    sets = {
        r["inputs"]["metadata"]["name"]: r["inputs"]
        for r in _of(doc, "kubernetes:apps/v1:DaemonSet")
        if r["inputs"].get("metadata", {}).get("namespace") == "kube-system"
    }
    injector = facts["device_injector"]
    nets = _networks(doc)
    errors: list[str] = []
    for pool in _of(doc, "container/nodePool:NodePool"):
        machine = pool["inputs"].get("nodeConfig", {}).get("machineType")
        mtu = facts["gpu_vpc_mtu"].get(machine)
        extra = pool["inputs"].get("networkConfig", {}).get("additionalNodeNetworkConfigs", [])
        for link in [n["network"] for n in extra] if mtu else []:
            got = nets.get(_net_name(link), {}).get("inputs", {}).get("mtu")
            if got != mtu["mtu"]:
                src = ref.source(mtu["source"])
                errors.append(f"node pool {pool['inputs']['name']}: GPU VPC {link} MTU {got}, {src} sets {mtu['mtu']}")
        kind = facts["machines"].get(machine)
        if kind is None:
            continue
        inst = facts["installers"][kind]
        name = pool["inputs"]["name"]
        wanted = [inst["daemonset"]] + ([injector["daemonset"]] if inst["device_injector"] else [])
        for ds in wanted:
            if not _runs_on(sets.get(ds), name):
                errors.append(f"node pool {name}: no {ds} on it ({kind}: {ref.source(inst['source'])})")
    for kind, inst in facts["installers"].items():
        if inst["daemonset"] in sets:
            errors += _check_installer(kind, inst, sets[inst["daemonset"]], ref)
    if injector["daemonset"] in sets:
        spec = sets[injector["daemonset"]]["spec"]["template"]["spec"]
        (main,) = spec["containers"]
        src = ref.source(injector["source"])
        if main["image"] != injector["image"]:
            errors.append(f"{injector['daemonset']}: image {main['image']}, {src} pins {injector['image']}")
        if _mounts(spec, main) != injector["mounts"]:
            errors.append(f"{injector['daemonset']}: mounts {_mounts(spec, main)}, {src}: {injector['mounts']}")
    return errors


def _check_installer(kind: str, inst: JSON, daemonset: JSON, ref: Reference) -> list[str]:
    spec = daemonset["spec"]["template"]["spec"]
    src, name = ref.source(inst["source"]), inst["daemonset"]
    repository = inst["image_repository"]
    installs = [c for c in spec.get("initContainers", []) if c["image"].rsplit(":", 1)[0] == repository]
    errors: list[str] = []
    if not installs:
        return [f"{name}: no init container runs {repository} ({src})"]
    install = installs[-1]
    tag = install["image"].rsplit(":", 1)[-1]
    if inst.get("image_tag") and tag != inst["image_tag"]:
        errors.append(f"{name}: {repository}:{tag}, {src} qualifies {inst['image_tag']}")
    if _mounts(spec, install) != inst["mounts"]:
        errors.append(f"{name}: mounts {_mounts(spec, install)}, {src}: {inst['mounts']}")
    script = "\n".join(install.get("args", []))
    at = [script.find(step) for step in inst["steps"]]
    if -1 in at or at != sorted(at):
        errors.append(f"{name}: its script does not run {inst['steps']} in that order ({src})")
    node_steps = inst.get("node_steps", [])
    if node_steps:
        first = spec["initContainers"][0]
        text = " ".join([*first.get("command", []), *first.get("args", [])])
        missing = [step for step in node_steps if step not in text]
        if first is install or missing:
            errors.append(f"{name}: its first init container lacks {missing or node_steps} ({src})")
    return errors


def _check_images(templates: list[JSON], ref: Reference) -> list[str]:
    want = ref.raw["images"]["gpu"]
    out = []
    for tpl in templates:
        name = tpl["name"]
        image = tpl["inputs"]["disks"][0]["sourceImage"]
        m = re.match(r"^projects/(?P<project>[^/]+)/global/images/family/(?P<family>[^/]+)$", image)
        baked = not m or m["project"] != want["project"]
        if not baked and not re.match(want["family_pattern"], m["family"]):
            out.append(f"{name}: image family {m['family']!r} is not an accelerator family with an NVIDIA driver "
                       f"({want['family_pattern']}; {ref.source('a3mega')})")  # fmt: skip
        secure = tpl["inputs"].get("shieldedInstanceConfig", {}).get("enableSecureBoot")
        machine = ref.raw["machines"].get(tpl["inputs"].get("machineType"), {})
        expected = machine.get("secure_boot", want["secure_boot"])
        if not baked and secure is not expected:
            why = (
                f"the accelerator image's driver is signed: expected on ({ref.source('accelerator_images')})"
                if expected
                else f"its fabric loads a module built on the node: expected off ({ref.source(machine['source'])})"
            )
            out.append(f"{name}: Secure Boot {secure}, {why}")
    return out


def _check_roce(doc: JSON, nets: dict[str, JSON], ref: Reference) -> list[str]:
    out = []
    roce = {n for n, r in nets.items() if str(r["inputs"].get("networkProfile", "")).endswith("-vpc-roce")}
    rules = ref.raw["roce_firewall"]
    for fw in _of(doc, "compute/firewall:Firewall"):
        if _net_name(fw["inputs"]["network"]) in roce:
            out.append(f"{fw['name']}: a VPC firewall rule on the RoCE VPC (none: {ref.source(rules['source'])})")
    for rule in _of(doc, "RegionNetworkFirewallPolicyRule"):
        match = rule["inputs"].get("match", {})
        src = match.get("srcIpRanges")
        if src and sorted(src) != sorted(rules["allowed_policy_sources"]):
            out.append(f"{rule['name']}: RDMA_ROCE_POLICY rule with srcIpRanges {src}: GCP accepts only "
                       f"{rules['allowed_policy_sources']} or secure tags ({ref.source(rules['source'])})")  # fmt: skip
    return out


def _check_controller(doc: JSON, ref: Reference) -> list[str]:
    """Slurm VMs carry their script as metadata; each controller keeps its state on its own, non-auto-deleted
    disk in its zone."""
    facts = ref.raw["controller"]
    src = ref.source(facts["source"])
    want = facts["state_disk"]
    disks = {r["inputs"]["name"]: r for r in _of(doc, "compute/disk:Disk")}
    out = []
    for vm in _of(doc, "compute/instance:Instance"):
        inputs, name = vm["inputs"], vm["name"]
        if "slurm-conf" not in inputs.get("metadata", {}):
            continue
        if facts["startup_script_in_metadata"] and "metadataStartupScript" in inputs:
            out.append(f"{name}: startup script in metadata_startup_script, which replaces the VM on every change "
                       f"(metadata startup-script: {src})")  # fmt: skip
        if not str(inputs.get("name", "")).endswith("-controller"):
            continue
        attached = [a for a in inputs.get("attachedDisks", []) if _net_name(str(a.get("source", ""))) in disks]
        if not attached:
            out.append(f"{name}: no state disk: the Slurm state is on the boot disk ({src})")
        for a in attached:
            disk = disks[_net_name(a["source"])]["inputs"]
            if a.get("autoDelete", want["auto_delete"]) is not want["auto_delete"]:
                out.append(f"{name}: state disk {disk['name']} is deleted with the VM ({src})")
            if disk.get("zone") != inputs.get("zone"):
                out.append(f"{name}: state disk {disk['name']} in {disk.get('zone')}, the VM in {inputs.get('zone')}")
            if disk.get("type") not in want["types"] or int(disk.get("size", 0)) < want["size_gb"]:
                out.append(f"{name}: state disk {disk['name']} {disk.get('type')} {disk.get('size')} GB, reference "
                           f"{want['types'][0]} >= {want['size_gb']} GB ({src})")  # fmt: skip
    return out


def _check_accounting(vm: JSON, ref: Reference) -> list[str]:
    """slurmctld sends job records to a slurmdbd on the controller, which the controller's script starts (with its
    database) before slurmctld."""
    facts = ref.raw["accounting"]
    src = ref.source(facts["source"])
    md = vm["inputs"].get("metadata", {})
    s = _conf_settings(md.get("slurm-conf", ""))
    name = vm["name"]
    out = [f"{name}: slurm.conf {k}={s.get(k)!r}, reference {v!r} ({ref.source('long_prolog_tpl')})"
           for k, v in facts["slurm_conf"].items() if s.get(k) != v]  # fmt: skip
    host = s.get("SlurmctldHost", "").split("(", 1)[0]
    if facts["accounting_host_is_controller"] and s.get("AccountingStorageHost") != host:
        out.append(f"{name}: slurm.conf AccountingStorageHost={s.get('AccountingStorageHost')!r}, reference the "
                   f"controller {host!r} ({ref.source('long_prolog_tpl')})")  # fmt: skip
    dbd = _conf_settings(md.get("slurmdbd-conf", ""))
    out += [f"{name}: slurmdbd.conf {k}={dbd.get(k)!r}, reference {v!r} ({ref.source('slurmdbd_tpl')})"
            for k, v in facts["slurmdbd_conf"].items() if dbd.get(k) != v]  # fmt: skip
    script = md.get("startup-script", "")
    at = [script.find(step) for step in facts["controller_order"]]
    if -1 in at or at != sorted(at):
        missing = [step for step, i in zip(facts["controller_order"], at, strict=True) if i < 0]
        out.append(f"{name}: the controller's script does not run {' -> '.join(facts['controller_order'])} in that "
                   f"order{f' (missing: {missing})' if missing else ''} ({src})")  # fmt: skip
    return out


def _check_checkpoint_mount(tpl: JSON, ref: Reference) -> list[str]:
    """A GPU node of a stack with a checkpoint bucket mounts it for jobs as the Toolkit's A3 Mega gcsfuse blueprint
    does: gcsfuse with allow_other, before slurmd, staging writes on the local SSD where there is one."""
    facts = ref.raw["checkpoint_mount"]
    src, name = ref.source(facts["source"]), tpl["name"]
    script = tpl["inputs"].get("metadata", {}).get("startup-script", "")
    if "slurmd" not in script:
        return []
    if "gcsfuse --config-file" not in script:
        return [f"{name}: the checkpoint bucket is not mounted for jobs (no gcsfuse mount) ({src})"]
    out = []
    if f"fuse-options: {facts['fuse_options']}" not in script:
        out.append(f"{name}: the checkpoint mount lacks fuse-options {facts['fuse_options']} ({src})")
    mount, slurmd = script.find("mount_checkpoints ||"), script.find("systemctl restart slurmd")
    if facts["before_slurmd"] and not (0 <= mount < slurmd and "Before=slurmd.service" in script):
        out.append(f"{name}: the checkpoint bucket is not mounted before slurmd starts ({src})")
    lssd = facts["temp_dir_on_local_ssd"]
    if f"{lssd} " in script and f"temp-dir: {lssd}" not in script:
        out.append(f"{name}: the checkpoint mount does not stage writes on the local SSD {lssd} ({src})")
    return out


def _check_lustre_firewall(doc: JSON, ref: Reference) -> list[str]:
    """A stack with Managed Lustre lets the private services access range in on LNet's port."""
    if not _of(doc, "lustre/instance:Instance"):
        return []
    facts = ref.raw["lustre_firewall"]
    prefixes = {
        f"/{r['inputs'].get('prefixLength')}"
        for r in _of(doc, "compute/globalAddress:GlobalAddress")
        if r["inputs"].get("purpose") == "VPC_PEERING"
    }
    for fw in _of(doc, "compute/firewall:Firewall"):
        inputs = fw["inputs"]
        sources = inputs.get("sourceRanges") or []
        allows = [a for a in inputs.get("allows", []) if a.get("protocol") == facts["protocol"]]
        if (
            inputs.get("direction", "INGRESS") == "INGRESS"
            and sources
            and all(any(s.endswith(p) for p in prefixes) for s in sources)
            and any(set(facts["ports"]) <= set(a.get("ports", [])) for a in allows)
        ):
            return []
    return [
        f"Managed Lustre: no firewall rule lets the private services access range in on {facts['protocol']} "
        f"{', '.join(facts['ports'])} ({ref.source(facts['source'])})"
    ]


def _check_reservations(templates: list[JSON]) -> list[str]:
    out = []
    for tpl in templates:
        affinity = tpl["inputs"].get("reservationAffinity", {})
        if affinity.get("type") == "SPECIFIC_RESERVATION" and tpl["inputs"].get("resourcePolicies"):
            out.append(f"{tpl['name']}: a specific-reservation pool with its own placement policy "
                       "(the reservation carries the placement; GCE refuses an external policy)")  # fmt: skip
    return out


def _check_machine(tpl: JSON, facts: JSON, nets: dict[str, JSON], ref: Reference) -> list[str]:
    name, src = tpl["name"], ref.source(facts["source"])
    out = []
    nics = tpl["inputs"]["networkInterfaces"]
    types = [n.get("nicType") for n in nics]
    if len(nics) != facts["nics"]["count"] or types != facts["nics"]["types"]:
        out.append(f"{name}: NICs {types}, reference {facts['nics']['types']} ({src})")
    mtus = [nets[_net_name(n["network"])]["inputs"].get("mtu") for n in nics if _net_name(n["network"]) in nets]
    if mtus and mtus[0] != facts["mtu"]["system"]:
        out.append(f"{name}: system VPC MTU {mtus[0]}, reference {facts['mtu']['system']} ({src})")
    if any(m != facts["mtu"]["gpu"] for m in mtus[1:]):
        out.append(f"{name}: GPU VPC MTUs {sorted(set(mtus[1:]))}, reference {facts['mtu']['gpu']} ({src})")
    if "gpu_vpcs" in facts and len({n["network"] for n in nics[1:]}) != facts["gpu_vpcs"]:
        out.append(f"{name}: {len({n['network'] for n in nics[1:]})} GPU VPCs, reference {facts['gpu_vpcs']} ({src})")
    if "rdma_subnets" in facts:
        rdma = [n for n in nics if n.get("nicType") == "MRDMA"]
        if len({n["subnetwork"] for n in rdma}) != facts["rdma_subnets"] or len({n["network"] for n in rdma}) != 1:
            out.append(f"{name}: RDMA NICs must use {facts['rdma_subnets']} subnets of one RoCE VPC ({src})")
        for n in rdma[:1]:
            profile = str(nets.get(_net_name(n["network"]), {}).get("inputs", {}).get("networkProfile", ""))
            if not profile.endswith(facts["network_profile_suffix"]):
                out.append(f"{name}: RoCE VPC network profile {profile!r} ({src})")
    if "boot_disk_type" in facts and tpl["inputs"]["disks"][0].get("diskType") != facts["boot_disk_type"]:
        out.append(f"{name}: boot disk {tpl['inputs']['disks'][0].get('diskType')}, reference "
                   f"{facts['boot_disk_type']} ({src})")  # fmt: skip
    out += _check_fabric_script(name, tpl["inputs"].get("metadata", {}).get("startup-script", ""), facts, ref)
    return out


def _check_fabric_script(name: str, script: str, facts: JSON, ref: Reference) -> list[str]:
    fab = ref.raw["fabric_software"][facts["fabric"]]
    src = ref.source(fab["source"])
    want = [fab[k] for k in ("rxdm_image", "nccl_plugin_image", "package", "udev_match", "slurmd_waits_for",
                             "nccl_package", "env_script", "lib_dir") if k in fab]  # fmt: skip
    want += list(fab.get("packages", [])) + [e for e in fab.get("env", [])]
    if "kernel_module" in fab:
        want.append(f"modprobe {fab['kernel_module']}")
    return [f"{name}: the node's startup script lacks {w!r} ({src})" for w in want if w not in script]


def _check_slurm_conf(conf: str, templates: list[JSON], ref: Reference) -> list[str]:
    facts = ref.raw["slurm_conf"]
    src = ref.source(facts["source"])
    s = _conf_settings(conf)
    out = [f"slurm.conf: {k}={s.get(k)!r}, reference {v!r} ({src})" for k, v in facts["keys"].items() if s.get(k) != v]
    params = s.get("SlurmctldParameters", "").split(",")
    out += [
        f"slurm.conf: SlurmctldParameters lacks {p} ({src})" for p in facts["slurmctld_parameters"] if p not in params
    ]
    if not re.match(facts["slurmctld_host_pattern"], s.get("SlurmctldHost", "")):
        out.append(f"slurm.conf: SlurmctldHost={s.get('SlurmctldHost')!r} carries no address "
                   f"({ref.source('long_prolog_tpl')})")  # fmt: skip
    machines = ref.raw["machines"]
    fabrics = {machines[m]["fabric"] for m in machines if re.search(rf"Features=[^ ]*\b{m}\b", conf)}
    for fabric in sorted(fabrics):
        for key, value in ref.raw["fabric_software"][fabric].get("slurm_conf", {}).items():
            if s.get(key) != value:
                out.append(f"slurm.conf: {key}={s.get(key)!r}, reference {value!r} with {fabric} nodes "
                           f"({ref.source('long_prolog_tpl')})")  # fmt: skip
    by_feature = {}
    for line in conf.splitlines():
        if line.startswith("NodeName="):
            f = _fields(line)
            machine = next((m for m in f.get("Features", "").split(",") if m in machines), None)
            if machine:
                by_feature[f["NodeName"]] = machine
                for key, value in machines[machine]["node_conf"].items():
                    if f.get(key) != str(value):
                        out.append(f"slurm.conf: {f['NodeName']} {key}={f.get(key)}, reference {value} "
                                   f"({ref.source(machines[machine]['source'])})")  # fmt: skip
    nodeset_machine = {}
    for line in conf.splitlines():
        if line.startswith("NodeSet="):
            f = _fields(line)
            nodeset_machine[f["NodeSet"]] = by_feature.get(f["Nodes"])
    for line in conf.splitlines():
        if line.startswith("PartitionName="):
            f = _fields(line)
            ms = {nodeset_machine.get(n) for n in f.get("Nodes", "").split(",")}
            if len(ms) == 1 and (m := ms.pop()):
                for key, value in machines[m]["partition_conf"].items():
                    if f.get(key) != value:
                        out.append(f"slurm.conf: partition {f['PartitionName']} {key}={f.get(key)}, reference {value} "
                                   f"({ref.source(machines[m]['source'])})")  # fmt: skip
    return out
