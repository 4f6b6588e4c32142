"""Whether a pod fits a pool's nodes beyond its GPUs: its CPU and memory requests against what a node of the pool
offers pods.  Pure.

The Cluster Autoscaler serves a ProvisioningRequest by simulating the scheduler over a node group's template node,
every predicate included; reading GPUs alone, this daemon launched a node of the smallest GPU shape for a 1-GPU pod
that asks more CPUs or memory than that machine has: the pod then stays Pending on a Ready node that holds its
booking, and the request is Provisioned for capacity it cannot use.  A job asking more CPUs than its GPU shape has
is the same defect the Slurm path fixed in its tenth round (the job_submit.lua and `autoscaler.slurm.readers`).

- **What a pod asks** (`pod_needs`): the scheduler's effective request per resource: the sum over its containers
  (a container's request, or its limit where it sets only a limit, which the API server then copies into the
  request), or the largest init container's when that is more, plus `spec.overhead` (the RuntimeClass's).
  Sidecar init containers (restartPolicy Always) run beside the others and add to the sum.
- **What a node offers** (`NodeRoom`): a Node of the pool that is Ready: its `status.allocatable` less the requests
  of the DaemonSet and static pods on it, which every node of the pool runs.  Before one is Ready: the machine's
  vCPUs and memory (the inventory's `vcpus` / `memory_gib`) less the kubelet reservations: GKE's documented ones
  for a GKE node pool (docs: "Plan GKE Standard node sizes", node allocatable resources; the Cluster Autoscaler's
  GCE provider estimates template nodes the same way), the kubelet's default memory eviction threshold (100 MiB)
  alone for Cluster API pools, where kubeadm reserves nothing by default; the daemon then takes off the requests
  of the DaemonSet pods that will run there (`autoscaler/kube/daemonsets.py`).  The first Ready node of the pool
  replaces the estimate.
- **Free room on a node** (`source.node_rooms`): a Ready node's allocatable less every pod on it that has not
  finished (`NodeFacts.free`), a booting node's pool's room, each less what the
  requests booked on it ask whose pods are not there yet: a pod whose CPUs or memory a node can no longer hold is
  not planned onto its free GPUs (`WorkUnit.avoid`), and of the requests one plan puts onto a node's free GPUs,
  those its room cannot hold too are left for the next tick (`RoomLedger`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kubernetes.utils import parse_quantity

CPU, MEMORY = "cpu", "memory"
GIB = 1024**3
MIB = 1024**2
EVICTION_HARD_MEMORY = 100 * MIB  # the kubelet's default `memory.available<100Mi`
# GKE's memory reservation: (GiB of the machine's memory, share reserved) tiers, the rest at 2 %
GKE_MEMORY_TIERS = ((4, 0.25), (4, 0.20), (8, 0.10), (112, 0.06))
GKE_MEMORY_REST = 0.02
GKE_SMALL_MEMORY_GIB = 1  # machines under 1 GiB: 255 MiB (no GPU machine is this small)
# GKE's CPU reservation: (cores, share reserved) tiers, the rest at 0.25 %
GKE_CPU_TIERS = ((1, 0.06), (1, 0.01), (2, 0.005))
GKE_CPU_REST = 0.0025


def quantity(value: Any) -> float:
    """A Kubernetes quantity (``500m``, ``2``, ``1Gi``, ``1e9``) as a number; 0 when absent or malformed (the API
    server refuses a malformed quantity, so a template that has one is not the daemon's to judge)."""
    if value is None or value == "":
        return 0.0
    try:
        return float(parse_quantity(value))
    except ValueError:
        return 0.0


@dataclass(frozen=True)
class PodNeeds:
    """What one pod asks of its node besides GPUs."""

    cpu_milli: int = 0
    memory_bytes: int = 0

    def __str__(self) -> str:
        return f"{self.cpu_milli / 1000:g} CPUs and {self.memory_bytes / GIB:.1f} GiB"


NO_NEEDS = PodNeeds()


def _requests(c: Mapping[str, Any]) -> dict[str, float]:
    r = c.get("resources") or {}
    req, lim = r.get("requests") or {}, r.get("limits") or {}
    return {k: quantity(req[k] if k in req else lim.get(k)) for k in (CPU, MEMORY)}


def pod_needs(spec: Mapping[str, Any]) -> PodNeeds:
    """The scheduler's effective CPU and memory request of a pod with this spec (module docstring)."""
    total = {CPU: 0.0, MEMORY: 0.0}
    for c in spec.get("containers") or []:
        for k, v in _requests(c).items():
            total[k] += v
    init_peak = {CPU: 0.0, MEMORY: 0.0}
    sidecars = {CPU: 0.0, MEMORY: 0.0}
    for c in spec.get("initContainers") or []:
        r = _requests(c)
        for k in (CPU, MEMORY):
            # an init container runs with the sidecars started before it; a sidecar keeps running with the rest
            init_peak[k] = max(init_peak[k], sidecars[k] + r[k])
            if c.get("restartPolicy") == "Always":
                sidecars[k] += r[k]
    overhead = spec.get("overhead") or {}
    need = {k: max(total[k] + sidecars[k], init_peak[k]) + quantity(overhead.get(k)) for k in (CPU, MEMORY)}
    return PodNeeds(round(need[CPU] * 1000), round(need[MEMORY]))


def largest(needs: Iterable[PodNeeds]) -> PodNeeds:
    """What a node must offer to hold any one of these pods."""
    needs = list(needs)
    return PodNeeds(max((n.cpu_milli for n in needs), default=0), max((n.memory_bytes for n in needs), default=0))


@dataclass(frozen=True)
class NodeRoom:
    """What a node of a pool offers pods (None: not known, no limit); `source` says where the figures come from."""

    cpu_milli: int | None
    memory_bytes: int | None
    source: str

    def holds(self, needs: PodNeeds) -> bool:
        return (self.cpu_milli is None or needs.cpu_milli <= self.cpu_milli) and (
            self.memory_bytes is None or needs.memory_bytes <= self.memory_bytes
        )

    def less(self, needs: PodNeeds) -> NodeRoom:
        """The room left once a pod asking `needs` is on the node."""
        cpu = None if self.cpu_milli is None else self.cpu_milli - needs.cpu_milli
        memory = None if self.memory_bytes is None else self.memory_bytes - needs.memory_bytes
        return NodeRoom(cpu, memory, self.source)

    def shortfall(self, needs: PodNeeds) -> str:
        """What the node lacks for `needs`, as a reader wants it said ("" when it holds them)."""
        out = []
        if self.cpu_milli is not None and needs.cpu_milli > self.cpu_milli:
            out.append(f"{needs.cpu_milli / 1000:g} CPUs (a node offers {self.cpu_milli / 1000:g})")
        if self.memory_bytes is not None and needs.memory_bytes > self.memory_bytes:
            out.append(f"{needs.memory_bytes / GIB:.1f} GiB (a node offers {self.memory_bytes / GIB:.1f})")
        return " and ".join(out)


def _tiered(total: float, tiers: tuple[tuple[float, float], ...], rest: float) -> float:
    reserved, left = 0.0, total
    for size, share in tiers:
        step = min(left, size)
        reserved += step * share
        left -= step
    return reserved + left * rest


def gke_allocatable(vcpus: int, memory_gib: float) -> tuple[int, int]:
    """(CPU millicores, memory bytes) a GKE Standard node of this machine offers pods: capacity less GKE's CPU and
    memory reservations and the 100 MiB eviction threshold."""
    cpu = vcpus - _tiered(vcpus, GKE_CPU_TIERS, GKE_CPU_REST)
    if memory_gib < GKE_SMALL_MEMORY_GIB:
        reserved = 255 * MIB
    else:
        reserved = _tiered(memory_gib, GKE_MEMORY_TIERS, GKE_MEMORY_REST) * GIB
    memory = memory_gib * GIB - reserved - EVICTION_HARD_MEMORY
    return int(cpu * 1000), int(memory)


def estimated_room(vcpus: int | None, memory_gib: float | None, *, gke: bool) -> NodeRoom:
    """A pool's node before one is Ready, from its machine's vCPUs and memory (None: not known)."""
    if not vcpus or not memory_gib:
        return NodeRoom(None, None, "machine size unknown")
    if gke:
        cpu, memory = gke_allocatable(vcpus, memory_gib)
        return NodeRoom(cpu, memory, "estimate: the machine less GKE's reservations")
    return NodeRoom(vcpus * 1000, int(memory_gib * GIB) - EVICTION_HARD_MEMORY, "estimate: the machine less 100 MiB")


def allocatable(node: Mapping[str, Any]) -> tuple[int | None, int | None]:
    """A Node's allocatable CPU millicores and memory bytes (None where it reports none)."""
    a = (node.get("status") or {}).get("allocatable") or {}
    cpu = round(quantity(a[CPU]) * 1000) if a.get(CPU) else None
    memory = round(quantity(a[MEMORY])) if a.get(MEMORY) else None
    return cpu, memory


def room_after(node: Mapping[str, Any], pods: Iterable[PodNeeds], source: str) -> NodeRoom | None:
    """A Node's allocatable less what `pods` ask (None: it reports no allocatable CPUs or memory)."""
    cpu, memory = allocatable(node)
    if cpu is None and memory is None:
        return None
    pods = list(pods)
    return NodeRoom(
        None if cpu is None else cpu - sum(n.cpu_milli for n in pods),
        None if memory is None else memory - sum(n.memory_bytes for n in pods),
        source,
    )


class RoomLedger:
    """The room of each node as one tick's bookings take it: a request is booked onto nodes only while each still
    holds one of its pods (the planner packs by GPUs alone)."""

    def __init__(self, rooms: Mapping[str, NodeRoom]) -> None:
        self.rooms = dict(rooms)

    def take(self, names: Iterable[str], needs: PodNeeds, new_room: NodeRoom | None = None) -> bool:
        """Book one pod of `needs` on each of `names` if every one holds it (a node not known yet, one this plan
        launches, starts at `new_room`: its pool's); False, and nothing taken, if one does not."""
        names = list(names)
        have = {n: self.rooms.get(n, new_room) for n in names}
        if any(r is not None and not r.holds(needs) for r in have.values()):
            return False
        for n, r in have.items():
            if r is not None:
                self.rooms[n] = r.less(needs)
        return True
