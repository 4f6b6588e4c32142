"""The Kueue objects of one `scheduler: kueue` cluster as plain manifests (pure: spec + catalog in, dicts out).

One ResourceFlavor per pool (node labels, taints, topology), a Cohort per named cohort, per team a Namespace,
a ClusterQueue whose nominal quotas are the team's share of each pool at max_nodes and a LocalQueue, the
WorkloadPriorityClasses, a Topology for topology-aware scheduling on GKE, and the ProvisioningRequest
admission check.  `components.kueue.queues` declares them (it takes manifests, not the spec);
`fleet.schemas.validate` checks each one against the real CRDs before anything is declared, and the tests
do again on the synthesized JSON.
"""

from __future__ import annotations

import math
from typing import Any

import yaml

from fleet.catalog import Catalog
from fleet.provisioning_class import GPU_FLEET_CLASS
from fleet.spec.kube import (
    GKE_TOPOLOGY_LEVELS,
    GPU_RESOURCE,
    GPU_TAINT,
    cluster_queue_name,
    flavor_name,
    flavor_node_labels,
    flavor_pools,
    kueue_quantity,
    local_queue_name,
    node_shape,
    pool_label,
    quota_amounts,
    spot,
    spot_taint,
    team_namespace,
    topology_aware,
)
from fleet.spec.model import ClusterSpec, KueueTeamSpec

API = "kueue.x-k8s.io/v1beta1"
PROVISIONING_CONTROLLER = "kueue.x-k8s.io/provisioning-request"
COVERED = ["cpu", "memory", GPU_RESOURCE]
MANAGED_BY = {"app.kubernetes.io/managed-by": "gpu-fleet"}
# Jobs Kueue manages (the frameworks GPU teams submit); the chart's default list plus JobSet and Kubeflow.
FRAMEWORKS = [
    "batch/job",
    "jobset.x-k8s.io/jobset",
    "kubeflow.org/pytorchjob",
    "kubeflow.org/mpijob",
    "ray.io/rayjob",
    "ray.io/raycluster",
]


def _meta(name: str, namespace: str | None = None, **labels: str) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": {**MANAGED_BY, **labels}}
    if namespace:
        meta["namespace"] = namespace
    return meta


def topology_name(cluster: ClusterSpec) -> str:
    return f"{cluster.name}-gpu-topology"


def admission_check_name(cluster: ClusterSpec) -> str:
    return f"{cluster.name}-provisioning"


def resource_flavors(cluster: ClusterSpec, catalog: Catalog) -> list[dict[str, Any]]:
    """One ResourceFlavor per pool, or per `kueue.flavors` entry over its pools (which share one GPU model:
    the rules check it).  A shared flavor carries the spot taint only when every pool of it is spot, and a
    topology only when every pool is topology-aware."""
    out = []
    for key, pools in flavor_pools(cluster).items():
        first = pools[0]
        spec: dict[str, Any] = {
            "nodeLabels": flavor_node_labels(cluster, first),
            # Only workloads tolerating preemption may take a spot flavor: Kueue matches pod tolerations
            # against nodeTaints.  Admitted pods get the GPU toleration added.
            "tolerations": [{**GPU_TAINT, "operator": "Equal"}],
        }
        if all(spot(p) for p in pools):
            spec["nodeTaints"] = [spot_taint(cluster)]
        if all(topology_aware(cluster, p, catalog) for p in pools):
            spec["topologyName"] = topology_name(cluster)
        if len(pools) == 1:
            labels = {"gpu-fleet/cluster": cluster.name, "gpu-fleet/pool": first.name,
                      "gpu-fleet/capacity": str(first.capacity)}  # fmt: skip
        else:
            labels = {"gpu-fleet/cluster": cluster.name, "gpu-fleet/flavor": key}
        out.append(
            {
                "apiVersion": API,
                "kind": "ResourceFlavor",
                "metadata": _meta(flavor_name(cluster, first), **labels),
                "spec": spec,
            }
        )
    return out


