"""The autoscaler inventory: every pool the autoscaler may resize, as the stacks export it.

`stacks/` builds one `InventoryPool` per node pool and exports the list as the stack output
`autoscaler_inventory`; the daemon reads it back (from `pulumi stack output autoscaler_inventory
--json` or the `outputs` of `fleet synth --json`) with `load_inventory`.  This module is the one
definition of that JSON shape.  Files are read through the input gate (fleet.input) and validated strictly:
the names in it become GCE API arguments and Slurm node names.

Pools of `scheduler: kueue` clusters carry more (docs/kubernetes.md): `pool_kind` says which actuator
resizes them — `gce-mig` (Slurm pools, and GKE node pools: instances by name in the MIGs GKE reports,
`instance_group_urls` / `instance_groups`) or `capi-machinedeployment` (`capi_namespace` /
`capi_machine_deployment`: replicas up, down through the Machine of an idle node) — plus the node
labels / taints that identify a pool's Nodes, its Kueue ResourceFlavor and its $/h.  `KubernetesSection`
is the `kubernetes:` part of the daemon config the stack writes for the in-cluster Deployment.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, field_validator, model_validator

from fleet.catalog import CapacityType, Catalog, load_catalog
from fleet.input import InputError, format_loc, load_json
from fleet.input.limits import MAX_INVENTORY_BYTES
from fleet.input.types import STRICT, GceName, MachineType, NodeCount, Region, Reservation, Zone, lax_enum, text
from fleet.provisioning_class import GPU_FLEET_CLASS, served_elsewhere

PoolName = text(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?", "must be a lower-case RFC 1035 name")
#: what the ProvisioningRequest CRD accepts in `spec.provisioningClassName` (a DNS subdomain, at most 253 chars)
ProvisioningClass = text(
    r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*",
    "must be a ProvisioningRequest class name (a DNS subdomain: a-z, 0-9, '-', '.')",
    253,
)
Project = text(r"([a-z][-a-z0-9.]*:)?[a-z][-a-z0-9]{0,62}", "must be a GCP project id")
SlurmName = text(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}", "must be a Slurm name (letters, digits, '.', '_', '-')")
ResourceRef = text(r"[A-Za-z0-9._/-]{1,512}", "must be a resource name or path (letters, digits, '.', '_', '/', '-')")


class InventoryPool(BaseModel):
    model_config = ConfigDict(**STRICT, extra="forbid", frozen=True)  # a misspelt key is an error, not ignored

    name: PoolName  # pool name, unique within its cluster
    cluster: PoolName
    provider: text(r"[a-z]+", "must be a provider name such as gcp", 16)  # "gcp" today
    project: Project
    region: Region
    zones: list[Zone] = Field(max_length=16)
    machine_type: MachineType
    gpu_type: text(r"[a-z0-9][-a-z0-9]{0,62}", "must be an accelerator type such as nvidia-h100-80gb")
    gpus_per_node: int = Field(ge=1, le=16)
    capacity_type: lax_enum(CapacityType)  # type: ignore[valid-type]
    reservation: Reservation | None = None
    min_nodes: NodeCount
    max_nodes: NodeCount
    instance_group: GceName  # MIG name stem; the zonal MIG in zone Z is instance_groups[Z]
    instance_groups: dict[Zone, GceName] = Field(default_factory=dict)  # zone -> zonal MIG name
    instance_template: ResourceRef | None = None
    node_name_prefix: GceName  # Slurm node / GCE instance names are f"{node_name_prefix}-{index}"
    slurm_nodeset: SlurmName | None = None
    slurm_partitions: list[SlurmName] = Field(default_factory=list, max_length=64)
    spot_tolerant: bool = False  # true when every partition this pool backs is spot-tolerant
    compact_placement: bool = False
    placement_policy: ResourceRef | None = None
    # Kubernetes pools (scheduler: kueue); the defaults describe a Slurm pool.
    scheduler: Literal["slurm", "kueue"] = "slurm"
    platform: Literal["gce", "gke", "kubernetes"] = "gce"
    pool_kind: Literal["gce-mig", "capi-machinedeployment"] = "gce-mig"
    gke_cluster: str | None = None  # GKE cluster name (platform gke)
    gke_node_pool: str | None = None  # node pool name; its MIGs are instance_group_urls
    instance_group_urls: list[str] = Field(default_factory=list)  # MIG links GKE reports for the node pool
    capi_cluster: str | None = None  # Cluster API Cluster name (platform kubernetes)
    capi_namespace: str | None = None
    capi_machine_deployment: str | None = None
    failure_domain: str | None = None  # the MachineDeployment's Cluster API failure domain (its "zone")
    kueue_flavor: str | None = None  # the pool's ResourceFlavor
    node_labels: dict[str, str] = Field(default_factory=dict)  # every Node of the pool has these labels
    node_taints: list[dict[str, str]] = Field(default_factory=list)  # {key, value, effect}
    vcpus: int | None = None
    memory_gib: int | None = None
    price_per_hour: float | None = None  # $/h per node (spec or catalog); None: unknown
    price_source: str | None = None  # "spec", "list", ... (fleet.spec.kube.pool_price)

    @model_validator(mode="after")
    def _min_not_above_max(self) -> InventoryPool:
        if self.min_nodes > self.max_nodes:
            raise ValueError(f"min_nodes {self.min_nodes} is greater than max_nodes {self.max_nodes}")
        return self


class LeaseConfig(BaseModel):
    """Leader election through a coordination.k8s.io/v1 Lease (client-go's defaults)."""

    model_config = ConfigDict(**STRICT, extra="forbid", frozen=True)

    name: str
    duration_s: float = 15.0
    renew_deadline_s: float = 10.0
    retry_period_s: float = 2.0


class KubernetesSection(BaseModel):
    """`kubernetes:` of the in-cluster daemon's /etc/gpu-fleet/autoscaler.yaml (the stack writes it)."""

    model_config = ConfigDict(**STRICT, extra="forbid", frozen=True)

    in_cluster: bool = True  # the pod's service account token; else `kubeconfig`
    kubeconfig: str | None = None
    namespace: str  # where the daemon runs and its Lease lives
    lease: LeaseConfig
    identity_env: str = "POD_NAME"  # the Lease holder identity (downward API)
    #: the ProvisioningRequest class the daemon serves: its own, never one another autoscaler also answers
    provisioning_class: ProvisioningClass = GPU_FLEET_CLASS
    cluster_api_namespace: str | None = None  # MachineDeployments / Machines (platform kubernetes)

    @field_validator("provisioning_class")
    @classmethod
    def _not_served_elsewhere(cls, value: str) -> str:
        reason = served_elsewhere(value)
        if reason:
            raise ValueError(reason)
        return value


def migs_from_urls(urls: list[str]) -> dict[str, str]:
    """`.../zones/<zone>/instanceGroupManagers/<name>` (or instanceGroups) links -> {zone: name}."""
    out: dict[str, str] = {}
    for url in urls:
        parts = url.rstrip("/").split("/")
        if "zones" in parts and len(parts) >= parts.index("zones") + 4:
            i = parts.index("zones")
            out[parts[i + 1]] = parts[i + 3]
    return out


_LIST = TypeAdapter(list[InventoryPool])


def parse_inventory(data: object) -> list[InventoryPool]:
    """Accept the bare list, `{"autoscaler_inventory": [...]}` or a whole `fleet synth --json`."""
    if isinstance(data, dict):
        if isinstance(data.get("outputs"), dict):
            data = data["outputs"]
        data = data.get("autoscaler_inventory", data)
    return _LIST.validate_python(data)


def load_inventory(path: Path) -> list[InventoryPool]:
    """Read an inventory file through the input gate and check it whole (`inventory_problems`), before anything
    uses it; InputError names the file and the `autoscaler_inventory[i].field` of each problem."""
    data = load_json(path, what="autoscaler inventory", max_bytes=MAX_INVENTORY_BYTES)
    where = _list_path(data)
    try:
        pools = parse_inventory(data)
    except ValidationError as exc:
        errors = [(f"{where}{format_loc(e['loc'])}" or "(root)", _reason(e)) for e in exc.errors(include_url=False)]
        raise InputError(str(path), errors[:MAX_REPORTED]) from None
    if problems := inventory_problems(pools, where):
        raise InputError(str(path), problems[:MAX_REPORTED])
    return pools


MAX_REPORTED = 20  # problems listed per refused file


def _reason(error: Any) -> str:
    """The reason of one pydantic error, as the file's author needs it."""
    if error["type"] == "extra_forbidden":
        return "unknown field of an inventory pool (misspelt, or written by a newer gpu-fleet)"
    return str(error["msg"]).removeprefix("Value error, ")


def _list_path(data: object) -> str:
    """Where the pool list is in the file, as error paths name it: `outputs.autoscaler_inventory` in a whole synth
    output, `autoscaler_inventory` in a stack's outputs, "" for a bare list."""
    if not isinstance(data, dict):
        return ""
    return "outputs.autoscaler_inventory" if isinstance(data.get("outputs"), dict) else "autoscaler_inventory"


def inventory_problems(
    pools: list[InventoryPool], where: str = "", catalog: Catalog | None = None
) -> list[tuple[str, str]]:
    """(field path, reason) of everything schema-valid pools get wrong together or against the catalog: what the
    daemon would otherwise trip on at its first tick, or half way into creating its state store.  `where` is the
    path of the list in the file.  Empty when the inventory may be used."""
    if not pools:
        return [(where or "(root)", "lists no pool: there is nothing to autoscale")]
    cat = catalog or load_catalog("gcp")
    out: list[tuple[str, str]] = []
    for i, pool in enumerate(pools):
        if pool.platform != "kubernetes":  # GCE VMs (Slurm on GCE, GKE): the catalog and GCE's rules apply
            out += [(f"{where}[{i}].{field}", why) for field, why in _gce_pool_problems(pool, cat)]
    return out + _clashes(pools, where)


def _gce_pool_problems(pool: InventoryPool, cat: Catalog) -> list[tuple[str, str]]:
    """(field, reason) of one pool whose nodes are GCE VMs."""
    out: list[tuple[str, str]] = []
    if pool.provider != "gcp":
        out.append(("provider", f"must be 'gcp' for a platform: {pool.platform} pool (its nodes are GCE VMs)"))
    out += _reservation_problems(pool)
    if pool.platform == "gce":
        out += [
            (f"instance_groups.{zone}", f"zone {zone!r} is not one of the pool's zones {pool.zones}")
            for zone in pool.instance_groups
            if zone not in pool.zones
        ]
    try:
        cat.machine(pool.machine_type)
    except KeyError as exc:  # UnknownMachineType: its message lists the known types
        return [*out, ("machine_type", f"{exc} (not in the machine catalog, fleet/catalog/data)")]
    return out + _catalog_problems(pool, cat)


def _reservation_problems(pool: InventoryPool) -> list[tuple[str, str]]:
    """A reservation name iff capacity_type is reservation, and then one zone (GCE reservations are zonal)."""
    if pool.capacity_type == CapacityType.RESERVATION:
        if not pool.reservation:
            return [("reservation", "required with capacity_type: reservation (the GCE reservation to consume)")]
        if len(pool.zones) > 1:
            return [("zones", f"a reservation is zonal: a reservation pool has one zone, not {pool.zones}")]
    elif pool.reservation:
        return [("reservation", f"set, but capacity_type is {pool.capacity_type}: only a reservation pool has one")]
    return []


def _catalog_problems(pool: InventoryPool, cat: Catalog) -> list[tuple[str, str]]:
    """Region, zones and GPUs of a pool of a machine type the catalog knows, against the catalog."""
    machine = cat.machine(pool.machine_type)
    offered = machine.zones_in(pool.region)
    if not offered:
        regions = cat.regions_offering(pool.machine_type)
        return [("region", f"{pool.machine_type} is not offered in {pool.region!r} (offered in: {_few(regions)})")]
    out: list[tuple[str, str]] = []
    if not pool.zones and pool.pool_kind == "gce-mig":
        out.append(("zones", "lists no zone: a pool of GCE VMs needs at least one"))
    seen: set[str] = set()
    for i, zone in enumerate(pool.zones):
        if zone.rpartition("-")[0] != pool.region:
            out.append((f"zones[{i}]", f"zone {zone!r} is not in the pool's region {pool.region!r}"))
        elif zone not in offered:
            out.append((f"zones[{i}]", f"{pool.machine_type} is not offered in {zone} (offered in: {_few(offered)})"))
        elif zone in seen:
            out.append((f"zones[{i}]", f"duplicate zone {zone!r}"))
        seen.add(zone)
    if pool.gpus_per_node != machine.gpu_count:
        out.append(("gpus_per_node", f"{pool.machine_type} has {machine.gpu_count} GPUs, not {pool.gpus_per_node}"))
    if pool.gpu_type != machine.gpu.accelerator_type:
        have = machine.gpu.accelerator_type
        out.append(("gpu_type", f"{pool.machine_type} carries {have}, not {pool.gpu_type}"))
    return out


def _clashes(pools: list[InventoryPool], where: str) -> list[tuple[str, str]]:
    """Two entries for one pool, or two pools sharing a node name space (`autoscaler.node_names`: its names would
    belong to both).  Distinct prefixes cannot clash (`a-od` and `a-od-x`: an index has no '-')."""
    out: list[tuple[str, str]] = []
    names: dict[tuple[str, str], int] = {}
    prefixes: dict[str, int] = {}
    for i, pool in enumerate(pools):
        j = names.setdefault((pool.cluster, pool.name), i)
        if j != i:
            out.append((f"{where}[{i}].name", f"duplicate pool {pool.cluster}/{pool.name} (also {where}[{j}])"))
        k = prefixes.setdefault(pool.node_name_prefix, i)
        if k != i:
            other = pools[k]
            out.append((
                f"{where}[{i}].node_name_prefix",
                f"{pool.node_name_prefix!r} is also the prefix of pool {other.cluster}/{other.name} ({where}[{k}]):"
                f" node names {pool.node_name_prefix}-<i> would belong to both",
            ))  # fmt: skip
    return out


def _few(names: tuple[str, ...] | list[str], shown: int = 6) -> str:
    """`a, b, c, ...` (at most `shown` names) or `none`."""
    return ", ".join(names[:shown]) + (", ..." if len(names) > shown else "") if names else "none"
