"""The `gpu-fleet` policy in a replay: the daemon's decision core (`autoscaler.core`) behind the simulated Slurm.

This is what production runs, driven the way production drives it.  `SimSlurm` allocates jobs to CLOUD node
names by Weight (as `fleet render slurm-conf` renders them) and calls the power-save hooks; this driver plays the
daemon (`autoscaler/daemon/tick.py`):

- ResumeProgram names are queued (the daemon's power queue); a tick groups them into one `ResumeUnit` per
  (pool, job) with `core.resume_unit` and calls `core.serve_resumes`, which plans the offering and zone per pool
  and launches exactly Slurm's names; a refused launch backs the offering off and the names stay queued for the
  next tick;
- `core.queue_depth` over jobs Slurm could not place (a job of an OverSubscribe=EXCLUSIVE partition as a unit that
  takes its nodes whole, as the daemon reads squeue's `shared`: `SimSlurm.exclusive`) plus the nodes that matter
  for scale-down, then `core.scale_down_steps` (drain idle nodes past `idle_timeout_s`, then power down and delete
  them by name);
- SuspendProgram deletes the instances by name; ResumeFailProgram backs the offering off with
  `core.resume_failed`, deletes the instance and returns the node to service (`scontrol update state=resume`), or,
  for a name of a held pool, powers it down (back, held, after SuspendTimeout), as the daemon does.

Ticks run when a hook fires and at the daemon's 10 s poll (`loop.interval_s`) while something waits (queued
resumes, idle or drained nodes, jobs Slurm could not place); between those nothing the daemon reads changes.
A job's end (EpilogSlurmctld) starts a tick `JOB_END_LATENCY_S` later, as the daemon's watcher does.
With a reservation and a hold, overflow pools are held as the daemon holds them (`core.held_pools`: powered-down
names drained, released by `core.held_launches` / `core.take_names` once the plan launches for a pending job)."""

from __future__ import annotations

import bisect
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from autoscaler.cloud import FailureKind, ProviderError
from autoscaler.core import (
    RELEASE_GRACE_S,
    LaunchOutcome,
    ReservedRoom,
    ResumeLaunch,
    ResumeUnit,
    UpNode,
    configured_names,
    deletable_after_drain,
    gang_exclusions,
    gate_exclusion,
    held_launches,
    held_pools,
    kept_idle,
    late_binding,
    name_index,
    queue_depth,
    resume_failed,
    resume_unit,
    scale_down_steps,
    serve_resumes,
    surplus_held_boots,
    take_names,
)
from autoscaler.core.settings import SeenJob, SettingsTracker
from autoscaler.core.stable import stable_until
from autoscaler.core.weights import ReservedNode, rendered_weights, reservation_weights, weight_changes
from autoscaler.model import Inventory, Node, NodeState, Plan, Policy, Pool, UnavailableOffering, WorkUnit
from autoscaler.planner.defrag import cordons_apply, step_down
from autoscaler.planner.minimum import pool_floor
from autoscaler.planner.rule import longest_idle_keep_s
from autoscaler.planner.standby import is_standby_unit, standby_count
from autoscaler.replay.facts import scenario_facts
from autoscaler.replay.scenario import Scenario
from autoscaler.replay.simslurm import SimSlurm, SlurmSettings
from autoscaler.replay.state import Job, JobState, ReplayError, SimNode
from autoscaler.replay.trace import TraceJob
from autoscaler.slurm.gang_gate import GANG_GATE_S
from fleet.catalog import CapacityType
from fleet.slurm.suspend import standby_exclusion_count

#: knobs of the gpu-fleet policy in replays that the settings rule does not derive (the rule sets idle keep,
#: batch window / reservation hold and defragmentation: autoscaler/planner/rule.py)
DEFAULT_POLICY = Policy(
    backoff_s=600.0,
    keep_reserved_nodes=True,  # reservation capacity is paid for either way
)

#: the daemon's loop settings (autoscaler/daemon/config.py LoopConfig defaults)
INTERVAL_S = 10.0
RESUME_FAIL_BACKOFF_S = 1800.0
#: job end -> the daemon's tick that scales the freed node down, through EpilogSlurmctld and the 1 s watcher:
#: 0.7 s mean (median 0.69 s, max 0.84 s, 8 job ends) on real slurmctld 22.05 with no compute-node Epilog
#: (`bench/job_end_latency.py`; a node Epilog adds its own run time, during which the node is COMPLETING)
JOB_END_LATENCY_S = 0.7
#: a held boot registering -> its job running: the run loop's 1 s sinfo watcher starts the tick that undrains it
#: (`autoscaler/daemon/loop.py` WATCH_S), then slurmctld's next scheduling pass starts the job.  Measured on slurmctld
#: 22.05.8 with the rendered `SchedulerParameters=batch_sched_delay=0` (`bench/late_bind_latency.py`, 12 boots): mean
#: 0.99 s, max 1.07 s (at Slurm's default batch_sched_delay, 3 s: mean 2.17 s, max 3.06 s; fleet/slurm/policy.py)
HELD_BOOT_LATENCY_S = 1.0
#: a submission -> the daemon's tick, while it holds pools: the rendered job_submit.lua touches the wake-up file,
#: which the run loop's 1 s watcher checks (`autoscaler/daemon/loop.py`).  The watcher's whole period is assumed; the
#: same bench measured submit -> power_up at mean 0.52 s, max 0.67 s, so waits are overstated by about half a
#: second (not the bill: it starts at the create, `SlurmSettings.resume_batch_s` later; submit -> create measured
#: mean 1.56 s, max 1.71 s against the 2.0 s modelled).  Under the preemption hold (tests/e2e/test_preempt.py's
#: scenario, partition-priority preemption on) slurmctld's first pass over the job can come after the wake-up's
#: tick, and the daemon ticks again once squeue shows the job tried (`Daemon.hold_change_due`): submit -> release
#: measured 0.89-1.41 s, mean 1.15 s (6 runs), so there the model is up to 0.41 s early
SUBMIT_WAKE_LATENCY_S = 1.0
#: slurmctld allocated a powered-down name to a job (bound at submit, or a released gang) -> the daemon creates the
#: instance, beyond `SlurmSettings.resume_batch_s` (slurmctld calls ResumeProgram ~1 s after the allocation, paid by
#: every bound policy): the hook queues the name and the run loop's 1 s watcher reads the power_queue rows
#: (`autoscaler/daemon/loop.py`).  Measured on slurmctld 22.05.8 (`bench/late_bind_latency.py --bind`, two runs of 12
#: boots): allocation -> hook 0.79-0.99 s, hook -> tick 0.32-0.39 s and 0.40-0.45 s (the watcher's phase against
#: slurmctld's power thread: one per run, so at most its 1 s period), tick -> instances.insert 0.03 s.  A name the
#: daemon powered up itself (late binding's held boots, standby and floor names) has none: `scontrol update
#: state=power_up` -> create measured 1.04 s against the modelled `resume_batch_s` (`bench/late_bind_latency.py`).
#: slurm-gcp's resume.py creates in the hook: slurm-power-save has none either
BOUND_RESUME_LATENCY_S = 0.4


