"""The guardrails every gpu-fleet stack must pass, as pure functions over (resource type, properties).

One definition, two runners: the Pulumi CrossGuard pack in `policies/` (`pulumi preview --policy-pack
policies`) and the offline `fleet policy check` (fleet/policy/check.py, over the resources `fleet synth`
records).  Properties are the engine's view of a resource's inputs (camelCase keys, e.g. `networkInterfaces`),
which is what both runners hand over.  Standard library only: the pack runs in its own virtualenv.

Resource policies (`RESOURCE_POLICIES`) look at one resource; stack policies (`STACK_POLICIES`) at all of them
(the per-stack GPU cap, which needs the autoscaler inventory on the controller).  Each returns a list of
violation messages; an empty list is compliant.  `Settings` holds what a platform team tunes (approved
regions, GPU caps, required labels); `DEFAULT_SETTINGS` is what ships.
"""

from __future__ import annotations

import ipaddress
import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

MANDATORY = "mandatory"
ADVISORY = "advisory"


@dataclass(frozen=True)
class Settings:
    """approved_regions: where resources may live (multi-region bucket locations by name, e.g. "us").
    required_labels: on every billable resource, non-empty.
    max_gpus: the default per-stack GPU cap (static VMs + every pool at max_nodes); stack_max_gpus: per stack.
    dev_stack_pattern: stacks matching it (or labelled env=dev) are dev stacks (advisory: spot capacity)."""

    approved_regions: frozenset[str] = frozenset(
        {"us-central1", "us-east1", "us-east4", "us-east5", "us-west1", "us-west4", "europe-west4", "asia-southeast1"}
    )
    approved_multi_regions: frozenset[str] = frozenset({"us", "eu"})
    required_labels: tuple[str, ...] = ("team", "cost-center")
    max_gpus: int = 1024
    stack_max_gpus: Mapping[str, int] = field(default_factory=dict)
    dev_stack_pattern: str = r"(^|-)dev($|-)"
    #: machine types that boot without Secure Boot (vTPM and integrity monitoring still required): their fabric
    #: loads a kernel module built on the node, which a Secure Boot kernel refuses (A3 Mega's TCPXO helper; the
    #: catalog's `gpu_software` families with `secure_boot: false`, kept equal by tests/policy/test_rules.py)
    secure_boot_exempt: frozenset[str] = frozenset({"a3-megagpu-8g"})

    def gpu_cap(self, stack: str) -> int:
        return int(self.stack_max_gpus.get(stack, self.max_gpus))


DEFAULT_SETTINGS = Settings()


class PropertyError(ValueError):
    """A property a rule needs is of the wrong type (a GPU count that is not a whole number): the message names the
    field (and the resource, from `check_resource` / `stack_gpus`).  A guardrail refuses what it cannot read rather
    than passing it."""


@dataclass(frozen=True)
class Resource:
    """One resource as both runners see it."""

    urn: str
    type: str
    name: str
    props: Mapping[str, Any]

    @property
    def stack(self) -> str:
        return stack_of(self.urn)


@dataclass(frozen=True)
class Violation:
    policy: str
    level: str
    urn: str
    message: str

    def line(self) -> str:
        name = self.urn.rsplit("::", 1)[-1] if self.urn else "(stack)"
        kind = self.urn.split("::")[2].rsplit("$", 1)[-1] if self.urn.count("::") >= 3 else ""
        return f"{self.level.upper()} {self.policy}: {kind} {name}: {self.message}".replace("  ", " ")


def stack_of(urn: str) -> str:
    """`urn:pulumi:STACK::PROJECT::TYPE::NAME` -> STACK."""
    return urn.split("::", 1)[0].rsplit(":", 1)[-1] if urn.startswith("urn:pulumi:") else ""


