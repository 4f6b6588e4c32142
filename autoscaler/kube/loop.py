"""One tick of the autoscaler on Kubernetes: serve Kueue's ProvisioningRequests, scale idle nodes down.

Order within a tick (each step acts only on this tick's fresh reads):
1. leader election (a Lease): a replica that does not lead reads and exports metrics only; one that takes the
   Lease over starts from what the last leader wrote on it (backoff memory, settings history:
   `autoscaler.kube.leader_state`);
2. reads: ProvisioningRequests of the atomic class and their PodTemplates, Nodes, Pods, each pool's cloud
   nodes (GCE instances of GKE node pools, Machines of Cluster API pools), offerings, async launch failures;
3. requests already booked: Provisioned once every booked node is Ready with its GPUs, the booked pool's node
   labels as the answer's details (Kueue pins the admitted pods to that pool by them; a booked node that
   vanishes after that is not the request's any more: never CapacityRevoked, see `_check_booking`); a failed
   launch -> its nodes deleted (all or nothing) and the request served again on another offering (the backoff
   memory remembers the failure, and the Lease hands it on to the next leader: `autoscaler.kube.leader_state`);
4. requests not booked yet -> one work unit each (a gang: all its pods) -> the pure planner
   (`autoscaler.planner.plan`: reservations first, spot only for tolerant pods, one zone, backoff, limits) ->
   the booking written on the request (the intent, before any cloud call) -> the launch, idempotent by the
   booking's request id; unserved units answered Provisioned=False with the planner's reason, or Failed when
   no pool can ever hold them or `ValidUntilSeconds` has passed;
5. scale-down: the planner's idle scale-down over nodes the Kubernetes side reports Ready, cordon-free of
   work: cordon, evict what runs there (DaemonSet pods only; the Eviction API honours PDBs), delete by name
   (GCE: the instance; Cluster API: the marked Machine).  A node running any non-DaemonSet pod is never
   drained or deleted; it is cordoned (nothing evicted) only when the planner finds it oversized for its pods
   (`autoscaler.planner.defrag.cordon_oversized`).

`autoscaler.core` (`queue_depth`, `scale_down_steps`) is the decision core shared with the Slurm daemon and
the replay; this module is the Kubernetes queue source's glue around it, as `autoscaler/daemon/tick.py` is
Slurm's: a ProvisioningRequest is work nothing holds yet (the core's pending units), Nodes and their pods are
the scheduler's facts (`NodeFacts` is the core's `SchedulerNode`).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence, Set
from dataclasses import dataclass, field, replace
from typing import Any

from loguru import logger

from autoscaler.cloud import (
    CloudNode,
    CloudNodeStatus,
    FailureKind,
    LaunchRequest,
    OfferingKey,
    Provider,
    ProviderError,
    shared_reads,
)
from autoscaler.core import queue_depth, scale_down_steps
from autoscaler.core.settings import ArrivalLog, SeenJob, SettingsTracker, shown_settings
from autoscaler.daemon.settings_log import log_settings
from autoscaler.daemon.snapshot import offering_from_dict, offering_to_dict
from autoscaler.kube.api import KubeApi, KubeError
from autoscaler.kube.daemonsets import estimates_less, overhead
from autoscaler.kube.leader_state import (
    BACKOFF,
    HISTORY,
    history_from_text,
    history_to_text,
    memory_from_json,
    memory_to_json,
)
from autoscaler.kube.lease import LeadershipLost, LeaseElector, micro_time
from autoscaler.kube.pod_fit import NodeRoom, RoomLedger
from autoscaler.kube.runs import RunWatch
from autoscaler.kube.source import (
    ARRIVED,
    BOOKING,
    Booking,
    NodeFacts,
    RequestView,
    condition,
    consumed_request,
    finished,
    holds_node,
    inventory_nodes,
    is_daemonset_pod,
    node_facts,
    node_rooms,
    pool_rooms,
    request_view,
    unschedulable_units,
)
from autoscaler.kube.taints import TaintCheck
from autoscaler.model import (
    Inventory,
    Placement,
    Policy,
    Pool,
    ScaleUp,
    UnavailableOffering,
    UnservedReason,
    WorkUnit,
    free_names,
    record_failure,
    request_id_for,
)
from fleet.provisioning_class import GPU_FLEET_CLASS
from fleet.spec.kube import CAPI_FLAVOR_LABEL, GKE_FLAVOR_LABEL

#: the planner's reasons that no retry can cure: the request is answered Failed at once
PERMANENT = {UnservedReason.NO_OFFERING, UnservedReason.NO_POOL, UnservedReason.GANG_TOO_LARGE}
#: the node labels a cluster with shared Kueue flavors steers pods by (`fleet.spec.kube.flavor_node_labels`)
FLAVOR_LABELS = (GKE_FLAVOR_LABEL, CAPI_FLAVOR_LABEL)
#: how long booked capacity is kept for a Provisioned request whose pods have not arrived (CA: 10 min)
BOOKING_TTL_S = 600.0
#: a best-effort-atomic request without `ValidUntilSeconds` is retried this long before Failed: the Cluster
#: Autoscaler's default (provreq processor, `defaultExpirationTime`, 7 days).  Each Failed is one of Kueue's
#: retries (the stack's retryStrategy.backoffLimitCount, 3) and the last deactivates the workload, so the hour used
#: until the forty-seventh round turned a stockout of about four hours into workloads deactivated for good
DEFAULT_VALID_S = 7 * 24 * 3600.0
#: a node created this long after a request was Provisioned is a later node of the same name, not one it was
#: Provisioned on (the API server stamps creation, this daemon the condition: their clocks may differ)
CLOCK_SLACK_S = 60.0
#: Cluster API replicas without a Machine this long get a warning: the MachineSet controller creates a Machine
#: seconds after a replicas change, and two minutes outlast its ordinary requeues
UNSEEN_REPLICAS_WARN_S = 120.0


@dataclass
class KubeTickResult:
    at: float
    leader: bool = False
    ok: bool = False
    error: str | None = None
    launched: list[dict[str, Any]] = field(default_factory=list)
    answered: dict[str, str] = field(default_factory=dict)  # request key -> condition set this tick
    deleted: list[str] = field(default_factory=list)
    cordoned: list[str] = field(default_factory=list)


@dataclass
class KubePools:
    """The managed pools: the planner's `Pool`s, each one's Node labels and spot taint, which provider acts."""

    pools: list[Pool]
    labels: dict[str, dict[str, str]]  # pool -> labels every Node of it carries
    spot_taints: list[dict[str, str]]
    providers: dict[str, Provider]  # pool -> its actuator (GCE for GKE node pools, Cluster API ...)
    machine_nodes: Callable[[str], dict[str, str]] | None = None  # CAPI: machine -> node name, per pool
    #: CAPI: per pool, the replicas no Machine stands for yet and the pool's offering
    unseen_replicas: Callable[[str], tuple[int, OfferingKey]] | None = None
    capi_pools: frozenset[str] = frozenset()  # pools whose cloud nodes are Machines (names chosen by Cluster API)
    taints: dict[str, list[dict[str, str]]] = field(default_factory=dict)  # pool -> taints every Node of it carries
    #: pool -> what a node of it offers a pod before one is Ready (`autoscaler.kube.pod_fit.estimated_room`)
    rooms: dict[str, NodeRoom] = field(default_factory=dict)
    #: pool -> the labels its nodes are known to carry before one is Ready, which DaemonSets select by
    #: (`autoscaler.kube.daemonsets.known_labels`)
    known_labels: dict[str, dict[str, str]] = field(default_factory=dict)


class KubeDaemon:
    def __init__(
        self,
        *,
        api: KubeApi,
        pools: KubePools,
        policy: Policy,
        elector: LeaseElector,
        clock: Callable[[], float] = time.time,
        metrics: Any = None,
        provisioning_class: str = GPU_FLEET_CLASS,
        settings: SettingsTracker | None = None,
    ) -> None:
        """With `settings`, the decision core runs with the settings rule's policy over the requests this
        daemon has seen (`autoscaler.core.settings`; `_learn`), else with `policy` as given."""
        self.api = api
        self.settings = settings
        self._arrivals = ArrivalLog()  # request key -> (first seen, the arrival)
        self._runs = RunWatch()  # the workloads' runs, from their pods
        self._since: float | None = None
        self.kp = pools
        # late binding holds Slurm's powered-down CLOUD names; Kueue binds nothing at submit and nothing is held
        self.policy = replace(policy, late_bind=False)
        self.elector = elector
        self.clock = clock
        self.metrics = metrics
        self.provisioning_class = provisioning_class
        self.taint_check = TaintCheck(pools.taints)
        self.memory: tuple[UnavailableOffering, ...] = ()  # handed on through the Lease (`_hand_on`)
        self._history_at: float | None = None  # the settings grid point whose history is on the Lease
        self._led = False  # whether the last tick led: a new leader reads the memory the last one left
        self.idle_since: dict[str, float] = {}
        self._unseen_since: dict[str, tuple[float, bool]] = {}  # CAPI pool -> (replicas without Machines since, warned)
        self._current: dict[str, dict[str, Any]] = {}  # request key -> the request as last read or written
        self._rooms: dict[str, NodeRoom] = dict(pools.rooms)  # pool -> what a node offers a pod (`pool_rooms`)
        self._daemonsets_refused = False  # the last DaemonSet list was refused (`_estimated_rooms`)
        #: pool -> what node selectors (pods', DaemonSets') are matched against: the labels its nodes are known to
        #: carry, well-known ones included (a pod selecting `kubernetes.io/os: linux` was Failed: no pool matched)
        self._selector_labels = pools.known_labels or pools.labels
        self._known_templates: dict[tuple[str, str], dict[str, Any]] = {}  # the requests' PodTemplates (`_templates`)
        self._launching: set[str] = set()  # new node names a request's launch covers, this tick (`_book`)
        self._live_before: set[str] = set()  # the cloud nodes the last tick listed (`_check_booking`)
        self._first_seen: dict[str, float] = {}  # unit id -> the tick that first planned it (`_not_after_first_seen`)

    # ---- reads -----------------------------------------------------------------------------------------
    def _providers(self) -> list[Provider]:
        seen: list[Provider] = []
        for p in self.kp.providers.values():
            if all(p is not q for q in seen):
                seen.append(p)
        return seen

    def _estimated_rooms(self) -> dict[str, NodeRoom]:
        """What a node of each pool offers pods before one is Ready: the machine's estimate less the DaemonSet pods
        that will run on it (`autoscaler/kube/daemonsets.py`).  A refused DaemonSet list (a ClusterRole from before
        the daemon read them) leaves the machine's estimate, said once."""
        try:
            daemonsets = self.api.daemonsets()
        except KubeError as exc:
            if exc.status != 403:
                raise
            if not self._daemonsets_refused:
                logger.warning(
                    "cannot list DaemonSets ({}): a pool's first node is estimated without the DaemonSet pods it "
                    "will run; redeploy the stack's ClusterRole (apps daemonsets: list, watch)",
                    exc,
                )
            self._daemonsets_refused = True
            return dict(self.kp.rooms)
        self._daemonsets_refused = False
        return estimates_less(self.kp.rooms, overhead(daemonsets, self._selector_labels, self.kp.taints))

    def _requests(self) -> list[dict[str, Any]]:
        prs = [
            pr
            for pr in self.api.provisioning_requests()
            if (pr.get("spec") or {}).get("provisioningClassName") == self.provisioning_class
        ]
        from autoscaler.kube.source import pr_key

        self._current = {pr_key(pr): pr for pr in prs}
        return prs

    def _templates(self, prs: Sequence[Mapping[str, Any]]) -> dict[tuple[str, str], dict[str, Any] | None]:
        """(namespace, name) -> the PodTemplate each request's pod sets name (None: not found).  Read once per
        request and kept while a request names it: Kueue creates a request's templates with it, one per pod set
        and attempt (`ppt-<workload>-<check>-<attempt>-<podset>`), and never changes them, and a Provisioned
        request lives as long as its workload, so reading them at every tick was a GET per running workload per
        tick.  A missing template is asked for again at the next tick."""
        out: dict[tuple[str, str], dict[str, Any] | None] = {}
        for pr in prs:
            ns = pr["metadata"].get("namespace", "default")
            for ps in (pr.get("spec") or {}).get("podSets") or []:
                key = (ns, (ps.get("podTemplateRef") or {}).get("name", ""))
                if key in out:
                    continue
                out[key] = self._known_templates.get(key)
                if out[key] is not None:
                    continue
                try:
                    out[key] = self._known_templates[key] = self.api.pod_template(*key)
                except KubeError as exc:
                    if exc.status != 404:
                        raise
        self._known_templates = {k: t for k, t in self._known_templates.items() if k in out}
        return out

    # ---- the tick ---------------------------------------------------------------------------------------
    def tick(self) -> KubeTickResult:
        now = self.clock()
        res = KubeTickResult(at=now)
        t0 = time.perf_counter()
        try:
            res.leader = self.elector.try_acquire()
            if res.leader and not self._led:  # taken over (or restarted): what the last leader left
                self._take_over(now)
            self._led = res.leader
            if res.leader:
                with shared_reads(self._providers()):
                    self._tick(now, res)
                self._hand_on(now)
            res.ok = True
        except (KubeError, ProviderError, OSError, LeadershipLost) as exc:  # the API server, the cloud, a tick past
            # the renew deadline: retried next tick
            res.error = f"{type(exc).__name__}: {exc}"
            logger.bind(error=res.error).error("tick failed: {}", res.error)
        m = self.metrics
        if m is not None:
            m.leader.set(1 if res.leader else 0)
            m.ticks.labels(outcome="ok" if res.ok else "failed").inc()
            m.tick_seconds.observe(time.perf_counter() - t0)
            if res.ok:
                m.tick_succeeded(self.clock())
            m.commands.labels(command="launch", outcome="ok").inc(len(res.launched))
            m.commands.labels(command="delete", outcome="ok").inc(len(res.deleted))
        return res

    def _take_over(self, now: float) -> None:
        """Start from what the last leader handed on through the Lease (`autoscaler.kube.leader_state`): its backoff
        memory, and the history its settings rule ran over (when observation began, the arrivals and their runs),
        so a failover neither retries stocked-out offerings nor forgets the work that kept nodes warm.  Without a
        handed-on history this replica keeps what it learned itself (nothing, unless it led before)."""
        self.memory = memory_from_json(self.elector.state.get(BACKOFF), now)
        if self.settings is None:
            return
        since, entries = history_from_text(self.elector.state.get(HISTORY))
        if since is not None:
            self._since, self._arrivals.entries = since, entries
            self.settings.computed_at = None  # the rule runs again over this history at the next tick
            logger.bind(arrivals=len(entries), since=since).info(
                "took the lease over: settings history of {} arrivals since {:.0f} from the last leader",
                len(entries),
                since,
            )

    def _hand_on(self, now: float) -> None:
        """Write on the Lease what the next leader starts from, with a renewal, when it changed: the backoff memory
        at every change, the settings history at every refresh of the settings grid (`SettingsTracker.refresh_s`:
        the rule reads the history only there, so a new leader misses at most one refresh's arrivals, which it
        then sees itself while the requests are still out)."""
        changed = False
        text = memory_to_json(self.memory, now)
        if text != self.elector.state.get(BACKOFF, "[]"):
            self.elector.state[BACKOFF] = text
            changed = True
        at = self.settings.computed_at if self.settings is not None else None
        if at is not None and at != self._history_at and self._since is not None:
            self.elector.state[HISTORY] = history_to_text(self._since, self._arrivals.entries, set(self._current))
            self._history_at = at
            changed = True
        if changed:
            self.elector.try_acquire()

    def _tick(self, now: float, res: KubeTickResult) -> None:
        prs = self._requests()
        templates = self._templates(prs)
        all_pods = self.api.pods()
        nodes = self.api.nodes()
        facts = node_facts(nodes, all_pods, self.kp.labels, self._selector_labels)
        self._rooms = pool_rooms(self._estimated_rooms(), facts)
        self.taint_check.check(nodes, facts, now)
        cloud = [c for prov in self._providers() for c in prov.list_nodes([p.name for p in self.kp.pools])]
        facts = self._alias_machines(facts)
        offerings = [o for prov in self._providers() for o in prov.offerings()]
        failed_ids: dict[str, str] = {}
        failed_names: dict[str, str] = {}
        for prov in self._providers():
            for f in prov.poll_errors():
                why = f"{f.kind}: {f.message or 'launch failed after acceptance'}"
                self._fail_offering(f.offering, f.kind, now, why)
                if f.request_id:
                    failed_ids[f.request_id] = why
                failed_names.update(dict.fromkeys(f.names, why))
        live = {c.name: c for c in cloud if str(c.status) != "gone"}

        self._bind_machines(self._views(templates), cloud, set(failed_names))
        bound = self._views(templates)  # with the Machines just bound to their bookings
        # launches whose nodes the cloud does not list yet: a request booked onto one has not lost it
        coming = {c.name for c in in_flight(bound, set(live) | set(failed_names))}
        # 3. booked requests
        for v in bound:
            if v.booking is None or v.failed:
                continue
            why = failed_ids.get(v.booking.request_id) or next(
                (failed_names[n] for n in v.booking.names if n in failed_names), None
            )
            if why is not None and not v.provisioned:  # all or nothing: clean up, serve it again elsewhere
                self._release(v, v.booking, why, now, res)
                continue
            self._check_booking(v, live, facts, now, res, coming)
        self._live_before = set(live)
        views = self._views(templates)  # as this tick's writes left them (released bookings, new conditions)
        self._learn(views, offerings, now, all_pods)
        arrived = self._see_arrivals(views, all_pods, now)
        booked = self._booked(views, now, {c.name: c.created_at for c in cloud}, arrived)
        self._expire_bookings(views, arrived, now, res)
        gone = set(res.deleted) | set(failed_names)  # deleted or failed this tick: no capacity to place on
        cloud = [c for c in cloud if c.name not in gone]
        booked_coming = in_flight(views, {c.name for c in cloud} | gone)
        cloud += booked_coming
        unbooked = self._unbooked_coming(cloud, booked_coming, now)
        cloud += unbooked
        inv = Inventory(
            tuple(self.kp.pools), tuple(inventory_nodes(self.kp.pools, cloud, facts, booked, self.idle_since, now))
        )

        # 4. requests to serve
        pending = [v for v in views if v.booking is None and not v.failed and not v.provisioned]
        for v in pending:
            if not v.accepted and v.problem is None:
                self._condition(v, "Accepted", "True", "Accepted", "gpu-fleet serves this request", now, res)
            if v.problem is not None:
                self._condition(v, "Failed", "True", "InvalidRequest", v.problem, now, res)
        # a node whose free CPUs or memory cannot hold one of a request's pods is no capacity for it (its GPUs may be)
        rooms = node_rooms(inv.nodes, facts, self._rooms, booked, {v.key: v.needs for v in views})
        units = [v.unit(_short_of(v, rooms)) for v in pending if v.problem is None]
        # unschedulable pods of admitted workloads no pending request stands for: capacity, launched by the planner
        # (no request to book it on: the pods take what comes up, as with the Cluster Autoscaler); a pod names the
        # request it consumes, so a live one stands for it
        live = [v.key for v in views if not v.failed and not v.provisioned]
        orphans = unschedulable_units(all_pods, live, self.kp.spot_taints, self._selector_labels, self._rooms)
        units = self._not_after_first_seen([*units, *orphans], now)
        # the decision core the Slurm daemon and the replay call: one plan over the work nothing holds yet
        p = queue_depth(units, inv, offerings, self.policy, now, self.memory, scheduler_holds=False)
        self.memory = p.unavailable
        by_key = {v.key: v for v in pending}
        placeholders = {c.name for c in unbooked}
        self._launching = set()
        ledger = RoomLedger(rooms)  # the planner packs by GPUs: each booking must also find the CPUs and memory
        new_pool = {n: su.pool for su in p.scale_ups for n in su.names}
        for uid, a in p.assignments.items():
            if uid in by_key and placeholders.isdisjoint(a.nodes):
                v = by_key[uid]
                pool = next((new_pool[n] for n in a.nodes if n in new_pool), None)
                if not ledger.take(a.nodes, v.needs, self._rooms.get(pool) if pool else None):
                    # another request of this plan took the room first: planned again next tick, off these nodes
                    logger.bind(request=uid).debug("{}: no CPU or memory room left on {}", uid, list(a.nodes))
                    continue
                self._book(v, a, p, {n.name: n.pool for n in inv.nodes}, facts, now, res)
            elif uid in by_key:  # onto replicas whose Machines are not listed yet: booked on them once they are
                logger.bind(request=uid).debug("{}: waits for the Machines on their way", uid)
        for su in p.scale_ups:  # launches for unschedulable pods: no booking, the request id makes it idempotent
            pods_share = pods_launch(su, p.assignments, by_key, now)
            if pods_share is not None:
                self._launch_for_pods(pods_share, now, res)
        for u in p.unserved:
            if u.unit in by_key:
                self._unserved(by_key[u.unit], u.reason, u.detail, now, res)
            else:
                logger.bind(unit=u.unit, reason=str(u.reason)).warning(
                    "unschedulable pods {}: {} ({})", u.unit, u.reason, u.detail
                )

        # 5. scale-down: the core's steps, cut to what the Kubernetes side reports idle / cordoned and empty
        self._scale_down(p, inv, facts, booked, now, res)

    def _learn(
        self, views: Sequence[RequestView], offerings: Sequence[Any], now: float, pods: Sequence[Mapping[str, Any]]
    ) -> None:
        """The settings rule over the work this leader has seen: each ProvisioningRequest is one workload arriving
        at its creation (its pods, GPUs per pod), and its run is timed from the pods that consume it
        (`autoscaler.kube.runs`: earliest start to latest finish, once they succeeded), so the rule has the mean
        run as on Slurm.  The leader hands the history on through the Lease at each refresh of the settings grid
        (`_hand_on`); a new leader starts from it (`_take_over`)."""
        if self.settings is None:
            return
        if self._since is None:
            self._since = now
        for v in views:
            if v.problem is None and v.gpus_per_pod > 0:
                self._arrivals.see(v.key, now, SeenJob(v.created, max(1, v.pods), v.gpus_per_pod))
        for run in self._runs.observe(pods, now):
            self._arrivals.ended(run.key, run.ended_at, run.run_s)
        before = shown_settings(self.policy)
        self.policy = replace(
            self.settings.current(
                now, self._since, offerings=offerings, pools=self.kp.pools, history=self._arrivals.history
            ),
            late_bind=False,
        )
        if shown_settings(self.policy) != before:
            log_settings(self.policy, self.settings.facts, "requests", self._since)

    def _bind_machines(
        self, views: Sequence[RequestView], cloud: Sequence[Any], failed: Set[str] = frozenset()
    ) -> None:
        """Cluster API names Machines itself: a launch's slots become the pool's new Machines, oldest booking
        first, each Machine to one launch (written back on the request, so every replica agrees); a request booked
        onto a slot's free GPUs follows it to the same Machine.  A Machine that failed (reported this tick:
        `failed`) is bound like a live one, so the failure reaches the launch it belonged to even when it failed
        before any tick saw it (before the nineteenth round such a launch was retried in the failing pool for
        good: an immediate capacity failure of the infrastructure provider never released its request)."""
        capi = self.kp.capi_pools
        if not capi:
            return
        machines = {
            pool: sorted(
                (c for c in cloud if c.pool == pool and (str(c.status) != "gone" or c.name in failed)),
                key=lambda c: c.created_at,
            )
            for pool in capi
        }
        taken = {n for v in views if v.booking for n in v.booking.names}
        renamed: dict[tuple[str, str], str] = {}  # (pool, slot) -> the Machine that took it
        capi_views = sorted((v for v in views if v.booking and v.booking.pool in capi), key=lambda v: v.booking.at)
        for v in (v for v in capi_views if v.booking.offering):  # the launches: each owns its slots
            b = v.booking
            real = {c.name for c in machines[b.pool]}
            bound = [n for n in b.names if n in real]
            open_slots = [n for n in b.names if n not in real]
            free = [c.name for c in machines[b.pool] if c.name not in taken]
            new = free[: len(open_slots)]
            if not new:
                continue
            taken.update(new)
            renamed.update({(b.pool, slot): m for slot, m in zip(open_slots, new, strict=False)})
            self._write_booking(v, dataclasses.replace(b, names=tuple(bound + new + open_slots[len(new) :])))
        for v in (v for v in capi_views if not v.booking.offering):  # booked onto a launch's slot: its Machine
            b = v.booking
            names = tuple(renamed.get((b.pool, n), n) for n in b.names)
            if names != b.names:
                self._write_booking(v, dataclasses.replace(b, names=names))

    def _unbooked_coming(self, cloud: Sequence[CloudNode], booked: Sequence[CloudNode], now: float) -> list[CloudNode]:
        """Cluster API replicas on their way that no booking names: a launch for unschedulable pods or for a pool's
        floor raises `spec.replicas`, and until the MachineSet controller creates the Machines `list_nodes` shows
        nothing for them.  Counted as booting nodes under free slot names (capacity on its way, as an in-flight
        NodeClaim), so the next tick neither launches them again nor lets the pool's max be overrun; before the
        twenty-sixth round a tick in that gap launched the same capacity again.  A request the planner puts on one
        is booked next tick, on the Machine that came (`_tick`)."""
        unseen = self.kp.unseen_replicas
        if unseen is None:
            return []
        by_pool = {p.name: p for p in self.kp.pools}
        used = {c.name for c in cloud}
        out: list[CloudNode] = []
        for pool in sorted(self.kp.capi_pools):
            count, key = unseen(pool)
            self._watch_unseen(pool, count, now)
            extra = count - sum(1 for c in booked if c.pool == pool)
            if extra <= 0 or pool not in by_pool:
                continue
            for name in free_names(by_pool[pool], used, extra):
                used.add(name)
                out.append(CloudNode(name, pool, key, CloudNodeStatus.PROVISIONING, now, None))
        return out

    def _watch_unseen(self, pool: str, count: int, now: float) -> None:
        """One warning per spell when a pool's MachineDeployment has had replicas without Machines for longer than
        `UNSEEN_REPLICAS_WARN_S`: the MachineSet controller is not creating them (a paused MachineDeployment, a
        missing infrastructure template, a controller that is down).  They stay counted as on their way, so the
        daemon does not raise the replicas further; what the operator needs is the reason, which Cluster API shows
        on the MachineDeployment and its MachineSet."""
        if count <= 0:
            self._unseen_since.pop(pool, None)
            return
        since, warned = self._unseen_since.get(pool, (now, False))
        if not warned and now - since > UNSEEN_REPLICAS_WARN_S:
            warned = True
            logger.bind(pool=pool, replicas=count).warning(
                "pool {}: {} replica(s) of its MachineDeployment have had no Machine for {:.0f} s; the MachineSet "
                "controller is not creating them (paused? infrastructure template? controller down?): see "
                "`kubectl describe machinedeployment` and its MachineSet; they are counted as on their way, "
                "not launched again",
                pool,
                count,
                now - since,
            )
        self._unseen_since[pool] = (since, warned)

    def _alias_machines(self, facts: dict[str, NodeFacts]) -> dict[str, NodeFacts]:
        """Cluster API pools: the cloud nodes are Machines; give each the facts of the Node it registered as."""
        if self.kp.machine_nodes is None:
            return facts
        out = dict(facts)
        for pool in sorted(self.kp.capi_pools):
            for machine, node in self.kp.machine_nodes(pool).items():
                if node in facts:
                    out[machine] = dataclasses.replace(facts[node], name=node)
        return out

    def _views(self, templates: Mapping[tuple[str, str], Mapping[str, Any] | None]) -> list[RequestView]:
        """Every request as this tick read it and then wrote it (`_current`): no second list call."""
        return [
            request_view(pr, templates, self.kp.spot_taints, self._selector_labels, self._rooms)
            for pr in self._current.values()
        ]

    def _not_after_first_seen(self, units: Sequence[WorkUnit], now: float) -> list[WorkUnit]:
        """Each unit as submitted no later than this leader first saw it.  A request's (or pod's) creation time is
        the API server's clock, which may run ahead of this daemon's; the planner's batch hold counts a creation
        after `now` as younger than any batch idle time, so the skew was added to the hold (the reservation
        hold's batch window), and a unit stamped far ahead was held for good.  Clamping to `now` would not do:
        every tick would see the unit as new."""
        seen = {u.id: self._first_seen.get(u.id, now) for u in units}
        self._first_seen = seen
        return [u if u.submit_time <= seen[u.id] else replace(u, submit_time=seen[u.id]) for u in units]

    def _see_arrivals(self, views: Sequence[RequestView], pods: Sequence[Mapping[str, Any]], now: float) -> set[str]:
        """Mark the requests whose pods have all been bound to nodes (as many as the request asks for, at one
        read): the booking has done its work, as Cluster Autoscaler's booking ends when the pods arrive.  From then
        on it holds nothing (`_booked`), also after those pods are gone (a reclaimed node: the workload's new pods
        are served as unschedulable pods, on capacity of their own), as the replay drops a booking once its job
        runs.  The mark is the request's ARRIVED annotation, so a new leader knows it too (before the
        twenty-eighth round it was this leader's memory, and a new one let such a booking hold until the booking
        TTL).  Returns the requests marked now: `views` were read before the mark (the next tick reads it, the
        watches' copy reading this process's own writes)."""
        bound: dict[str, int] = {}
        for p in pods:
            key = consumed_request(p)
            if key is not None and (p.get("spec") or {}).get("nodeName"):
                bound[key] = bound.get(key, 0) + 1
        marked: set[str] = set()
        for v in views:
            if v.arrived or not v.provisioned or not 0 < v.pods <= bound.get(v.key, 0):
                continue
            marked.add(v.key)
            try:
                self._current[v.key] = self.api.patch_provisioning_request(
                    v.namespace, v.name, {"metadata": {"annotations": {ARRIVED: micro_time(now)[:19] + "Z"}}}
                )
            except KubeError as exc:
                if exc.status != 404:  # gone: nothing to mark
                    raise
        return marked

    def _booked(
        self, views: Sequence[RequestView], now: float, created: Mapping[str, float], arrived: Set[str] = frozenset()
    ) -> dict[str, dict[str, int]]:
        """node name -> {request key: the GPUs each of its pods asks for}, for bookings still holding their nodes
        (not past the booking TTL, pods not arrived: the request's mark, or `arrived` for those `_see_arrivals`
        marked after `views` were read).  Several requests may be booked onto one node's GPUs.  `created`: when
        each live cloud node was created.

        A Provisioned request holds only the nodes it was Provisioned on: a node of the same name created after
        that (its node was reclaimed and a new launch took the free name) is not its.  `CLOCK_SLACK_S` absorbs the
        skew between the API server's clock (creation) and this daemon's (the condition): a node the request was
        Provisioned on was Ready by then, so created well before.  Until the twenty-seventh
        round the booking held the new node for up to the booking TTL, so after a spot node under a gang was
        reclaimed, the gang's replacement launch saw one of its own new nodes taken and launched a whole gang
        again (found by tests/kube/test_one_path.py)."""
        out: dict[str, dict[str, int]] = {}
        for v in views:
            b = v.booking
            if b is None or v.failed:
                continue
            if _booking_end(v, now, arrived) is not None:
                continue  # its pods arrived (the booking is consumed), or the booking time passed
            at = v.provisioned_at
            for n in b.names:
                if at is not None and created.get(n, at) > at + CLOCK_SLACK_S:
                    continue
                out.setdefault(n, {})[v.key] = max(1, v.gpus_per_pod)
        return out

    def _expire_bookings(
        self, views: Sequence[RequestView], arrived: Set[str], now: float, res: KubeTickResult
    ) -> None:
        """BookingExpired=True on a Provisioned request whose booking no longer holds its capacity, as the Cluster
        Autoscaler's provisioning-request processor writes it: `CapacityBookingConsumed` once its pods arrived,
        `CapacityReservationTimeExpired` after BOOKING_TTL_S.  Kueue (0.14) ignores it while the workload stays
        admitted; a workload evicted and admitted again then gets a new request (a new attempt), where a
        Provisioned request without it was taken as capacity still held, and the pods came back to none."""
        for v in views:
            if not v.provisioned or v.failed or v.booking_expired:
                continue
            reason = _booking_end(v, now, arrived)
            if reason is not None:
                message = f"gpu-fleet: {BOOKING_ENDS[reason]}; it is no longer booked"
                self._condition(v, "BookingExpired", "True", reason, message, now, res)

    # ---- requests ---------------------------------------------------------------------------------------
    def _provisioned(self, v: RequestView, pool: str, names: Sequence[str], now: float, res: KubeTickResult) -> None:
        """Provisioned=True, with the booked pool's node labels as `provisioningClassDetails`: the stack's
        ProvisioningRequestConfig has Kueue copy the pool label into the admitted pods' node selector
        (`podSetUpdates`), so the pods run in the pool the capacity was booked in, as the replay's do."""
        details = dict(self.kp.labels.get(pool) or {})
        self._condition(v, "Provisioned", "True", "Provisioned", _ready_message(names), now, res, details=details)

    def _condition(
        self,
        v: RequestView,
        kind: str,
        status: str,
        reason: str,
        message: str,
        now: float,
        res: KubeTickResult,
        *,
        details: Mapping[str, str] | None = None,
    ) -> None:
        pr = self._current.get(v.key) or {}
        conds = [c for c in ((pr.get("status") or {}).get("conditions") or []) if c.get("type") != kind]
        old = condition(pr, kind)
        if old and old.get("status") == status and old.get("reason") == reason and old.get("message") == message:
            return
        changed = not old or old.get("status") != status
        conds.append(
            {
                "type": kind,
                "status": status,
                "reason": reason,
                "message": message[:32768],
                "lastTransitionTime": micro_time(now)[:19] + "Z" if changed else old["lastTransitionTime"],
                "observedGeneration": v.generation,
            }
        )
        status_patch: dict[str, Any] = {"conditions": conds}
        if details:
            status_patch["provisioningClassDetails"] = dict(details)
        self._current[v.key] = self.api.patch_provisioning_request_status(v.namespace, v.name, {"status": status_patch})
        res.answered[v.key] = f"{kind}={status} ({reason})"
        logger.bind(request=v.key, condition=kind, status=status, reason=reason).info(
            "{}: {}={} {}: {}", v.key, kind, status, reason, message
        )

    def _book(
        self,
        v: RequestView,
        a: Any,
        p: Any,
        pool_of: Mapping[str, str],
        facts: Mapping[str, NodeFacts],
        now: float,
        res: KubeTickResult,
    ) -> None:
        su = next((s for s in p.scale_ups if v.key in s.units), None)
        names = tuple(a.nodes)
        if su is None or a.placement is not Placement.NEW:  # on nodes already up or booting: book them only
            pool = su.pool if su is not None else next((pool_of[n] for n in names if n in pool_of), "")
            booked = self._write_booking(v, Booking(f"existing-{v.key}", pool, {}, names, len(names), now))
            if booked and all(n in facts and facts[n].ready and not facts[n].cordoned for n in names):
                # the capacity is there now: Provisioned in this tick, not at the next one (Kueue admits at once)
                self._provisioned(v, pool, names, now, res)
            return
        shared = [n for n in names if n in self._launching]
        if shared and len(shared) == len(names):
            # on new nodes the launch of another request of this plan covers (small work packed onto one new node):
            # booked onto them as onto booting nodes, not launched a second time under another request id
            self._write_booking(v, Booking(f"existing-{v.key}", su.pool, {}, names, len(names), now))
            return
        if shared:  # partly on another's new nodes: not planned today (a gang takes whole nodes, a one-pod request
            # one); should the planner ever do it, the request waits a tick and is planned onto them as booting nodes
            logger.bind(request=v.key).debug("{}: shares new node(s) {} with another launch", v.key, shared)
            return
        # the booking's time, not the request's creation: a request planned again onto the same free slot name (its
        # booked room taken, a launch released) is a new launch, which a Cluster API pool would otherwise take for
        # the applied one; a replica taking over reads the id from the booking, never recomputes it
        rid = request_id_for(su.pool, su.offering, names, now)
        booking = Booking(rid, su.pool, offering_to_dict(su.offering), names, len(names), now)
        if not self._write_booking(v, booking):
            return  # another replica booked it first: it launches
        self._launching.update(names)
        self._launch(v, booking, su.placement_group, now, res)

    def _write_booking(self, v: RequestView, booking: Booking) -> bool:
        """The intent, on the request itself, before any cloud call; conditional on the request's version."""
        rv = ((self._current.get(v.key) or {}).get("metadata") or {}).get("resourceVersion")
        body = {"metadata": {"resourceVersion": rv, "annotations": {BOOKING: booking.to_json()}}}
        try:
            self._current[v.key] = self.api.patch_provisioning_request(v.namespace, v.name, body)
        except KubeError as exc:
            if exc.status in (404, 409):
                return False
            raise
        return True

    def _launch(self, v: RequestView, b: Booking, placement: str | None, now: float, res: KubeTickResult) -> None:
        key = offering_from_dict(b.offering)
        provider = self.kp.providers[b.pool]
        try:
            self.elector.check_leading()
            provider.launch(LaunchRequest(b.request_id, b.pool, key, b.names, placement))
            res.launched.append({"request": v.key, "request_id": b.request_id, "pool": b.pool, "names": list(b.names)})
            logger.bind(request=v.key, request_id=b.request_id, pool=b.pool, names=list(b.names)).info(
                "{}: launching {} node(s) in {} ({})", v.key, len(b.names), b.pool, key
            )
        except ProviderError as exc:
            if exc.kind is FailureKind.TRANSIENT:
                return  # the booking stays: the next tick (or the next leader) retries the same request id
            self._fail_offering(key, exc.kind, now, str(exc))
            self._release(v, b, f"{exc.kind}: {exc}", now, res)

    def _launch_for_pods(self, su: Any, now: float, res: KubeTickResult) -> None:
        provider = self.kp.providers[su.pool]
        try:
            self.elector.check_leading()
            provider.launch(LaunchRequest(su.request_id, su.pool, su.offering, su.names, su.placement_group))
            res.launched.append({"request": ",".join(su.units), "request_id": su.request_id, "pool": su.pool,
                                 "names": list(su.names)})  # fmt: skip
        except ProviderError as exc:
            if exc.kind is not FailureKind.TRANSIENT:
                self._fail_offering(su.offering, exc.kind, now, str(exc))

    def _release(self, v: RequestView, b: Booking, why: str, now: float, res: KubeTickResult) -> None:
        """All or nothing: delete whatever the booking created, drop the booking, serve the request again."""
        provider = self.kp.providers.get(b.pool)
        if provider is not None and b.names:
            existing = {c.name for c in provider.list_nodes([b.pool])}
            mine = [n for n in b.names if n in existing]
            if mine:
                self.elector.check_leading()
                provider.delete(b.pool, mine)
                res.deleted += mine
        self._drop_booking(v)
        self._condition(v, "Provisioned", "False", "CapacityIsNotFound", why, now, res)

    def _drop_booking(self, v: RequestView) -> None:
        """Take the booking off the request: it is planned again."""
        self._current[v.key] = self.api.patch_provisioning_request(
            v.namespace, v.name, {"metadata": {"annotations": {BOOKING: None}}}
        )

    def _check_booking(
        self,
        v: RequestView,
        live: Mapping[str, Any],
        facts: Mapping[str, NodeFacts],
        now: float,
        res: KubeTickResult,
        coming: Set[str] = frozenset(),
    ) -> None:
        b = v.booking
        assert b is not None
        if not b.offering:  # booked on nodes that were already up, booting, or on their way (`coming`)
            lost = [n for n in b.names if n not in live and n not in coming]
            if lost and not v.provisioned:
                self._release(v, b, f"booked node(s) gone before they were ready: {', '.join(lost)}", now, res)
                return
            ready = all(n in facts and facts[n].ready for n in b.names)
        else:
            missing = [n for n in b.names if n not in live]
            # (a Cluster API pool's MachineSet replaces a vanished Machine itself, and `_bind_machines` moves the
            # booking onto the replacement)
            gone = [n for n in missing if n in self._live_before] if b.pool not in self.kp.capi_pools else []
            if gone and not v.provisioned:
                # listed at the last tick, gone before Ready (a spot VM reclaimed while it booted): all or nothing,
                # the rest deleted and the request served again now, as the replay does.  Before the twenty-seventh
                # round the launch was repeated under its request id, which Compute Engine de-duplicates: the
                # request waited for the VM to come back or for its ValidUntilSeconds (tests/kube/test_one_path.py)
                self._release(v, b, f"booked node(s) gone before they were ready: {', '.join(gone)}", now, res)
                return
            if missing and not v.provisioned:
                # a launch the next leader must finish (its nodes were never listed), or one not listed yet
                self._launch(v, b, None, now, res)
                return
            ready = all(n in facts and facts[n].ready for n in b.names)
        if v.provisioned:
            # A booked node gone after Provisioned (a reclaimed spot node, an idle one scaled down after the booking
            # time) is not reported as CapacityRevoked: Kueue deactivates a workload that is not finished on it
            # (KEP-1136), which would stop a spot-tolerant workload for good at its first preemption, or a running
            # one whose pods kube-scheduler put on other nodes.  Nothing pins the pods to the booked nodes, so the
            # pods the Job controller recreates are served as unschedulable pods (step 6), as the replay does.
            return
        if not ready:
            return
        need = max(1, v.gpus_per_pod)
        taken = [n for n in b.names if room_for(facts[n], v.key) < need]
        if taken:
            # Ready, but other pods took the room first (kube-scheduler placed pending pods there: nothing pins a
            # booked node to its request): not Provisioned on it; the booking goes and the request is planned
            # again in this tick, as the replay does.  Before the twenty-seventh round it was answered Provisioned
            # and its pods could not be scheduled (tests/kube/test_one_path.py).
            self._drop_booking(v)
            logger.bind(request=v.key, nodes=taken).info(
                "{}: other pods took the room booked on {}; planned again", v.key, ", ".join(taken)
            )
            return
        self._provisioned(v, b.pool, b.names, now, res)

    def _unserved(self, v: RequestView, reason: UnservedReason, detail: str, now: float, res: KubeTickResult) -> None:
        valid = v.valid_until_s if v.valid_until_s is not None else DEFAULT_VALID_S
        fits = [p.max_nodes for p in self.kp.pools if _holds_a_pod(p, v) and (v.pools is None or p.name in v.pools)]
        if not fits or v.pods > max(fits):
            biggest = (
                f"the largest pool that can run its pods holds {max(fits)} nodes" if fits else "no pool fits a pod"
            )
            if v.unfit:
                biggest += f" (a pod asks {v.needs}; {v.unfit})"
            self._condition(
                v,
                "Failed",
                "True",
                "CapacityIsNotFound",
                f"{v.pods} pods x {v.gpus_per_pod} GPUs: {biggest}{self._outside_selector(v)}",
                now,
                res,
            )
        elif reason in PERMANENT:
            self._condition(v, "Failed", "True", "CapacityIsNotFound", f"{reason}: {detail}", now, res)
        elif now - v.created > valid:
            self._condition(v, "Failed", "True", "Expired", f"not provisioned within {valid:.0f} s: {detail}", now, res)
        else:
            self._condition(v, "Provisioned", "False", "CapacityIsNotFound", f"{reason}: {detail}", now, res)

    def _outside_selector(self, v: RequestView) -> str:
        """Why a request whose pods' node selector (its Kueue flavor's) allows no pool that fits could still be
        served: Kueue assigns a flavor by quota, never by whether a pod fits its nodes."""
        if v.pools is None:
            return ""
        allowed = [p for p in self.kp.pools if p.name in v.pools]
        would = [
            p.name for p in self.kp.pools if p.name not in v.pools and _holds_a_pod(p, v) and v.pods <= p.max_nodes
        ]
        if not would:
            return ""
        shapes = ", ".join(f"{p.name} ({p.gpus_per_node} GPUs/node)" for p in allowed) or "none"
        same_model = {p.gpu_type for p in allowed} & {p.gpu_type for p in self.kp.pools if p.name in would}
        labels = self.kp.labels.get(would[0]) or {}
        steer = {k: val for k, val in labels.items() if k in FLAVOR_LABELS} or labels  # what its flavor selects on
        selector = ", ".join(f"{k}: {val}" for k, val in steer.items())
        return (
            f" among the pools its node selector allows: {shapes}; {', '.join(would)} would hold it. Kueue assigns "
            "a flavor by quota, not by whether a pod fits its nodes: give such pods the node selector of a flavor "
            f"that fits ({selector}) and Kueue assigns that flavor"
            + ("; or put the pools of one GPU model in one kueue.flavors entry" if same_model else "")
        )

    def _fail_offering(self, key: Any, kind: FailureKind, now: float, message: str) -> None:
        self.memory = record_failure(self.memory, key, kind, now, self.policy, message)

    # ---- scale-down ----------------------------------------------------------------------------------------
    def _scale_down(
        self,
        p: Any,
        inv: Inventory,
        facts: Mapping[str, NodeFacts],
        booked: Mapping[str, Mapping[str, int]],
        now: float,
        res: KubeTickResult,
    ) -> None:
        for n in inv.nodes:
            if n.state.value == "ready-idle":
                self.idle_since.setdefault(n.name, now)
            else:
                self.idle_since.pop(n.name, None)
        free = {name: f for name, f in facts.items() if name not in booked}  # a booked node is never a candidate
        for step in scale_down_steps(p, free):
            for name in step.names:
                f = free.get(name)
                if f is None:
                    continue
                if step.action == "drain":
                    self.elector.check_leading()
                    self.api.cordon(f.name)
                    res.cordoned.append(f.name)
                    continue
                if not self._evict_daemonsets(f.name):
                    continue  # work arrived since the read, or a PodDisruptionBudget says wait: next tick
                self.kp.providers[step.pool].delete(step.pool, [name])
                res.deleted.append(name)
                self.idle_since.pop(name, None)

    def _evict_daemonsets(self, node: str) -> bool:
        """Evict the DaemonSet pods of an empty node through the Eviction API; False (nothing evicted) when a pod
        that holds the node (`holds_node`) is on it, False when a PDB refuses.  The node's pods are listed from the
        API server now (`pods_on`), not taken from the tick's read nor the watches' cache.  A static pod's mirror
        goes with its node, and a finished pod holds nothing: neither is evicted nor keeps the node."""
        mine = self.api.pods_on(node)
        if any(holds_node(p) for p in mine):
            return False  # work arrived since the read: leave the node alone
        for p in mine:
            if not is_daemonset_pod(p) or finished(p):
                continue
            md = p["metadata"]
            try:
                self.elector.check_leading()
                self.api.evict(md.get("namespace", "default"), md["name"])
            except KubeError as exc:
                if exc.status == 429:
                    logger.bind(node=node, pod=md["name"]).info("eviction refused by a PodDisruptionBudget: waiting")
                    return False
                if exc.status != 404:
                    raise
        return True


