"""A simulated slurmctld with power-saved `State=CLOUD` nodes, and the replay loop around it.

What it does is what Slurm 22.05 does with CLOUD nodes (docs/autoscaler.md, /work/shared/recipes "Learned the
hard way", checked on a real slurmctld in tests/e2e):

- **Allocation at submit.**  A job is allocated nodes at once, powered-down ones included, in the order real
  slurmctld 22.05 was seen to use (tests/e2e/test_weights.py):
  1. nodes that need no power-up (registered, or already powering up for another job) with room, lowest Weight
     first, then node-table order (pools as configured, then index): 22.05 puts every node that needs a boot
     after every node that does not.  A node's Weight is its pool's rendered one unless the driver changed it
     (`set_weights`: the daemon's `scontrol update nodename=... weight=...`, best fit on the reservation,
     `autoscaler.core.weights`);
  2. then powered-down nodes by Weight tier, in node-table order within a tier.  Weights are the ones
     `fleet render slurm-conf` renders (`fleet.slurm.weights.pool_weights`: capacity tier, then the shape's rank,
     cheapest $/GPU-hour first, then fewer GPUs) unless the driver gives its own per capacity type.  22.05 itself
     ignores the Weight of powered-down nodes; it powers up the last pool tree of topology.conf that fits, and the
     render writes the trees from the highest Weight to the lowest (`fleet.slurm.topology`), so this is what it
     does with the rendered files (tests/e2e/test_weights.py; before the twenty-fourth round one root joined the
     pools and 22.05 took the pool leaf with the fewest nodes instead).
  A multi-node job gets all its nodes from one pool (no switch joins two pools: tests/e2e/test_gang_pools.py):
  the first pool whose nodes that need no power-up can hold it, else the lowest-Weight pool that can (`_pick_gang`).
  With `SlurmSettings.prefer` (gpu-fleet: the rendered job_submit.lua, `fleet.slurm.job_submit`) a job first gets
  nodes of its right-sized machine type only (in the order above), when they can hold it: `--prefer`, which
  22.05 honours for powered-down nodes too.
  Allocated powered-down nodes are POWERING_UP from then on and the job is CONFIGURING until every one of its
  nodes registered, and then until slurmctld's next periodic pass launches it (`launch_pass_s`: a 30 s grid on
  22.05.8, `bench/late_bind_latency.py --bind`; a job allocated nodes that are up starts at once); small jobs pack
  onto nodes already powering up.  A job stays PENDING only when it cannot be
  placed (every name in use, DOWN or powering down).
- **OverSubscribe=EXCLUSIVE.**  A job whose partition `fleet render slurm-conf` renders `OverSubscribe=EXCLUSIVE`
  (every machine type of it takes its node whole, `fleet.slurm.conf.whole_node`: A3/A4 8-GPU with GPU NICs)
  takes every GPU of each node it gets, and gets only nodes with no job (slurm.conf(5): "Allocates entire nodes
  to jobs even with select/cons_tres").  The replay's partitions: spot-tolerant jobs stand for one of every pool
  of the driver, the others for one of its pools that are not spot (`exclusive`).
- **Released names.**  A held pool's powered-down names are drained; a name the driver undrains (`release`) is
  allocatable `release_allocation_s` later, at slurmctld's next scheduling pass (measured: about 1 s).
- **ResumeProgram** is called `resume_batch_s` after the first allocation of a batch with every name
  allocated since, and the job -> names map (`SLURM_RESUME_FILE`).
- **ResumeTimeout**: a node not registered `resume_timeout_s` after its allocation goes DOWN, its jobs are
  requeued (eligible again after `requeue_hold_s`: Slurm's BeginTime on requeue, AuthInfo cred_expire, 120 s by
  default as the stack renders it; the e2e harness sets 30 s to run faster)
  and ResumeFailProgram is called; the node is unusable until the driver returns it to service.
- **SuspendTime**: a registered node idle for `suspend_time_s` gets SuspendProgram; the name is powering down
  (unusable) for `suspend_timeout_s`, then powered down (allocatable) again.
- **Partition-priority preemption** (`SlurmSettings.preempt_spot`, what the stack renders with
  `Policy.preempt_spot`): a job that may not use spot and cannot be placed otherwise requeues running
  spot-tolerant jobs off registered reserved nodes, the latest started first (the rendered
  `preempt_youngest_first`; without it slurmctld 22.05 takes the earliest submitted:
  bench/probe_preempt_order.py), only those on the
  nodes it takes and only as many as it needs (`_preempt_for`); they resume from their checkpoint after the
  requeue hold.  A powered-down node the job may use counts as "otherwise", as on real slurmctld, so preemption
  happens only where the driver holds the overflow (`hold`).
- A preempted (spot) instance: its jobs are requeued at once and the node powers down (what the daemon's
  `state=down` then `power_down` and slurm-gcp's slurmsync both do; tests/e2e/test_cloud_preemption.py).
- **EpilogSlurmctld**: when a job ends its nodes are free at once (no compute-node Epilog is modelled) and the
  driver's optional `job_end(sim, job, names)` is called, as slurmctld runs EpilogSlurmctld (the gpu-fleet
  daemon's wake-up; slurm-power-save has no such hook and does not define it).

The autoscaler on top is a `SlurmDriver`: it gets the ResumeProgram / SuspendProgram / ResumeFailProgram calls
and timer ticks, and acts through the same commands a real one has (launch by name, delete by name, drain,
`state=resume`).  The engine exposes what `metrics.policy_metrics` reads (state, cloud, counters, span)."""

from __future__ import annotations

import bisect
import functools
import heapq
import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from autoscaler.cloud import InsufficientCapacity, OfferingKey, ProviderError, QuotaExceeded
from autoscaler.core.hold import constraint_allows
from autoscaler.model import NodeState, Pool, ScaleUp
from autoscaler.replay.engine import EngineCounters, Timeline, next_event_at
from autoscaler.replay.scenario import DEFAULT_SLURM_LAUNCH_PASS_S, Scenario
from autoscaler.replay.state import ClusterState, Job, JobState, ReplayError, SimNode
from autoscaler.replay.trace import TraceJob
from autoscaler.sim import NodeEventKind, SimClock, SimCloud, SimConfig
from autoscaler.slurm.constraint import alternatives
from fleet.catalog import CapacityType, load_catalog
from fleet.slurm.conf import whole_node
from fleet.slurm.job_submit import Prefer, constraints, preferences
from fleet.slurm.weights import pool_weights, ranking_shapes


def command(fn: Callable) -> Callable:  # type: ignore[type-arg]
    """Marks a command a driver may run on the simulated Slurm (its `scontrol`, its cloud calls): each call
    counts as a change (`SimSlurm.version`), whatever it did."""

    @functools.wraps(fn)
    def run(self: SimSlurm, *args: object, **kw: object) -> object:
        self.version += 1
        return fn(self, *args, **kw)

    run.is_command = True  # type: ignore[attr-defined]
    return run


#: event kinds; _ELIGIBLE is a bare scheduling pass (a requeue hold ended, released names became allocatable);
#: _LAUNCH is slurmctld's periodic pass that launches a job whose booted nodes have all registered
_SUBMIT, _END, _RESUME, _TIMEOUT, _IDLE, _RETURN, _TICK, _ELIGIBLE, _LAUNCH = range(9)