# --- resource kinds --------------------------------------------------------------------------------------------
INSTANCE = "gcp:compute/instance:Instance"
TEMPLATE = "gcp:compute/instanceTemplate:InstanceTemplate"
REGION_TEMPLATE = "gcp:compute/regionInstanceTemplate:RegionInstanceTemplate"
FIREWALL = "gcp:compute/firewall:Firewall"
BUCKET = "gcp:storage/bucket:Bucket"
GKE_CLUSTER = "gcp:container/cluster:Cluster"
GKE_NODE_POOL = "gcp:container/nodePool:NodePool"
ADDRESS = "gcp:compute/address:Address"
PROJECT_IAM = ("gcp:projects/iAMMember:IAMMember", "gcp:projects/iAMBinding:IAMBinding")
VM_KINDS = (INSTANCE, TEMPLATE, REGION_TEMPLATE)
# Billable resources that carry labels, and where (a dotted path into the properties).
BILLABLE_LABELS: dict[str, str] = {
    INSTANCE: "labels",
    TEMPLATE: "labels",
    REGION_TEMPLATE: "labels",
    "gcp:compute/disk:Disk": "labels",
    ADDRESS: "labels",  # external addresses only (internal reservations are free)
    "gcp:filestore/instance:Instance": "labels",
    "gcp:lustre/instance:Instance": "labels",
    "gcp:parallelstore/instance:Instance": "labels",
    BUCKET: "labels",
    "gcp:secretmanager/secret:Secret": "labels",
    GKE_CLUSTER: "resourceLabels",
    GKE_NODE_POOL: "nodeConfig.resourceLabels",
}
# Machine families whose GPUs come with the machine type (no guestAccelerators needed).
GPU_MACHINE_FAMILIES = ("a2-", "a3-", "a4-", "a4x-", "g2-", "g4-")
OPEN_RANGES = ("0.0.0.0/0", "::/0")
SHARED_ADDRESS_SPACE = ipaddress.ip_network("100.64.0.0/10")  # RFC 6598: private too, though not is_private


def _get(props: Mapping[str, Any], path: str) -> Any:
    cur: Any = props
    for key in path.split("."):
        if not isinstance(cur, Mapping):
            return None
        cur = cur.get(key)
    return cur


def _list(value: Any) -> list[Any]:
    """A repeated property as a list; one value given bare (a string, an object) is a list of one, so a rule
    cannot be dodged by leaving out the brackets (`sourceRanges: "0.0.0.0/0"`)."""
    if isinstance(value, str | bytes):
        return [value] if value else []
    if isinstance(value, Mapping):
        return [value]
    return list(value) if isinstance(value, Sequence) else []