#: why a Provisioned request's booking ended, by the BookingExpired reason the Cluster Autoscaler writes for it
BOOKING_ENDS = {
    "CapacityBookingConsumed": "the request's pods were all scheduled",
    "CapacityReservationTimeExpired": f"capacity was held {BOOKING_TTL_S:.0f} s",
}


def _booking_end(v: RequestView, now: float, arrived: Set[str]) -> str | None:
    """The BOOKING_ENDS reason a Provisioned request's booking no longer holds its capacity for (its pods arrived:
    the request's mark, or `arrived` marked this tick; or the booking TTL passed), None while it holds."""
    if v.provisioned_at is None:
        return None
    if v.arrived or v.key in arrived:
        return "CapacityBookingConsumed"
    if now - v.provisioned_at > BOOKING_TTL_S:
        return "CapacityReservationTimeExpired"
    return None


def _holds_a_pod(p: Pool, v: RequestView) -> bool:
    """Whether a node of pool `p` can run one of `v`'s pods: GPUs enough, CPUs and memory enough (`fit_pools`), and
    spot only for pods tolerating it."""
    fits = v.fit_pools is None or p.name in v.fit_pools
    return fits and p.gpus_per_node >= v.gpus_per_pod and (v.spot_ok or str(p.capacity_type) != "spot")