@dataclass(frozen=True)
class SlurmSettings:
    """The power-saving keys of slurm.conf the simulation obeys."""

    resume_timeout_s: float = 1800.0  # fleet spec default (fleet/spec/model.py SlurmSpec.resume_timeout)
    suspend_time_s: float = 300.0  # fleet spec default SuspendTime
    suspend_timeout_s: float = 300.0  # fleet/slurm/conf.py renders SuspendTimeout=300
    resume_batch_s: float = 1.0  # ResumeProgram runs 1-3 s after the allocation, batching jobs
    requeue_hold_s: float = 120.0  # a requeued job's BeginTime: cred_expire, 120 s by default (slurmctld 22.05)
    #: a released (undrained) powered-down name -> allocated to the pending job: slurmctld 22.05.8 with the rendered
    #: `batch_sched_delay=0`, `bench/probe_drain_transitions.py --what release`: 0.88-1.0 s, mean 0.96 s, 6 rounds
    #: (Slurm's default: 0.88-1.9 s); the names are allocatable from then on
    release_allocation_s: float = 1.0
    #: a job allocated nodes that had to boot (CONFIGURING) is launched at slurmctld's next periodic pass after its
    #: last node registered, not at the registration: slurmctld defers the batch launch while a node is powered
    #: down and retries deferred launches in its background loop.  Measured on slurmctld 22.05.8
    #: (`bench/late_bind_latency.py --bind`, 36 boots over three runs): every job of a run started on one 30 s
    #: grid, registration -> RUNNING 0.47-28.6 s, run means 13.8-15.0 s; a job allocated nodes already up starts
    #: at once.  The grid's phase is the replay's start.  0: at the registration (before the twenty-ninth round).
    #: The simulated Slurm takes it from `Scenario.slurm_launch_pass_s` (`fleet simulate --slurm-launch-pass`)
    launch_pass_s: float = DEFAULT_SLURM_LAUNCH_PASS_S
    #: node Weight per capacity type; None: per pool, as `fleet render slurm-conf` renders them (`pool_weights`)
    weights: Mapping[CapacityType, int] | None = None
    #: the rendered job_submit.lua's `--prefer=<right-sized machine type>` (`fleet.slurm.job_submit.preferences`)
    prefer: bool = True
    #: the job_submit.lua of late binding (`Policy.late_bind`): the right-sized machine type as a hard `--constraint`
    #: (no fallback to other shapes), widened per job by the driver (`allow`, `scontrol update jobid=N features=`)
    constrain: bool = False
    #: the job_submit.lua rewrites the daemon's wake-up file at every submission (where the daemon may hold pools:
    #: `fleet.slurm.policy.submit_wakes_daemon`); the driver's `job_submitted` hears of it
    submit_wake: bool = False
    #: that constraint allows every shape of the right-sized one's share group (`Policy.share_nodes`,
    #: `fleet.slurm.job_submit.share_groups`)
    shared: bool = False
    #: SuspendExcNodes by capacity type: pools of these types are never suspended (fleet/slurm/conf.py renders
    #: every reservation pool there, plus pool minimums, which the replay's pools do not have)
    suspend_exc: frozenset[CapacityType] = frozenset({CapacityType.RESERVATION})
    #: SuspendExcNodes `<pool's nodes>:<count>` on on-demand pools (`fleet.slurm.suspend.standby_exclusion`):
    #: slurmctld keeps that many usable idle nodes of each such pool from power save (0: none)
    suspend_exc_count: int = 0
    #: partition-priority preemption (`PreemptType=preempt/partition_prio`, `PreemptMode=REQUEUE`, spot-tolerant
    #: partitions at a lower PriorityTier, as `fleet render slurm-conf` renders with `Policy.preempt_spot`): a job
    #: that may not use spot and cannot start otherwise requeues running spot-tolerant jobs off reserved nodes
    preempt_spot: bool = False
    #: the job_submit.lua's gang gate (`Policy.gates_gangs`, `autoscaler.slurm.gang_gate`): a multi-node job waits
    #: behind a BeginTime this far ahead of its submission until the driver releases it (`open_gate`); 0: no gate
    gang_gate_s: float = 0.0
    #: a released gang -> allocated: slurmctld 22.05.8 allocated it 0.19-0.24 s after `scontrol update jobid=N
    #: ExcNodeList=... StartTime=now` (`bench/probe_gang_gate.py`, 3 rounds, squeue polled every 50 ms)
    gate_allocation_s: float = 0.2


class SlurmDriver(Protocol):
    """The autoscaler behind slurmctld's power-save hooks in a replay."""

    name: str
    description: str

    def pools(self, scenario: Scenario) -> list[Pool]: ...

    def slurm_settings(self, scenario: Scenario) -> SlurmSettings: ...

    def resume(self, sim: SimSlurm, names: Sequence[str], jobs: Mapping[str, Job | None]) -> None:
        """ResumeProgram: `names` were allocated (to `jobs[name]`, None without a job)."""

    def suspend(self, sim: SimSlurm, names: Sequence[str]) -> None:
        """SuspendProgram: the nodes are idle past SuspendTime."""

    def resume_fail(self, sim: SimSlurm, names: Sequence[str]) -> None:
        """ResumeFailProgram: the nodes missed ResumeTimeout (now DOWN)."""

    def tick(self, sim: SimSlurm) -> float | None:
        """A timer the driver asked for fired (or something changed); return when to be called next."""

    # optional (looked up with getattr, like `next_poll` and `idle_wake`):
    # def job_end(self, sim: SimSlurm, job: Job, names: Sequence[str]) -> None:
    #     """EpilogSlurmctld: `job` ended and freed `names` (already idle in `sim`)."""
    # def job_submitted(self, sim: SimSlurm, job: Job) -> None:
    #     """job_submit.lua ran for `job` (a driver whose lua writes a wake-up)."""
    # def held_registered(self, sim: SimSlurm, node: SimNode) -> None:
    #     """A node booted drained (`boot_held`) registered; it takes no job until `undrain_held`."""


@dataclass(eq=False)
class _Name:
    """A configured CLOUD node name that is not powered down: allocated, up, DOWN or powering down."""

    node: SimNode
    pool: Pool
    index: int
    launched: bool = False
    down: bool = False
    allocated_at: float = 0.0
    #: powered up while drained (`boot_held`): takes no job until the driver undrains it (`undrain_held`)
    held_boot: bool = False

    @property
    def powering_down(self) -> bool:
        """Its instance was deleted: POWERING_DOWN for SuspendTimeout, then powered down (`_retire`)."""
        return self.node.state is NodeState.DELETING


def _index(nm: _Name) -> int:
    return nm.index


def exclusive_partition(pools: Iterable[Pool]) -> bool:
    """Whether `fleet render slurm-conf` renders a partition of `pools` `OverSubscribe=EXCLUSIVE`: every machine
    type in it takes its node whole (`fleet.slurm.conf.whole_node`, the render's own rule)."""
    cat = load_catalog()
    machines = [cat.machine(p.machine_type) for p in pools]
    return bool(machines) and all(whole_node(m) for m in machines)


def _fits(node: SimNode, gpus: int, whole: bool) -> bool:
    """`node` has room for a member of `gpus` GPUs; `whole`: the job takes the node whole (every GPU free)."""
    return node.free >= (node.gpus if whole else gpus)


