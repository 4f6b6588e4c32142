"""Values derived from the Kubernetes / Kueue parts of a fleet spec (pure; one definition each).

The rules, the Kueue object builder, the stacks and the autoscaler inventory all read them from here:
a pool's node shape (catalog for GCE machine types, `cluster_api` for a provider the catalog lacks),
its $/h, the Kueue names, and each team's nominal quota, derived from the pools' max sizes.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
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


def shared_flavor(cluster: ClusterSpec, pool_name: str) -> str | None:
    """The `kueue.flavors` entry naming the pool, if any (the rules allow one at most)."""
    if cluster.kueue is None:
        return None
    return next((name for name, pools in cluster.kueue.flavors.items() if pool_name in pools), None)


def flavor_key(cluster: ClusterSpec, pool_name: str) -> str:
    """What a pool's ResourceFlavor is named after: its shared flavor, else the pool itself."""
    return shared_flavor(cluster, pool_name) or pool_name


def flavor_name(cluster: ClusterSpec, pool: NodePoolSpec) -> str:
    """The ResourceFlavor of a pool (cluster-scoped, so prefixed by the cluster)."""
    return f"{cluster.name}-{flavor_key(cluster, pool.name)}"


def flavor_pools(cluster: ClusterSpec) -> dict[str, list[NodePoolSpec]]:
    """Flavor key -> its pools, in the order of the cluster's pools (first pool first)."""
    out: dict[str, list[NodePoolSpec]] = {}
    for pool in cluster.pools:
        out.setdefault(flavor_key(cluster, pool.name), []).append(pool)
    return out


def cluster_queue_name(cluster: ClusterSpec, team: KueueTeamSpec) -> str:
    return f"{cluster.name}-{team.name}"


def local_queue_name(team: KueueTeamSpec) -> str:
    return team.name


def quota_gpus(team: KueueTeamSpec, pool: NodePoolSpec, shape: NodeShape) -> int:
    """The team's nominal GPUs on a pool: its share of the pool's GPUs at max_nodes, rounded down."""
    share = team.quotas[pool.name]
    return math.floor(share * pool.max_nodes * shape.gpus + 1e-9)


def quota_amounts(team: KueueTeamSpec, pool: NodePoolSpec, shape: NodeShape) -> dict[str, int]:
    """The team's nominal cpu, memory (GiB) and GPUs on a pool, cpu and memory in proportion to its GPUs."""
    gpus = quota_gpus(team, pool, shape)
    nodes = gpus / shape.gpus
    cpu = math.floor(nodes * shape.vcpus * ALLOCATABLE_CPU_FRACTION)
    mem = math.floor(nodes * shape.memory_gib * ALLOCATABLE_MEMORY_FRACTION)
    return {"cpu": cpu, "memory": mem, GPU_RESOURCE: gpus}


def kueue_quantity(resource: str, amount: int) -> str:
    """A Kueue quantity string of a `quota_amounts` value (memory in Gi)."""
    return f"{amount}Gi" if resource == "memory" else str(amount)


def spot(pool: NodePoolSpec) -> bool:
    return pool.capacity is CapacityType.SPOT


# ---------------------------------------------------------------- node labels and taints (one definition)

GKE_NODEPOOL_LABEL = "cloud.google.com/gke-nodepool"  # GKE sets it on every node of a node pool
GKE_SPOT_LABEL = "cloud.google.com/gke-spot"
# Cluster API copies Machine labels of this domain to the Node (CAPI >= 1.4 label sync).
CAPI_POOL_LABEL = "node.cluster.x-k8s.io/gpu-fleet-pool"
CAPI_SPOT_TAINT = "gpu-fleet/spot"
# The shared Kueue flavor of a node's pool (`kueue.flavors`); on Cluster API in the synced domain as well.
GKE_FLAVOR_LABEL = "gpu-fleet/kueue-flavor"
CAPI_FLAVOR_LABEL = "node.cluster.x-k8s.io/gpu-fleet-kueue-flavor"
GPU_TAINT = {"key": GPU_RESOURCE, "value": "present", "effect": "NoSchedule"}  # GKE adds it to GPU nodes
# Topology-aware scheduling levels GKE labels GPU nodes with (A3 Mega, A3 Ultra, A4 with dense placement).
GKE_TOPOLOGY_LEVELS = ("cloud.google.com/gce-topology-block", "cloud.google.com/gce-topology-subblock",
                       "kubernetes.io/hostname")  # fmt: skip
TOPOLOGY_FABRICS = ("gpudirect-tcpxo", "rdma")


def flavor_label(cluster: ClusterSpec) -> str:
    """The node label a shared flavor selects its pools' nodes by."""
    return GKE_FLAVOR_LABEL if cluster.platform == "gke" else CAPI_FLAVOR_LABEL


def pool_label(cluster: ClusterSpec) -> str:
    """The node label naming a node's pool (GKE sets its own; Cluster API syncs ours from the Machine)."""
    return GKE_NODEPOOL_LABEL if cluster.platform == "gke" else CAPI_POOL_LABEL


def uses_shared_flavors(cluster: ClusterSpec) -> bool:
    return cluster.kueue is not None and bool(cluster.kueue.flavors)