def _short_of(v: RequestView, rooms: Mapping[str, NodeRoom]) -> frozenset[str]:
    """The nodes whose room (`source.node_rooms`) cannot hold one of `v`'s pods."""
    if not (v.needs.cpu_milli or v.needs.memory_bytes):
        return frozenset()
    return frozenset(name for name, r in rooms.items() if not r.holds(v.needs))


def room_for(f: NodeFacts, key: str) -> int:
    """GPUs of node `f` that the pods of other requests (and of none) leave for request `key`'s pods."""
    return f.gpus - sum(g for k, g in f.gpus_by_request.items() if k != key)


def _ready_message(names: Sequence[str]) -> str:
    return f"{len(names)} node(s) ready: {', '.join(names)}"


def in_flight(views: Sequence[RequestView], listed: set[str]) -> list[CloudNode]:
    """Nodes booked by a launch that the cloud does not list yet (a Cluster API launch before its Machines appear):
    capacity on its way, as Karpenter counts an in-flight NodeClaim, so the planner neither launches for it again
    nor gives its name to another launch, and books small requests onto its free GPUs."""
    out: list[CloudNode] = []
    for v in views:
        b = v.booking
        if b is None or v.failed or v.provisioned or not b.offering:
            continue
        key = offering_from_dict(b.offering)
        for n in b.names:
            if n not in listed:
                listed.add(n)
                out.append(CloudNode(n, b.pool, key, CloudNodeStatus.PROVISIONING, b.at, b.request_id))
    return out


def pods_launch(su: ScaleUp, assignments: Mapping[str, Any], requests: Mapping[str, Any], now: float) -> ScaleUp | None:
    """The part of scale-up `su` that unschedulable pods' units stand for, launched without a booking: all of it
    when no request unit shares it, the names the requests' units were not assigned when one does (a request books
    and launches its own names, `_book`; before, the pods' share of a shared scale-up waited a tick for a plan
    of its own), None when the requests take every name."""
    if not any(u in requests for u in su.units):
        return su
    booked = {n for u in su.units if u in requests and u in assignments for n in assignments[u].nodes}
    rest = tuple(n for n in su.names if n not in booked)
    if not rest:
        return None
    units = tuple(u for u in su.units if u not in requests)
    return dataclasses.replace(su, names=rest, units=units, request_id=request_id_for(su.pool, su.offering, rest, now))
