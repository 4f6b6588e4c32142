"""The discrete-event replay loop: trace submissions, job ends, the sim cloud's boots and
preemptions, and policy timers, off one heap in simulated time (nothing sleeps).

At each instant the engine applies what happened, lets the scheduler (`ClusterState.schedule`)
start what fits, then asks the policy for commands if anything changed, and executes them on the
sim cloud through the provider protocol (launch / delete by name).  It stops when every job of the
trace has run; nodes still up then are billed to that moment."""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from autoscaler.cloud import InsufficientCapacity, Offering, ProviderError, QuotaExceeded
from autoscaler.model import DeleteNodes, Drain, NodeState, Pool, ScaleUp, request_id_for
from autoscaler.replay.policy import Decision, ReplayPolicy
from autoscaler.replay.scenario import Scenario
from autoscaler.replay.state import ClusterState, Job, JobState, ReplayError, SimNode
from autoscaler.replay.trace import TraceJob
from autoscaler.sim import NodeEventKind, SimClock, SimCloud, SimConfig
from fleet.catalog import CapacityType, load_catalog

_JOB_END, _TIMER = 0, 1
MAX_ROUNDS = 8  # decide -> execute -> failure -> decide again, per instant


@dataclass
class Timeline:
    """Step changes of demanded GPUs (running + pending), billed GPUs (the reservation counted whole,
    plus every other live node, booting included) and running GPUs, for the report."""

    t: list[float] = field(default_factory=list)
    demand: list[int] = field(default_factory=list)
    provisioned: list[int] = field(default_factory=list)
    running: list[int] = field(default_factory=list)

    def record(self, t: float, demand: int, provisioned: int, running: int) -> None:
        if self.t and self.demand[-1] == demand and self.provisioned[-1] == provisioned and self.running[-1] == running:
            return
        if self.t and self.t[-1] == t:
            self.demand[-1], self.provisioned[-1], self.running[-1] = demand, provisioned, running
            return
        self.t.append(t)
        self.demand.append(demand)
        self.provisioned.append(provisioned)
        self.running.append(running)


@dataclass
class EngineCounters:
    decide_calls: int = 0
    launches: int = 0
    launch_failures: int = 0
    nodes_launched: int = 0
    drains: int = 0
    deletes: int = 0
    preemptions: int = 0
    events: int = 0


class AdmissionGate(Protocol):
    """A queueing gate in front of the cluster (Kueue's quota): told of arrivals and ends, it admits jobs."""

    def arrive(self, job: Job, now: float) -> None: ...

    def finish(self, job: Job) -> None: ...

    def admit(self, now: float) -> tuple[list[Job], bool]:
        """(jobs to submit to the cluster now, whether anything was admitted: news for the autoscaler)."""
        ...


