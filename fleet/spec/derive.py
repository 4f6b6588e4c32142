"""Values derived from a fleet spec that the rules, the Slurm renderer and the components must agree on.

One definition each: the zones a pool really uses, a cluster's own zone, node names, the default partition, the
checkpoint bucket name, and how GPU fabric subnets are carved out of `network.gpu_cidr`.
"""

from __future__ import annotations

from dataclasses import dataclass
from ipaddress import IPv4Network

from fleet.catalog import Catalog, MachineType
from fleet.spec.model import ClusterSpec, FleetSpec, NodePoolSpec, SlurmPartitionSpec, SlurmSpec

GCE_RESERVED_PER_SUBNET = 4  # network, gateway, second-to-last and broadcast addresses
GCE_SMALLEST_SUBNET = 29  # GCE subnets are at most /29


def node_name_prefix(cluster: str, pool: str) -> str:
    """Slurm node names and GCE instance names of a pool are f"{prefix}-{i}", i in 0..max_nodes-1."""
    return f"{cluster}-{pool}"


def node_hostlist(cluster: str, pool: str, count: int) -> str:
    """Slurm hostlist of a pool's node names: `a3mega-resv-[0-63]` (`a3mega-resv-0` for one node)."""
    prefix = node_name_prefix(cluster, pool)
    if count == 1:
        return f"{prefix}-0"
    return f"{prefix}-[0-{count - 1}]"


def on_gcp(cluster: ClusterSpec) -> bool:
    """The cluster's nodes are GCE VMs (Slurm on GCE, or GKE); `platform: kubernetes` nodes are not."""
    return cluster.platform != "kubernetes"


def pool_zones(spec: FleetSpec, pool: NodePoolSpec, catalog: Catalog) -> tuple[str, ...]:
    """The zones a pool launches in: its own `zones`, else the fleet zones that offer its type."""
    if pool.zones is not None:
        return tuple(pool.zones)
    if pool.machine_type not in catalog:
        return ()
    machine = catalog.machine(pool.machine_type)
    return tuple(z for z in spec.zones if machine.offered_in(z))


def default_cluster_zone(spec: FleetSpec, cluster: ClusterSpec, catalog: Catalog) -> str:
    """Where a cluster without `zone` puts its control plane and zonal storage: the first zone of its first pool
    (gke: the first fleet zone any pool uses), else the first fleet zone.  It moves when the pools are reordered
    or the catalog changes where a type is offered."""
    if cluster.platform == "gke":
        used = {z for p in cluster.pools for z in pool_zones(spec, p, catalog)}
        return next((z for z in spec.zones if z in used), spec.zones[0])
    first = pool_zones(spec, cluster.pools[0], catalog)
    return first[0] if first else spec.zones[0]


def cluster_zone(spec: FleetSpec, cluster: ClusterSpec, catalog: Catalog) -> str:
    """The zone of a cluster's controller and login VMs and of its zonal storage (Filestore BASIC/ZONAL, Managed
    Lustre, the controller's state disk, all immutable in place): its `zone`, else `default_cluster_zone`."""
    return cluster.zone or default_cluster_zone(spec, cluster, catalog)


def controller_address(spec: FleetSpec, cluster_name: str) -> str:
    """The static internal IP of a Slurm cluster's controller, reserved by the stack and written into
    `SlurmctldHost=name(ip)`: counted down from the top of the system subnet (GCE keeps the last two
    addresses), one per cluster in spec order, so `fleet render` knows it without a deploy."""
    index = next(i for i, c in enumerate(spec.clusters) if c.name == cluster_name)
    net = spec.network.system_cidr
    return str(net.broadcast_address - 2 - index)


def default_partition(slurm: SlurmSpec) -> SlurmPartitionSpec:
    """The partition marked `default: true`, else the first one."""
    return next((p for p in slurm.partitions if p.default), slurm.partitions[0])


def checkpoint_bucket_name(spec: FleetSpec, cluster: ClusterSpec) -> str | None:
    """The GCS bucket for checkpoints/datasets (None when the cluster has no bucket)."""
    bucket = cluster.storage.checkpoints
    if bucket is None:
        return None
    return bucket.name or f"{spec.project}-{cluster.name}-checkpoints"


def fabric_subnet_count(machine: MachineType) -> int:
    """Subnets one VM's extra NICs need: every gVNIC after the first (the system VPC), every
    GPUDirect-TCPX(O) NIC (one VPC each) and every RDMA NIC (one subnet each of the RoCE VPC)."""
    return machine.nics.gvnic - 1 + machine.nics.gpu_nics + machine.nics.rdma_nics


def subnet_prefix_for(hosts: int) -> int:
    """Longest prefix whose subnet holds `hosts` VMs plus the addresses GCE reserves."""
    need = hosts + GCE_RESERVED_PER_SUBNET
    prefix = 32 - max(need - 1, 1).bit_length()
    return min(prefix, GCE_SMALLEST_SUBNET)


@dataclass(frozen=True)
class FabricNetwork:
    """The GPU fabric of one machine type in one cluster: `count` subnets of /`prefixlen`."""

    cluster: str
    machine_type: str
    fabric: str
    count: int
    prefixlen: int
    max_nodes: int

    @property
    def addresses(self) -> int:
        return self.count * 2 ** (32 - self.prefixlen)


def fabric_networks(spec: FleetSpec, catalog: Catalog) -> list[FabricNetwork]:
    """Fabric subnets every cluster needs, one entry per (cluster, machine type with extra NICs).

    Pools of one machine type in one cluster share its fabric; each subnet holds all their nodes.
    """
    out = []
    for cluster in filter(on_gcp, spec.clusters):
        nodes: dict[str, int] = {}
        for pool in cluster.pools:
            if pool.machine_type in catalog:
                nodes[pool.machine_type] = nodes.get(pool.machine_type, 0) + pool.max_nodes
        for machine_type, max_nodes in nodes.items():
            machine = catalog.machine(machine_type)
            count = fabric_subnet_count(machine)
            if count:
                prefix = subnet_prefix_for(max_nodes)
                out.append(FabricNetwork(cluster.name, machine_type, machine.nics.fabric, count, prefix, max_nodes))
    return out


def carve_gpu_subnets(spec: FleetSpec, catalog: Catalog) -> dict[tuple[str, str], list[IPv4Network]]:
    """Concrete fabric subnets from `network.gpu_cidr`, keyed by (cluster, machine type).

    Largest first, so every block is aligned; raises ValueError when they do not fit (the rule
    `gpu_cidr_fits_fabric` reports that before anything is declared).
    """
    gpu_cidr = spec.network.gpu_cidr
    nets = sorted(fabric_networks(spec, catalog), key=lambda n: n.prefixlen)
    cursor = int(gpu_cidr.network_address)
    end = int(gpu_cidr.broadcast_address) + 1
    out: dict[tuple[str, str], list[IPv4Network]] = {}
    for net in nets:
        size = 2 ** (32 - net.prefixlen)
        for _ in range(net.count):
            if cursor + size > end:
                raise ValueError(f"GPU fabric subnets do not fit in {gpu_cidr}")
            out.setdefault((net.cluster, net.machine_type), []).append(IPv4Network((cursor, net.prefixlen)))
            cursor += size
    return out
