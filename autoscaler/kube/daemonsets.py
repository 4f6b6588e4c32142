"""What the DaemonSets of a cluster take of a pool's node before any node of the pool is Ready.  Pure.

Until a pool has a Ready Node, what a node of it offers pods is an estimate from its machine
(`autoscaler.kube.pod_fit.estimated_room`).  Every node then also runs the DaemonSet pods that schedule there
(GKE's logging, metrics and CSI agents, the GPU device plugin, a cluster's own monitoring or RDMA installers),
and their requests come off what is left for work: counting none, the daemon planned a pod sized to the last
few hundred millicores onto a new node that then could not hold it.  Karpenter counts the same thing when it
sizes a NodeClaim (its scheduler's daemonset overhead, from the DaemonSets' pod templates), and the Cluster
Autoscaler adds a node group's DaemonSet pods to its template node.

A DaemonSet counts on a pool when its pod template would schedule on the pool's nodes:

- its `nodeSelector` and required node affinity match the labels the pool's nodes are known to carry
  (`autoscaler.kube.build.known_labels`, which workload pods' selectors are matched against too).  A selector on
  any other label is not known to match, and is not counted;
- it tolerates every `NoSchedule` and `NoExecute` taint of the pool (the DaemonSet controller's own tolerations,
  for `node.kubernetes.io/*` conditions, concern no pool taint).

Its pod's requests are what the scheduler counts (`pod_fit.pod_needs`: containers, init containers, overhead).
The first Ready node of the pool replaces the whole estimate with its allocatable less the DaemonSet pods it
actually runs (`source.pool_rooms`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from autoscaler.kube.pod_fit import NO_NEEDS, NodeRoom, PodNeeds, pod_needs
from autoscaler.kube.source import pools_for, tolerates

SCHEDULING_EFFECTS = ("NoSchedule", "NoExecute")


def _template_spec(ds: Mapping[str, Any]) -> Mapping[str, Any]:
    return ((ds.get("spec") or {}).get("template") or {}).get("spec") or {}


def runs_on(spec: Mapping[str, Any], labels: Mapping[str, str], taints: Sequence[Mapping[str, str]]) -> bool:
    """Whether a DaemonSet pod of this template spec schedules on a node with these labels and taints."""
    selected = pools_for(spec, {"pool": labels})
    if selected is not None and "pool" not in selected:
        return False
    return all(tolerates(spec, t) for t in taints if t.get("effect") in SCHEDULING_EFFECTS)


def overhead(
    daemonsets: Iterable[Mapping[str, Any]],
    labels: Mapping[str, Mapping[str, str]],
    taints: Mapping[str, Sequence[Mapping[str, str]]],
) -> dict[str, tuple[PodNeeds, int]]:
    """Pool -> (what the DaemonSet pods that run on its nodes ask together, how many there are)."""
    specs = [_template_spec(ds) for ds in daemonsets]
    out: dict[str, tuple[PodNeeds, int]] = {}
    for pool, pool_labels in labels.items():
        asks = [pod_needs(s) for s in specs if runs_on(s, pool_labels, taints.get(pool, ()))]
        total = PodNeeds(sum(n.cpu_milli for n in asks), sum(n.memory_bytes for n in asks)) if asks else NO_NEEDS
        out[pool] = (total, len(asks))
    return out


def estimates_less(
    estimates: Mapping[str, NodeRoom], overheads: Mapping[str, tuple[PodNeeds, int]]
) -> dict[str, NodeRoom]:
    """Each pool's estimated room less its DaemonSet pods' requests, its `source` saying how many it counts."""
    out = dict(estimates)
    for pool, room in estimates.items():
        need, count = overheads.get(pool, (NO_NEEDS, 0))
        if count and (room.cpu_milli is not None or room.memory_bytes is not None):
            less, why = room.less(need), f"{room.source} and {count} DaemonSet pods ({need})"
            out[pool] = NodeRoom(less.cpu_milli, less.memory_bytes, why)
    return out
