"""The `gpu-fleet` policy on the Kueue path of a replay: the Kubernetes daemon's semantics (`autoscaler/kube/loop.py`).

Behind the Kueue gate (`kueue_gate.py`, with the ProvisioningRequest admission check) a job reaches the
autoscaler only once Kueue reserved quota for it, as the ProvisioningRequest the admission check creates; its
pods exist only once that request is Provisioned.  This driver plays `KubeDaemon.tick` on the generic replay
engine (no Slurm: nothing allocates node names at submission; pods go where their request booked capacity):

- it acts on the daemon's poll (`loop.interval_s`, 10 s) and, as the daemon's watches wake it
  (`autoscaler/kube/wake.py`), `WAKE_LATENCY_S` after a request is created, a node registers or is preempted, or
  a job ends, no sooner than `MIN_GAP_S` after the last tick's start (`watch`; off: events between polls wait for
  the next one, as before the nineteenth round); a tick that cordoned nodes is followed `MIN_GAP_S` later;
- each request without a booking is ONE work unit (a gang of all the workload's pods, all or nothing in one
  zone), submitted at its quota reservation (the request's creation); all of them go through one `plan()` over
  the inventory (the same planner and settings rule as the Slurm path);
- an assignment is *booked* (busy to the planner; new nodes held for the workload's pods, the engine's
  nominations); a NEW placement launches the plan's ScaleUp; a booking on registered nodes is answered
  Provisioned in the same poll, and otherwise the poll that finds every booked node registered answers it
  (`KueueGate.provisioned`): Kueue admits the workload and its pods run on those nodes;
- a refused launch (stockout, quota) backs the offering off in the planner's memory and drops the booking: the
  request is served again at the next poll (all or nothing; the daemon's `_release`); a booked node that vanished
  before the pods ran (spot preemption) drops the booking and deletes the rest of it; a booked node whose room
  other pods took drops the booking (planned again);
- pods of a workload that lost its node after it ran (spot preemption) are planned like a request;
- scale-down is `scale_down_idle` over the inventory (idle since the first poll that saw the node idle): cordon
  (drain) at one poll, delete the still-empty cordoned nodes at the next, never a node with work or a booking.

A node counts the GPUs its pods ask for and those its bookings hold (each booked request's GPUs per pod), booting
or registered, as the daemon's `inventory_nodes` does: a small request may be booked onto the free GPUs of a node
running pods or of one booting for another request.  Before the seventeenth round a node running pods counted
wholly used here, and before the eighteenth a booked node did (here and in the daemon), so on 8-GPU-only families
every 1-GPU request arriving during a boot got a node of its own.  A gang's nodes (nominated for it) count wholly
used until its pods run (the daemon counts a gang's GPUs per pod: the same for the usual gang of whole-node pods,
a difference for a gang of 4-GPU pods on 8-GPU nodes); a one-request launch is not nominated
(`nominates_single_unit_launches`).  The settings rule sees the runs of the workloads that
finished (their pods' start to end, `autoscaler.kube.runs`) at the first poll after, as the daemon times them from
their pods."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from autoscaler.cloud import ProviderError
from autoscaler.core import queue_depth
from autoscaler.core.settings import ArrivalLog, SeenJob, SettingsTracker
from autoscaler.kube.wake import MIN_GAP_S, WAKE_LATENCY_S, next_tick_at
from autoscaler.model import (
    Command,
    DeleteNodes,
    Drain,
    Inventory,
    Node,
    NodeState,
    Placement,
    Policy,
    Pool,
    ScaleUp,
    UnavailableOffering,
    WorkUnit,
    record_failure,
)
from autoscaler.planner.minimum import pool_floor
from autoscaler.replay.facts import scenario_facts
from autoscaler.replay.gpu_fleet import DEFAULT_POLICY, INTERVAL_S, policy_settings
from autoscaler.replay.policy import Decision, ReplayView
from autoscaler.replay.scenario import Scenario
from autoscaler.replay.state import Job, JobState, SimNode
from autoscaler.replay.trace import TraceJob

#: late binding is the Slurm daemon's (held CLOUD names): nothing is held on Kubernetes
KUBE_POLICY = replace(DEFAULT_POLICY, late_bind=False)


@dataclass
class GpuFleetKubePolicy:
    """The Kubernetes daemon's decision loop in a replay; see the module docstring."""

    policy: Policy = KUBE_POLICY
    name: str = "gpu-fleet"
    description: str = (
        "the gpu-fleet daemon on Kubernetes: one ProvisioningRequest per admitted workload, planned as one gang "
        "(right-sized cheapest offering, reservation first, spot for tolerant work, one zone, backoff), booked "
        "nodes held for it, idle scale-down by cordon then delete"
    )
    interval_s: float = INTERVAL_S
    #: tick on the daemon's watch events between polls (`autoscaler/kube/wake.py`; `loop.watch`, on by default)
    watch: bool = True
    woken_ticks: int = 0
    #: the workload's pods exist only once its request is Provisioned, and then run on the nodes booked for it
    binds_nominations: bool = True
    #: a launch for one request holds nothing but the GPUs its booking asks for: nothing binds pods to nodes on
    #: Kubernetes (the engine nominates a one-unit launch's nodes to its job by default; only gangs are nominated
    #: here, explicitly); before the eighteenth round every such node counted wholly used until its pods ran
    nominates_single_unit_launches: bool = False
    #: Kueue with the ProvisioningRequest admission check: the gate waits for `provisioned` (`KueueGate`)
    admission_check: bool = True
    gate: Any = None  # the run's KueueGate (set by `kueue_run.KueueContext.engine`)
    placement_weights: None = None
    unavailable: tuple[UnavailableOffering, ...] = ()
    planner_calls: int = 0
    ticks: int = 0
    first_planned: dict[str, float] = field(default_factory=dict)  # job id -> first poll that planned it
    #: the settings rule over the requests the daemon has seen (None: `policy` is fixed); `KubeDaemon._learn`
    tracker: SettingsTracker | None = None
    _arrivals: ArrivalLog = field(default_factory=ArrivalLog)
    _pools: list[Pool] = field(default_factory=list)
    _t0: float | None = None
    _last_tick: float | None = None
    _woken_at: float | None = None  # a watch event's tick, due then
    _requests_seen: set[str] = field(default_factory=set)
    _bookings: dict[str, tuple[str, ...]] = field(default_factory=dict)  # job id -> booked node names
    _idle_since: dict[str, float] = field(default_factory=dict)
    _nodes: dict[str, tuple[SimNode, int, bool, Node]] = field(default_factory=dict)

    @classmethod
    def for_scenario(
        cls,
        scenario: Scenario,
        wait_value_usd_per_gpu_hour: float | None = None,
        jobs: Sequence[TraceJob] = (),
        warm_cap: bool = True,
    ) -> GpuFleetKubePolicy:
        """As the Kubernetes daemon is configured: `DEFAULT_POLICY` plus the wait value (and `Policy.warm_cap`),
        and the settings rule over the ProvisioningRequests seen so far and the runs of their workloads
        (`KubeDaemon._learn`), refreshed on the same grid.  Nothing is read from the trace's future; `jobs` is not
        read."""
        facts = scenario_facts(scenario, (), wait_value_usd_per_gpu_hour)
        base = replace(
            KUBE_POLICY,
            wait_value_usd_per_gpu_hour=facts.wait_value_usd_per_gpu_hour,
            warm_cap=warm_cap,
        )
        return cls(policy=base, tracker=SettingsTracker(base=base, boot_s=scenario.ready_s))

    def settings(self) -> dict[str, object]:
        settings = policy_settings(self.policy, self.tracker, "the requests seen", self.interval_s)
        # standby nodes are not brought up on this path (the planner is not asked for them): none ran
        return {"scheduler": "kueue", **settings, "standby_by_machine": {}, "watch": self.watch}

    def pools(self, scenario: Scenario) -> list[Pool]:
        self._pools = scenario.pools()
        return self._pools

    # ---- the daemon's poll ------------------------------------------------------------------------------

    def _next_tick(self, t: float) -> float:
        t0 = self._t0 if self._t0 is not None else t
        return t0 + math.ceil((t - t0) / self.interval_s - 1e-9) * self.interval_s

    def decide(self, view: ReplayView, now: float, reasons: frozenset[str]) -> Decision:
        if self._t0 is None:
            self._t0 = now
        if self.watch and self._watched(view, reasons):
            self._wake_for_event(now + WAKE_LATENCY_S)
        tick = self._next_tick(now)
        woken = self._woken_at is not None and self._woken_at <= now + 1e-9
        if (tick > now + 1e-6 and not woken) or self._last_tick == now:  # between ticks (or ticked at this instant)
            wake = tick if tick > now + 1e-6 else now + self.interval_s
            return Decision(wake_at=self._soonest(wake))
        if tick > now + 1e-6:
            self.woken_ticks += 1
        self._last_tick = now
        self._woken_at = None  # this tick reads everything the events changed
        self.ticks += 1
        st = view.state
        gate = self.gate
        self._learn(view, now)
        cmds: list[Command] = []
        # bookings of requests whose pods run (or whose nodes vanished) are done
        for jid, names in list(self._bookings.items()):
            job = st.by_id[jid]
            if job.state is not JobState.PENDING:
                del self._bookings[jid]
            elif any(n not in st.nodes for n in names):  # a booked node is gone before the pods ran
                del self._bookings[jid]
                left = [st.nodes[n] for n in names if n in st.nodes and not st.nodes[n].jobs]
                cmds += _deletes(left, f"request {jid}: a booked node vanished; all or nothing, served again")
            elif any(_taken(st.nodes[n], job) for n in names):  # other pods took the room while it booted
                del self._bookings[jid]
            elif gate is not None and jid in gate.checking and all(st.nodes[n].registered for n in names):
                self._provisioned(job, names, st)
        # the requests out (quota reserved, not provisioned) and pods nothing holds capacity for (requeued)
        waiting = [*(gate.checking.values() if gate is not None else ()), *st.pending()]
        pending = [j for j in waiting if j.id not in self._bookings]
        units = [
            WorkUnit(
                id=j.id,
                # a request's creation (admission); a reclaimed workload's pods are created anew (`pending_since`)
                submit_time=(
                    gate.admitted_at.get(j.id, j.submit)
                    if gate is not None and j.requeued_at is None
                    else j.pending_since
                ),
                gpus_per_node=j.gpus_per_node,
                nodes=j.nodes,
                spot_ok=j.spot_ok,
                pools=None if j.pool is None else frozenset({j.pool}),
            )
            for j in pending
        ]
        booked = self._booked_gpus(st)
        below = self._below_floor(st.nodes.values())
        if units or below or not self._shortcut:
            inv = self._inventory(st.nodes.values(), booked, now, full=True)
        elif st.idle or st.draining:  # scale-down alone decides the same over the idle and cordoned nodes
            inv = self._inventory((*st.idle.values(), *st.draining.values()), booked, now, full=False)
        else:
            self._idle_since.clear()
            return Decision(tuple(cmds), wake_at=self._soonest(self._wake(view, now)))
        nominations: dict[str, tuple[str, ...]] = {}
        for u in units:
            self.first_planned.setdefault(u.id, now)
        if units or below:  # work to place, or a pool to bring to its floor (`pool_floor`: the daemon's plan does)
            # the decision core the Kubernetes daemon calls (`KubeDaemon.tick`): nothing but it books a request
            p = queue_depth(units, inv, view.offerings(), self.policy, now, self.unavailable, scheduler_holds=False)
            self.planner_calls += 1
            self.unavailable = p.unavailable
            for su in p.scale_ups:
                cmds.append(su)
                if su.gang and su.units:
                    nominations[su.units[0]] = su.names
            for uid, a in p.assignments.items():
                self._bookings[uid] = tuple(a.nodes)
                if gate is not None and uid in gate.checking and a.placement is Placement.READY:
                    self._provisioned(st.by_id[uid], a.nodes, st)  # on registered nodes: in this poll (`_book`)
            booked = self._booked_gpus(st)
        drains, deletes = self._scale_down(inv, set(booked), now)
        if drains and self.watch:  # the daemon's loop ticks again to delete what it cordoned
            self._wake_for_event(now + MIN_GAP_S)
        wake = self._soonest(self._wake(view, now))
        return Decision((*cmds, *drains, *deletes), nominations, wake_at=wake)

    # ---- the daemon's watches (autoscaler/kube/wake.py) -------------------------------------------------

    def _watched(self, view: ReplayView, reasons: frozenset[str]) -> bool:
        """An event the daemon's watches wake it for: a ProvisioningRequest created (a workload got quota), a node
        registered (Ready) or preempted (deleted), a job's pods finished."""
        woke = bool(reasons & {"ready", "gone", "idle"})
        if self.gate is not None:
            new = [jid for jid in self.gate.checking if jid not in self._requests_seen]
            self._requests_seen.update(new)
            if len(self._requests_seen) > 4 * len(self.gate.checking) + 1024:
                self._requests_seen &= set(self.gate.checking)
            woke |= bool(new)
        return woke

    def _wake_for_event(self, at: float) -> None:
        """A tick due `at`, no sooner than the loop's gap after the last one (`wake.next_tick_at`, as the daemon)."""
        at = next_tick_at(at, next_poll=math.inf, last_tick=self._last_tick, woken=True, min_gap_s=MIN_GAP_S)
        if self._woken_at is None or at < self._woken_at:
            self._woken_at = at

    def _soonest(self, wake: float | None) -> float | None:
        if self._woken_at is None:
            return wake
        return self._woken_at if wake is None else min(wake, self._woken_at)

    def _learn(self, view: ReplayView, now: float) -> None:
        """`KubeDaemon._learn` on the requests this poll sees (the gate's outstanding ProvisioningRequests, each
        created at its quota reservation) and the runs of the workloads that finished since the last poll (their
        pods succeeded: from their start on the node to their end, `autoscaler.kube.runs`; seen at this poll)."""
        if self.tracker is None or self.gate is None:
            return
        for j in self.gate.checking.values():
            self._arrivals.see(j.id, now, SeenJob(self.gate.admitted_at.get(j.id, j.submit), j.nodes, j.gpus_per_node))
        for j in self.gate.take_finished():
            if j.start is not None and j.end is not None:
                self._arrivals.ended(j.id, now, j.end - j.start)
        assert self._t0 is not None
        self.policy = self.tracker.current(
            now, self._t0, offerings=view.offerings, pools=self._pools, history=self._arrivals.history
        )

    @property
    def _shortcut(self) -> bool:
        """With no fleet-wide limits and no pool minimum, scale-down over the idle and cordoned nodes alone decides
        the same as over the whole inventory (nothing else to plan when no request waits)."""
        p = self.policy
        return (
            p.max_nodes is None
            and p.max_gpus is None
            and p.budget_usd_per_hour is None
            and all(pool_floor(pl, p) == 0 for pl in self._pools)
        )

    def _below_floor(self, nodes: Iterable[SimNode]) -> bool:
        """Whether a pool has fewer nodes than its floor (`pool_floor`; every node the sim lists counts)."""
        floors = {pl.name: f for pl in self._pools if (f := pool_floor(pl, self.policy))}
        if not floors:
            return False
        have = Counter(n.pool for n in nodes if n.pool in floors)
        return any(have[name] < f for name, f in floors.items())

    def _provisioned(self, job: Job, names: Sequence[str], st: Any) -> None:
        """Provisioned: Kueue admits the workload and its pods are created, confined to the booked nodes' pool (the
        node selector of the Kueue flavor the deployed stack gives each pool: `stacks/kueue_objects.py`)."""
        assert self.gate is not None
        job.pool = st.nodes[names[0]].pool
        self.gate.provisioned(job.id)

    def _booked_gpus(self, st: Any) -> dict[str, int]:
        """node name -> the GPUs the bookings on it hold (each booked request's GPUs per pod; the daemon's
        `KubeDaemon._booked`)."""
        out: dict[str, int] = {}
        for jid, names in self._bookings.items():
            g = st.by_id[jid].gpus_per_node
            for n in names:
                out[n] = out.get(n, 0) + g
        return out

    def _inventory(self, nodes: Iterable[SimNode], booked: dict[str, int], now: float, *, full: bool) -> Inventory:
        out = [self._node(n, booked.get(n.name, 0), now) for n in nodes]
        idle = {n.name for n in out if n.state is NodeState.READY_IDLE}
        for name in [k for k in self._idle_since if k not in idle]:
            del self._idle_since[name]
        if full and len(self._nodes) > 2 * len(out) + 64:
            live = {n.name for n in out}
            self._nodes = {k: v for k, v in self._nodes.items() if k in live}
        return Inventory(tuple(self._pools), tuple(out))

    def _node(self, n: SimNode, booked: int, now: float) -> Node:
        """The daemon's `inventory_nodes`: booting until registered, cordoned = draining, a gang's nominated node =
        wholly busy, pods and bookings = busy with the GPUs they ask for, else idle since the first poll that saw
        it idle."""
        if n.state is NodeState.DRAINING:
            state, used = NodeState.DRAINING, 0
        elif n.nominated_for is not None:  # a gang's node: its pods are on their way
            state, used = (NodeState.BUSY if n.registered else NodeState.BOOTING), n.gpus
        elif booked or n.jobs:  # the GPUs its pods and its bookings ask for: the rest may take more work
            used = min(n.gpus, max(1, n.gpus - n.free + booked))
            state = NodeState.BUSY if n.registered else NodeState.BOOTING
        elif not n.registered:
            state, used = NodeState.BOOTING, 0
        else:
            state, used = NodeState.READY_IDLE, 0
        if state is NodeState.READY_IDLE:
            since = self._idle_since.setdefault(n.name, now)
        else:
            self._idle_since.pop(n.name, None)
            since = n.launched_at
        cached = self._nodes.get(n.name)
        if (
            cached is not None
            and cached[:3] == (n, n.version, booked)
            and (cached[3].state, cached[3].since)
            == (
                state,
                since,
            )
        ):
            return cached[3]
        node = Node(
            name=n.name,
            pool=n.pool,
            offering=n.offering,
            state=state,
            gpus=n.gpus,
            gpus_used=used,
            since=since,
            units=tuple(str(i) for i in n.jobs),
            hourly_usd=n.hourly_usd,
        )
        self._nodes[n.name] = (n, n.version, booked, node)
        return node

    def _scale_down(self, inv: Inventory, booked: set[str], now: float) -> tuple[list[Drain], list[DeleteNodes]]:
        from autoscaler.planner import scale_down_idle

        drains, deletes = scale_down_idle(inv, self.policy, now, in_use=booked)
        busy = {n.name for n in inv.nodes if n.has_work or n.name in booked}
        out_d = []
        for d in drains:
            names = tuple(x for x in d.nodes if x not in busy)
            if names:
                out_d.append(Drain(d.pool, names, d.reason))
        # cordoned at an earlier poll and still empty: deleted now (the daemon deletes every draining node)
        out_x = []
        for dn in deletes:
            names = tuple(x for x in dn.names if x not in busy)
            if names:
                out_x.append(DeleteNodes(dn.pool, names, dn.reason))
        return out_d, out_x

    def _wake(self, view: ReplayView, now: float) -> float | None:
        """The next poll, when the daemon has something to do then: requests not booked yet, cordoned nodes to
        delete, or an idle node reaching its idle timeout (registrations and job ends call again anyway)."""
        st = view.state
        nxt = now + self.interval_s
        checking = self.gate.checking if self.gate is not None else {}
        if st.draining or any(j.id not in self._bookings for j in (*checking.values(), *st.pending())):
            return nxt
        for jid in checking:  # booked on nodes already up: Provisioned at the next poll (no event will come)
            if all(n in st.nodes and st.nodes[n].registered for n in self._bookings[jid]):
                return nxt
        due = []
        for n in st.idle.values():
            if self.policy.keep_reserved_nodes and n.offering.reservation is not None:
                continue
            since = self._idle_since.get(n.name, now)
            due.append(since + self.policy.idle_timeout_for(n.offering.machine_type))
        if not due:
            return None
        return self._next_tick(max(min(due), nxt))

    def on_launch_failure(self, command: ScaleUp, error: ProviderError, now: float) -> None:
        """The daemon's `_fail_offering` + `_release`: back the offering off, drop the booking (served again at
        the next poll)."""
        self.unavailable = record_failure(self.unavailable, command.offering, error.kind, now, self.policy, str(error))
        for uid in command.units:
            self._bookings.pop(uid, None)


def _taken(n: SimNode, job: Job) -> bool:
    """A registered booked node whose room other pods took (kube-scheduler placed them first): the booking no
    longer holds capacity for `job`, which is planned again."""
    return n.registered and n.nominated_for is not job and n.free < job.gpus_per_node


def _deletes(nodes: Sequence[SimNode], reason: str) -> list[DeleteNodes]:
    by_pool: dict[str, list[str]] = {}
    for n in nodes:
        by_pool.setdefault(n.pool, []).append(n.name)
    return [DeleteNodes(p, tuple(names), reason) for p, names in by_pool.items()]