def topologies(cluster: ClusterSpec, catalog: Catalog) -> list[dict[str, Any]]:
    if not any(topology_aware(cluster, p, catalog) for p in cluster.pools):
        return []
    levels = [{"nodeLabel": label} for label in GKE_TOPOLOGY_LEVELS]
    return [
        {"apiVersion": API, "kind": "Topology", "metadata": _meta(topology_name(cluster)), "spec": {"levels": levels}}
    ]


def _limit(quantity: str, fraction: float, rounding: Any) -> str:
    """`fraction` of a quantity ("96", "1020Gi"), rounded with `rounding` (math.floor / math.ceil)."""
    unit = "Gi" if quantity.endswith("Gi") else ""
    return f"{rounding(int(quantity.removesuffix(unit)) * fraction + 1e-9 * (rounding is math.floor))}{unit}"


def _cluster_queue(cluster: ClusterSpec, team: KueueTeamSpec, catalog: Catalog) -> dict[str, Any]:
    assert cluster.kueue is not None
    pools = {p.name: p for p in cluster.pools}
    # flavor -> resource -> nominal, summed over the team's pools of the flavor, in the order of team.quotas
    nominals: dict[str, dict[str, int]] = {}
    for pool_name in team.quotas:
        pool = pools[pool_name]
        shape = node_shape(pool, catalog)
        assert shape is not None  # the spec rules guarantee a known node shape
        into = nominals.setdefault(flavor_name(cluster, pool), {})
        for name, amount in quota_amounts(team, pool, shape).items():
            into[name] = into.get(name, 0) + amount
    flavors = []
    for fname, quantities in nominals.items():
        resources = []
        for name, amount in quantities.items():
            nominal = kueue_quantity(name, amount)
            res: dict[str, Any] = {"name": name, "nominalQuota": nominal}
            if team.borrowing_limit is not None:
                res["borrowingLimit"] = _limit(nominal, team.borrowing_limit, math.ceil)
            if team.lending_limit is not None:
                res["lendingLimit"] = _limit(nominal, team.lending_limit, math.floor)
            resources.append(res)
        flavors.append({"name": fname, "resources": resources})
    spec: dict[str, Any] = {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": team_namespace(team)}},
        "queueingStrategy": "BestEffortFIFO",
        "resourceGroups": [{"coveredResources": list(COVERED), "flavors": flavors}],
        # Reclaim lent quota from any borrower in the cohort; inside the queue, higher priority preempts lower.
        "preemption": {"reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority"},
        # Try the next flavor (e.g. spot after reservation) before borrowing or preempting.
        "flavorFungibility": {"whenCanBorrow": "TryNextFlavor", "whenCanPreempt": "TryNextFlavor"},
    }
    if team.cohort:
        spec["cohort"] = team.cohort
    if cluster.kueue.fair_sharing:
        spec["fairSharing"] = {"weight": f"{team.fair_share_weight:g}"}
    else:
        # Borrowing by preempting lower-priority borrowers: classical preemption only.  Under fair sharing Kueue
        # ignores it ("May only be configured with Classical Preemption, and __not__ with Fair Sharing", the
        # ClusterQueue API): fair sharing's own strategies decide, and setting it there only misled the reader.
        spec["preemption"]["borrowWithinCohort"] = {"policy": "LowerPriority"}
    if cluster.kueue.provisioning:
        spec["admissionChecksStrategy"] = {
            "admissionChecks": [{"name": admission_check_name(cluster), "onFlavors": [f["name"] for f in flavors]}]
        }
    meta = _meta(cluster_queue_name(cluster, team), **{"gpu-fleet/team": team.name})
    return {"apiVersion": API, "kind": "ClusterQueue", "metadata": meta, "spec": spec}


def namespaces(cluster: ClusterSpec) -> list[dict[str, Any]]:
    assert cluster.kueue is not None
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": _meta(team_namespace(t), **{"gpu-fleet/team": t.name})}
        for t in cluster.kueue.teams
    ]


def cohorts(cluster: ClusterSpec) -> list[dict[str, Any]]:
    assert cluster.kueue is not None
    names = dict.fromkeys(t.cohort for t in cluster.kueue.teams if t.cohort)
    return [{"apiVersion": API, "kind": "Cohort", "metadata": _meta(name), "spec": {}} for name in names]


