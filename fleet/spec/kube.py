"""Values derived from the Kubernetes / Kueue parts of a fleet spec (pure; one definition each).

The rules, the Kueue object builder, the stacks and the autoscaler inventory all read them from here:
a pool's node shape (catalog for GCE machine types, `cluster_api` for a provider the catalog lacks),
its $/h, the Kueue names, and each team's nominal quota, derived from the pools' max sizes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from fleet.catalog import CapacityType, Catalog
from fleet.spec.model import ClusterSpec, FleetSpec, KueueTeamSpec, NodePoolSpec

GPU_RESOURCE = "nvidia.com/gpu"
# Kubernetes reserves part of every node (kubelet, system daemons): quotas count what pods can get.
ALLOCATABLE_CPU_FRACTION = 0.9
ALLOCATABLE_MEMORY_FRACTION = 0.85


@dataclass(frozen=True)
class NodeShape:
    gpu_type: str
    gpus: int
    vcpus: int
    memory_gib: int


def node_shape(pool: NodePoolSpec, catalog: Catalog) -> NodeShape | None:
    """GPUs, CPUs and memory of one node of the pool; None for an unknown machine type (a rule reports it)."""
    if pool.cluster_api is not None:
        c = pool.cluster_api
        return NodeShape(c.gpu_type, c.gpus_per_node, c.vcpus, c.memory_gib)
    if pool.machine_type not in catalog:
        return None
    m = catalog.machine(pool.machine_type)
    return NodeShape(m.gpu.accelerator_type, m.gpu_count, m.vcpus, m.memory_gib)


def pool_price(spec: FleetSpec, pool: NodePoolSpec, catalog: Catalog) -> tuple[float | None, str]:
    """($/h per node, source): the spec's `price_per_hour` wins, else the catalog's for the capacity type."""
    if pool.price_per_hour is not None:
        return pool.price_per_hour, "spec"
    if pool.machine_type not in catalog:
        return None, "missing"
    price = catalog.machine(pool.machine_type).price(spec.region)
    unit = price.hourly(pool.capacity) if price else None
    return (unit, price.source) if price and unit is not None else (None, "missing")


def team_namespace(team: KueueTeamSpec) -> str:
    return team.namespace or team.name


def flavor_name(cluster: ClusterSpec, pool: NodePoolSpec) -> str:
    """The ResourceFlavor of a pool (cluster-scoped, so prefixed by the cluster)."""
    return f"{cluster.name}-{pool.name}"


def cluster_queue_name(cluster: ClusterSpec, team: KueueTeamSpec) -> str:
    return f"{cluster.name}-{team.name}"


def local_queue_name(team: KueueTeamSpec) -> str:
    return team.name


def quota_gpus(team: KueueTeamSpec, pool: NodePoolSpec, shape: NodeShape) -> int:
    """The team's nominal GPUs on a pool: its share of the pool's GPUs at max_nodes, rounded down."""
    share = team.quotas[pool.name]
    return math.floor(share * pool.max_nodes * shape.gpus + 1e-9)


def nominal_quota(team: KueueTeamSpec, pool: NodePoolSpec, shape: NodeShape) -> dict[str, str]:
    """Kueue quantities (cpu, memory, nvidia.com/gpu) in proportion to the GPUs of the quota."""
    gpus = quota_gpus(team, pool, shape)
    nodes = gpus / shape.gpus
    cpu = math.floor(nodes * shape.vcpus * ALLOCATABLE_CPU_FRACTION)
    mem = math.floor(nodes * shape.memory_gib * ALLOCATABLE_MEMORY_FRACTION)
    return {"cpu": str(cpu), "memory": f"{mem}Gi", GPU_RESOURCE: str(gpus)}


def spot(pool: NodePoolSpec) -> bool:
    return pool.capacity is CapacityType.SPOT