@dataclass(frozen=True)
class _Facts:
    """A node as `scale_down_steps` sees it (what sinfo reports)."""

    idle: bool
    drain: bool
    has_work: bool


@dataclass(frozen=True)
class _Quiet:
    """A tick that issued nothing: Slurm's `version` after it, until when its decision stands, and how many plans
    it made (each poll it answers stands for as many)."""

    version: int
    until: float
    planner_calls: int


@dataclass
class GpuFleetPolicy:
    """The daemon's decision core on the simulated Slurm; see the module docstring."""

    policy: Policy = DEFAULT_POLICY
    name: str = "gpu-fleet"
    description: str = (
        "the gpu-fleet daemon on Slurm: slurmctld allocates CLOUD nodes by Weight (reservation, spot, on-demand; "
        "right-sized shapes), the decision core picks offering and zone (backoff on stockouts, gangs all or "
        "nothing), idle scale-down by name"
    )
    slurm: SlurmSettings = field(default_factory=SlurmSettings)
    interval_s: float = INTERVAL_S
    resume_fail_backoff_s: float = RESUME_FAIL_BACKOFF_S
    #: the settings rule over what the simulated Slurm has shown so far (None: `policy` is fixed)
    tracker: SettingsTracker | None = None
    unavailable: tuple[UnavailableOffering, ...] = ()
    planner_calls: int = 0
    ticks: int = 0
    _open: dict[str, tuple[Job | None, float]] = field(default_factory=dict)  # the power queue: name -> (job, at)
    #: names the daemon powered up itself (`scontrol update state=power_up`) whose ResumeProgram call is still to come
    _powered: set[str] = field(default_factory=set)
    _pools: list[Pool] = field(default_factory=list)
    _t0: float | None = None
    _nodes: dict[str, tuple[SimNode, int, Node]] = field(default_factory=dict)
    #: job idx -> its work unit (rebuilt when a requeue stamps a new submit time)
    _units: dict[int, WorkUnit] = field(default_factory=dict)
    #: every launch attempt: (time, request id, pool, offering, names, outcome), and every tick's time
    launch_log: list[tuple[float, str, str, str, tuple[str, ...], str]] = field(default_factory=list)
    tick_log: list[float] = field(default_factory=list)
    _seen_final: dict[int, SeenJob | None] = field(default_factory=dict)  # job idx -> settled history entry
    _standby_kept: set[str] = field(default_factory=set)  # idle names the last plan kept as standby nodes
    #: job idx of the gangs whose ExcNodeList it set (`_exclude_up_nodes`)
    _excluded: set[int] = field(default_factory=set)
    _pool_names: dict[frozenset[str], frozenset[str]] = field(default_factory=dict)  # `_names_of`
    _rendered: dict[str, int] | None = None  # the pools' rendered Weights (`core.weights.rendered_weights`)
    _stepping: frozenset[str] | None = None  # pools with a step-down shape (`_pools_with_step_down`)
    #: the last tick issued nothing: its decision stands while Slurm is unchanged, until this (`_quiet_after`)
    _quiet: _Quiet | None = None
    #: polls answered from `_quiet` (counted in `ticks` and, with the plans they stand for, in `planner_calls`)
    quiet_ticks: int = 0
    #: run the full tick anyway and fail if it issues a command or wakes otherwise (the check of `stable_until`;
    #: `FLEET_REPLAY_VERIFY_QUIET=1` turns it on for a whole run, bench/autoscaler_claims.py included)
    verify_quiet: bool = field(default_factory=lambda: os.environ.get("FLEET_REPLAY_VERIFY_QUIET") == "1")

    @classmethod
    def for_scenario(
        cls,
        scenario: Scenario,
        wait_value_usd_per_gpu_hour: float | None = None,
        jobs: Sequence[TraceJob] = (),
        warm_cap: bool = True,
        preempt_spot: bool = True,
        late_bind: bool = True,
        share_nodes: bool = False,
        gang_gate: bool = True,
    ) -> GpuFleetPolicy:
        """The replay's gpu-fleet, configured as the daemon is: `DEFAULT_POLICY` plus the wait value, and the
        settings rule applied by `autoscaler.core.settings.SettingsTracker` to the jobs the simulated Slurm has
        shown up to the replay's clock (arrivals over the last day, runs of jobs that ended), refreshed every
        10 minutes, exactly as the daemon applies it to what squeue showed it.  Nothing is read from the trace's
        future and no setting is swept.  `jobs` is accepted for the callers' signature and not read.  `warm_cap`:
        `Policy.warm_cap`, an operator's setting the rule keeps; so are `preempt_spot` (`Policy.preempt_spot`) and
        `late_bind` (`Policy.late_bind`), `share_nodes` (`Policy.share_nodes`) and `gang_gate` (`Policy.gang_gate`)."""
        facts = scenario_facts(scenario, (), wait_value_usd_per_gpu_hour)
        base = replace(
            DEFAULT_POLICY,
            wait_value_usd_per_gpu_hour=facts.wait_value_usd_per_gpu_hour,
            warm_cap=warm_cap,
            preempt_spot=preempt_spot,
            late_bind=late_bind,
            share_nodes=share_nodes,
            gang_gate=gang_gate,
        )
        tracker = SettingsTracker(base=base, boot_s=scenario.ready_s)
        # Slurm powers an idle node down after SuspendTime whatever the daemon keeps: the stack renders it no
        # shorter than the longest idle keep the rule can set (plus one tick), so the rule's keep is what happens
        slurm = replace(
            SlurmSettings(),
            suspend_time_s=max(SlurmSettings().suspend_time_s, longest_idle_keep_s(facts) + INTERVAL_S),
            # standby nodes idle past SuspendTime by design: the stack renders SuspendExcNodes `<nodes>:<max>`
            # for on-demand pools when waiting is valued
            suspend_exc_count=standby_exclusion_count(base),
        )
        return cls(policy=base, slurm=slurm, tracker=tracker)

    def polls_on_allocation(self, sim: SimSlurm) -> bool:
        """With standby nodes (it replenishes) or a reservation (it re-weights the reserved nodes,
        `autoscaler.core.weights`) the daemon's next poll after a job took a node matters: the simulated Slurm calls
        the tick then (the daemon polls every 10 s anyway; otherwise such a poll decides nothing, so the replay
        skips it).  So it does when a job took free GPUs on a busy node the cordon of oversized nodes may drain
        (`autoscaler.planner.defrag.cordon_oversized`: a pool with a step-down shape, of a shape the policy does not
        keep warm)."""
        if self.policy.standby_by_machine or self._has_reservation:
            return True
        return bool(self._cordonable(sim))

    def _cordonable(self, sim: SimSlurm) -> list[SimNode]:
        """The busy nodes with free GPUs that the cordon of oversized nodes may drain
        (`autoscaler.planner.defrag.cordon_oversized`): in a pool with a step-down shape, of a shape the policy does
        not keep warm; none where the cordon does not apply (`cordons_apply`)."""
        if not cordons_apply(self._pools, self.policy):
            return []
        stepping = self._pools_with_step_down(sim)
        return [
            nm.node
            for nm in sim.partly_used()
            if nm.pool.name in stepping and not self.policy.keeps_warm(nm.pool.machine_type)
        ]

    def _pools_with_step_down(self, sim: SimSlurm) -> frozenset[str]:
        """The pools whose nodes can be oversized: a step-down shape at their price exists (`defrag.step_down` over
        every offering; the planner leaves out backed-off ones, so this may name a pool it would not cordon)."""
        if self._stepping is None:
            self._stepping = frozenset(n for n, s in step_down(self._pools, sim.offerings()).items() if s > 0)
        return self._stepping

    @property
    def _has_reservation(self) -> bool:
        return any(p.capacity_type is CapacityType.RESERVATION for p in self._pools)

    def settings(self) -> dict[str, object]:
        return {
            **policy_settings(self.policy, self.tracker, "the observed history", self.interval_s),
            "resume_timeout_s": self.slurm.resume_timeout_s,
            "suspend_time_s": self.slurm.suspend_time_s,
        }

    def pools(self, scenario: Scenario) -> list[Pool]:
        self._pools = scenario.pools()
        return self._pools

    def slurm_settings(self, scenario: Scenario) -> SlurmSettings:
        # the stack renders partition-priority preemption of spot-tolerant work with Policy.preempt_spot
        # (fleet/slurm/preempt.py); the daemon holds the overflow for it (`core.held_pools`); under late binding
        # the job_submit.lua gives every GPU job its right-sized machine type as a hard constraint
        late = late_binding(scenario.pools(), self.policy)
        kinds = [p.capacity_type for p in scenario.pools()]
        return replace(
            self.slurm,
            preempt_spot=self.policy.preempt_spot,
            constrain=late,
            shared=late and self.policy.share_nodes,
            prefer=not late,
            # the lua's submit wake-up, wherever the daemon may hold pools or gates gangs
            # (fleet.slurm.policy.submit_wakes_daemon), and its gang gate (fleet.slurm.policy.gates_gangs)
            submit_wake=self.policy.releases_jobs(kinds),
            gang_gate_s=GANG_GATE_S if self.policy.gates_gangs(kinds) else 0.0,
        )

    # ---- the hooks ------------------------------------------------------------------------------------

    def resume(self, sim: SimSlurm, names: Sequence[str], jobs: Mapping[str, Job | None]) -> None:
        for n in names:
            self._open[n] = (jobs.get(n), sim.now)
        bound = any(n not in self._powered for n in names)  # names slurmctld allocated, not the daemon's power-ups
        self._powered.difference_update(names)
        sim.wake(sim.now + (BOUND_RESUME_LATENCY_S if bound else 0.0))  # the daemon's hook watcher starts a tick

    def suspend(self, sim: SimSlurm, names: Sequence[str]) -> None:
        for n in names:
            self._open.pop(n, None)  # the latest request per name wins
        by_pool: dict[str, list[str]] = {}
        for n in names:
            nm = sim.names.get(n)
            if nm is not None and not nm.node.jobs:
                by_pool.setdefault(nm.pool.name, []).append(n)
        for pool, ns in by_pool.items():
            sim.delete(pool, ns)

    def resume_fail(self, sim: SimSlurm, names: Sequence[str]) -> None:
        """The daemon's handling of ResumeFailProgram (`Daemon._power_down_requests`): the offering of a name with an
        instance is remembered as unavailable and the instance deleted; a name of a held pool is powered down
        ("resume failed; held again": POWERING_DOWN for SuspendTimeout, then powered down and held), any other goes
        back to service at once (`scontrol update state=resume`)."""
        for n in names:
            self._open.pop(n, None)
            nm = sim.names.get(n)
            if nm is None:
                continue
            if nm.launched:
                self.unavailable = resume_failed(
                    self.unavailable, nm.node.offering, sim.now, self.policy, self.resume_fail_backoff_s
                )
            if nm.pool.name in sim.held:
                sim.delete(nm.pool.name, [n])
            else:
                sim.delete_down(nm.pool.name, [n])
                sim.return_to_service([n])

    def job_submitted(self, sim: SimSlurm, job: Job) -> None:
        """Wherever the daemon may hold pools or gates gangs the job_submit.lua touches its wake-up file, which it
        watches while it holds some or gates gangs: a tick follows within a second (a held pool's powered-down names
        are not allocatable, so no ResumeProgram call would start one; a gated gang waits for that tick)."""
        if sim.conf.submit_wake and (sim.held or sim.conf.gang_gate_s > 0):
            sim.wake(sim.now + SUBMIT_WAKE_LATENCY_S)

    def held_registered(self, sim: SimSlurm, node: SimNode) -> None:
        """A node booted drained (late binding) registered: the daemon's watcher sees it within a second."""
        sim.wake(sim.now + HELD_BOOT_LATENCY_S)

    def job_end(self, sim: SimSlurm, job: Job, names: Sequence[str]) -> None:
        """EpilogSlurmctld: the daemon's watcher ticks `JOB_END_LATENCY_S` after a job's end (docs/autoscaler.md
        "Job end"); that tick sees the freed nodes idle and scales down those the policy does not keep."""
        sim.wake(sim.now + JOB_END_LATENCY_S)

    def idle_wake(self, sim: SimSlurm, node: SimNode) -> float | None:
        if self.policy.keep_reserved_nodes and node.offering.capacity_type is CapacityType.RESERVATION:
            return None
        if node.name in self._standby_kept:
            return None  # kept up as a standby node: nothing to decide until a job takes it or the settings change
        m = node.offering.machine_type
        cap = self.policy.idle_keep_max_by_machine.get(m)
        if cap is not None and sum(1 for nm in sim.idle.values() if nm.node.offering.machine_type == m) > cap:
            return self._next_tick(sim.now)  # more idle nodes of the shape than the rule keeps warm
        return self._next_tick(node.since + self.policy.idle_timeout_for(m))

    # ---- the daemon's tick ------------------------------------------------------------------------------

    def next_poll(self, t: float) -> float:
        """When the daemon's next poll after `t` reads the queue."""
        return self._next_tick(t)

    def _next_tick(self, t: float) -> float:
        t0 = self._t0 if self._t0 is not None else 0.0
        return t0 + math.ceil((t - t0) / self.interval_s - 1e-9) * self.interval_s

    def tick(self, sim: SimSlurm) -> float | None:
        now = sim.now
        if self._t0 is None:
            self._t0 = now
        self.ticks += 1
        self.tick_log.append(now)
        quiet = self._quiet
        if quiet is not None and quiet.version == sim.version and now < quiet.until:
            if not self.verify_quiet:
                self.quiet_ticks += 1
                self.planner_calls += quiet.planner_calls
                return self._wake(sim, now, False)
            return self._verify_quiet(sim, quiet)
        version, calls = sim.version, self.planner_calls
        wake, pending, nodes = self._full_tick(sim, now)
        self._quiet = self._quiet_after(sim, now, version, self.planner_calls - calls, pending, nodes)
        return wake

    def _full_tick(self, sim: SimSlurm, now: float) -> tuple[float | None, list[WorkUnit], tuple[Node, ...]]:
        """The daemon's tick; returns its wake-up, and the pending units and nodes its queue-depth plan read."""
        if self.tracker is not None:
            self.policy = self.tracker.current(
                now,
                self._t0,
                offerings=sim.offerings,
                pools=self._pools,
                history=lambda a, b: self.seen_jobs(sim, a, b),
            )
        held = held_pools(self._pools, self.policy)
        if held != sim.held:
            sim.hold(held)
        late = late_binding(self._pools, self.policy)
        if held:  # the daemon's first act on its read: held boots that registered take work from now on
            booted = [nm.node.name for nm in sim.held_boots() if nm.launched and nm.node.registered and not nm.down]
            if booted:
                sim.undrain_held(booted)
        self._open_gates(sim, held)
        offerings = sim.offerings()
        resume = self.resume_units(sim)
        refused = False
        if resume:
            inv = Inventory(tuple(self._pools), self._limit_nodes(sim, now))

            def launch(rl: ResumeLaunch) -> tuple[LaunchOutcome, FailureKind | None, str]:
                nonlocal refused
                su = rl.scale_up
                err = sim.launch(su)
                result = (LaunchOutcome.OK, None, "") if err is None else _outcome(err)
                self.launch_log.append((now, su.request_id, su.pool, str(su.offering), su.names, str(result[0])))
                if err is None:
                    for n in su.names:
                        self._open.pop(n, None)
                else:
                    refused = True
                return result

            out = serve_resumes(resume, inv, offerings, self.policy, now, self.unavailable, launch, self._planner)
            self.unavailable = out.memory
        # queue depth + scale-down
        pending = [self._unit(sim, j) for j in sim.pending_jobs()]
        cordonable = self._cordonable(sim)
        below = self._below_floor(sim)
        nodes = self._scale_down_nodes(sim, now, cordonable, full=bool(pending) or self._limited or below)
        standby = bool(self.policy.standby_by_machine)
        plan = None
        idle = any(nm.launched for nm in sim.idle.values()) or any(nm.launched for nm in sim.draining.values())
        if pending or standby or idle or cordonable or below:
            plan = queue_depth(
                pending,
                Inventory(tuple(self._pools), nodes),
                offerings,
                self.policy,
                now,
                self.unavailable,
                self._planner,
                standby_in_flight=self._standby_in_flight(sim, nodes) if standby else None,
                preemption_room=preemption_room(sim) if held and self._has_reservation else (),
            )
            self.unavailable = plan.unavailable
            self._standby_kept = {
                n for uid, a in plan.assignments.items() if is_standby_unit(uid) for n in a.nodes if n in sim.idle
            }
            for su in plan.scale_ups:  # the daemon's `scontrol update state=power_up` of floor and standby names
                if su.minimum and su.pool not in held:  # `floor_count`: less what Slurm is powering up unlisted
                    self._powered.update(sim.power_up(su.pool, su.count - self._unlisted_power_ups(sim, su.pool)))
                elif (k := standby_count(su)) and not late:  # late binding: booted held (`_release`)
                    self._powered.update(sim.power_up(su.pool, k))
            # what sinfo shows of the nodes the plan would drain or delete (the only ones scale_down_steps reads)
            named = {n for d in plan.drains for n in d.nodes} | {n for dn in plan.deletes for n in dn.names}
            facts = {n.name: self._facts(sim, n.name) for n in nodes if n.name in named}
            drained: list[tuple[str, tuple[str, ...]]] = []
            for step in scale_down_steps(plan, facts):
                if step.action == "drain":
                    sim.drain(step.names)
                    drained.append((step.pool, step.names))
                else:
                    sim.delete(step.pool, step.names)
            for pool, names in drained:  # the daemon's re-read after the drain, then the same-tick delete
                fresh = {n: self._facts(sim, n) for n in names if n in sim.names}
                ok = deletable_after_drain(names, fresh)
                if ok:
                    sim.delete(pool, ok)
            if held:
                self._release(sim, plan, held)
        if late:
            self._abort_surplus_boots(sim, plan, nodes)
        self._reweigh(sim)
        return self._wake(sim, now, refused), pending, nodes

    def _quiet_after(
        self,
        sim: SimSlurm,
        now: float,
        version: int,
        planner_calls: int,
        pending: Sequence[WorkUnit],
        nodes: Sequence[Node],
    ) -> _Quiet | None:
        """After a tick that ran no command (Slurm's version unchanged) and launched nothing from the power queue:
        its decision stands until a clock threshold of the core (`core.stable.stable_until`) over the `pending`
        units and `nodes` its plan read, or the settings' next refresh, as long as nothing happens in Slurm (the
        next poll then reads the same).  None after any other tick, or with standby nodes (their units are dated
        `now`)."""
        if sim.version != version or self._open or self.policy.standby_by_machine:
            return None
        until = stable_until(
            now,
            pending,
            nodes,
            self.policy,
            self.unavailable,
            [at for rel in sim.released.values() for at in rel.values()],
        )
        if self.tracker is not None and self._t0 is not None:
            until = min(until, self.tracker.grid_point(now, self._t0) + self.tracker.refresh_s)
        return _Quiet(version, until, planner_calls) if until > now else None

    def _verify_quiet(self, sim: SimSlurm, quiet: _Quiet) -> float | None:
        """`verify_quiet`: the full tick, which must run no command and wake as the quiet answer would."""
        now = sim.now
        expected = self._wake(sim, now, False)
        calls = self.planner_calls
        wake = self._full_tick(sim, now)[0]
        wrong = [
            *(["ran commands"] if sim.version != quiet.version else []),
            *([f"woke at {wake} instead of {expected}"] if wake != expected else []),
            *(["planned another number of times"] if self.planner_calls - calls != quiet.planner_calls else []),
        ]
        if wrong:
            raise ReplayError(
                f"policy {self.name}: the tick at t={now:g}, answered as quiet (stable until {quiet.until:g}), "
                f"{' and '.join(wrong)}: a clock threshold is missing from core.stable.stable_until"
            )
        self.quiet_ticks += 1
        return wake

    def _abort_surplus_boots(self, sim: SimSlurm, plan: Plan | None, nodes: Sequence[Node]) -> None:
        """The daemon's abort of surplus held boots (`core.surplus_held_boots`): held boots with an instance, not
        registered, no job, that the plan puts no pending job on, in a shape with no idle keep, are deleted (the
        daemon's `scontrol update state=power_down_force` and delete by name)."""
        boots = {
            nm.node.name: nm.pool
            for nm in sim.held_boots()
            if nm.launched and not nm.down and not nm.node.registered and not nm.node.jobs
        }
        if boots:
            kept = kept_idle(nodes, plan, self.policy)
            for name in surplus_held_boots({n: p.machine_type for n, p in boots.items()}, plan, self.policy, kept):
                sim.delete(boots[name].name, [name])

    def _reweigh(self, sim: SimSlurm) -> None:
        """The daemon's step after scale-down: best fit on the reservation (`autoscaler.core.weights`), the Weights
        of the registered reserved nodes set from their free GPUs as the simulated Slurm shows them."""
        if not self._has_reservation:
            return
        reserved = [nm for nm in sim.registered() if nm.pool.capacity_type is CapacityType.RESERVATION]
        if not reserved:
            return
        if self._rendered is None:
            self._rendered = rendered_weights(self._pools)
        nodes = [ReservedNode(nm.node.name, nm.pool.name, nm.node.gpus, nm.node.gpus - nm.node.free) for nm in reserved]
        changes = weight_changes(reservation_weights(self._pools, self._rendered, nodes), sim.weights())
        if changes:
            sim.set_weights(changes)

    def seen_jobs(self, sim: SimSlurm, start: float, at: float) -> list[SeenJob]:
        """The daemon's job history at `at` (`StateStore.observe_jobs` at every tick): the jobs submitted in
        [start, at] that a squeue it read by `at` showed; for those it saw leave the queue by `at`, when it saw
        that, and the run from squeue's start time to then (known only when it saw the job RUNNING).  The daemon
        reads squeue at every 10 s poll and at every hook-driven tick; a job that came and went between two reads
        is never seen, as in production."""
        jobs = sim.state.jobs  # sorted by submit time
        lo = bisect.bisect_left(jobs, start, key=lambda j: j.submit)
        hi = bisect.bisect_right(jobs, at, key=lambda j: j.submit)
        out = []
        for j in jobs[lo:hi]:
            final = self._seen_final.get(j.idx, False)
            if final is not False:  # settled: seen leaving the queue, or never seen at all
                if final is not None:
                    out.append(final)
                continue
            first = self._read_at(j.submit)
            end = j.end if j.state is JobState.DONE and j.end is not None else math.inf
            if first >= end:
                self._seen_final[j.idx] = None
                continue
            if first > at:
                continue
            ended_at = run = None
            if end < math.inf and (seen_end := self._read_at(end)) <= at:
                ended_at = seen_end
                if j.start is not None and self._read_at(j.start) < end:
                    run = seen_end - j.start
            seen = SeenJob(j.submit, j.nodes, j.gpus_per_node, ended_at, run)
            if ended_at is not None:
                self._seen_final[j.idx] = seen
            out.append(seen)
        return out

    def _read_at(self, t: float) -> float:
        """When the daemon first reads Slurm at or after `t`: its next poll, or an earlier hook-driven tick."""
        poll = self._next_tick(t)
        i = bisect.bisect_left(self.tick_log, t)
        return min(poll, self.tick_log[i]) if i < len(self.tick_log) else poll

    def _release(self, sim: SimSlurm, plan: Plan, held: frozenset[str]) -> None:
        """The daemon's `_hold`: widen the constraints of jobs the plan serves with another machine type; release
        as many held names as the plan launches for gangs (every launch, without late binding) in each held pool,
        lowest free index first (the names Slurm shows drained and powered down); under late binding, boot as many
        drained names as the plan launches for single nodes, less those booted and not launched yet."""
        pending = sim.pending_jobs()
        constraints = {f"job/{j.idx + 1}": a for j in pending if (a := sim.allowed(j)) is not None}
        split = held_launches(plan, held, self._pools, self.policy, constraints)
        if split.widen:
            by_uid = {f"job/{j.idx + 1}": j for j in pending}
            for uid, mts in split.widen.items():
                sim.allow(by_uid[uid], mts)
        if split.boot:
            booting: dict[str, int] = {}
            for nm in sim.held_boots():
                # a boot under way with no instance yet; an aborted one (powering down) is not on its way (the
                # daemon's `_hold` skips POWERING_DOWN names before it counts boots)
                if not nm.launched and not nm.down and not nm.powering_down:
                    booting[nm.pool.name] = booting.get(nm.pool.name, 0) + 1
            for pool_name, n in split.boot.items():
                if n > booting.get(pool_name, 0):
                    self._powered.update(sim.boot_held(pool_name, n - booting.get(pool_name, 0)))
        self._exclude_up_nodes(sim, plan, held, pending)
        want = split.release
        cands: dict[str, list[str]] = {}
        for pool_name, n in want.items():
            pool = sim.pools[pool_name]
            cands[pool_name] = [pool.node_name(i) for i in sim.held_indices(pool, n)]
        outstanding = {p: sum(1 for i, at in sim.released[p].items() if sim.now - at <= RELEASE_GRACE_S) for p in held}
        for pool_name, names in take_names(want, cands, outstanding).items():
            sim.release(pool_name, [name_index(n) for n in names], grace_s=RELEASE_GRACE_S)

    def _open_gates(self, sim: SimSlurm, held: frozenset[str]) -> None:
        """The daemon's `_open_gang_gates`: each gang the lua gated is released, kept off the nodes up or coming up
        unless nodes ready now hold it whole (`core.gate_exclusion`).  Under a hold the daemon's watcher looks again
        once slurmctld has tried it (`Daemon.hold_change_due`), a second after its pass."""
        gated = sim.gated_jobs()
        if not gated:
            return
        up = [
            UpNode(
                name,
                nm.pool.name,
                nm.node.gpus,
                nm.node.free,
                nm.node.registered and not nm.held_boot and nm.node.state in (NodeState.READY_IDLE, NodeState.BUSY),
                nm.pool.capacity_type is CapacityType.RESERVATION,
            )
            for name, nm in sim.names.items()
            if not (nm.powering_down or nm.down)
        ]
        bootable = {p.name: p.max_nodes - sim.names_up(p) for p in self._pools}  # names powered down
        for job in gated:
            names = gate_exclusion(
                job.nodes, job.gpus_per_node, sim.job_pools(job), up, bootable, whole=sim.exclusive(job)
            )
            sim.open_gate(job, names)
            if names:
                self._excluded.add(job.idx)
        if held:
            sim.wake(sim.now + sim.conf.gate_allocation_s + SUBMIT_WAKE_LATENCY_S)

    def _exclude_up_nodes(self, sim: SimSlurm, plan: Plan, held: frozenset[str], pending: Sequence[Job]) -> None:
        """The daemon's `_exclude_up_nodes`: each pending gang kept off the held pools' nodes up or coming up
        unless the plan puts it on ready nodes alone (`core.gang_exclusions`)."""
        # forgotten only once the job is done: Slurm keeps a job's ExcNodeList when it requeues it
        self._excluded = {i for i in self._excluded if sim.state.jobs[i].state is not JobState.DONE}
        gangs = {f"job/{j.idx + 1}": j for j in pending if j.nodes > 1}
        if not gangs:
            return
        # up or coming up (held boots included: undrained once registered); not a name Slurm must power up
        room = {
            n: nm.node.gpus for n, nm in sim.names.items() if nm.pool.name in held and not (nm.powering_down or nm.down)
        }
        excluded = {uid: sim.excluded.get(j.idx, frozenset()) for uid, j in gangs.items()}
        sizes = {uid: j.gpus_per_node for uid, j in gangs.items()}
        ours = frozenset(uid for uid, j in gangs.items() if j.idx in self._excluded)
        # every name of a gang's pools, and the held boots Slurm cannot give yet: the daemon's `leave_schedulable`
        fits = {uid: (j.nodes, self._names_of(sim.job_pools(j))) for uid, j in gangs.items()}
        drained = frozenset(n for n, nm in sim.names.items() if nm.held_boot)
        # powered down and not drained: the names of the pools not held that are not up (a held pool's are drained)
        bootable = self._names_of(frozenset(p.name for p in self._pools if p.name not in held)) - sim.names.keys()
        changes = gang_exclusions(
            plan, room, sizes, excluded, ours, fits=fits, unschedulable=drained, bootable=bootable
        )
        for uid, names in changes.items():
            job = gangs[uid]
            sim.exclude(job, names)
            if names:
                self._excluded.add(job.idx)
            else:
                self._excluded.discard(job.idx)

    def _names_of(self, pools: frozenset[str]) -> frozenset[str]:
        """Every configured name of `pools` (cached: the same few pool sets come back every tick)."""
        if pools not in self._pool_names:
            self._pool_names[pools] = configured_names(p for p in self._pools if p.name in pools)
        return self._pool_names[pools]

    def _planner(self, *args, **kw):  # type: ignore[no-untyped-def]
        from autoscaler.planner import plan

        self.planner_calls += 1
        return plan(*args, **kw)

    def _below_floor(self, sim: SimSlurm) -> bool:
        """Whether a pool has fewer names up or coming up than its floor (`pool_floor`): the plan then runs, over
        the whole inventory, to bring it up."""
        return any(sim.names_up(p) < f for p in self._pools if (f := pool_floor(p, self.policy)))

    @staticmethod
    def _unlisted_power_ups(sim: SimSlurm, pool: str) -> int:
        """Names of `pool` powering up with no instance yet (the plan's inventory lists launched nodes only)."""
        return sum(
            1
            for nm in sim.names.values()
            if nm.pool.name == pool and not nm.launched and not (nm.down or nm.powering_down)
        )

    @property
    def _limited(self) -> bool:
        p = self.policy
        return (
            p.max_nodes is not None
            or p.max_gpus is not None
            or p.budget_usd_per_hour is not None
            or any(pl.min_nodes for pl in self._pools)
        )

    def resume_units(self, sim: SimSlurm) -> dict[str, list[ResumeUnit]]:
        """The queued resume names still waiting for an instance, one unit per (pool, job), as build_view groups
        them (pools by name, jobs by id)."""
        groups: dict[tuple[str, int], list[tuple[str, Job | None, float]]] = {}
        for n, (job, at) in list(self._open.items()):
            nm = sim.names.get(n)
            if nm is None or nm.launched or nm.down:
                self._open.pop(n, None)
                continue
            key = (nm.pool.name, job.idx if job is not None else -1)
            groups.setdefault(key, []).append((n, job, at))
        out: dict[str, list[ResumeUnit]] = {}
        for (pool_name, _), rows in sorted(groups.items()):
            job = rows[0][1]
            pool = sim.pools[pool_name]
            names = tuple(sorted((r[0] for r in rows), key=name_index))
            # Slurm numbers jobs in submission order: the trace's order + 1 stands for the Slurm job id
            ru = resume_unit(pool, job.idx + 1 if job else None, names, min(r[2] for r in rows), tag=job)
            out.setdefault(pool_name, []).append(ru)
        return out

    def _unit(self, sim: SimSlurm, job: Job) -> WorkUnit:
        u = self._units.get(job.idx)
        if u is None or u.submit_time != job.pending_since:  # a requeue stamps a new submit time
            u = self._units[job.idx] = _unit(job, whole=sim.exclusive(job))
        return u

    def _node(self, n: SimNode) -> Node:
        cached = self._nodes.get(n.name)
        if cached is not None and cached[0] is n and cached[1] == n.version:
            return cached[2]
        state = n.state if n.registered else NodeState.BOOTING
        node = Node(
            name=n.name,
            pool=n.pool,
            offering=n.offering,
            state=state,
            gpus=n.gpus,
            gpus_used=n.gpus - n.free,  # GPUs Slurm allocated, booting nodes included (as sinfo reports them)
            since=n.since,
            units=tuple(str(i) for i in n.jobs),
            hourly_usd=n.hourly_usd,
        )
        self._nodes[n.name] = (n, n.version, node)
        return node

    def _limit_nodes(self, sim: SimSlurm, now: float) -> tuple[Node, ...]:
        """Live nodes for the fleet-wide limits (none needed without limits)."""
        if not self._limited:
            return ()
        return self._launched_nodes(sim)

    def _launched_nodes(self, sim: SimSlurm) -> tuple[Node, ...]:
        """Every node with an instance, as the daemon reads them (`_node`)."""
        return tuple(self._node(nm.node) for nm in sim.names.values() if nm.launched)

    def _scale_down_nodes(
        self, sim: SimSlurm, now: float, cordonable: Sequence[SimNode], *, full: bool
    ) -> tuple[Node, ...]:
        """The inventory the queue-depth plan needs: every launched node when there is unplaced work or a limit,
        else only idle and draining ones and the busy ones the cordon may drain (`_cordonable`; without limits or
        pool minimums, the planner's scale-down and its cordon of oversized nodes decide the same over those as over
        the whole fleet)."""
        if len(self._nodes) > 2 * len(sim.names) + 64:
            self._nodes = {k: v for k, v in self._nodes.items() if k in sim.names}
        if full:
            return self._launched_nodes(sim)
        out = [self._node(nm.node) for nm in sim.idle.values() if nm.launched]
        out += [self._node(nm.node) for nm in sim.draining.values() if nm.launched]
        out += [self._node(n) for n in cordonable]
        return tuple(out)

    def _standby_in_flight(self, sim: SimSlurm, nodes: Sequence[Node]) -> dict[str, int]:
        """Machine type -> names powering up with no job that `nodes` (the plan's inventory) does not list: the
        daemon's `standby_in_flight` over the simulated Slurm."""
        listed = {n.name for n in nodes}
        out: dict[str, int] = {}
        for name, nm in sim.names.items():
            node = nm.node
            if node.jobs or node.registered or nm.down or nm.powering_down or name in listed:
                continue
            out[nm.pool.machine_type] = out.get(nm.pool.machine_type, 0) + 1
        return out

    def _facts(self, sim: SimSlurm, name: str) -> _Facts:
        nm = sim.names[name]
        st = nm.node.state
        return _Facts(
            idle=st is NodeState.READY_IDLE and nm.node.registered,
            drain=st is NodeState.DRAINING,
            has_work=bool(nm.node.jobs),
        )

    def _wake(self, sim: SimSlurm, now: float, refused: bool) -> float | None:
        wakes: list[float] = []
        if sim.held:  # jobs left PENDING by the hold: plan again when the next one's hold ends
            due = [j.pending_since + self.policy.batch_window_s for j in sim.pending_jobs()]
            if due:
                wakes.append(self._next_tick(max(min(due), now + self.interval_s)))
        if self._open:
            if refused:
                wakes.append(now + self.interval_s)  # the memory changed: plan again next tick
            else:
                later = [u.until for u in self.unavailable if u.until > now]
                wakes.append(self._next_tick(min(later)) if later else now + self.interval_s)
        if sim.draining:
            wakes.append(now + self.interval_s)
        for nm in sim.idle.values():
            w = self.idle_wake(sim, nm.node)
            if w is not None:
                wakes.append(max(w, now + self.interval_s))
        return min(wakes) if wakes else None

    def on_launch_failure(self, *_: object) -> None:  # the ReplayPolicy protocol; failures go through the core
        return None


