"""The Kubernetes queue source: ProvisioningRequests, Nodes and Pods -> the planner's model.  Pure.

A queue source turns a scheduler's view into work units and node facts (DESIGN.md, seam 8).  Here:

- **Work**: each `autoscaling.x-k8s.io/v1` ProvisioningRequest of the atomic class that Kueue's admission
  check created for a workload is ONE unit — a gang of all its pods (sum of the pod sets' counts), each pod on
  its own node with the GPUs its template asks for (`nvidia.com/gpu` limits, else requests), all or nothing.
  Spot-tolerant when the pod template tolerates the spot taint of the fleet's spot pools (or GKE's
  `cloud.google.com/gke-spot`); restricted to the pools whose node labels satisfy its nodeSelector and required
  node affinity (`pools_for`).
- **Nodes**: a Node is capacity of a managed pool when its labels carry the pool's `node_labels`; it counts
  as capacity only once Ready with allocatable `nvidia.com/gpu` (DESIGN.md: a GPU node is not ready when the VM
  is up).  Busy when a non-DaemonSet pod that has not finished runs on it; DRAINING when cordoned.
- **Bookings**: the capacity a request was given is written on the request itself (an annotation, before the
  launch call), so whichever replica leads next finds it: `Booking`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from autoscaler.kube.pod_fit import NO_NEEDS, NodeRoom, PodNeeds, largest, pod_needs, room_after
from autoscaler.model import Node, NodeState, Pool, WorkUnit

GPU = "nvidia.com/gpu"
BOOKING = "autoscaling.gpu-fleet.dev/booking"  # on a ProvisioningRequest: the capacity given to it (JSON)
#: on a Provisioned request: when the daemon saw all its pods bound (its booking is consumed, for every leader)
ARRIVED = "autoscaling.gpu-fleet.dev/pods-arrived"
GKE_SPOT_TAINT = "cloud.google.com/gke-spot"
NODE_POOL_LABEL = "autoscaling.gpu-fleet.dev/pool"  # every managed Node carries its inventory pool's name
#: the pod annotation naming the ProvisioningRequest a workload's pods consume (Kueue's admission check writes it
#: on every pod set: `PodSetUpdates`)
CONSUMES = "autoscaling.x-k8s.io/consume-provisioning-request"
#: the older key Kueue wrote before 0.9 (and still writes beside the new one); the Cluster Autoscaler reads both
CONSUMES_LEGACY = "cluster-autoscaler.kubernetes.io/consume-provisioning-request"


def ts(value: str | None) -> float:
    """RFC 3339 (`2026-12-01T10:00:00Z`) -> epoch seconds; 0 when absent."""
    if not value:
        return 0.0
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def condition(obj: Mapping[str, Any], kind: str) -> dict[str, Any] | None:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == kind:
            return c
    return None


def is_true(obj: Mapping[str, Any], kind: str) -> bool:
    c = condition(obj, kind)
    return bool(c) and c.get("status") == "True"


def pr_key(pr: Mapping[str, Any]) -> str:
    md = pr["metadata"]
    return f"pr/{md.get('namespace', 'default')}/{md['name']}"


@dataclass(frozen=True)
class Booking:
    """The capacity one request was given: written before the launch, read back by any replica."""

    request_id: str
    pool: str
    offering: dict[str, Any]  # autoscaler.daemon.snapshot.offering_to_dict shape
    names: tuple[str, ...]  # node names (Cluster API pools: machine names, filled in as Machines appear)
    count: int
    at: float

    def to_json(self) -> str:
        return json.dumps(
            {
                "request_id": self.request_id,
                "pool": self.pool,
                "offering": self.offering,
                "names": list(self.names),
                "count": self.count,
                "at": self.at,
            },
            sort_keys=True,
        )

    @classmethod
    def of(cls, pr: Mapping[str, Any]) -> Booking | None:
        raw = ((pr.get("metadata") or {}).get("annotations") or {}).get(BOOKING)
        if not raw:
            return None
        try:
            d = json.loads(raw)
            return cls(d["request_id"], d["pool"], d["offering"], tuple(d["names"]), int(d["count"]), float(d["at"]))
        except (ValueError, KeyError, TypeError):
            return None  # not ours or damaged: treated as unbooked (the request is served again)


@dataclass(frozen=True)
class RequestView:
    """One ProvisioningRequest as the autoscaler serves it."""

    key: str  # pr/<namespace>/<name>
    namespace: str
    name: str
    created: float
    generation: int
    pods: int
    gpus_per_pod: int
    spot_ok: bool
    pools: frozenset[str] | None  # pools its node selector allows (None: any that fits)
    valid_until_s: float | None
    booking: Booking | None
    accepted: bool
    provisioned: bool
    failed: bool
    problem: str | None = None  # why it cannot be served as written (bad template ...): answered Failed
    provisioned_at: float | None = None  # lastTransitionTime of Provisioned=True
    arrived: bool = False  # its pods were all bound once (ARRIVED): the booking holds nothing any more
    booking_expired: bool = False  # BookingExpired=True: told Kueue the capacity is no longer held for it
    needs: PodNeeds = NO_NEEDS  # the CPUs and memory its largest pod asks (`autoscaler.kube.pod_fit`)
    fit_pools: frozenset[str] | None = None  # the pools whose nodes hold those (None: every pool, or not known)
    unfit: str = ""  # why the other pools' nodes do not ("h1: 30 CPUs (a node offers 25.7)"; "" when none)

    def unit(self, avoid: frozenset[str] = frozenset()) -> WorkUnit:
        """Its work unit; `avoid`: nodes whose free CPUs or memory cannot hold one of its pods."""
        return WorkUnit(
            id=self.key,
            submit_time=self.created,
            gpus_per_node=max(1, self.gpus_per_pod),
            nodes=max(1, self.pods),
            pools=both(self.pools, self.fit_pools),
            spot_ok=self.spot_ok,
            avoid=avoid,
        )


def both(a: frozenset[str] | None, b: frozenset[str] | None) -> frozenset[str] | None:
    """The pools two restrictions both allow (None: no restriction)."""
    return b if a is None else a if b is None else a & b


def fitting_pools(needs: PodNeeds, rooms: Mapping[str, NodeRoom] | None) -> tuple[frozenset[str] | None, str]:
    """(The pools whose nodes hold a pod of `needs`, None when all do; why the others do not.)"""
    if not rooms:
        return None, ""
    short = {p: r.shortfall(needs) for p, r in rooms.items() if not r.holds(needs)}
    if not short:
        return None, ""
    return frozenset(p for p in rooms if p not in short), "; ".join(f"{p}: {why}" for p, why in sorted(short.items()))


def _quantity(v: Any) -> int:
    try:
        return int(str(v))
    except ValueError:
        return 0


def pod_gpus(spec: Mapping[str, Any]) -> int:
    """GPUs one pod asks for: the sum over its containers (limits, else requests); init containers' max."""
    total = 0
    for c in spec.get("containers") or []:
        r = c.get("resources") or {}
        total += _quantity((r.get("limits") or {}).get(GPU) or (r.get("requests") or {}).get(GPU) or 0)
    init = max(
        (
            _quantity(
                ((c.get("resources") or {}).get("limits") or {}).get(GPU)
                or ((c.get("resources") or {}).get("requests") or {}).get(GPU)
                or 0
            )
            for c in spec.get("initContainers") or []
        ),
        default=0,
    )
    return max(total, init)