class SimSlurm:
    """slurmctld + the sim cloud + a driver, over one trace (see the module docstring)."""

    def __init__(
        self, jobs: Sequence[TraceJob], scenario: Scenario, driver: SlurmDriver, sim_config: SimConfig | None = None
    ) -> None:
        if not jobs:
            raise ReplayError("the trace has no jobs")
        self.scenario = scenario
        self.policy = driver
        self.driver = driver
        # slurmctld's own behaviour, the same whatever the policy renders: the scenario's
        self.conf = replace(driver.slurm_settings(scenario), launch_pass_s=scenario.slurm_launch_pass_s)
        self.clock = SimClock(min(j.submit for j in jobs) - scenario.ready_s)
        self.cloud = SimCloud(sim_config or scenario.sim_config(), self.clock)
        self.state = ClusterState(
            [Job(i, tj, *tj.shape()) for i, tj in enumerate(sorted(jobs, key=lambda j: (j.submit, j.id)))],
            checkpoint_interval_s=scenario.checkpoint_interval_s,
        )
        self.pool_list = driver.pools(scenario)
        self.pools: Mapping[str, Pool] = {p.name: p for p in self.pool_list}
        #: spot tolerance -> the job's partition is OverSubscribe=EXCLUSIVE (`exclusive`): spot-tolerant jobs stand
        #: for a partition of every pool, the others for one of the pools that are not spot
        self._exclusive = {
            True: exclusive_partition(self.pool_list),
            False: exclusive_partition(p for p in self.pool_list if p.capacity_type is not CapacityType.SPOT),
        }
        w = self.conf.weights
        if w is None:
            rows = ((p.name, p.capacity_type, p.machine_type) for p in self.pool_list)
            self.weight = pool_weights(rows, load_catalog(), scenario.region)
        else:
            self.weight = {p.name: w.get(p.capacity_type, 1 << 20) for p in self.pool_list}
        levels = sorted(set(self.weight.values()))
        self.tiers = [[p for p in self.pool_list if self.weight[p.name] == lv] for lv in levels]
        self.by_weight = [p for tier in self.tiers for p in tier]  # node-table order within one Weight
        self._order = {p.name: i for i, p in enumerate(self.by_weight)}
        #: Weights set on single nodes (`scontrol update nodename=... weight=...`, `set_weights`), by pool
        self.node_weight: dict[str, dict[str, int]] = {}
        self.prefer: dict[int, Prefer] = {}  # GPUs per node -> the --prefer (the one partition's)
        #: spot tolerance -> GPUs per node -> the constraint the constrain-mode lua sets (`job_submit.constraints`,
        #: pinned to spot where it pins: the replay's spot-tolerant jobs stand for a partition of every pool, the
        #: others for one of the pools that are not spot)
        self.right_sized: dict[bool, dict[int, frozenset[str]]] = {}
        #: job idx -> the alternatives its hard constraint allows (`constrain`), once widened by the driver
        self.constraints: dict[int, frozenset[str]] = {}
        #: job idx -> the names its `ExcNodeList` keeps it off (`exclude`; the driver sets them on pending gangs)
        self.excluded: dict[int, frozenset[str]] = {}
        if self.conf.prefer or self.conf.constrain:
            rows = ((p.name, p.capacity_type, p.machine_type) for p in self.pool_list)
            reserved = max(
                (p.gpus_per_node for p in self.pool_list if p.capacity_type is CapacityType.RESERVATION), default=0
            )
            shapes = ranking_shapes(rows, load_catalog(), scenario.region)  # as fleet.slurm.conf renders the lua
            self.prefer = preferences({"all": shapes}, {"all": reserved}).get("all", {})
            if self.conf.constrain:
                strict = [s for s in shapes if s.capacity is not CapacityType.SPOT]
                tables = constraints({"spot": shapes, "strict": strict}, shared=self.conf.shared)
                self.right_sized = {
                    spot_ok: {g: alternatives(expr) for g, expr in tables.get(part, {}).items()}
                    for spot_ok, part in ((True, "spot"), (False, "strict"))
                }
        self.names: dict[str, _Name] = {}  # every name not powered down
        self._free: dict[str, list[int]] = {p.name: [] for p in self.pool_list}  # freed indices (heap)
        self._next: dict[str, int] = {p.name: 0 for p in self.pool_list}
        self._room: dict[str, dict[str, _Name]] = {p.name: {} for p in self.pool_list}  # allocatable with free GPUs
        self.idle: dict[str, _Name] = {}  # registered, no job, not draining
        self.down: dict[str, _Name] = {}
        self.draining: dict[str, _Name] = {}
        self._resume_batch: list[str] = []
        self._heap: list[tuple[float, int, int, object]] = []
        self._seq = 0
        self._tick_at = math.inf
        self._eligible: dict[int, float] = {}  # requeued or gated job idx -> BeginTime
        self.gated: set[int] = set()  # gangs behind the lua's gate (`SlurmSettings.gang_gate_s`) not released yet
        #: held pools (the reservation hold, `autoscaler.core.hold`): their powered-down names are drained, only
        #: `released` ones (index -> when) are allocatable
        self.held: frozenset[str] = frozenset()
        self._held_boots: dict[str, _Name] = {}  # names booted drained, not undrained yet (`held_boots`)
        self.released: dict[str, dict[int, float]] = {p.name: {} for p in self.pool_list}
        self.release_grace_s = 0.0
        cat = load_catalog()
        self.reserved_gpus = sum(
            r.nodes * cat.machine(r.machine_type).gpu_count for r in self.cloud.config.reservations
        )
        self.timeline = Timeline()
        self.counters = EngineCounters()
        #: counts every change a driver did not make itself in its tick, and every command it ran (`command`): a
        #: driver that finds it where its last tick left it knows Slurm looks as it did then, time apart
        self.version = 0
        self.t_start = self.state.jobs[0].submit
        self.t_end: float | None = None
        self.wall_s = 0.0
        self.slurm_counters = {
            "resume_calls": 0,
            "resume_timeouts": 0,
            "suspends": 0,
            "requeues": 0,
            "power_ups": 0,
            "preempt_requeues": 0,
        }

    @property
    def now(self) -> float:
        return self.clock.now

    def offerings(self):  # type: ignore[no-untyped-def]
        return self.cloud.offerings()

    # ---- the loop ---------------------------------------------------------------------------------------

    def run(self, until: float | None = None) -> SimSlurm:
        """Replay to the end of the trace (or stop at simulated time `until`, for tests)."""
        wall0 = time.perf_counter()
        jobs = self.state.jobs
        n, nxt = len(jobs), 0
        submitted = getattr(self.driver, "job_submitted", None)  # the job_submit.lua's wake-up, if the driver has one
        self._call_tick()
        while self.state.done < n:
            t = next_event_at(jobs, nxt, self._heap, self.cloud)
            if until is not None and t > until:
                self.clock.advance_to(until)
                self.t_end = until
                self.wall_s = time.perf_counter() - wall0
                return self
            if t == math.inf:
                raise ReplayError(
                    f"policy {self.driver.name}: {self.state.pending_count} job(s) pending and nothing will happen "
                    f"at t={self.now:.0f}"
                )
            self.clock.advance_to(t)
            changed = False
            for ev in self.cloud.advance(t):
                self.counters.events += 1
                self.version += 1
                nm = self.names.get(ev.name)
                if nm is None or not nm.launched:
                    continue
                if ev.kind is NodeEventKind.REGISTERED:
                    self._register(nm, t)
                elif ev.kind is NodeEventKind.PREEMPTED:
                    self.counters.preemptions += 1
                    self._lose(nm, t)
                    changed = True
            tick = False
            while self._heap and self._heap[0][0] <= t:
                _, kind, _, payload = heapq.heappop(self._heap)
                self.counters.events += 1
                if kind != _TICK:
                    self.version += 1
                if kind == _END:
                    job, attempt = payload  # type: ignore[misc]
                    if job.state is JobState.RUNNING and job.attempt == attempt:
                        self._finish(job, t)
                        changed = True
                elif kind == _RESUME:
                    self._fire_resume()
                elif kind == _TIMEOUT:
                    nm, node = payload  # type: ignore[misc]
                    if self.names.get(nm.node.name) is nm and nm.node is node and not node.registered:
                        self._resume_timeout(nm, t)
                        changed = True
                elif kind == _IDLE:
                    nm, version = payload  # type: ignore[misc]
                    if self.idle.get(nm.node.name) is nm and nm.node.version == version:
                        if self._suspend_excluded(nm):  # Slurm looks again at its next power-save pass
                            self._push(t + self.conf.suspend_time_s, _IDLE, (nm, version))
                        else:
                            self.slurm_counters["suspends"] += 1
                            self.driver.suspend(self, [nm.node.name])
                elif kind == _RETURN:
                    nm = payload  # type: ignore[assignment]
                    if self.names.get(nm.node.name) is nm and nm.node.state is NodeState.DELETING:
                        self._power_off(nm)
                        changed = True
                elif kind == _ELIGIBLE:
                    changed = True
                elif kind == _LAUNCH:
                    job, attempt = payload  # type: ignore[misc]
                    if job.attempt == attempt and self._launch(job, t):
                        changed = True
                elif kind == _TICK and t >= self._tick_at:
                    self._tick_at = math.inf
                    tick = True
            while nxt < n and jobs[nxt].submit <= t:
                self.version += 1
                self.state.submit(jobs[nxt])
                if self.conf.gang_gate_s > 0 and jobs[nxt].nodes > 1:
                    self._gate(jobs[nxt], t)
                if submitted is not None:
                    submitted(self, jobs[nxt])
                nxt += 1
                changed = True
            if changed or self.state.pending_changed:
                placed = self.state.pending_count
                self.schedule(t)
                if self.state.pending_count:  # jobs Slurm could not place: the daemon sees them at its next poll
                    self.wake(self.driver_poll(t))
                elif self.state.pending_count < placed and self._driver_polls_on_allocation():
                    self.wake(self.driver_poll(t))  # a job took a node: the driver's next poll may act on it
            if tick:
                self._call_tick()
            self.timeline.record(t, self.state.demand_gpus, self._billed_gpus(), self.state.running_gpus)
        self.t_end = self.now
        for nm in list(self.names.values()):
            if nm.node.held_since is not None:
                self.state.partial_gang_gpu_s += nm.node.gpus * (self.now - nm.node.held_since)
            if nm.launched:
                self.cloud.delete(nm.pool.name, [nm.node.name])
                self.state.remove_node(nm.node, self.now)
        self.timeline.record(self.now, 0, 0, 0)
        self.wall_s = time.perf_counter() - wall0
        return self

    def _push(self, t: float, kind: int, payload: object) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (t, kind, self._seq, payload))

    def wake(self, at: float | None) -> None:
        """Call the driver's `tick` at `at` (the earliest asked for wins)."""
        if at is None:
            return
        at = max(at, self.now)
        if at < self._tick_at:
            self._tick_at = at
            self._push(at, _TICK, None)

    def _call_tick(self) -> None:
        # this tick serves every wake-up asked for up to now (a submission at the poll's own instant included):
        # the daemon runs one tick then, not one per request
        if self._tick_at <= self.now:
            self._tick_at = math.inf
        self.counters.decide_calls += 1
        self.wake(self.driver.tick(self))

    def _billed_gpus(self) -> int:
        st = self.state
        return st.provisioned_gpus - st.provisioned_by_capacity.get(CapacityType.RESERVATION, 0) + self.reserved_gpus

    # ---- scheduling -------------------------------------------------------------------------------------

    def schedule(self, now: float) -> None:
        """Slurm's scheduling pass: allocate every pending job that can be placed now, in queue order."""
        st = self.state
        failed: set[tuple[int, int, bool, frozenset[str] | None, frozenset[str] | None]] = set()
        for _, idx in list(st._pending):
            job = st.jobs[idx]
            if self._eligible.get(idx, 0.0) > now:
                continue
            shape = (job.nodes, job.gpus_per_node, job.spot_ok, self.allowed(job), self.excluded.get(job.idx))
            if shape in failed:
                continue
            picked = self._select(job, now)
            if picked is None and self.conf.preempt_spot and not job.spot_ok:
                picked = self._preempt_for(job, now)
            if picked is None:
                failed.add(shape)
                continue
            self._allocate(job, picked, now)
        st.pending_changed = False

    def _preempt_for(self, job: Job, now: float) -> list[tuple[Pool, _Name | int]] | None:
        """Partition-priority preemption as slurmctld 22.05's select/cons_tres runs it for a job that cannot start
        otherwise: the preemptable jobs (running spot-tolerant jobs on registered reserved nodes the job may use)
        are taken latest started first (the rendered `preempt_youngest_first`, fleet/slurm/preempt.py;
        ties: the latest submitted) until enough nodes would have room;
        the job gets those nodes by the usual order (Weight, node-table order), and only the taken jobs on them are
        requeued, less any whose GPUs the job turns out not to need (Slurm's preempt reorder pass).  Requeued jobs
        resume from their last checkpoint after the requeue hold.  None: preemption cannot place the job."""
        g, need = job.gpus_per_node, job.nodes
        whole = self.exclusive(job)
        res = CapacityType.RESERVATION
        pools = {p.name for p in self._eligible_pools(job, self.by_weight) if p.capacity_type is res}
        nodes = [nm for nm in self.registered() if nm.pool.name in pools and nm.node.state is not NodeState.DRAINING]
        if not nodes:
            return None
        on = {nm.node.name: nm for nm in nodes}
        victims = self.victim_order(
            {
                i
                for nm in nodes
                for i in nm.node.jobs
                if self.state.jobs[i].spot_ok and self.state.jobs[i].state is JobState.RUNNING
            }
        )
        free = {n: nm.node.free for n, nm in on.items()}
        want = {n: nm.node.gpus if whole else g for n, nm in on.items()}  # what the job needs free on each
        taken: list[Job] = []
        fits = {n for n, f in free.items() if f >= want[n]}  # only the freed nodes can join it

        def placeable() -> list[str]:
            """The nodes the job would get now (`_one_pool`); [] while it cannot be placed."""
            return [nm.node.name for nm in self._one_pool((on[n] for n in fits), need)]

        for i in victims:
            if placeable():
                break
            v = self.state.jobs[i]
            taken.append(v)
            for n in v.placed_on:
                if n.name in free:
                    free[n.name] += n.jobs.get(v.idx, 0)  # the GPUs it holds there (all of them, taken whole)
                    if free[n.name] >= want[n.name]:
                        fits.add(n.name)
        order = placeable()
        if not order:
            return None
        chosen = set(order)
        requeue = [v for v in taken if any(n.name in chosen for n in v.placed_on)]
        for v in list(reversed(requeue)):  # the last taken first: give back what the job does not need
            back = {n.name: free[n.name] - n.jobs.get(v.idx, 0) for n in v.placed_on if n.name in chosen}
            if all(f >= want[n] for n, f in back.items()):
                free.update(back)
                requeue.remove(v)
        for v in requeue:
            self.slurm_counters["preempt_requeues"] += 1
            self._requeue(v, now)
        return [(on[n].pool, on[n]) for n in order]

    def victim_order(self, candidates: set[int]) -> list[int]:
        """Preemption candidates (job indices) in the order slurmctld takes them with the rendered
        `SchedulerParameters=preempt_youngest_first`: the latest started first, ties the latest submitted."""
        return sorted(candidates, key=lambda i: (-(self.state.jobs[i].start or 0.0), -i))

    def job_pools(self, job: Job) -> frozenset[str]:
        """The pools whose nodes `job` may get (its GPUs per node; spot ones only for spot-tolerant work)."""
        return frozenset(p.name for p in self._eligible_pools(job, self.by_weight))

    def exclusive(self, job: Job) -> bool:
        """`job` takes its nodes whole: its partition is OverSubscribe=EXCLUSIVE (module docstring).  What squeue's
        `shared` shows as "none" for it (`autoscaler.slurm.readers`, `SlurmJob.exclusive`)."""
        return self._exclusive[job.spot_ok]

    def _eligible_pools(self, job: Job, tier: list[Pool]) -> list[Pool]:
        return [
            p
            for p in tier
            if p.gpus_per_node >= job.gpus_per_node and (job.spot_ok or p.capacity_type is not CapacityType.SPOT)
        ]

    def _select(self, job: Job, now: float) -> list[tuple[Pool, _Name | int]] | None:
        """Nodes for `job` the way slurmctld 22.05 picks them (module docstring): with a `--prefer`, only the
        preferred machine type's nodes if they can hold the job; else nodes that need no power-up by Weight, then
        powered-down ones by Weight tier, node-table order within one Weight."""
        allowed = self.allowed(job)
        if allowed is not None:  # a hard --constraint: the pools it allows or nothing
            return self._pick(job, [p for p in self.by_weight if constraint_allows(allowed, p)])
        want = self.prefer.get(job.gpus_per_node)
        if want is not None:
            picked = self._pick(job, [p for p in self.by_weight if want.allows(p.machine_type, p.capacity_type)])
            if picked is not None:
                return picked
        return self._pick(job, self.by_weight)

    def allowed(self, job: Job) -> frozenset[str] | None:
        """The alternatives `job`'s hard constraint allows (`SlurmSettings.constrain`: the right-sized machine type, or
        its share group with `SlurmSettings.shared`, pinned to spot for spot-tolerant work, as the job_submit.lua
        sets it, or what the driver widened it to; `autoscaler.core.hold.constraint_allows`); None: no constraint."""
        if not self.conf.constrain:
            return None
        got = self.constraints.get(job.idx)
        if got is not None:
            return got
        want = self.right_sized.get(job.spot_ok, {}).get(job.gpus_per_node)
        return want

    @command
    def allow(self, job: Job, terms: frozenset[str]) -> None:
        """`scontrol update jobid=N features=a|b`: `job`'s constraint now allows `terms`."""
        self.constraints[job.idx] = terms
        self.state.pending_changed = True

    @command
    def exclude(self, job: Job, names: frozenset[str]) -> None:
        """`scontrol update jobid=N ExcNodeList=...`: `job` may not get `names` (empty: any node again).  Only names
        given back can make the job placeable: then Slurm schedules."""
        freed = self.excluded.get(job.idx, frozenset()) - names
        if names:
            self.excluded[job.idx] = names
        else:
            self.excluded.pop(job.idx, None)
        if freed:
            self.state.pending_changed = True

    def _pick(self, job: Job, pools: list[Pool]) -> list[tuple[Pool, _Name | int]] | None:
        need = job.nodes
        g = job.gpus_per_node
        if need > 1:
            return self._pick_gang(job, pools)
        whole = self.exclusive(job)
        picked: list[tuple[Pool, _Name | int]] = []
        allowed = {p.name for p in pools}
        eligible = self._eligible_pools(job, pools)
        if self.node_weight and any(p.name in self.node_weight for p in eligible):
            picked = self._pick_weighted(eligible, g, need, whole)
            if len(picked) >= need:
                return picked
        else:
            for pool in eligible:
                room = [nm for nm in self._room[pool.name].values() if _fits(nm.node, g, whole)]
                if not room:
                    continue
                want = need - len(picked)
                chosen = [min(room, key=_index)] if want == 1 else sorted(room, key=_index)[:want]
                picked.extend((pool, nm) for nm in chosen)
                if len(picked) >= need:
                    return picked
        for tier in self.tiers:
            for pool in self._eligible_pools(job, [p for p in tier if p.name in allowed]):
                for i in self._free_indices(pool, need - len(picked)):
                    picked.append((pool, i))
                if len(picked) >= need:
                    return picked
        return None

    def _pick_gang(self, job: Job, pools: list[Pool]) -> list[tuple[Pool, _Name | int]] | None:
        """A multi-node job's nodes, all from one pool (the rendered topology.conf joins no two pools,
        `fleet.slurm.topology`): the first pool whose nodes that need no power-up can hold it, taking those nodes
        by Weight and node-table order as for any job; else the pool of the lowest Weight that can hold it whole
        (slurmctld powers up the last tree that fits, and the render writes them from the highest Weight down),
        its nodes that need no power-up first.  None: no single pool can hold it now."""
        need, g, whole = job.nodes, job.gpus_per_node, self.exclusive(job)
        eligible = self._eligible_pools(job, pools)
        off = self.excluded.get(job.idx, frozenset())  # its ExcNodeList
        room = {
            p.name: [nm for nm in self._room[p.name].values() if _fits(nm.node, g, whole) and nm.node.name not in off]
            for p in eligible
        }
        up_only = self._one_pool((nm for nms in room.values() for nm in nms), need)
        if up_only:
            return [(nm.pool, nm) for nm in up_only]
        for pool in eligible:
            up = sorted(room[pool.name], key=lambda nm: (self._node_weight(nm), nm.index))
            want = need - len(up)
            down = [i for i in self._free_indices(pool, want + len(off)) if pool.node_name(i) not in off][:want]
            if len(up) + len(down) >= need:
                return [(pool, nm) for nm in up] + [(pool, i) for i in down]
        return None

    def _one_pool(self, nodes: Iterable[_Name], need: int) -> list[_Name]:
        """`need` of `nodes` (nodes that need no power-up) all from one pool, as slurmctld takes them for a job: by
        Weight, then node-table order, the first pool to reach `need` (one pool: `fleet.slurm.topology`); [] when no
        pool has that many."""
        taken: dict[str, list[_Name]] = {}
        for nm in sorted(nodes, key=lambda nm: (self._node_weight(nm), self._order[nm.pool.name], nm.index)):
            got = taken.setdefault(nm.pool.name, [])
            got.append(nm)
            if len(got) == need:
                return got
        return []

    def _pick_weighted(self, pools: list[Pool], g: int, need: int, whole: bool) -> list[tuple[Pool, _Name | int]]:
        """Nodes that need no power-up, with some carrying their own Weight (`set_weights`): the lowest Weight
        first, then node-table order (pool, index), as slurmctld orders them.  `whole`: the job takes them whole."""
        room = [
            (self._node_weight(nm), self._order[pool.name], nm)
            for pool in pools
            for nm in self._room[pool.name].values()
            if _fits(nm.node, g, whole)
        ]
        room.sort(key=lambda r: (r[0], r[1], r[2].index))
        return [(r[2].pool, r[2]) for r in room[:need]]

    def _node_weight(self, nm: _Name) -> int:
        """The Weight slurmctld orders `nm` by: its pool's rendered one unless `set_weights` changed it."""
        return self.node_weight.get(nm.pool.name, {}).get(nm.node.name, self.weight[nm.pool.name])

    def _driver_polls_on_allocation(self) -> bool:
        """Does the driver's next poll after an allocation matter (its optional `polls_on_allocation(sim)`)?"""
        hook = getattr(self.driver, "polls_on_allocation", None)
        return bool(hook(self)) if hook is not None else False

    def partly_used(self) -> list[_Name]:
        """The launched, registered, busy names with a free GPU and not drained (what a cordon may drain)."""
        return [
            nm
            for room in self._room.values()
            for nm in room.values()
            if nm.launched and nm.node.registered and nm.node.state is NodeState.BUSY and not nm.down
        ]

    def registered(self) -> list[_Name]:
        """The names whose node is up and registered with slurmctld (not powered down, powering up or DOWN)."""
        return [nm for nm in self.names.values() if nm.launched and nm.node.registered and not nm.down]

    def weights(self) -> dict[str, int]:
        """Node name -> its Weight now, for the registered nodes: what `sinfo` shows the daemon."""
        return {nm.node.name: self._node_weight(nm) for nm in self.registered()}

    @command
    def set_weights(self, changes: Mapping[int, Sequence[str]]) -> None:
        """The daemon's `scontrol update nodename=... weight=W`, one per Weight: from now on slurmctld orders those
        nodes by W among the nodes that need no power-up.  A name Slurm does not know is ignored."""
        for w, names in changes.items():
            for n in names:
                nm = self.names.get(n)
                if nm is not None:
                    self.node_weight.setdefault(nm.pool.name, {})[n] = int(w)

    def _suspend_excluded(self, nm: _Name) -> bool:
        """SuspendExcNodes `<range>:<count>`: an on-demand pool keeps `suspend_exc_count` usable idle nodes up."""
        k = self.conf.suspend_exc_count
        if k <= 0 or nm.pool.capacity_type is not CapacityType.ON_DEMAND:
            return False
        return sum(1 for x in self.idle.values() if x.pool.name == nm.pool.name) <= k

    def _free_indices(self, pool: Pool, count: int) -> list[int]:
        if count <= 0:
            return []
        if pool.name in self.held:  # drained while powered down, except the ones released recently
            rel, lag, now = self.released[pool.name], self.conf.release_allocation_s, self.now
            # `at + lag` is the scheduling pass `release` queued, to the bit: allocatable from then until the grace
            return sorted(i for i, at in rel.items() if at + lag <= now and now - at <= self.release_grace_s)[:count]
        return self.free_indices(pool, count)

    def held_indices(self, pool: Pool, count: int) -> list[int]:
        """The lowest `count` powered-down indices of a held pool that are still drained (not released recently):
        the names the driver may release or boot."""
        skip = set(self.released[pool.name])
        return [i for i in self.free_indices(pool, count + len(skip)) if i not in skip][:count]

    def names_up(self, pool: Pool) -> int:
        """How many names of `pool` are not powered down (up, powering up or down, DOWN)."""
        return self._next[pool.name] - len(self._free[pool.name])

    def free_indices(self, pool: Pool, count: int) -> list[int]:
        """The lowest powered-down (allocatable unless held) indices of `pool`."""
        heap, nxt = self._free[pool.name], self._next[pool.name]
        if count == 1:
            if heap:
                return [heap[0]]
            return [nxt] if nxt < pool.max_nodes else []
        out = heapq.nsmallest(count, self._free[pool.name])
        i = self._next[pool.name]
        while len(out) < count and i < pool.max_nodes:
            out.append(i)
            i += 1
        return sorted(out)[:count]

    def _take_index(self, pool: Pool, i: int) -> None:
        self.released[pool.name].pop(i, None)
        heap = self._free[pool.name]
        if i >= self._next[pool.name]:
            heap.extend(range(self._next[pool.name], i))
            heapq.heapify(heap)
            self._next[pool.name] = i + 1
        else:
            heap.remove(i)
            heapq.heapify(heap)

    def _placeholder(self, pool: Pool) -> OfferingKey:
        return OfferingKey(pool.provider, pool.zones[0], pool.machine_type, pool.capacity_type, pool.reservation)

    def _allocate(self, job: Job, picked: list[tuple[Pool, _Name | int]], now: float) -> None:
        st = self.state
        st._unqueue(job)
        self._eligible.pop(job.idx, None)
        g, whole = job.gpus_per_node, self.exclusive(job)
        fresh: list[str] = []
        for pool, c in picked:
            if isinstance(c, int):
                c = self._power_up_index(pool, c, now)
                fresh.append(c.node.name)
            node = c.node
            took = node.gpus if whole else g  # OverSubscribe=EXCLUSIVE: every GPU of the node
            node.free -= took
            node.jobs[job.idx] = took
            node.jobs_run += 1
            node.version += 1
            if node.free < 1:
                self._room[pool.name].pop(node.name, None)
            if self.idle.pop(node.name, None) is not None:
                node.state = NodeState.BUSY
                node.since = now
            job.placed_on.append(node)
        job.state = JobState.CONFIGURING
        if job.is_gang and fresh:
            # nodes already up wait, allocated and idle, for the gang's boots: partial-gang waste, as
            # `ClusterState` counts a registered node nominated for a gang (the baselines' engine)
            for node in job.placed_on:
                if node.registered and node.held_since is None:
                    node.held_since = now
        self._queue_resume(fresh, now)
        self._maybe_start(job, now)

    def _power_up_index(self, pool: Pool, i: int, now: float) -> _Name:
        """Powered-down name `i` of `pool` becomes POWERING_UP (no instance yet, every GPU free), with its
        ResumeTimeout armed: an allocation's powered-down pick, or an `scontrol ... state=power_up`."""
        self._take_index(pool, i)
        name = pool.node_name(i)
        node = SimNode(name, pool.name, self._placeholder(pool), pool.gpus_per_node, 0.0, now)
        node.free = node.gpus
        nm = self.names[name] = _Name(node, pool, i, allocated_at=now)
        self._room[pool.name][name] = nm
        self._push(now + self.conf.resume_timeout_s, _TIMEOUT, (nm, node))
        return nm

    def _queue_resume(self, names: Sequence[str], now: float) -> None:
        """`names` go to the next ResumeProgram call (`resume_batch_s` after the first of a batch)."""
        if not names:
            return
        if not self._resume_batch:
            self._push(now + self.conf.resume_batch_s, _RESUME, None)
        self._resume_batch.extend(names)

    def _maybe_start(self, job: Job, now: float, booted: bool = False) -> None:
        """Start a CONFIGURING job whose nodes are all up: at once when they were up at its allocation, at the next
        launch pass (`SlurmSettings.launch_pass_s`) when the last of them just registered (`booted`)."""
        if job.state is not JobState.CONFIGURING or not all(n.registered for n in job.placed_on):
            return
        for n in job.placed_on:
            if n.held_since is not None:
                self.state.partial_gang_gpu_s += n.gpus * (now - n.held_since)
                n.held_since = None
        p = self.conf.launch_pass_s
        if booted and p > 0:
            self._push(math.ceil(now / p) * p, _LAUNCH, (job, job.attempt))
            return
        self._launch(job, now)

    def _launch(self, job: Job, now: float) -> bool:
        """The job runs from `now` (False: it is no longer CONFIGURING on registered nodes)."""
        if job.state is not JobState.CONFIGURING or not all(n.registered for n in job.placed_on):
            return False
        job.state = JobState.RUNNING
        job.start = now
        if job.first_start is None:
            job.first_start = now
        self.state.running_gpus += job.gpus
        self._push(now + job.remaining_s, _END, (job, job.attempt))
        return True

    def _fire_resume(self) -> None:
        names = [n for n in self._resume_batch if n in self.names and not self.names[n].launched]
        self._resume_batch = []
        if not names:
            return
        owners: dict[str, Job | None] = {}
        for n in names:
            jobs = [self.state.jobs[i] for i in self.names[n].node.jobs]
            owners[n] = jobs[0] if jobs else None
        self.slurm_counters["resume_calls"] += 1
        self.driver.resume(self, names, owners)

    # ---- node life ---------------------------------------------------------------------------------------

    def _register(self, nm: _Name, now: float) -> None:
        node = nm.node
        node.ready_at = now
        node.version += 1
        node.since = now
        if nm.held_boot:  # IDLE+DRAIN: no job until the driver undrains it; its watcher sees it register
            hook = getattr(self.driver, "held_registered", None)
            if hook is not None:
                hook(self, nm.node)
            return
        if node.jobs:
            node.state = NodeState.BUSY
            for i in list(node.jobs):
                job = self.state.jobs[i]
                if job.state is JobState.CONFIGURING:
                    if job.is_gang and not all(n.registered for n in job.placed_on):
                        node.held_since = now
                    self._maybe_start(job, now, booted=True)
        else:
            self._become_idle(nm, now)

    def _become_idle(self, nm: _Name, now: float) -> None:
        node = nm.node
        node.state = NodeState.READY_IDLE
        node.since = now
        node.version += 1
        self.idle[node.name] = nm
        if nm.pool.capacity_type not in self.conf.suspend_exc:
            self._push(now + self.conf.suspend_time_s, _IDLE, (nm, node.version))
        self.wake(self.driver_idle_wake(nm))

    def driver_poll(self, t: float) -> float | None:
        hook = getattr(self.driver, "next_poll", None)
        return hook(t) if hook else None

    def driver_idle_wake(self, nm: _Name) -> float | None:
        hook = getattr(self.driver, "idle_wake", None)
        return hook(self, nm.node) if hook else None

    def _release_job(self, job: Job, now: float) -> None:
        for n in job.placed_on:
            if n.held_since is not None:
                self.state.partial_gang_gpu_s += n.gpus * (now - n.held_since)
                n.held_since = None
            used = n.jobs.pop(job.idx, 0)
            n.free += used
            n.version += 1
            nm = self.names.get(n.name)
            if nm is None or nm.node is not n:
                continue
            if n.state is not NodeState.DRAINING and not nm.down and n.state is not NodeState.DELETING:
                self._room[nm.pool.name][n.name] = nm
            if not n.jobs and n.registered and n.state is NodeState.BUSY:
                self._become_idle(nm, now)
        if job.state is JobState.RUNNING:
            job.gpu_seconds += job.gpus * (now - (job.start or now))
            self.state.running_gpus -= job.gpus
        job.placed_on = []

    def _finish(self, job: Job, now: float) -> None:
        names = [n.name for n in job.placed_on]
        self._release_job(job, now)
        job.state = JobState.DONE
        job.end = now
        self.state.demand_gpus -= job.gpus
        self.state.done += 1
        hook = getattr(self.driver, "job_end", None)
        if hook is not None:
            hook(self, job, names)

    def _requeue(self, job: Job, now: float) -> None:
        if job.state is JobState.RUNNING:
            ran = now - (job.start or now)
            every = self.state.checkpoint_interval_s
            if every > 0:
                job.progress_s = min(job.trace.duration, job.progress_s + (ran // every) * every)
            job.preemptions += 1
        self._release_job(job, now)
        job.state = JobState.PENDING
        job.attempt += 1
        job.start = None
        job.requeued_at = now  # squeue's submit time from now on (batch_requeue_fini)
        self.slurm_counters["requeues"] += 1
        bisect.insort(self.state._pending, job.key)
        self._eligible[job.idx] = now + self.conf.requeue_hold_s
        self._push(now + self.conf.requeue_hold_s, _ELIGIBLE, None)
        self.state.pending_changed = True

    def _jobs_on(self, node: SimNode) -> list[Job]:
        return [self.state.jobs[i] for i in list(node.jobs)]

    def _resume_timeout(self, nm: _Name, now: float) -> None:
        """ResumeTimeout: node DOWN, its jobs requeued, ResumeFailProgram."""
        self.slurm_counters["resume_timeouts"] += 1
        for job in self._jobs_on(nm.node):
            self._requeue(job, now)
        nm.down = True
        self._room[nm.pool.name].pop(nm.node.name, None)
        self.down[nm.node.name] = nm
        self.driver.resume_fail(self, [nm.node.name])

    def _lose(self, nm: _Name, now: float) -> None:
        """The instance is gone (preempted): jobs requeued, the node powers down."""
        for job in self._jobs_on(nm.node):
            self._requeue(job, now)
        self._retire(nm, now)

    def _retire(self, nm: _Name, now: float) -> None:
        """The instance is deleted (or gone): the name is powering down for SuspendTimeout."""
        node = nm.node
        self._drop_instance(nm, now)
        self.idle.pop(node.name, None)
        self.down.pop(node.name, None)
        self.draining.pop(node.name, None)
        self._room[nm.pool.name].pop(node.name, None)
        node.state = NodeState.DELETING
        node.version += 1
        self._push(now + self.conf.suspend_timeout_s, _RETURN, nm)

    def _drop_instance(self, nm: _Name, now: float) -> None:
        """The name's instance is gone (billing counters, unused-node stats); the name keeps its Slurm state."""
        if nm.launched:
            self.state.remove_node(nm.node, now)
            nm.launched = False

    def _power_off(self, nm: _Name) -> None:
        """Powered down: the name is allocatable again."""
        del self.names[nm.node.name]
        self._held_boots.pop(nm.node.name, None)
        heapq.heappush(self._free[nm.pool.name], nm.index)

    # ---- commands a driver may run ----------------------------------------------------------------------

    @command
    def launch(self, cmd: ScaleUp) -> ProviderError | None:
        """Create the instances of exactly `cmd.names` (names Slurm allocated); the provider's refusal is
        returned (stockout, quota)."""
        self.counters.launches += 1
        try:
            self.cloud.launch(cmd.launch_request())
        except (InsufficientCapacity, QuotaExceeded) as exc:
            self.counters.launch_failures += 1
            return exc
        except ProviderError as exc:
            raise ReplayError(f"policy {self.driver.name}: launch {cmd.request_id} rejected: {exc}") from exc
        hourly = cmd.hourly_usd / max(1, len(cmd.names))
        for name in cmd.names:
            nm = self.names.get(name)
            if nm is None or nm.launched:
                raise ReplayError(f"policy {self.driver.name}: launched {name}, which Slurm did not resume")
            node = nm.node
            node.offering = cmd.offering
            node.hourly_usd = hourly
            node.launched_at = self.now
            node.state = NodeState.BOOTING
            node.since = self.now
            node.version += 1
            nm.launched = True
            free, jobs = node.free, dict(node.jobs)
            self.state.add_node(node)  # billing counters (resets free)
            node.free, node.jobs = free, jobs
            self.counters.nodes_launched += 1
        return None

    @command
    def delete(self, pool: str, names: Sequence[str]) -> list[str]:
        """Delete instances by name; never one with a job (the daemon's guard)."""
        out = []
        for name in names:
            nm = self.names.get(name)
            if nm is None:
                continue
            self._delete_instance(pool, nm)
            self._retire(nm, self.now)
            out.append(name)
        return out

    def _delete_instance(self, pool: str, nm: _Name) -> None:
        """The driver deletes `nm`'s instance, if it has one; never one with a job (the daemon's guard)."""
        if nm.node.jobs:
            raise ReplayError(f"policy {self.driver.name} deleted node {nm.node.name} with {len(nm.node.jobs)} job(s)")
        if nm.launched:
            self.cloud.delete(pool, [nm.node.name])
            self.counters.deletes += 1
            self._drop_instance(nm, self.now)

    @command
    def fail_resume(self, names: Sequence[str]) -> None:
        """The resume itself failed (slurm-gcp marks the nodes DOWN at once): jobs requeued, nodes DOWN."""
        for name in names:
            nm = self.names.get(name)
            if nm is None or nm.down:
                continue
            for job in self._jobs_on(nm.node):
                self._requeue(job, self.now)
            nm.down = True
            self._room[nm.pool.name].pop(name, None)
            self.down[name] = nm

    @command
    def delete_down(self, pool: str, names: Sequence[str]) -> None:
        """Delete the instances of DOWN names and leave them DOWN (the daemon's delete by name before it returns a
        timed-out name to service with `state=resume`)."""
        for name in names:
            nm = self.down.get(name)
            if nm is not None:
                self._delete_instance(pool, nm)

    @command
    def return_to_service(self, names: Sequence[str]) -> None:
        """`scontrol update state=resume` of DOWN nodes: back to powered down (idle~)."""
        for name in names:
            nm = self.down.pop(name, None)
            if nm is None:
                continue
            if nm.launched:
                raise ReplayError(f"policy {self.driver.name}: returned {name} to service with its instance up")
            self._power_off(nm)
        self.state.pending_changed = True
        self.schedule(self.now)

    @command
    def drain(self, names: Sequence[str]) -> None:
        """`scontrol update state=drain`: an idle node takes no job; a busy registered one (a cordon) keeps its
        running jobs, takes no more, and stays drained once they end."""
        for name in names:
            nm = self.idle.pop(name, None)
            if nm is None:
                nm = self.names.get(name)
                if nm is None or nm.down or not nm.node.registered or nm.node.state is not NodeState.BUSY:
                    continue
            nm.node.state = NodeState.DRAINING
            nm.node.since = self.now
            nm.node.version += 1
            self._room[nm.pool.name].pop(name, None)
            self.draining[name] = nm
            self.counters.drains += 1

    @command
    def power_up(self, pool_name: str, count: int) -> list[str]:
        """`scontrol update nodename=... state=power_up` of `count` powered-down names of a pool, lowest first (what
        the daemon does for standby nodes): each name is POWERING_UP with no job, in the next ResumeProgram batch,
        and takes jobs like any node powering up.  Returns the names."""
        pool = self.pools.get(pool_name)
        if pool is None or count <= 0:
            return []
        now = self.now
        out = [self._power_up_index(pool, i, now).node.name for i in self._free_indices(pool, count)]
        if out:
            self._queue_resume(out, now)
            self.slurm_counters["power_ups"] += len(out)
            self.schedule(now)  # pending jobs may take a node powering up
        return out

    @command
    def boot_held(self, pool_name: str, count: int) -> list[str]:
        """`scontrol update nodename=... state=power_up` of `count` drained powered-down names of a held pool,
        lowest first, released ones excepted (late binding): each is POWERING_UP+DRAIN with no job, in the next
        ResumeProgram batch, and takes no job until `undrain_held` (measured on slurmctld 22.05:
        bench/probe_late_bind.py).  Returns the names."""
        pool = self.pools.get(pool_name)
        if pool is None or count <= 0:
            return []
        now = self.now
        out = []
        for i in self.held_indices(pool, count):
            nm = self._power_up_index(pool, i, now)
            nm.held_boot = True
            self._held_boots[nm.node.name] = nm
            self._room[pool.name].pop(nm.node.name, None)
            out.append(nm.node.name)
        if out:
            self._queue_resume(out, now)
            self.slurm_counters["power_ups"] += len(out)
        return out

    def held_boots(self) -> list[_Name]:
        """Names booted drained (`boot_held`) and not undrained yet (until powered off, deleted ones included)."""
        return list(self._held_boots.values())

    @command
    def undrain_held(self, names: Sequence[str]) -> None:
        """`scontrol update state=undrain` of registered held boots: idle and allocatable from now on."""
        for name in names:
            nm = self.names.get(name)
            if nm is None or not nm.held_boot or not nm.launched or not nm.node.registered or nm.down:
                continue
            nm.held_boot = False
            del self._held_boots[name]
            self._room[nm.pool.name][name] = nm
            self._become_idle(nm, self.now)
        self.state.pending_changed = True
        self.schedule(self.now)

    @command
    def hold(self, pools: frozenset[str]) -> None:
        """The driver keeps these pools' powered-down names drained (`scontrol update state=drain`)."""
        self.held = pools

    @command
    def release(self, pool: str, indices: Sequence[int], *, grace_s: float) -> None:
        """Undrain these powered-down names of a held pool: Slurm allocates them to pending jobs
        `conf.release_allocation_s` later (its next scheduling pass); released names nobody took within `grace_s`
        are drained again."""
        self.release_grace_s = grace_s
        rel = self.released[pool]
        for i, at in list(rel.items()):
            if self.now - at > grace_s:
                del rel[i]
        for i in indices:
            rel[i] = self.now
        self._push(self.now + self.conf.release_allocation_s, _ELIGIBLE, None)

    def _gate(self, job: Job, now: float) -> None:
        """The job_submit.lua gates a gang: BeginTime `gang_gate_s` ahead (Slurm tries it then if nobody released
        it first: the gate fails open)."""
        self.gated.add(job.idx)
        self._eligible[job.idx] = now + self.conf.gang_gate_s
        self._push(now + self.conf.gang_gate_s, _ELIGIBLE, None)

    def gated_jobs(self) -> list[Job]:
        """The gated gangs still pending behind their gate (none once released or eligible)."""
        out = []
        for idx in sorted(self.gated):
            job = self.state.jobs[idx]
            if job.state is JobState.PENDING and self._eligible.get(idx, 0.0) > self.now:
                out.append(job)
        self.gated.intersection_update(j.idx for j in out)
        return out

    @command
    def open_gate(self, job: Job, names: frozenset[str]) -> None:
        """`scontrol update jobid=N [ExcNodeList=...] StartTime=now`: a gated gang is kept off `names` (none: its
        exclusion as it is) and Slurm tries it `gate_allocation_s` later."""
        self.gated.discard(job.idx)
        if names:
            self.excluded[job.idx] = names
        self._eligible[job.idx] = self.now + self.conf.gate_allocation_s
        self._push(self.now + self.conf.gate_allocation_s, _ELIGIBLE, None)

    def pending_jobs(self) -> list[Job]:
        return [j for j in self.state.pending() if self._eligible.get(j.idx, 0.0) <= self.now]