def policy_settings(
    p: Policy, tracker: SettingsTracker | None, learned_from: str, interval_s: float
) -> dict[str, object]:
    """The settings a replay's gpu-fleet ran with, for its JSON `settings`: how they were set (the rule over what
    was `learned_from`, or fixed) and the policy's knobs as they stood at the end."""
    rule: dict[str, object] = {"settings_source": "fixed"}
    if tracker is not None:
        rule = {
            "settings_source": f"rule over {learned_from} (autoscaler/core/settings.py)",
            "settings_window_s": tracker.window_s,
            "settings_refresh_s": tracker.refresh_s,
            "settings_boot_s": tracker.boot_s,
            "settings_refreshes": tracker.refreshes,
            "settings_changes": tracker.changes,
        }
    return {
        **rule,
        "wait_value_usd_per_gpu_hour": p.wait_value_usd_per_gpu_hour,
        "idle_timeout_by_machine": dict(p.idle_timeout_by_machine),
        "idle_keep_max_by_machine": dict(p.idle_keep_max_by_machine),
        "warm_cap": p.warm_cap,
        "preempt_spot": p.preempt_spot,
        "late_bind": p.late_bind,
        "share_nodes": p.share_nodes,
        "gang_gate": p.gang_gate,
        "standby_by_machine": dict(p.standby_by_machine),
        "defragment": p.defragment,
        "idle_timeout_s": p.idle_timeout_s,
        "batch_window_s": p.batch_window_s,
        "batch_idle_s": p.batch_idle_s,
        "backoff_s": p.backoff_s,
        "keep_reserved_nodes": p.keep_reserved_nodes,
        "launch_reserved_nodes": p.launch_reserved_nodes,
        "tick_interval_s": interval_s,
    }