def node_labels(cluster: ClusterSpec, pool: NodePoolSpec) -> dict[str, str]:
    """Labels every node of the pool carries: the pool's, and in a cluster with shared flavors its flavor's
    (`flavor_node_labels`)."""
    labels = {pool_label(cluster): pool.name}
    if uses_shared_flavors(cluster):
        labels[flavor_label(cluster)] = flavor_key(cluster, pool.name)
    return labels


def gke_set_labels(cluster: ClusterSpec, pool: NodePoolSpec) -> dict[str, str]:
    """The labels a GKE node pool's config sets on its nodes: the pool's own `labels`, `gpu-fleet/pool` and
    `node_labels` but the node-pool label, which GKE sets itself."""
    labels = {**pool.labels, "gpu-fleet/pool": pool.name, **node_labels(cluster, pool)}
    return {k: v for k, v in labels.items() if k != GKE_NODEPOOL_LABEL}


#: GKE labels a node whose local SSDs are its ephemeral storage so (components/gke/node_pool.py)
GKE_LOCAL_SSD_LABEL = "cloud.google.com/gke-ephemeral-storage-local-ssd"
LOCAL_SSD_GIB = 375  # one GCE local NVMe SSD


def gke_local_ssds(pool: NodePoolSpec, cat: Catalog) -> int:
    """How many local SSDs a GKE node of the pool has as ephemeral storage: all its machine type comes with."""
    return cat.machine(pool.machine_type).local_ssd_gib // LOCAL_SSD_GIB


#: the label domains Cluster API copies from a Machine to its Node (`util/labels.GetManagedLabels`): keys prefixed
#: node-role.kubernetes.io, and the node-restriction.kubernetes.io and node.cluster.x-k8s.io domains with their
#: subdomains; any other Machine label stays on the Machine unless the core manager's
#: --additional-sync-machine-labels matches it
CAPI_SYNCED_PREFIX = "node-role.kubernetes.io"
CAPI_SYNCED_DOMAINS = ("node-restriction.kubernetes.io", "node.cluster.x-k8s.io")


def capi_synced(key: str, additional: Iterable[str] = ()) -> bool:
    """Whether Cluster API copies a Machine label with this key to the Node (`additional`: the regexes of the
    management cluster's --additional-sync-machine-labels, searched for in the key as Go's MatchString does)."""
    domain = key.split("/", 1)[0] if "/" in key else ""
    if domain == CAPI_SYNCED_PREFIX or any(domain == d or domain.endswith("." + d) for d in CAPI_SYNCED_DOMAINS):
        return True
    return any(re.search(pattern, key) for pattern in additional)


def carried_labels(cluster: ClusterSpec, pool: NodePoolSpec) -> dict[str, str]:
    """Every label a node of the pool carries that gpu-fleet sets: what pods' node selectors can name.  On GKE the
    node pool's labels (`gke_set_labels`) and GKE's node-pool label; on Cluster API `node_labels` and those of the
    pool's own `labels` that Cluster API copies to the Node (`capi_synced`)."""
    if cluster.platform == "gke":
        return {**gke_set_labels(cluster, pool), **node_labels(cluster, pool)}
    extra = cluster.kubernetes.additional_sync_machine_labels if cluster.kubernetes is not None else []
    synced = {k: v for k, v in pool.labels.items() if capi_synced(k, extra)}
    return {**synced, **node_labels(cluster, pool)}


def flavor_node_labels(cluster: ClusterSpec, pool: NodePoolSpec) -> dict[str, str]:
    """The nodeLabels of the pool's ResourceFlavor: Kueue copies them into the pods' (and the
    ProvisioningRequest's) node selector, so they name the pools the autoscaler may serve the workload from.

    The pool label, or in a cluster with shared flavors the flavor label for every flavor: Kueue matches a pod's
    node selector against a flavor only on the label keys its queue's flavors use, so one key for all of them
    lets a pod steer by it (a pool label would match no shared flavor, which has none)."""
    if uses_shared_flavors(cluster):
        return {flavor_label(cluster): flavor_key(cluster, pool.name)}
    return {pool_label(cluster): pool.name}


def spot_taint(cluster: ClusterSpec) -> dict[str, str]:
    key = GKE_SPOT_LABEL if cluster.platform == "gke" else CAPI_SPOT_TAINT
    return {"key": key, "value": "true", "effect": "NoSchedule"}


def node_taints(cluster: ClusterSpec, pool: NodePoolSpec) -> list[dict[str, str]]:
    """Taints of the pool's nodes: GPUs for GPU pods only; spot nodes only for pods that tolerate preemption."""
    return [dict(GPU_TAINT)] + ([spot_taint(cluster)] if spot(pool) else [])


def pool_tolerations(cluster: ClusterSpec) -> list[dict[str, str]]:
    """Tolerations of every taint the stack gives a pool's nodes (the GPU taint; the spot taint, whether or not a pool
    is spot yet): what a DaemonSet that must run on every GPU node of the cluster carries (the GPU Operator's)."""
    return [{"key": t["key"], "operator": "Exists", "effect": t["effect"]} for t in (GPU_TAINT, spot_taint(cluster))]


def topology_aware(cluster: ClusterSpec, pool: NodePoolSpec, catalog: Catalog) -> bool:
    """GKE labels the block / sub-block of nodes of GPUDirect machine types: TAS can place gangs tightly."""
    if cluster.platform != "gke" or pool.machine_type not in catalog:
        return False
    return catalog.machine(pool.machine_type).nics.fabric in TOPOLOGY_FABRICS