def tolerates(spec: Mapping[str, Any], taint: Mapping[str, str]) -> bool:
    for t in spec.get("tolerations") or []:
        if t.get("key") not in (None, "", taint.get("key")):
            continue
        if t.get("effect") and taint.get("effect") and t["effect"] != taint["effect"]:
            continue
        if (t.get("operator") == "Exists" or t.get("value") == taint.get("value")) and (
            t.get("key") or t.get("operator") == "Exists"
        ):
            return True
    return False


def pools_for(spec: Mapping[str, Any], pool_labels: Mapping[str, Mapping[str, str]]) -> frozenset[str] | None:
    """Pools whose node labels (the pool's `node_labels`) satisfy the pod's nodeSelector and its required node
    affinity; None when it selects nothing (or its affinity names node fields, which no pool's labels tell)."""
    sel = spec.get("nodeSelector") or {}
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    terms = required.get("nodeSelectorTerms") or []
    if any(t.get("matchFields") for t in terms):
        terms = []
    if not sel and not terms:
        return None
    ok = {
        p
        for p, labels in pool_labels.items()
        if all(labels.get(k) == v for k, v in sel.items()) and (not terms or any(_term(t, labels) for t in terms))
    }
    return frozenset(ok)


def _term(term: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """One nodeSelectorTerm (its matchExpressions ANDed; an empty term matches no node, as the API defines)."""
    exprs = term.get("matchExpressions") or []
    return bool(exprs) and all(_expression(e, labels) for e in exprs)


def _expression(e: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    have, values, op = labels.get(e.get("key", "")), list(e.get("values") or []), e.get("operator")
    if op == "In":
        return have is not None and have in values
    if op == "NotIn":
        return have is None or have not in values
    if op == "Exists":
        return have is not None
    if op == "DoesNotExist":
        return have is None
    if op in ("Gt", "Lt") and have is not None and len(values) == 1:
        try:
            a, b = int(have), int(values[0])
        except ValueError:
            return False
        return a > b if op == "Gt" else a < b
    return False


def request_view(
    pr: Mapping[str, Any],
    templates: Mapping[tuple[str, str], Mapping[str, Any] | None],
    spot_taints: Sequence[Mapping[str, str]],
    pool_labels: Mapping[str, Mapping[str, str]],
    rooms: Mapping[str, NodeRoom] | None = None,
) -> RequestView:
    """`rooms`: pool -> what a node of it offers a pod (`pool_rooms`); None: GPUs alone decide."""
    md = pr["metadata"]
    ns = md.get("namespace", "default")
    spec = pr.get("spec") or {}
    pods = 0
    gpus = 0
    spot = True
    pools: frozenset[str] | None = None
    problem = None
    needs: list[PodNeeds] = []
    for ps in spec.get("podSets") or []:
        ref = (ps.get("podTemplateRef") or {}).get("name", "")
        tmpl = templates.get((ns, ref))
        if tmpl is None:
            problem = f"PodTemplate {ns}/{ref} not found"
            continue
        pspec = ((tmpl.get("template") or {}).get("spec")) or {}
        pods += int(ps.get("count") or 0)
        g = pod_gpus(pspec)
        needs.append(pod_needs(pspec))
        if g == 0:
            problem = problem or f"PodTemplate {ns}/{ref} asks for no {GPU}: no GPU pool is needed"
        gpus = max(gpus, g)
        spot &= any(tolerates(pspec, t) for t in (*spot_taints, {"key": GKE_SPOT_TAINT, "value": "true"}))
        allowed = pools_for(pspec, pool_labels)
        if allowed is not None:
            pools = allowed if pools is None else pools & allowed
    params = spec.get("parameters") or {}
    valid = params.get("ValidUntilSeconds")
    need = largest(needs)
    fit, unfit = fitting_pools(need, rooms)
    return RequestView(
        key=pr_key(pr),
        namespace=ns,
        name=md["name"],
        created=ts(md.get("creationTimestamp")),
        generation=int(md.get("generation") or 1),
        pods=pods,
        gpus_per_pod=gpus,
        spot_ok=spot and pods > 0,
        pools=pools,
        valid_until_s=float(valid) if valid not in (None, "") and str(valid).isdigit() else None,
        booking=Booking.of(pr),
        accepted=is_true(pr, "Accepted"),
        provisioned=is_true(pr, "Provisioned"),
        failed=is_true(pr, "Failed"),
        problem=problem,
        provisioned_at=ts((condition(pr, "Provisioned") or {}).get("lastTransitionTime"))
        if is_true(pr, "Provisioned")
        else None,
        arrived=bool((md.get("annotations") or {}).get(ARRIVED)),
        booking_expired=is_true(pr, "BookingExpired"),
        needs=need,
        fit_pools=fit,
        unfit=unfit,
    )


def is_daemonset_pod(pod: Mapping[str, Any]) -> bool:
    owners = (pod.get("metadata") or {}).get("ownerReferences") or []
    return any(o.get("kind") == "DaemonSet" for o in owners)


def is_mirror_pod(pod: Mapping[str, Any]) -> bool:
    return "kubernetes.io/config.mirror" in ((pod.get("metadata") or {}).get("annotations") or {})


def finished(pod: Mapping[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def consumed_request(pod: Mapping[str, Any]) -> str | None:
    """The key (`pr/<namespace>/<name>`) of the ProvisioningRequest whose capacity the pod consumes; None for a
    pod of no request (or a DaemonSet's)."""
    md = pod.get("metadata") or {}
    ann = md.get("annotations") or {}
    name = ann.get(CONSUMES) or ann.get(CONSUMES_LEGACY)
    if not name or is_daemonset_pod(pod):
        return None
    return f"pr/{md.get('namespace', 'default')}/{name}"


def holds_node(pod: Mapping[str, Any]) -> bool:
    """Does the pod keep its node busy: not a DaemonSet's, not a static pod's mirror, not finished.  The one
    test for both the inventory (`workload_pods`) and the check before a node is deleted."""
    return not (is_daemonset_pod(pod) or is_mirror_pod(pod) or finished(pod))


def workload_pods(pods: Iterable[Mapping[str, Any]]) -> dict[str, list[Mapping[str, Any]]]:
    """node name -> pods on it that hold it busy (`holds_node`)."""
    out: dict[str, list[Mapping[str, Any]]] = {}
    for p in pods:
        node = (p.get("spec") or {}).get("nodeName")
        if node and holds_node(p):
            out.setdefault(node, []).append(p)
    return out


def machine_failed(machine: Mapping[str, Any]) -> bool:
    """A Cluster API Machine that failed to provision: phase Failed, or a failureReason (v1beta2 keeps it under
    `status.deprecated.v1beta1`)."""
    st = machine.get("status") or {}
    old = (st.get("deprecated") or {}).get("v1beta1") or {}
    return st.get("phase") == "Failed" or bool(old.get("failureReason"))


def node_ready(node: Mapping[str, Any]) -> bool:
    ready = any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (node.get("status") or {}).get("conditions") or []
    )
    return ready and _quantity(((node.get("status") or {}).get("allocatable") or {}).get(GPU, 0)) > 0


def node_pool(node: Mapping[str, Any], pool_labels: Mapping[str, Mapping[str, str]]) -> str | None:
    labels = (node.get("metadata") or {}).get("labels") or {}
    if labels.get(NODE_POOL_LABEL) in pool_labels:
        return labels[NODE_POOL_LABEL]
    for pool, want in pool_labels.items():
        if want and all(labels.get(k) == v for k, v in want.items()):
            return pool
    return None


@dataclass
class NodeFacts:
    """What the scheduler side says of one node, fresh this tick (scale-down acts on this only)."""

    name: str
    pool: str
    ready: bool
    cordoned: bool
    workload: int  # pods that hold it busy
    gpus: int
    gpus_used: int  # GPUs the pods that hold it busy ask for
    zone: str | None
    since: float
    labels: dict[str, str] = field(default_factory=dict)
    work_pools: frozenset[str] | None = None  # the pools every selecting pod on it could also run on (`pools_for`)
    #: the GPUs its busy pods ask for, by the request they consume ("" for pods of none): `inventory_nodes` adds a
    #: booking's GPUs only until its pods are there
    gpus_by_request: dict[str, int] = field(default_factory=dict)
    #: its allocatable CPUs and memory less what every pod on it that has not finished asks (None: the Node reports
    #: no allocatable figure), and less its DaemonSet and static pods alone: what a node of its pool offers a new pod
    #: (`pool_rooms`; `autoscaler.kube.pod_fit`)
    free: NodeRoom | None = None
    empty: NodeRoom | None = None

    # the decision core's `SchedulerNode` (autoscaler.core.scale_down_steps): what scale-down may act on
    @property
    def idle(self) -> bool:
        return self.ready and not self.cordoned and not self.workload

    @property
    def drain(self) -> bool:
        return self.cordoned

    @property
    def has_work(self) -> bool:
        return self.workload > 0


def node_facts(
    nodes: Iterable[Mapping[str, Any]],
    pods: Iterable[Mapping[str, Any]],
    pool_labels: Mapping[str, Mapping[str, str]],
    selector_labels: Mapping[str, Mapping[str, str]] | None = None,
) -> dict[str, NodeFacts]:
    """The managed nodes' facts.  `pool_labels` tell which pool a node is of; `selector_labels` (default the same)
    what the pods' node selectors are matched against (`daemonsets.known_labels`: the pool's and the well-known)."""
    pods = list(pods)
    busy = workload_pods(pods)
    asks: dict[str, list[PodNeeds]] = {}  # node -> what each pod on it that has not finished asks
    fixed: dict[str, list[PodNeeds]] = {}  # ... of those, its DaemonSet and static pods
    for p in pods:
        node = (p.get("spec") or {}).get("nodeName")
        if node and not finished(p):
            need = pod_needs(p.get("spec") or {})
            asks.setdefault(node, []).append(need)
            if is_daemonset_pod(p) or is_mirror_pod(p):
                fixed.setdefault(node, []).append(need)
    out: dict[str, NodeFacts] = {}
    for n in nodes:
        pool = node_pool(n, pool_labels)
        if pool is None:
            continue
        md = n["metadata"]
        labels = md.get("labels") or {}
        ready_since = max(
            (
                ts(c.get("lastTransitionTime"))
                for c in (n.get("status") or {}).get("conditions") or []
                if c.get("type") == "Ready"
            ),
            default=ts(md.get("creationTimestamp")),
        )
        out[md["name"]] = NodeFacts(
            name=md["name"],
            pool=pool,
            ready=node_ready(n),
            cordoned=bool((n.get("spec") or {}).get("unschedulable")),
            workload=len(busy.get(md["name"], [])),
            gpus=_quantity(((n.get("status") or {}).get("allocatable") or {}).get(GPU, 0)),
            gpus_used=sum(pod_gpus(p.get("spec") or {}) for p in busy.get(md["name"], [])),
            zone=labels.get("topology.kubernetes.io/zone"),
            since=ready_since,
            labels=dict(labels),
            work_pools=_work_pools(busy.get(md["name"], []), selector_labels or pool_labels),
            gpus_by_request=_gpus_by_request(busy.get(md["name"], [])),
            free=room_after(n, asks.get(md["name"], ()), md["name"]),
            empty=room_after(n, fixed.get(md["name"], ()), f"node {md['name']}: allocatable less its DaemonSet pods"),
        )
    return out


def pool_rooms(estimates: Mapping[str, NodeRoom], facts: Mapping[str, NodeFacts]) -> dict[str, NodeRoom]:
    """Pool -> what a node of it offers a new pod: its first Ready Node's allocatable less the DaemonSet and static
    pods on it (`NodeFacts.empty`), else `estimates` (the machine less the kubelet's reservations)."""
    out = dict(estimates)
    seen: set[str] = set()
    for f in sorted(facts.values(), key=lambda f: f.name):
        if f.ready and f.empty is not None and f.pool not in seen:
            seen.add(f.pool)
            out[f.pool] = f.empty
    return out


def _gpus_by_request(pods: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for p in pods:
        key = consumed_request(p) or ""
        out[key] = out.get(key, 0) + pod_gpus(p.get("spec") or {})
    return out


def _work_pools(
    pods: Iterable[Mapping[str, Any]], pool_labels: Mapping[str, Mapping[str, str]]
) -> frozenset[str] | None:
    """The pools every pod of `pods` that selects its nodes (`pools_for`) could run on; None: none selects."""
    out: frozenset[str] | None = None
    for p in pods:
        allowed = pools_for(p.get("spec") or {}, pool_labels)
        if allowed is not None:
            out = allowed if out is None else out & allowed
    return out


def inventory_nodes(
    pools: Sequence[Pool],
    cloud: Iterable[Any],  # autoscaler.cloud.CloudNode of every managed pool
    facts: Mapping[str, NodeFacts],
    booked: Mapping[str, Mapping[str, int]],  # node name -> {request key booked on it: its GPUs per pod}
    idle_since: Mapping[str, float],
    now: float,
) -> list[Node]:
    """The planner's nodes: every live cloud node, in the state the Kubernetes side shows.  A node counts the GPUs
    its bookings hold (each booked request's GPUs per pod, until that request's pods are on it) and those its
    other pods ask for, so a 1-GPU request booked onto an 8-GPU node leaves 7 GPUs for the next request, booting
    or Ready (before the eighteenth round a booking held the whole node).

    An idle node is idle since the first tick that saw it idle (`idle_since`, kept by the loop), and since `now`
    when no tick has yet: its idle timeout starts then, as in the replay.  Until the twenty-seventh round a node no
    tick had seen idle counted as idle since it became Ready, so a node that had run work for longer than its
    shape's idle timeout was cordoned at the first tick after its pods finished: the warm keeping the settings rule
    and the wait value ask for never happened for it (found by tests/kube/test_one_path.py)."""
    by_pool = {p.name: p for p in pools}
    out: list[Node] = []
    for c in cloud:
        if c.pool not in by_pool or str(c.status) == "gone":
            continue
        f = facts.get(c.name)
        pool = by_pool[c.pool]
        bookings = booked.get(c.name) or {}
        held = tuple(bookings)
        on_node = f.gpus_by_request if f is not None else {}
        booked_gpus = sum(g for key, g in bookings.items() if key not in on_node)
        if str(c.status) == "stopping":  # being deleted: no capacity, nothing to place on
            state, used, units = NodeState.DELETING, 0, ()
        elif f is None or not f.ready:  # booting; what is booked on it is those requests'
            state, used, units = NodeState.BOOTING, min(pool.gpus_per_node, booked_gpus), held
        elif f.cordoned:
            state, used, units = NodeState.DRAINING, 0, ()
        elif held or f.workload:  # the GPUs its pods ask for and its bookings hold (the rest may take more work)
            used = min(pool.gpus_per_node, max(1, f.gpus_used + booked_gpus))
            state, units = NodeState.BUSY, held
        else:
            state, used, units = NodeState.READY_IDLE, 0, ()
        since = idle_since.get(c.name, now) if state is NodeState.READY_IDLE else c.created_at
        out.append(
            Node(
                name=c.name,
                pool=c.pool,
                offering=c.offering,
                state=state,
                gpus=pool.gpus_per_node,
                gpus_used=used,
                since=since,
                units=units,
                work_pools=f.work_pools if f is not None and state is NodeState.BUSY else None,
            )
        )
    return out


def node_rooms(
    nodes: Iterable[Node],
    facts: Mapping[str, NodeFacts],
    pool_rooms: Mapping[str, NodeRoom],
    booked: Mapping[str, Mapping[str, int]],
    needs: Mapping[str, PodNeeds],
) -> dict[str, NodeRoom]:
    """Node name -> what it offers one more pod (`autoscaler.kube.pod_fit`): a Ready node's free CPUs and memory, a
    booting node its pool's room, each less what the requests booked on it ask (`needs`: request key -> one pod's)
    whose pods are not on it yet."""
    out: dict[str, NodeRoom] = {}
    for n in nodes:
        if n.state is NodeState.DELETING:
            continue
        f = facts.get(n.name)
        unknown = NodeRoom(None, None, n.name)
        if f is not None and f.ready:
            room, on_node = f.free or unknown, f.gpus_by_request
        else:
            room, on_node = pool_rooms.get(n.pool) or unknown, {}
        for key in booked.get(n.name) or {}:
            if key not in on_node and key in needs:
                room = room.less(needs[key])
        out[n.name] = room
    return out


def unschedulable(pod: Mapping[str, Any]) -> bool:
    """A pending pod the scheduler could not place (PodScheduled=False, reason Unschedulable)."""
    st = pod.get("status") or {}
    if st.get("phase") not in (None, "Pending") or (pod.get("spec") or {}).get("nodeName"):
        return False
    return any(
        c.get("type") == "PodScheduled" and c.get("status") == "False" and c.get("reason") == "Unschedulable"
        for c in st.get("conditions") or []
    )


def unschedulable_units(
    pods: Iterable[Mapping[str, Any]],
    served: Iterable[str],
    spot_taints: Sequence[Mapping[str, str]],
    pool_labels: Mapping[str, Mapping[str, str]] | None = None,
    rooms: Mapping[str, NodeRoom] | None = None,
) -> list[WorkUnit]:
    """Unschedulable GPU pods of admitted workloads that no pending ProvisioningRequest covers (a node of the
    workload died, a pod was evicted after its request was Provisioned): one gang unit per request they consume,
    its pods together.  The request is how Kueue ties a workload's pods to it: its admission check's podSetUpdates
    put `autoscaling.x-k8s.io/consume-provisioning-request` on every pod (`consumed_request`); Kueue sets no
    workload label on pods (`kueue.x-k8s.io/podset` only), which this read until the forty-seventh round, so no
    real pod ever formed a unit.  `served`: the keys (`pr/<namespace>/<name>`) of the requests still pending,
    which stand for their pods.  `pool_labels`: pool -> its nodes' labels; a unit whose pods select nodes
    (nodeSelector) goes only to the pools every pod's selector allows, and (`rooms`: `pool_rooms`) whose nodes
    hold its pods' CPUs and memory."""
    served = set(served)
    groups: dict[str, list[Mapping[str, Any]]] = {}
    for p in pods:
        request = consumed_request(p)
        if request is None or request in served or not unschedulable(p) or pod_gpus(p.get("spec") or {}) == 0:
            continue
        groups.setdefault(request, []).append(p)
    out = []
    for request, members in sorted(groups.items()):
        spec = members[0].get("spec") or {}
        spot = all(
            any(tolerates(m.get("spec") or {}, t) for t in (*spot_taints, {"key": GKE_SPOT_TAINT, "value": "true"}))
            for m in members
        )
        pools: frozenset[str] | None = None
        for m in members:
            allowed = pools_for(m.get("spec") or {}, pool_labels or {})
            if allowed is not None:
                pools = allowed if pools is None else pools & allowed
        fit, _ = fitting_pools(largest(pod_needs(m.get("spec") or {}) for m in members), rooms)
        pools = both(pools, fit)
        out.append(
            WorkUnit(
                id=f"pods/{request.removeprefix('pr/')}",
                submit_time=min(ts((m.get("metadata") or {}).get("creationTimestamp")) for m in members),
                gpus_per_node=max(pod_gpus(m.get("spec") or {}) for m in members),
                nodes=len(members),
                pools=pools,
                spot_ok=spot and bool(spec),
            )
        )
    return out