def _count(value: Any, where: str) -> int:
    """A count property (GPUs, nodes) as an int: absent / null is 0; a whole number, also as a float (the engine's
    numbers) or a decimal string; anything else is a PropertyError naming `where`."""
    if value is None:
        return 0
    if isinstance(value, str) and value.strip().isascii() and value.strip().isdigit():
        return int(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    raise PropertyError(f"{where}: {value!r} is not a whole number")


def gpus_of(props: Mapping[str, Any]) -> int:
    """GPUs on one VM (instance or template): guest accelerators, or the machine type's own."""
    accelerators = _list(props.get("guestAccelerators"))
    n = sum(
        _count(a.get("count"), f"guestAccelerators[{i}].count")
        for i, a in enumerate(accelerators)
        if isinstance(a, Mapping)
    )
    if n:
        return n
    mt = str(props.get("machineType") or "").rsplit("/", 1)[-1]
    if mt.startswith(GPU_MACHINE_FAMILIES):
        m = re.search(r"-(\d+)g$", mt)
        return int(m.group(1)) if m else 1
    return 0


def _region_of(location: str) -> str:
    """us-east4-a -> us-east4; us-east4 -> us-east4; US-EAST4 -> us-east4."""
    loc = location.lower().rsplit("/", 1)[-1]
    return loc[:-2] if re.fullmatch(r"[a-z]+-[a-z]+\d+-[a-z]", loc) else loc


# --- resource policies -------------------------------------------------------------------------------------------
def no_external_ip_on_gpu_vms(kind: str, props: Mapping[str, Any], settings: Settings) -> list[str]:
    if kind not in VM_KINDS or not gpus_of(props):
        return []
    out = []
    for i, nic in enumerate(_list(props.get("networkInterfaces"))):
        if not isinstance(nic, Mapping):
            continue
        for key in ("accessConfigs", "ipv6AccessConfigs"):
            if _list(nic.get(key)):
                out.append(f"networkInterfaces[{i}].{key}: a GPU VM must have no external IP (egress via Cloud NAT)")
    return out


def no_open_ingress(kind: str, props: Mapping[str, Any], settings: Settings) -> list[str]:
    if kind != FIREWALL:
        return []
    if not _enabled_ingress_allow(props):
        return []  # deny rules, egress rules and disabled rules may name any range
    open_ranges = [r for r in _list(props.get("sourceRanges")) if _is_open(r)]
    if not open_ranges:
        return []
    return [f"sourceRanges: {', '.join(open_ranges)} on an allow rule opens it to the internet"]


def _enabled_ingress_allow(props: Mapping[str, Any]) -> bool:
    """A firewall rule that lets traffic in: INGRESS (the default), with `allows`, not disabled."""
    direction = str(props.get("direction") or "INGRESS").upper()
    return direction == "INGRESS" and bool(_list(props.get("allows"))) and props.get("disabled") is not True


def _is_open(source_range: Any) -> bool:
    """A range that admits every address: 0.0.0.0/0 or ::/0, however spelled (`::0/0`, `1.2.3.4/0`, spaces)."""
    if not isinstance(source_range, str):
        return False
    text = source_range.strip()
    if text in OPEN_RANGES:
        return True
    try:
        return ipaddress.ip_network(text, strict=False).prefixlen == 0
    except ValueError:
        return False


def shielded_vm(kind: str, props: Mapping[str, Any], settings: Settings) -> list[str]:
    if kind in VM_KINDS:
        cfg, where = props.get("shieldedInstanceConfig"), "shieldedInstanceConfig"
    elif kind == GKE_NODE_POOL:
        cfg, where = _get(props, "nodeConfig.shieldedInstanceConfig"), "nodeConfig.shieldedInstanceConfig"
    else:
        return []
    cfg = cfg if isinstance(cfg, Mapping) else {}
    machine = str(props.get("machineType") or "").rsplit("/", 1)[-1] if kind in VM_KINDS else ""
    boot = () if machine in settings.secure_boot_exempt else ("enableSecureBoot",)
    need = (*boot, "enableIntegrityMonitoring") + (("enableVtpm",) if kind in VM_KINDS else ())
    off = [k for k in need if cfg.get(k) is not True]
    return [f"{where}: {', '.join(off)} must be true (Shielded VM)"] if off else []


def required_labels(kind: str, props: Mapping[str, Any], settings: Settings) -> list[str]:
    path = BILLABLE_LABELS.get(kind)
    if not path:
        return []
    if kind == ADDRESS and str(props.get("addressType") or "EXTERNAL").upper() == "INTERNAL":
        return []  # a reserved internal address is free
    labels = _get(props, path)
    labels = labels if isinstance(labels, Mapping) else {}
    missing = [k for k in settings.required_labels if not str(labels.get(k) or "").strip()]
    return [f"{path}: missing required label(s) {', '.join(missing)} (billable resource)"] if missing else []


def approved_region(kind: str, props: Mapping[str, Any], settings: Settings) -> list[str]:
    out = []
    for key in ("region", "zone", "location"):
        value = props.get(key)
        if not isinstance(value, str) or not value:
            continue
        loc = value.lower().rsplit("/", 1)[-1]
        if kind == BUCKET and loc in settings.approved_multi_regions:
            continue
        region = _region_of(loc)
        if region not in settings.approved_regions:
            out.append(f"{key}: {value} is not an approved region ({', '.join(sorted(settings.approved_regions))})")
    return out


def bucket_private(kind: str, props: Mapping[str, Any], settings: Settings) -> list[str]:
    if kind != BUCKET:
        return []
    out = []
    if props.get("uniformBucketLevelAccess") is not True:
        out.append("uniformBucketLevelAccess: must be true (no per-object ACLs)")
    if props.get("publicAccessPrevention") != "enforced":
        out.append(f"publicAccessPrevention: must be 'enforced', got {props.get('publicAccessPrevention')!r}")
    return out


def spot_for_dev(kind: str, props: Mapping[str, Any], settings: Settings, stack: str = "") -> list[str]:
    """Advisory: GPU capacity on a dev stack should be spot (cheaper, and preemption is fine there)."""
    if kind not in VM_KINDS or not gpus_of(props):
        return []
    labels = props.get("labels") if isinstance(props.get("labels"), Mapping) else {}
    dev = bool(re.search(settings.dev_stack_pattern, stack)) or str(labels.get("env", "")).lower() == "dev"
    if not dev:
        return []
    model = str(_get(props, "scheduling.provisioningModel") or "STANDARD").upper()
    if model == "SPOT" or _get(props, "scheduling.preemptible") is True:
        return []
    return [f"scheduling.provisioningModel: {model} on a dev stack; use SPOT for dev GPU capacity"]


#: project-wide roles no identity of a stack gets: the basic roles, and the two that act as any service account of
#: the project (granted on the one account that needs impersonating instead: serviceaccount/iAMMember)
BROAD_PROJECT_ROLES = {
    "roles/owner": "a basic role",
    "roles/editor": "a basic role",
    "roles/viewer": "a basic role",
    "roles/iam.serviceAccountUser": "acts as every service account of the project; grant it on the one account",
    "roles/iam.serviceAccountTokenCreator": "mints tokens of every service account of the project; grant it on the one",
}


def least_privilege_iam(kind: str, props: Mapping[str, Any], settings: Settings) -> list[str]:
    """No basic role, and no project-wide impersonation, for anyone a stack binds at project level."""
    if kind not in PROJECT_IAM:
        return []
    role = str(props.get("role") or "")
    why = BROAD_PROJECT_ROLES.get(role)
    return [f"role: {role} at project level ({why})"] if why else []


def _truthy(value: Any) -> bool:
    """A GCE metadata flag as GCE reads it: TRUE / true / 1 / y / yes."""
    return str(value).strip().lower() in ("true", "1", "y", "yes")


def vm_access_locked(kind: str, props: Mapping[str, Any], settings: Settings) -> list[str]:
    """VMs and GKE nodes take SSH keys from nowhere project-wide and keep the serial console closed; GCE VMs log in
    through OS Login (GKE nodes have no OS Login: their keys are the node pool's)."""
    if kind in VM_KINDS:
        metadata, where, oslogin = props.get("metadata"), "metadata", True
    elif kind == GKE_NODE_POOL:
        metadata, where, oslogin = _get(props, "nodeConfig.metadata"), "nodeConfig.metadata", False
    else:
        return []
    md = metadata if isinstance(metadata, Mapping) else {}
    out = []
    if not _truthy(md.get("block-project-ssh-keys")):
        out.append(f"{where}.block-project-ssh-keys: must be TRUE (no project-wide SSH key reaches the VM)")
    if oslogin and not _truthy(md.get("enable-oslogin")):
        out.append(f"{where}.enable-oslogin: must be TRUE (SSH through OS Login and IAM)")
    if _truthy(md.get("serial-port-enable")):
        out.append(f"{where}.serial-port-enable: the interactive serial console must stay off")
    return out


#: a download piped into a shell: code that runs unpinned and unchecked
PIPED_INSTALL = re.compile(r"\b(curl|wget)\b[^\n|;&]*\|\s*(sudo\s+)?(ba|da|z)?sh\b")


def pinned_startup(kind: str, props: Mapping[str, Any], settings: Settings) -> list[str]:
    """A startup script runs no downloaded script unchecked (`curl ... | bash`): what a VM runs is pinned."""
    if kind not in VM_KINDS:
        return []
    metadata = props.get("metadata")
    script = metadata.get("startup-script") if isinstance(metadata, Mapping) else None
    if not isinstance(script, str):
        return []
    found = PIPED_INSTALL.search(script)
    return [f"metadata.startup-script: {found.group(0)!r} runs a downloaded script unpinned"] if found else []


def ssh_has_targets(kind: str, props: Mapping[str, Any], settings: Settings) -> list[str]:
    """An ingress rule that lets SSH in from outside the private ranges (IAP's, say) names the VMs it reaches
    (target service accounts or tags), not every VM of the network.  Rules whose sources are all private (a VPC's
    own subnets talking among themselves) are the internal rules and may."""
    if kind != FIREWALL or not _enabled_ingress_allow(props):
        return []
    if not any(_allows_port(a, 22) for a in _list(props.get("allows"))):
        return []
    outside = [r for r in _list(props.get("sourceRanges")) if not _is_private(r)]
    if not outside or _list(props.get("targetServiceAccounts")) or _list(props.get("targetTags")):
        return []
    return [f"allows SSH (22) from {', '.join(map(str, outside))} to every VM of its network: name the VMs"]


def _is_private(source_range: Any) -> bool:
    """A source range inside the private address space (RFC 1918, RFC 6598, or IPv6 ULA)."""
    try:
        net = ipaddress.ip_network(str(source_range).strip(), strict=False)
    except ValueError:
        return False
    return (net.is_private and net.prefixlen > 0) or (net.version == 4 and net.subnet_of(SHARED_ADDRESS_SPACE))  # type: ignore[arg-type]


def _allows_port(allow: Any, port: int) -> bool:
    """Whether one `allows` entry admits TCP `port` (all protocols, tcp without ports, a port or a range)."""
    if not isinstance(allow, Mapping):
        return False
    protocol = str(allow.get("protocol") or "").lower()
    if protocol not in ("tcp", "all", "6"):
        return False
    ports = _list(allow.get("ports"))
    if not ports:
        return True
    for spec in ports:
        low, _, high = str(spec).partition("-")
        try:
            if int(low) <= port <= int(high or low):
                return True
        except ValueError:
            continue
    return False


def gke_private(kind: str, props: Mapping[str, Any], settings: Settings) -> list[str]:
    """GKE clusters: private nodes, no legacy ABAC, and an API server not open to the internet."""
    if kind == GKE_NODE_POOL:
        private = _get(props, "networkConfig.enablePrivateNodes")
        return ["networkConfig.enablePrivateNodes: false gives the pool's nodes public IPs"] if private is False else []
    if kind != GKE_CLUSTER:
        return []
    out = []
    if _get(props, "privateClusterConfig.enablePrivateNodes") is not True:
        out.append("privateClusterConfig.enablePrivateNodes: must be true (no public IPs on nodes)")
    if props.get("enableLegacyAbac") is True:
        out.append("enableLegacyAbac: must be off (RBAC only)")
    blocks = _list(_get(props, "masterAuthorizedNetworksConfig.cidrBlocks"))
    if not isinstance(_get(props, "masterAuthorizedNetworksConfig"), Mapping):
        out.append("masterAuthorizedNetworksConfig: must be set (who may reach the API server)")
    for b in blocks:
        if isinstance(b, Mapping) and _is_open(b.get("cidrBlock")):
            out.append(f"masterAuthorizedNetworksConfig.cidrBlocks: {b.get('cidrBlock')} opens the API server")
    return out


K8S_ROLES = ("kubernetes:rbac.authorization.k8s.io/v1:ClusterRole", "kubernetes:rbac.authorization.k8s.io/v1:Role")
K8S_BINDINGS = (
    "kubernetes:rbac.authorization.k8s.io/v1:ClusterRoleBinding",
    "kubernetes:rbac.authorization.k8s.io/v1:RoleBinding",
)
#: built-in ClusterRoles that grant (nearly) everything: no stack binds its accounts to them
BROAD_K8S_ROLES = ("cluster-admin", "admin", "edit")


def k8s_rbac_least_privilege(kind: str, props: Mapping[str, Any], settings: Settings) -> list[str]:
    """Kubernetes RBAC a stack declares names what it grants: no `*` verb, resource or API group in a (Cluster)Role,
    no secrets read cluster-wide, and no binding to cluster-admin, admin or edit."""
    if kind in K8S_BINDINGS:
        ref = props.get("roleRef") if isinstance(props.get("roleRef"), Mapping) else {}
        name = str(ref.get("name") or "")
        return (
            [f"roleRef: {name} grants nearly everything; bind a role naming what is needed"]
            if name in (BROAD_K8S_ROLES)
            else []
        )
    if kind not in K8S_ROLES:
        return []
    out = []
    for i, rule in enumerate(_list(props.get("rules"))):
        if not isinstance(rule, Mapping):
            continue
        for key in ("verbs", "resources", "apiGroups"):
            if "*" in [str(v) for v in _list(rule.get(key))]:
                out.append(f"rules[{i}].{key}: '*' grants whatever the API server serves, now and later")
        reads = {"get", "list", "watch", "*"} & {str(v) for v in _list(rule.get("verbs"))}
        if kind == K8S_ROLES[0] and "secrets" in [str(r) for r in _list(rule.get("resources"))] and reads:
            out.append(f"rules[{i}]: reads secrets in every namespace (a ClusterRole): use a Role in one namespace")
    return out


@dataclass(frozen=True)
class Rule:
    name: str
    description: str
    level: str
    check: Callable[..., list[str]]
    needs_stack: bool = False


RESOURCE_POLICIES: tuple[Rule, ...] = (
    Rule("gpu-no-external-ip", "GPU VMs and templates have no external IP", MANDATORY, no_external_ip_on_gpu_vms),
    Rule(
        "no-open-ingress",
        "No firewall allow rule admits 0.0.0.0/0 or ::/0 (deny rules may)",
        MANDATORY,
        no_open_ingress,
    ),
    Rule("shielded-vm", "Every VM, template and GKE node pool is a Shielded VM", MANDATORY, shielded_vm),
    Rule("required-labels", "Billable resources carry the team and cost-center labels", MANDATORY, required_labels),
    Rule("approved-regions", "Resources live in approved regions only", MANDATORY, approved_region),
    Rule(
        "bucket-private",
        "Buckets use uniform bucket-level access with public access prevention enforced",
        MANDATORY,
        bucket_private,
    ),
    Rule(
        "least-privilege-iam",
        "No basic role, and no project-wide serviceAccountUser / TokenCreator, at project level",
        MANDATORY,
        least_privilege_iam,
    ),
    Rule(
        "vm-access-locked",
        "VMs and GKE nodes block project-wide SSH keys, keep the serial console off; VMs use OS Login",
        MANDATORY,
        vm_access_locked,
    ),
    Rule("pinned-startup", "No startup script pipes a download into a shell", MANDATORY, pinned_startup),
    Rule("ssh-has-targets", "SSH rules name the VMs they reach", MANDATORY, ssh_has_targets),
    Rule("gke-private", "GKE: private nodes, no legacy ABAC, API server not open", MANDATORY, gke_private),
    Rule(
        "k8s-rbac-least-privilege",
        "Kubernetes roles name their verbs, resources and groups; no cluster-wide secrets, no cluster-admin",
        MANDATORY,
        k8s_rbac_least_privilege,
    ),
    Rule("dev-spot", "Dev stacks run GPU capacity on spot (advisory)", ADVISORY, spot_for_dev, needs_stack=True),
)


# --- stack policies -------------------------------------------------------------------------------------------
def stack_gpus(resources: Sequence[Resource]) -> tuple[int, list[str]]:
    """GPUs the stack can run at most: static GPU VMs, every pool of the autoscaler inventory (declared on the
    controller's metadata) at max_nodes, and GKE node pools at their autoscaling maximum; with the breakdown."""
    total, parts = 0, []
    for r in resources:
        if r.type == INSTANCE:
            n = gpus_of(r.props)
            if n:
                total += n
                parts.append(f"{r.name}: {n}")
            inv = _get(r.props, "metadata")
            raw = inv.get("gpu-fleet-inventory") if isinstance(inv, Mapping) else None
            if isinstance(raw, str):
                try:
                    pools = json.loads(raw)
                except ValueError:
                    pools = []
                for i, p in enumerate(pools if isinstance(pools, list) else []):
                    if isinstance(p, Mapping):
                        where = f"{r.urn}: metadata.gpu-fleet-inventory[{i}]"
                        n = _count(p.get("max_nodes"), f"{where}.max_nodes") * _count(
                            p.get("gpus_per_node"), f"{where}.gpus_per_node"
                        )
                        total += n
                        parts.append(f"{p.get('cluster')}/{p.get('name')}: {n}")
        elif r.type == GKE_NODE_POOL:
            per_node = sum(
                _count(a.get("count"), f"{r.urn}: nodeConfig.guestAccelerators[{i}].count")
                for i, a in enumerate(_list(_get(r.props, "nodeConfig.guestAccelerators")))
                if isinstance(a, Mapping)
            )
            nodes = _node_count(r)
            if per_node and nodes:
                total += per_node * nodes
                parts.append(f"{r.name}: {per_node * nodes}")
    return total, parts


def _node_count(r: Resource) -> int:
    """A GKE node pool's most nodes: the autoscaling maximum (total or per zone), else its fixed or initial count."""
    for path in ("autoscaling.totalMaxNodeCount", "autoscaling.maxNodeCount", "nodeCount", "initialNodeCount"):
        n = _count(_get(r.props, path), f"{r.urn}: {path}")
        if n:
            return n
    return 0


def gpu_cap(resources: Sequence[Resource], settings: Settings, stack: str) -> list[str]:
    total, parts = stack_gpus(resources)
    cap = settings.gpu_cap(stack)
    if total <= cap:
        return []
    return [f"the stack can run {total} GPUs, over its cap of {cap} ({'; '.join(parts)})"]


STACK_POLICIES: tuple[Rule, ...] = (
    Rule("gpu-cap", "A stack stays under its GPU cap (every pool at max_nodes)", MANDATORY, gpu_cap),
)
ALL_POLICIES = RESOURCE_POLICIES + STACK_POLICIES


def check_resource(rule: Rule, r: Resource, settings: Settings = DEFAULT_SETTINGS) -> list[Violation]:
    """`rule` over one resource; a property it cannot read is a PropertyError naming the resource."""
    try:
        if rule.needs_stack:
            msgs = rule.check(r.type, r.props, settings, r.stack)
        else:
            msgs = rule.check(r.type, r.props, settings)
    except PropertyError as exc:
        raise PropertyError(f"{r.urn}: {exc}") from None
    return [Violation(rule.name, rule.level, r.urn, m) for m in msgs]


def check_all(resources: Sequence[Resource], settings: Settings = DEFAULT_SETTINGS) -> list[Violation]:
    """Every violation of every policy over one stack's resources (resource policies first)."""
    out: list[Violation] = []
    for rule in RESOURCE_POLICIES:
        for r in resources:
            out += check_resource(rule, r, settings)
    stack = next((r.stack for r in resources if r.stack), "")
    for rule in STACK_POLICIES:
        out += [Violation(rule.name, rule.level, "", m) for m in rule.check(resources, settings, stack)]
    return out