class ReplayEngine:
    """Replays `jobs` through `policy` on a fresh `SimCloud` built from `scenario`."""

    def __init__(
        self,
        jobs: Sequence[TraceJob],
        scenario: Scenario,
        policy: ReplayPolicy,
        sim_config: SimConfig | None = None,
        admission: AdmissionGate | None = None,
    ) -> None:
        """`sim_config` replaces the cloud the scenario describes (quotas, scheduled stockout windows ...).
        `admission`: a queueing gate in front of the cluster (Kueue: `autoscaler.replay.kueue_gate`); a job is
        submitted to the cluster only once the gate admits it.  None: every job is submitted when it arrives."""
        if not jobs:
            raise ReplayError("the trace has no jobs")
        self.scenario = scenario
        self.policy = policy
        self.admission = admission
        self.clock = SimClock(min(j.submit for j in jobs) - scenario.ready_s)
        self.cloud = SimCloud(sim_config or scenario.sim_config(), self.clock)
        self.state = ClusterState(
            [Job(i, tj, *tj.shape()) for i, tj in enumerate(sorted(jobs, key=_key))],
            checkpoint_interval_s=scenario.checkpoint_interval_s,
        )
        self.state.exclusive_nodes = bool(getattr(policy, "exclusive_nodes", False))
        self.pools: Mapping[str, Pool] = {p.name: p for p in policy.pools(scenario)}
        self.timeline = Timeline()
        self._weights = getattr(policy, "placement_weights", None)
        cat = load_catalog()
        self.reserved_gpus = sum(
            r.nodes * cat.machine(r.machine_type).gpu_count for r in self.cloud.config.reservations
        )
        self.counters = EngineCounters()
        self.t_start = self.state.jobs[0].submit
        self.t_end: float | None = None
        self.wall_s = 0.0
        self._heap: list[tuple[float, int, int, object]] = []
        self._seq = 0
        self._timer = math.inf
        self._taken: set[str] = set()
        self._offerings_cache: list[Offering] | None = None

    # ---- the view a policy sees -------------------------------------------------------------------

    @property
    def now(self) -> float:
        return self.clock.now

    def offerings(self) -> Sequence[Offering]:
        if self._offerings_cache is None:
            self._offerings_cache = self.cloud.offerings()
        return self._offerings_cache

    def new_names(self, pool: Pool, count: int) -> tuple[str, ...]:
        names = [
            n for n in self.state.free_names(pool.node_name_prefix, count + len(self._taken)) if n not in self._taken
        ]
        names = names[:count]
        self._taken.update(names)
        return tuple(names)

    def scale_up(
        self, pool: Pool, offering: Offering, count: int, units: tuple[str, ...], reason: str, *, gang: bool = False
    ) -> ScaleUp:
        names = self.new_names(pool, count)
        return ScaleUp(
            pool=pool.name,
            offering=offering.key,
            names=names,
            request_id=request_id_for(pool.name, offering.key, names, self.now),
            units=units,
            reason=reason,
            gang=gang,
            hourly_usd=offering.hourly_usd * count if offering.key.reservation is None else 0.0,
        )

    # ---- the loop ---------------------------------------------------------------------------------

    def run(self) -> ReplayEngine:
        wall0 = time.perf_counter()
        jobs = self.state.jobs
        n = len(jobs)
        nxt = 0
        gate = self.admission
        self._decide(frozenset({"start"}))
        while self.state.done < n:
            t = next_event_at(jobs, nxt, self._heap, self.cloud)
            if t == math.inf:
                raise ReplayError(
                    f"policy {self.policy.name}: {self.state.pending_count} job(s) pending and nothing will happen "
                    f"(no boot, job end or timer scheduled) at t={self.now:.0f}"
                )
            self.clock.advance_to(t)
            self._offerings_cache = None
            reasons: set[str] = set()
            for ev in self.cloud.advance(t):
                self.counters.events += 1
                node = self.state.nodes.get(ev.name)
                if node is None:
                    continue
                if ev.kind is NodeEventKind.REGISTERED:
                    self.state.register(node, t)
                    reasons.add("ready")
                elif ev.kind is NodeEventKind.PREEMPTED:
                    self.counters.preemptions += 1
                    self.state.remove_node(node, t)
                    reasons.add("gone")
            while self._heap and self._heap[0][0] <= t:
                _, kind, _, payload = heapq.heappop(self._heap)
                self.counters.events += 1
                if kind == _JOB_END:
                    job, attempt = payload  # type: ignore[misc]
                    if job.state is JobState.RUNNING and job.attempt == attempt:
                        self.state.finish(job, t)
                        if gate is not None:
                            gate.finish(job)
                        reasons.add("idle")
                else:
                    if t >= self._timer:
                        self._timer = math.inf
                    reasons.add("timer")
            while nxt < n and jobs[nxt].submit <= t:
                if gate is None:
                    self.state.submit(jobs[nxt])
                    reasons.add("submit")
                else:
                    gate.arrive(jobs[nxt], t)
                nxt += 1
            if gate is not None and self._admit(t):  # quota freed or work arrived: Kueue admits what fits now
                reasons.add("submit")
            if self.state.pending_changed or reasons & {"ready", "idle", "gone"}:
                started = self.state.schedule(t, binding=self.policy.binds_nominations, weights=self._weights)
                self._start(started, t)
            if reasons and self.state.done < n:
                self._decide(frozenset(reasons))
                if gate is not None and self._admit(t):  # admission checks the policy just passed
                    self._start(self.state.schedule(t, binding=self.policy.binds_nominations, weights=self._weights), t)
            self.timeline.record(t, self.state.demand_gpus, self._billed_gpus(), self.state.running_gpus)
        self.t_end = self.now
        self.state.settle_holds(self.now)
        for node in list(self.state.nodes.values()):
            self.cloud.delete(node.pool, [node.name])
            self.state.remove_node(node, self.now)
        self.timeline.record(self.now, 0, 0, 0)
        self.wall_s = time.perf_counter() - wall0
        return self

    def _admit(self, t: float) -> bool:
        """Submit to the cluster what the admission gate admits now; True if anything was admitted."""
        assert self.admission is not None
        jobs, news = self.admission.admit(t)
        for job in jobs:
            self.state.submit(job)
        return news

    def _billed_gpus(self) -> int:
        """GPUs being paid for: the whole reservation, plus every other live node."""
        st = self.state
        return st.provisioned_gpus - st.provisioned_by_capacity.get(CapacityType.RESERVATION, 0) + self.reserved_gpus

    def _start(self, started: list[Job], t: float) -> None:
        for job in started:
            self._push(t + job.remaining_s, _JOB_END, (job, job.attempt))

    def _push(self, t: float, kind: int, payload: object) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (t, kind, self._seq, payload))

    # ---- decisions --------------------------------------------------------------------------------

    def _decide(self, reasons: frozenset[str]) -> None:
        now = self.now
        for _ in range(MAX_ROUNDS):
            self.counters.decide_calls += 1
            decision = self.policy.decide(self, now, reasons)
            self._taken.clear()
            failed = self._execute(decision)
            if decision.wake_at is not None and now < decision.wake_at < self._timer:
                self._timer = decision.wake_at
                self._push(decision.wake_at, _TIMER, None)
            if failed:
                reasons = frozenset({"failure"})
            elif decision.again:
                reasons = frozenset({"again"})
            else:
                return

    def _execute(self, decision: Decision) -> bool:
        """Run the commands; True when a launch was refused (the policy gets to react at once)."""
        failed = False
        now = self.now
        for cmd in decision.commands:
            if isinstance(cmd, ScaleUp):
                failed |= not self._launch(cmd, decision.nominations, now)
            elif isinstance(cmd, Drain):
                for name in cmd.nodes:
                    node = self.state.nodes.get(name)
                    if node is not None:
                        self.state.drain(node, now)
                        self.counters.drains += 1
            elif isinstance(cmd, DeleteNodes):
                for name in cmd.names:
                    node = self.state.nodes.get(name)
                    if node is None:
                        continue
                    if node.jobs:
                        raise ReplayError(
                            f"policy {self.policy.name} deleted node {name} with {len(node.jobs)} job(s) running"
                        )
                    self.cloud.delete(cmd.pool, [name])
                    self._offerings_cache = None  # quota and reservation slots freed
                    self.state.remove_node(node, now)
                    self.counters.deletes += 1
            else:  # pragma: no cover - Command is a closed union
                raise ReplayError(f"unknown command {cmd!r}")
        return failed

    def _launch(self, cmd: ScaleUp, nominations: Mapping[str, tuple[str, ...]], now: float) -> bool:
        self.counters.launches += 1
        try:
            self.cloud.launch(cmd.launch_request())
        except (InsufficientCapacity, QuotaExceeded) as exc:
            self.counters.launch_failures += 1
            self.policy.on_launch_failure(cmd, exc, now)
            return False
        except ProviderError as exc:
            raise ReplayError(f"policy {self.policy.name}: launch {cmd.request_id} rejected: {exc}") from exc
        self._offerings_cache = None
        hourly = cmd.hourly_usd / max(1, len(cmd.names))  # ScaleUp.hourly_usd is what the whole request adds
        new: dict[str, SimNode] = {}
        for name in cmd.names:
            node = SimNode(name, cmd.pool, cmd.offering, _gpus(self, cmd), hourly, now, NodeState.BOOTING, now)
            self.state.add_node(node)
            new[name] = node
            self.counters.nodes_launched += 1
        owners: dict[str, str] = {}
        for unit, names in nominations.items():
            for name in names:
                if name in new:
                    owners[name] = unit
        # a launch for one unit is held for its job (Slurm allocates powered-down nodes to the job), unless the
        # policy says nothing binds pods to nodes (`GpuFleetKubePolicy.nominates_single_unit_launches`)
        if not owners and len(cmd.units) == 1 and getattr(self.policy, "nominates_single_unit_launches", True):
            owners = dict.fromkeys(new, cmd.units[0])
        for name, unit in owners.items():
            job = self.state.by_id.get(unit)
            if job is not None and job.state is JobState.PENDING:
                self.state.nominate(new[name], job, now)
        return True


def next_event_at(jobs: Sequence[Job], nxt: int, heap: list[tuple], cloud: SimCloud) -> float:
    """When a replay loop must wake next: the next submission, its own earliest timer, or the sim cloud's next
    boot / registration / preemption, whichever is first (math.inf: nothing will ever happen)."""
    t = jobs[nxt].submit if nxt < len(jobs) else math.inf
    if heap and heap[0][0] < t:
        t = heap[0][0]
    ct = cloud.next_event_time()
    return ct if ct is not None and ct < t else t


def _gpus(engine: ReplayEngine, cmd: ScaleUp) -> int:
    pool = engine.pools.get(cmd.pool)
    if pool is not None:
        return pool.gpus_per_node
    for off in engine.offerings():
        if off.key == cmd.offering:
            return off.gpus_per_node
    raise ReplayError(f"launch {cmd.request_id}: unknown pool {cmd.pool!r}")


def _key(j: TraceJob) -> tuple[float, str]:
    return (j.submit, j.id)
