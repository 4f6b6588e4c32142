"""Pure mapping of a validated fleet spec onto component arguments, names and the autoscaler inventory.

No Pulumi resources here (only plain data), so every naming, address and NIC decision is testable
without mocks.  Reference shapes (public Cluster Toolkit blueprints):

- a3-megagpu-8g: system VPC (MTU 8244) + 8 GPUDirect-TCPXO VPCs of one subnet each (MTU 8896): 9 NICs.
- a3-highgpu-8g: system VPC + 4 GPUDirect-TCPX VPCs (MTU 8244): 5 NICs.
- a3-ultragpu-8g / a4-highgpu-8g: system VPC + a second gVNIC VPC + one RoCE VPC with 8 subnets
  (zonal network profile `<zone>-vpc-roce`, MRDMA NICs), MTU 8896: 10 NICs.

Fabric subnets come from `fleet.spec.derive.carve_gpu_subnets` (the same carving the spec rules check).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import yaml

from components.gcp.network import DataPlaneArgs
from fleet.catalog import CapacityType, Catalog, MachineType
from fleet.slurm.conf import node_name_prefix
from fleet.spec.derive import carve_gpu_subnets, checkpoint_bucket_name, on_gcp, pool_zones
from fleet.spec.load import SpecError
from fleet.spec.model import ClusterSpec, FleetSpec, NodePoolSpec

SYSTEM = "system"  # NicPlan.plane of the first NIC


def resource_labels(
    spec: FleetSpec, cluster: ClusterSpec | None = None, own: dict[str, str] | None = None
) -> dict[str, str]:
    """A cloud resource's labels: the spec's, then the resource's `own` (a pool's), then the keys gpu-fleet sets
    (`managed-by`, and `gpu-fleet-cluster` for a cluster's resources), which always win."""
    generated = {"managed-by": "gpu-fleet"} | ({"gpu-fleet-cluster": cluster.name} if cluster is not None else {})
    return {**spec.labels, **(own or {}), **generated}


def fleet_name(stack: str) -> str:
    """A GCE-safe prefix from the stack name (lower-case, [a-z0-9-], <= 20 chars, starts with a letter)."""
    name = re.sub(r"[^a-z0-9-]+", "-", stack.lower()).strip("-")
    if not name or not name[0].isalpha():
        name = f"f-{name}"
    return name[:20].rstrip("-")


def instance_group_stem(cluster: str, pool: str) -> str:
    return f"{cluster}-{pool}"


def instance_group_name(cluster: str, pool: str, zone: str) -> str:
    """Name of the pool's zonal MIG in `zone`."""
    return f"{instance_group_stem(cluster, pool)}-{zone}"


def lustre_filesystem_name(cluster: str) -> str:
    """Managed Lustre filesystem names are 1-8 letters/digits: the cluster name without dashes, cut to 8."""
    return (re.sub(r"[^a-z0-9]", "", cluster.lower()) or "scratch")[:8]


def boot_disk_type(machine: MachineType) -> str:
    """A3 Ultra and A4 boot only from Hyperdisk; the others take Persistent Disk."""
    return "hyperdisk-balanced" if machine.nics.fabric == "rdma" else "pd-balanced"


@dataclass(frozen=True)
class NicPlan:
    """One NIC of a pool's VMs: the plane it attaches to (SYSTEM or a DataPlaneArgs.name), which subnet, type."""

    plane: str
    subnet: int
    nic_type: str


@dataclass(frozen=True)
class FabricPlan:
    """The data planes of one (cluster, machine type) and the NICs its VMs carry."""

    cluster: str
    machine_type: str
    planes: list[DataPlaneArgs]
    nics: list[NicPlan]


def _plane_prefix(cluster: ClusterSpec, machine: MachineType, catalog: Catalog) -> str:
    fabric_types = {p.machine_type for p in cluster.pools if catalog.machine(p.machine_type).nics.total > 1}
    if len(fabric_types) <= 1:
        return cluster.name
    head, kind = machine.name.split("-")[:2]
    return f"{cluster.name}-{head}{kind.removesuffix('gpu')}"


def _rdma_zone(spec: FleetSpec, ci: int, cluster: ClusterSpec, machine: MachineType, catalog: Catalog) -> str:
    """RoCE VPCs are zonal: every pool of this type in the cluster must use one and the same zone."""
    errors, zones = [], set()
    for pi, pool in enumerate(cluster.pools):
        if pool.machine_type != machine.name:
            continue
        pz = pool_zones(spec, pool, catalog)
        zones.update(pz)
        if len(pz) != 1:
            errors.append(
                (
                    f"clusters[{ci}].pools[{pi}].zones",
                    f"{machine.name} uses a zonal RoCE network: pool {pool.name!r} needs exactly one zone,"
                    f" got {list(pz)}",
                )
            )
    if not errors and len(zones) != 1:
        errors.append(
            (
                f"clusters[{ci}].pools",
                f"pools of {machine.name} in cluster {cluster.name!r} share one RoCE network: use one zone,"
                f" got {sorted(zones)}",
            )
        )
    if errors:
        raise SpecError(errors)
    return zones.pop()


def fabric_plans(spec: FleetSpec, catalog: Catalog) -> dict[tuple[str, str], FabricPlan]:
    """Data planes and NIC lists keyed by (cluster, machine type); machine types with one NIC get no planes."""
    subnets = carve_gpu_subnets(spec, catalog)
    out: dict[tuple[str, str], FabricPlan] = {}
    for ci, cluster in enumerate(spec.clusters):
        if not on_gcp(cluster):  # an existing cluster's nodes are not on the fleet's VPCs
            continue
        for machine_type in dict.fromkeys(p.machine_type for p in cluster.pools):
            machine = catalog.machine(machine_type)
            nics = [NicPlan(SYSTEM, 0, "GVNIC")]
            planes: list[DataPlaneArgs] = []
            cidrs = [str(c) for c in subnets.get((cluster.name, machine_type), [])]
            prefix = _plane_prefix(cluster, machine, catalog)
            layout = machine.nics
            gpu_mtu = (layout.gke_gpu_nic_mtu if cluster.platform == "gke" else None) or layout.gpu_nic_mtu or 8896
            for i in range(1, layout.gvnic):
                planes.append(DataPlaneArgs(f"{prefix}-net-{i}", "gvnic", [cidrs.pop(0)], layout.system_mtu))
                nics.append(NicPlan(planes[-1].name, 0, "GVNIC"))
            for i in range(layout.gpu_nics):
                planes.append(DataPlaneArgs(f"{prefix}-gpunet-{i}", "gpudirect", [cidrs.pop(0)], gpu_mtu))
                nics.append(NicPlan(planes[-1].name, 0, "GVNIC"))
            if layout.rdma_nics:
                zone = _rdma_zone(spec, ci, cluster, machine, catalog)
                rdma = [cidrs.pop(0) for _ in range(layout.rdma_nics)]
                planes.append(DataPlaneArgs(f"{prefix}-rdma", "rdma", rdma, gpu_mtu, zone=zone))
                nics += [NicPlan(planes[-1].name, i, "MRDMA") for i in range(layout.rdma_nics)]
            out[(cluster.name, machine_type)] = FabricPlan(cluster.name, machine_type, planes, nics)
    return out


def system_mtu(spec: FleetSpec, catalog: Catalog) -> int:
    """The system VPC's MTU: the largest any pool's machine type wants (one VPC serves them all)."""
    gcp_pools = [p for c in spec.clusters if on_gcp(c) for p in c.pools]
    return max([1460] + [catalog.machine(p.machine_type).nics.system_mtu for p in gcp_pools])


def partitions_of(cluster: ClusterSpec, pool: NodePoolSpec) -> list[str]:
    if cluster.slurm is None:
        return []
    return [part.name for part in cluster.slurm.partitions if pool.name in part.pools]


def spot_tolerant(cluster: ClusterSpec, pool: NodePoolSpec) -> bool:
    """True when every partition this pool backs accepts preemption."""
    if cluster.slurm is None:
        return False
    parts = [part for part in cluster.slurm.partitions if pool.name in part.pools]
    return bool(parts) and all(part.spot_tolerant for part in parts)


def inventory_entry(
    spec: FleetSpec, cluster: ClusterSpec, pool: NodePoolSpec, catalog: Catalog, instance_template: object = None
) -> dict[str, object]:
    """One `fleet.inventory.InventoryPool` as a plain dict (`instance_template` may be a Pulumi Output)."""
    machine = catalog.machine(pool.machine_type)
    zones = list(pool_zones(spec, pool, catalog))
    stem = instance_group_stem(cluster.name, pool.name)
    return {
        "name": pool.name,
        "cluster": cluster.name,
        "provider": spec.provider,
        "project": spec.project,
        "region": spec.region,
        "zones": zones,
        "machine_type": pool.machine_type,
        "gpu_type": machine.gpu.accelerator_type,
        "gpus_per_node": machine.gpu_count,
        "capacity_type": str(pool.capacity),
        "reservation": pool.reservation,
        "min_nodes": pool.min_nodes,
        "max_nodes": pool.max_nodes,
        "instance_group": stem,
        "instance_groups": {z: instance_group_name(cluster.name, pool.name, z) for z in zones},
        "instance_template": instance_template,
        "node_name_prefix": node_name_prefix(cluster.name, pool.name),
        "slurm_nodeset": pool.name if cluster.scheduler == "slurm" else None,
        "slurm_partitions": partitions_of(cluster, pool),
        "spot_tolerant": spot_tolerant(cluster, pool),
        "compact_placement": pool.compact_placement,
        "placement_policy": placement_policy_name(stem, pool),
    }


def pool_image(pool: NodePoolSpec, machine: MachineType) -> tuple[str, bool]:
    """(boot image, Secure Boot) of a pool: the user's baked image, else the catalog's GPU image for the machine
    family; Secure Boot as the pool sets it, else the catalog's for the family (off where a module the node loads
    is built on it, A3 Mega's TCPXO helper, baked image or not)."""
    default = machine.software
    image = pool.image or (default.image if default else "")
    if not image:
        raise SpecError([("pools[].image", f"{machine.name}: the catalog names no GPU image; set pools[].image")])
    signed = default.secure_boot if default else True
    return image, signed if pool.secure_boot is None else pool.secure_boot


def placement_policy_name(stem: str, pool: NodePoolSpec) -> str | None:
    """What places a compact pool's nodes (GpuNodePool's table): its own COLLOCATED policy, the MIGs'
    workload policy (flex-start), or the reservation's own placement (`reservation/<name>`)."""
    if not pool.compact_placement:
        return None
    if pool.capacity is CapacityType.RESERVATION:
        return f"reservation/{pool.reservation}"
    return f"{stem}-workload" if pool.capacity is CapacityType.FLEX_START else f"{stem}-compact"


def bucket_location(spec: FleetSpec, cluster: ClusterSpec) -> str | None:
    bucket = cluster.storage.checkpoints
    return (bucket.location or spec.region) if bucket else None


__all__ = [
    "SYSTEM",
    "FabricPlan",
    "NicPlan",
    "boot_disk_type",
    "bucket_location",
    "checkpoint_bucket_name",
    "fabric_plans",
    "fleet_name",
    "instance_group_name",
    "instance_group_stem",
    "inventory_entry",
    "lustre_filesystem_name",
    "partitions_of",
    "spot_tolerant",
    "system_mtu",
]


def autoscaler_config(cluster: ClusterSpec, impersonate: str | None = None) -> str:
    """The controller's /etc/gpu-fleet/autoscaler.yaml (see autoscaler/daemon/config.py): the daemon
    runs as SlurmUser next to slurmctld, talks to Slurm by its CLI and to GCE as the cluster's autoscaler
    service account (`impersonate`: the controller's account may mint its tokens, nothing else on the VM
    holds its rights), and keeps its state where the Resume/SuspendProgram hooks write."""
    assert cluster.slurm is not None
    auto = cluster.slurm.autoscaler
    config = {
        "inventory": "/etc/gpu-fleet/inventory.json",
        # beside it, the late-binding lua's wake-up file (autoscaler.slurm.wake.DEPLOYED_STATE: the same path)
        "state_path": "/var/lib/gpu-fleet/autoscaler.db",
        "policy": dict(auto.policy),
        "slurm": {"mode": "cli"},
        "provider": {"kind": "gce", **({"impersonate_service_account": impersonate} if impersonate else {})},
        "metrics": {"host": "127.0.0.1", "port": auto.metrics_port},
    }
    return "# Generated by gpu-fleet (stacks/plan.py) from clusters[].slurm.autoscaler\n" + yaml.safe_dump(
        config, sort_keys=False
    )