def _outcome(err: ProviderError) -> tuple[LaunchOutcome, FailureKind | None, str]:
    if err.kind is FailureKind.TRANSIENT:
        return LaunchOutcome.TRANSIENT, err.kind, str(err)
    return LaunchOutcome.REFUSED, err.kind, str(err)


def preemption_room(sim: SimSlurm) -> tuple[ReservedRoom, ...]:
    """What the daemon reads off sinfo and squeue (`autoscaler.daemon.snapshot.preemption_room`): the registered,
    undrained reserved nodes and the GPUs on each that running spot-tolerant work or nobody holds."""
    out = []
    for nm in sim.registered():
        if nm.pool.capacity_type is not CapacityType.RESERVATION or nm.node.state is NodeState.DRAINING:
            continue
        held = sum(g for i, g in nm.node.jobs.items() if not sim.state.jobs[i].spot_ok)
        if nm.node.gpus - held > 0:
            out.append(ReservedRoom(nm.node.name, nm.pool.name, nm.node.gpus - held))
    return tuple(out)


def _unit(job: Job, *, whole: bool) -> WorkUnit:
    """A pending job as the daemon's snapshot makes it a work unit (`autoscaler.daemon.snapshot.build_view`);
    `whole`: squeue shows it taking its nodes whole (`SlurmJob.exclusive`: an OverSubscribe=EXCLUSIVE partition,
    `SimSlurm.exclusive`), so it plans whole nodes (`WorkUnit.whole_node`)."""
    return WorkUnit(
        id=f"job/{job.idx + 1}",  # the Slurm job id stand-in, as the daemon names units
        submit_time=job.pending_since,  # squeue's: a requeued job's is its requeue's
        gpus_per_node=job.gpus_per_node,
        nodes=job.nodes,
        spot_ok=job.spot_ok,
        whole_node=whole,
    )