def cluster_queues(cluster: ClusterSpec, catalog: Catalog) -> list[dict[str, Any]]:
    assert cluster.kueue is not None
    return [_cluster_queue(cluster, t, catalog) for t in cluster.kueue.teams]


def local_queues(cluster: ClusterSpec) -> list[dict[str, Any]]:
    assert cluster.kueue is not None
    return [
        {
            "apiVersion": API,
            "kind": "LocalQueue",
            "metadata": _meta(local_queue_name(t), team_namespace(t)),
            "spec": {"clusterQueue": cluster_queue_name(cluster, t)},
        }
        for t in cluster.kueue.teams
    ]


def priority_classes(cluster: ClusterSpec) -> list[dict[str, Any]]:
    assert cluster.kueue is not None
    return [
        {
            "apiVersion": API,
            "kind": "WorkloadPriorityClass",
            "metadata": _meta(p.name),
            "value": p.value,
            "description": p.description or p.name,
        }
        for p in cluster.kueue.priority_classes
    ]


def provisioning(cluster: ClusterSpec) -> list[dict[str, Any]]:
    """The admission check through which Kueue asks the autoscaler for a workload's nodes, all or nothing."""
    assert cluster.kueue is not None
    if not cluster.kueue.provisioning:
        return []
    name = admission_check_name(cluster)
    config = {
        "apiVersion": API,
        "kind": "ProvisioningRequestConfig",
        "metadata": _meta(name),
        "spec": {
            "provisioningClassName": GPU_FLEET_CLASS,  # served by the daemon alone (fleet/provisioning_class.py)
            "managedResources": [GPU_RESOURCE],
            "retryStrategy": {"backoffLimitCount": 3, "backoffBaseSeconds": 60, "backoffMaxSeconds": 1800},
            # The daemon answers Provisioned with the booked pool's node labels as provisioningClassDetails;
            # Kueue (0.12+) adds this one to the admitted pods' node selector, so kube-scheduler binds them in
            # the pool the capacity was booked in, even under a flavor that spans several (`kueue.flavors`).
            "podSetUpdates": {
                "nodeSelector": [{"key": pool_label(cluster), "valueFromProvisioningClassDetail": pool_label(cluster)}]
            },
        },
    }
    check = {
        "apiVersion": API,
        "kind": "AdmissionCheck",
        "metadata": _meta(name),
        "spec": {
            "controllerName": PROVISIONING_CONTROLLER,
            "parameters": {"apiGroup": "kueue.x-k8s.io", "kind": "ProvisioningRequestConfig", "name": name},
        },
    }
    return [config, check]


def queue_objects(cluster: ClusterSpec, catalog: Catalog) -> list[dict[str, Any]]:
    """Every Kueue object of the cluster (not the Namespaces), in creation order."""
    return [
        *topologies(cluster, catalog),
        *resource_flavors(cluster, catalog),
        *priority_classes(cluster),
        *provisioning(cluster),
        *cohorts(cluster),
        *cluster_queues(cluster, catalog),
        *local_queues(cluster),
    ]


def manager_config(cluster: ClusterSpec) -> str:
    """Kueue's Configuration (the chart's managerConfig.controllerManagerConfigYaml): fair sharing on when asked,
    the job frameworks, and waitForPodsReady so a gang that never becomes ready gives its quota back."""
    assert cluster.kueue is not None
    config: dict[str, Any] = {
        "apiVersion": "config.kueue.x-k8s.io/v1beta1",
        "kind": "Configuration",
        "health": {"healthProbeBindAddress": ":8081"},
        "metrics": {"bindAddress": ":8443"},
        "webhook": {"port": 9443},
        "leaderElection": {"leaderElect": True},
        "manageJobsWithoutQueueName": False,
        "integrations": {"frameworks": list(FRAMEWORKS)},
        "waitForPodsReady": {
            "enable": True,
            "timeout": "30m",
            "blockAdmission": False,
            "requeuingStrategy": {"timestamp": "Eviction", "backoffLimitCount": 5},
        },
    }
    if cluster.kueue.fair_sharing:
        config["fairSharing"] = {
            "enable": True,
            "preemptionStrategies": ["LessThanOrEqualToFinalShare", "LessThanInitialShare"],
        }
    return yaml.safe_dump(config, sort_keys=False)
