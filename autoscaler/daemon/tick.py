"""One tick of the daemon: read everything, reconcile, serve Slurm's power-save requests, plan, actuate.

Order within a tick (each step only acts on this tick's fresh reads):
1. reads: Slurm nodes + jobs (may be unavailable), the cloud's instances and offerings, async launch
   failures (-> backoff memory), the store's open intents and power-save queue;
2. reconcile intents / unknown instances (adopt, relaunch idempotently, orphans after a grace period);
3. SuspendProgram requests -> delete those instances by name; ResumeFailProgram requests -> back off the
   offering, delete the stuck instance, `scontrol update state=resume` to put the node back in service (a held
   name is powered down instead and drained again once the power thread has taken it: see `_hold`);
4. ResumeProgram requests -> one `plan()` per pool over the resumed nodes (offering and zone choice,
   gang atomicity, backoff, limits) -> launches named after the Slurm nodes;
5. queue depth: one `plan()` over PENDING jobs Slurm could not place + the whole inventory -> pools brought up to
   their floor (`min_nodes`, every reserved slot: `scontrol ... state=power_up`), pre-warm
   (`scontrol ... state=power_up`, only with `loop.prewarm`) and idle scale-down (drain, then power down
   and delete by name, only nodes Slurm reports idle; what this tick drained is re-read and, if empty, deleted
   in the same tick); with a reservation hold, overflow pools' powered-down nodes are kept drained (a held name
   powered down is drained again once slurmctld's power thread has taken the power-down) and released
   (undrained) as the plan launches for the jobs left PENDING (`autoscaler.core.hold`); under late binding
   (`Policy.late_bind`, no reservation) every pool is held, single-node launches are booted drained
   (`state=power_up`) and undrained once registered (first thing in the next tick), and a pending job the plan
   serves with another machine type has its constraint widened (`scontrol update jobid=... features=...`);
6. best fit on the reservation: each registered reserved node's Weight set to its rendered Weight plus its free
   GPUs (`scontrol update weight=`, only the ones that differ), so slurmctld gives small jobs the fullest reserved
   node they fit and keeps whole nodes free for whole-node jobs (`autoscaler.core.weights`);
7. job-end wake-ups (EpilogSlurmctld rows, read before Slurm): settled once this tick's view shows the job's
   nodes freed, so the watcher stops ticking early (`autoscaler.daemon.job_end`);
8. metrics.
A daemon that does not hold the leader lock runs steps 1 and 8 only.
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
from collections import defaultdict
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loguru import logger

from autoscaler.cloud import (
    CloudNode,
    CloudNodeStatus,
    FailureKind,
    LaunchRequest,
    Offering,
    Provider,
    ProviderError,
    shared_reads,
)
from autoscaler.core import (
    RELEASE_GRACE_S,
    LaunchOutcome,
    ResumeLaunch,
    configured_names,
    deletable_after_drain,
    gang_exclusions,
    gate_exclusion,
    held_launches,
    held_pools,
    kept_idle,
    late_binding,
    name_order,
    queue_depth,
    resume_failed,
    scale_down_steps,
    serve_resumes,
    surplus_held_boots,
    take_names,
)
from autoscaler.core.decide import Planner, default_planner
from autoscaler.core.settings import SeenJob, SettingsTracker, shown_settings
from autoscaler.core.weights import ReservedNode, rendered_weights, reservation_weights, weight_changes
from autoscaler.daemon import job_end
from autoscaler.daemon.actuate import Actuator, deletable
from autoscaler.daemon.config import LoopConfig
from autoscaler.daemon.lock import LeaderLock
from autoscaler.daemon.lost_calls import LostCalls, bound_jobs, resume_timed_out, resuming, suspended
from autoscaler.daemon.metrics import Metrics
from autoscaler.daemon.named_nodes import fixed_node_releases
from autoscaler.daemon.reconcile import Reconciliation, reconcile
from autoscaler.daemon.settings_log import log_settings
from autoscaler.daemon.snapshot import (
    NameIndex,
    View,
    build_view,
    gangs_to_lease,
    gated_gangs,
    job_fit,
    offering_from_dict,
    offering_to_dict,
    pool_nodes,
    unavailable_from_rows,
    users_exclusion,
)
from autoscaler.daemon.standby import floor_count, standby_in_flight, standby_names
from autoscaler.daemon.state import OPEN_REQUEST_STATES, JobEndRow, PowerRow, RequestRow, StateStore
from autoscaler.daemon.unservable import UnservableJobs
from autoscaler.model import NodeState, Plan, Policy, Pool, UnavailableOffering, record_failure
from autoscaler.node_names import split_node_name
from autoscaler.planner.standby import standby_count
from autoscaler.slurm.client import SlurmClient, SlurmUnavailable
from autoscaler.slurm.constraint import ConstraintUnreadable, alternatives, constraint_expression
from autoscaler.slurm.gang_gate import lease_s
from autoscaler.slurm.hostlist import compress
from autoscaler.slurm.readers import SlurmJob, SlurmNode, waiting_on_power_up
from autoscaler.slurm.wake import submit_wake_path
from fleet.catalog import CapacityType

Memory = list[UnavailableOffering]
HOLD_REASON = "gpu-fleet: held while reserved capacity may free up (reservation hold)"
#: the drain reason of held names under late binding (slurmctld clears it when `power_up` boots the node)
LATE_BIND_REASON = "gpu-fleet: held for late binding (booted drained, undrained once registered)"
#: the reason the boot of a held name gives `scontrol update state=power_up`: slurmctld 22.05 may show it on the
#: node until it registers (measured: tests/e2e/test_late_binding.py, the sized pools), so it marks a held boot too
LATE_BIND_BOOT_REASON = "gpu-fleet: late binding boot (drained until it registers)"
#: the reason of an undrain of held names a pending job's nodes are fixed to (`autoscaler.daemon.named_nodes`)
FIXED_NODES_RELEASE_REASON = "gpu-fleet: released for a job whose nodes are fixed"
HELD_REASONS = frozenset({HOLD_REASON, LATE_BIND_REASON, LATE_BIND_BOOT_REASON})
# a lost power call's action -> (the program slurmctld ran, the state it left the names in, its grace's loop key)
_LOST_CALLS = {
    "resume": ("ResumeProgram", "powering up", "lost_resume_grace_s"),
    "suspend": ("SuspendProgram", "powered down while their instances run", "lost_suspend_grace_s"),
    "resume_fail": ("ResumeFailProgram", "DOWN for ResumeTimeout", "lost_resume_fail_grace_s"),
}


def right_sizing(job: SlurmJob) -> frozenset[str]:
    """The alternatives of the right-sizing constraint the lua set on `job` (or the daemon widened it to,
    `autoscaler.slurm.constraint.alternatives`); its plain feature names where the expression is not one of
    those (then only machine types can be read off it)."""
    try:
        return alternatives(job.constraint_expression)
    except ConstraintUnreadable:
        return frozenset(job.features)


def held_drain(node: SlurmNode) -> bool:
    """Drained by the hold: one of its reasons (the boot's included), or none at all - slurmctld 22.05 clears a
    drained node's reason when `scontrol update state=power_up` boots it, or shows the boot's own reason until the
    node registers (both measured: tests/e2e/test_late_binding.py), and an admin's drain always carries one
    (scontrol refuses a drain without a reason)."""
    return node.drain and (node.reason in HELD_REASONS or not node.reason)


def own_reason(reason: str) -> bool:
    """A node reason only the daemon wrote: 23.11 appends slurmctld's own reasons to the one a node has
    ("<ours> : Kill task failed"), which then is not ours alone."""
    return bool(reason) and all(part.startswith("gpu-fleet") for part in reason.split(" : "))


def power_down_taken(node: SlurmNode) -> bool:
    """slurmctld's power thread has taken the node's power-down (POWERING_DOWN, no longer the pending POWER_DOWN).
    Measured on slurmctld 22.05 (tests/e2e/test_late_binding.py): a DRAIN set while the power-down is pending - just
    after `scontrol update state=power_down`, or just before it - is cleared when the thread takes it, and the name
    comes back allocatable after SuspendTimeout; a DRAIN set once the node is POWERING_DOWN survives."""
    return "POWERING_DOWN" in node.flags


def registered_idle(node: SlurmNode) -> bool:
    """Up and registered with no work, drained or not: a held boot the daemon may undrain."""
    return (
        node.state == "idle"
        and not (node.flags & {"POWERED_DOWN", "POWERING_UP", "POWERING_DOWN", "NOT_RESPONDING"})
        and not node.has_work
    )


SlurmView = dict[str, SlurmNode] | None  # None: Slurm did not answer this tick


@dataclass
class TickResult:
    at: float
    duration_s: float = 0.0
    leader: bool = False  # planned as the leader: holds the lock, or a dry run (which takes none)
    dry_run: bool = False
    slurm_ok: bool = False
    ok: bool = False
    error: str | None = None
    commands: list[dict] = field(default_factory=list)
    unserved: list[dict] = field(default_factory=list)
    pending_units: int = 0
    resume_units: int = 0
    waiting_on_boot: int = 0  # jobs Slurm placed on CLOUD nodes still powering up
    job_ends: list[int | None] = field(default_factory=list)  # jobs whose end (EpilogSlurmctld) this tick settled

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


class Daemon:
    def __init__(
        self,
        *,
        pools: Sequence[Pool],
        provider: Provider,
        slurm: SlurmClient,
        store: StateStore,
        policy: Policy,
        loop: LoopConfig,
        metrics: Metrics | None = None,
        planner: Planner | None = None,
        lock: LeaderLock | None = None,
        clock: Callable[[], float] = time.time,
        dry_run: bool = False,
        settings: SettingsTracker | None = None,
    ) -> None:
        """`policy` is the config's; with `settings` (what `build_daemon` passes) the decision core runs with the
        settings rule's policy over the jobs this daemon has seen (`autoscaler.core.settings`), refreshed every
        `settings.refresh_s`; without it, `policy` as given."""
        self.pools = list(pools)
        self.pool_names = [p.name for p in self.pools]
        self.provider = provider
        self.slurm = slurm
        self.store = store
        self.policy = policy
        self.settings = settings
        self._jobs_since: float | None = None  # the store's jobs_observed_since, once read
        self.loop = loop
        self.metrics = metrics or Metrics()
        self.planner = planner or default_planner()
        self.lock = lock or LeaderLock(store.path)
        self.clock = clock
        self.dry_run = dry_run
        self._released: dict[str, float] = {}  # held names released (undrained) -> when
        # late binding: names booted drained, not undrained yet -> when first seen (rebuilt from sinfo each tick)
        self._held_boots: dict[str, float] = {}
        # held names powered down whose drain must wait for slurmctld's power thread (`_hold`; rebuilt each tick)
        self._held_power_downs: set[str] = set()
        # under a hold: pending jobs the last tick could not plan because slurmctld had not tried them yet (reason
        # None); the run loop ticks again once it has (`hold_change_due`), not at the next poll (rebuilt each tick)
        self._untried: frozenset[str] = frozenset()  # their unit ids (`job/<id>`, as the snapshot names them)
        self._reserved = [p for p in self.pools if p.capacity_type is CapacityType.RESERVATION]
        # the Weights `fleet render slurm-conf` gives each pool's nodes: the base of the reserved nodes' best fit
        self._base_weights = rendered_weights(self.pools) if self._reserved else {}
        self.unservable = UnservableJobs()
        self.lost_resumes = LostCalls(resuming, loop.lost_resume_grace_s)
        self.lost_suspends = LostCalls(suspended, loop.lost_suspend_grace_s)
        self.lost_resume_fails = LostCalls(resume_timed_out, loop.lost_resume_fail_grace_s)

    # --- the tick ------------------------------------------------------------------------------------------
    def tick(self) -> TickResult:
        t0 = time.perf_counter()
        now = self.clock()
        res = TickResult(at=now)
        act = Actuator(
            provider=self.provider,
            slurm=self.slurm,
            store=self.store,
            metrics=self.metrics,
            clock=self.clock,
            dry_run=self.dry_run,
        )
        try:
            res.dry_run = self.dry_run
            res.leader = self.dry_run or self.lock.try_acquire()
            self.metrics.leader.set(1 if res.leader and not self.dry_run else 0)
            if res.leader and not self.dry_run:
                self.store.set_leader(f"{os.uname().nodename}:{os.getpid()}", os.getpid(), now)
            with shared_reads([self.provider]):
                self._tick(now, res, act)
            res.ok = True
            self.metrics.ticks.labels(outcome="ok").inc()
            self.metrics.tick_succeeded(self.clock())
        except (ProviderError, SlurmUnavailable, OSError) as exc:  # the cloud or the disk: retried next tick
            res.error = f"{type(exc).__name__}: {exc}"
            logger.bind(error=res.error).error("tick failed: {}", res.error)
            self.metrics.ticks.labels(outcome="failed").inc()
        except Exception as exc:  # a bug or unexpected data: keep the daemon alive, say so loudly
            res.error = f"{type(exc).__name__}: {exc}"
            logger.bind(error=res.error).opt(exception=exc).error("tick failed unexpectedly: {}", res.error)
            self.metrics.ticks.labels(outcome="failed").inc()
        finally:
            res.commands = act.log.entries
            res.duration_s = time.perf_counter() - t0
            self.metrics.tick_seconds.observe(res.duration_s)
        return res

    @property
    def _powers_up_by_name(self) -> bool:
        """The daemon picks names to power up itself, where a name in a Slurm reservation would serve no other job:
        a held pool's boots and releases, a pool's floor (`min_nodes`, a reservation pool's slots), standby nodes."""
        p = self.policy
        return bool(
            held_pools(self.pools, p)
            or p.standby_by_machine
            or any(
                pool.min_nodes or (p.launch_reserved_nodes and pool.capacity_type is CapacityType.RESERVATION)
                for pool in self.pools
            )
        )

    def _read_slurm(self) -> tuple[dict[str, SlurmNode] | None, list[SlurmJob] | None, frozenset[str]]:
        """sinfo and squeue; and where the daemon picks names to power up (`_powers_up_by_name`) or a pending job
        names one, the active advanced reservations (`autoscaler.daemon.named_nodes`): each such job's nodes, and
        every reserved name, which no other job may use.  Returns (nodes, jobs, reserved names); (None, None, ...)
        when Slurm did not answer."""
        try:
            nodes = {n.name: n for n in self.slurm.nodes()}
            jobs = self.slurm.jobs()
        except SlurmUnavailable as exc:
            logger.bind(error=str(exc)).warning("Slurm not answering: no scale-down this tick ({})", exc)
            return None, None, frozenset()
        if not (self._powers_up_by_name or any(j.pending and j.reservation for j in jobs)):
            return nodes, jobs, frozenset()
        try:
            reservations = self.slurm.reservations()
        except SlurmUnavailable as exc:  # this tick releases nothing for reservation jobs and plans no unit for them
            logger.bind(error=str(exc)).warning("Slurm reservations not read: {}", exc)
            reservations = {}
        jobs = [dataclasses.replace(j, reservation_nodes=reservations.get(j.reservation, ())) if j.reservation
                else j for j in jobs]  # fmt: skip
        return nodes, jobs, frozenset(n for names in reservations.values() for n in names)

    def _tick(self, now: float, res: TickResult, act: Actuator) -> None:
        ended = self.store.open_job_ends() if res.leader else []  # before Slurm: see autoscaler.daemon.job_end
        snodes, sjobs, reserved = self._read_slurm()
        if res.leader and snodes is not None and held_pools(self.pools, self.policy):
            snodes = self._undrain_held_boots(snodes, act)
        res.slurm_ok = snodes is not None
        self.metrics.slurm_up.set(1 if res.slurm_ok else 0)
        if snodes is not None and sjobs is not None:
            res.waiting_on_boot = len(waiting_on_power_up(sjobs, snodes))
            self.metrics.waiting_on_boot.set(res.waiting_on_boot)
        memory = list(unavailable_from_rows(self.store.unavailable(now)))
        actuate = res.leader and not self.dry_run
        failed_names: set[str] = set()
        if actuate:  # before listing: a provider may cancel (delete) the failed instances while reporting them
            memory, failed_names = self._async_failures(memory, now, snodes, act)
        cloud = [c for c in self.provider.list_nodes(self.pool_names) if c.name not in failed_names]
        offerings = self.provider.offerings()
        if sjobs is not None and res.leader:
            self._observe_jobs(sjobs, offerings, now)
        power = self.store.open_power()
        requests = self.store.requests(OPEN_REQUEST_STATES)
        if res.leader:
            self._preempted(cloud, requests, snodes, act)

        # 2. reconcile
        if res.leader:
            resume_names = {r.name for r in power if r.action == "resume"}
            rec = reconcile(
                requests,
                cloud,
                snodes,
                resume_names,
                self.store.orphans(),
                now,
                launch_timeout_s=self.loop.launch_timeout_s,
                managed=None,
            )
            memory = self._apply_reconcile(rec, requests, snodes, now, act, memory, actuate)
            if actuate:
                requests = self.store.requests(OPEN_REQUEST_STATES)
                cloud = self.provider.list_nodes(self.pool_names) if rec.relaunch else cloud
            self._delete_stopped(cloud, requests, snodes, act)

        # 3. suspend / resume-fail, latest request per name wins
        timed_out: set[str] = set()  # held names a resume failure powered down (the hold watches them in step 5)
        if res.leader:
            memory, timed_out = self._power_down_requests(power, cloud, snodes, requests, now, act, memory, actuate)
            power = self.store.open_power() if actuate else power
            requests = self.store.requests(OPEN_REQUEST_STATES) if actuate else requests
            if snodes is not None and self._make_lost_calls(snodes, sjobs, power, requests, cloud, now, actuate):
                power = self.store.open_power()  # resumes served below; suspends and resume-fails from the next tick

        prices = {o.key: o.hourly_usd for o in offerings}
        own = self.store.own_exclusions() if any(j.excluded_nodes for j in sjobs or ()) else {}
        view = build_view(
            self.pools, cloud, snodes, sjobs, requests, power, now, prices=prices, reserved=reserved, own_exclusions=own
        )
        res.pending_units = len(view.pending)
        held = held_pools(self.pools, self.policy)
        self._untried = frozenset(u.id for u in view.pending if held and not u.evaluated)
        if res.leader and snodes is not None and sjobs is not None:
            opened = self._open_gang_gates(snodes, sjobs, act)
            self._lease_gang_gates(snodes, sjobs, now, act)
            if held:  # slurmctld tries them in a second: the hold's watcher looks each second for that
                self._untried |= opened
        self.unservable.update(view.pending, self.pools, self.metrics)  # logged once per job, gauge per tick
        res.resume_units = sum(len(v) for v in view.resume.values())

        if res.leader:
            # resume rows whose node is already live need nothing more
            live = {n.name for n in view.inventory.nodes if n.state is not NodeState.DELETING}
            done = [r.id for r in power if r.action == "resume" and r.name in live]
            unknown = [r.id for r in view.unknown_power_rows]
            for r in view.unknown_power_rows:
                logger.bind(name=r.name, action=r.action).error(
                    "Slurm asked to {} {}, which is in no managed pool: ignored", r.action, r.name
                )
            if actuate and (done or unknown):
                self.store.finish_power(done + unknown, now)
            # 4. Slurm's resume requests
            memory = self._serve_resumes(view, offerings, now, act, memory, res, actuate)

        # 5. queue depth + scale-down
        in_flight = standby_in_flight(self.pools, view.inventory, snodes) if snodes is not None else None
        plan = queue_depth(
            view.pending,
            view.inventory,
            offerings,
            self.policy,
            now,
            memory,
            self.planner,
            standby_in_flight=in_flight,
            preemption_room=view.preemption_room,
            unusable=view.reserved,
        )
        res.unserved.extend(
            {"unit": u.unit, "reason": str(u.reason), "detail": u.detail}
            for u in plan.unserved
            if u.unit.startswith("job/")
        )
        if res.leader:
            self._queue_depth(plan, view, snodes, sjobs, now, act, timed_out)

        # 6. best fit on the reservation
        if res.leader and snodes is not None:
            self._reserved_weights(snodes, act)

        if actuate:
            self._save_memory(memory, now)
            self._settle_job_ends(ended, snodes, sjobs, now, res)
        self._export(view, cloud, offerings, memory, res)

    # --- steps ---------------------------------------------------------------------------------------------
    def _observe_jobs(self, sjobs: Sequence[SlurmJob], offerings: Sequence[Offering], now: float) -> None:
        """Record squeue in the job history, then bring the settings up to date (the rule's policy at the last
        refresh point; a change is logged once)."""
        self.store.observe_jobs(
            [(j.job_id, j.submit_time, j.node_count, j.gpus_per_node, j.start_time) for j in sjobs if j.gpus_per_node],
            now,
        )
        if self.settings is None:
            return
        self._jobs_since = self._jobs_since or self.store.jobs_observed_since() or now
        since = self._jobs_since

        def history(start: float, at: float) -> list[SeenJob]:
            rows = self.store.job_history(start, at)
            return [SeenJob(r.submit, r.nodes, r.gpus_per_node, r.ended_at, r.run_s) for r in rows]

        before = shown_settings(self.policy)
        self.policy = self.settings.current(now, since, offerings=offerings, pools=self.pools, history=history)
        if shown_settings(self.policy) != before:
            log_settings(self.policy, self.settings.facts, "jobs", since)

    def _record(
        self, memory: list[UnavailableOffering], key: Any, kind: FailureKind | str, now: float, message: str
    ) -> list[UnavailableOffering]:
        self.metrics.offering_failures.labels(kind=str(kind)).inc()
        return list(record_failure(memory, key, kind, now, self.policy, message))

    def _async_failures(
        self, memory: list[UnavailableOffering], now: float, snodes: dict[str, SlurmNode] | None, act: Actuator
    ) -> tuple[list[UnavailableOffering], set[str]]:
        """Launch failures reported after acceptance -> backoff memory; the names are asked for again.

        A failure names what the provider cancelled (members with no VM).  The request's other names may have a VM:
        a request is all or nothing (a gang must not stay up in part), so they are deleted too, but only through
        `Actuator.delete`, which deletes nothing Slurm shows work on.  A sibling with work (an independent job a
        batch packed in the same request) stays, held by the request, as any node."""
        failed: set[str] = set()
        for f in self.provider.poll_errors():
            logger.bind(
                request_id=f.request_id, offering=str(f.offering), kind=str(f.kind), names=list(f.names)
            ).warning("launch failed after acceptance: {} {} ({})", f.offering, f.kind, f.message)
            memory = self._record(memory, f.offering, f.kind, now, f.message)
            names = list(f.names)
            row = self.store.request(f.request_id) if f.request_id else None
            names = names or (list(row.names) if row is not None else [])
            self.store.release_names(names, now, f"launch failed: {f.kind}")
            if row is not None:
                if row.state in OPEN_REQUEST_STATES:
                    names += self._failed_siblings(row, names, snodes, act)
                if not set(row.names) - set(names):  # nothing of it is left
                    self.store.set_request_state(row.request_id, "failed", now, f"{f.kind}: {f.message}")
            failed.update(names)
            # Slurm still waits for these nodes: ask again, next plan picks another offering
            again = [n for n in names if snodes is None or (snodes.get(n) is not None and snodes[n].powering_up)]
            if again:  # with the jobs Slurm bound them to: independent jobs stay separate units, gangs keep priority
                self.store.enqueue_power("resume", again, now, self.store.resume_jobs_of(again))
        return memory, failed

    def _failed_siblings(self, row: RequestRow, failed: Sequence[str], snodes: SlurmView, act: Actuator) -> list[str]:
        """The names of a request that failed in part that the provider left (they have a VM): deleted through
        `Actuator.delete`, so only those Slurm shows no work on; returns the names deleted."""
        siblings = [n for n in row.names if n not in failed]
        idle = [n for n in siblings if deletable(n, snodes)]
        if busy := [n for n in siblings if n not in idle]:
            logger.bind(request_id=row.request_id, names=busy).info(
                "launch {} failed in part: keeping {}, which Slurm shows work on (or did not answer)",
                row.request_id, busy,
            )  # fmt: skip
        return act.delete(row.pool, idle, f"the rest of failed launch {row.request_id}", snodes) if idle else []

    def _preempted(
        self, cloud: Sequence[CloudNode], requests: Sequence[RequestRow], snodes: SlurmView, act: Actuator
    ) -> None:
        """A held instance the cloud reports preempted: its jobs are lost.  Mark the Slurm node DOWN, then power it
        down, so Slurm requeues the jobs at once instead of after SlurmdTimeout (what slurm-gcp's slurmsync does:
        `state=down reason=...`, then a power-down).

        DOWN first, because slurmctld (22.05's node_mgr.c `update_node`) sets a node DOWN *before* it kills its jobs
        (`_make_node_down`, then `kill_running_job_by_node_name`), and `deallocate_nodes` (node_scheduler.c) skips a
        DOWN node: no terminate RPC waited on, the job is requeued PENDING and schedulable at once.  `power_down_force`
        alone kills the jobs while the node is still up: `deallocate_nodes` marks it COMPLETING and sends the
        terminate RPC to the dead slurmd, the requeued job stays COMPLETING (unschedulable: job_scheduler.c) and the
        node cannot be suspended (power_save.c wants it !COMPLETING) until slurmctld's ping marks it DOWN after
        SlurmdTimeout.  `power_down` on the DOWN node then sets POWER_DOWN; the power thread suspends DOWN nodes too
        (power_save.c: IDLE or DOWN) and calls SuspendProgram; with `SlurmctldParameters=idle_on_node_suspend` (the
        stack renders it) the node is IDLE again (DRAIN and FAIL cleared) and, after SuspendTimeout, POWERED_DOWN
        and allocatable; a held pool drains it again as any powered-down held name.  The stopped VM is deleted by
        `_delete_stopped` at the next tick (the DOWN node shows no work) or by the suspend, whichever comes first.
        The power-down follows only a DOWN slurmctld took (alone, it would wait for the jobs as `power_down_force`
        does)."""
        if snodes is None:
            return
        held = {n for r in requests if r.state == "launched" for n in r.names}
        live = {c.name for c in cloud if c.status is not CloudNodeStatus.GONE}  # a name launched again since
        names = [
            c.name
            for c in cloud
            if c.status is CloudNodeStatus.GONE
            and c.preempted
            and c.name not in live
            and c.name in snodes
            and not (snodes[c.name].powered_down or snodes[c.name].powering_down)
            # held by its launch, or (the tick that saw the preemption could not reach slurmctld, and the request
            # let the gone name go) a node Slurm still runs work on and has not marked DOWN
            and (c.name in held or (snodes[c.name].has_work and not snodes[c.name].down))
        ]
        if names:
            logger.bind(names=names).warning("instances preempted: marking their Slurm nodes down {}", names)
            if act.scontrol(names, "down", "gpu-fleet: instance preempted"):
                act.scontrol(names, "power_down", "gpu-fleet: instance preempted")

    def _delete_stopped(
        self, cloud: Sequence[CloudNode], requests: Sequence[RequestRow], snodes: SlurmView, act: Actuator
    ) -> None:
        """Preempted instances the cloud keeps (a spot VM the stack's template stops on preemption stays TERMINATED
        in a MIG that repairs nothing) that no open request holds any more: deleted by name once Slurm shows no work
        on them.  Until then the stopped VM's disk costs, and its name cannot be launched again (a launch of a name
        still in the group creates nothing).  Once only: a cloud may go on listing a gone node for a while (the
        simulated one does), so a name whose last history entry is the daemon's delete is left alone."""
        if snodes is None:
            return
        held = {n for r in requests for n in r.names}
        by_pool: dict[str, list[str]] = defaultdict(list)
        for c in cloud:
            if not (c.status is CloudNodeStatus.GONE and c.preempted and c.name not in held):
                continue
            if deletable(c.name, snodes) and [h.state for h in self.store.history(c.name)[-1:]] != ["deleting"]:
                by_pool[c.pool].append(c.name)
        for pool, names in by_pool.items():
            act.delete(pool, names, "instance stopped by the cloud (preempted): deleting it", snodes)

    def _apply_reconcile(
        self,
        rec: Reconciliation,
        requests: Sequence[RequestRow],
        snodes: SlurmView,
        now: float,
        act: Actuator,
        memory: Memory,
        actuate: bool,
    ) -> Memory:
        by_id = {r.request_id: r for r in requests}
        for rid in rec.adopt_requests:
            r = by_id[rid]
            logger.bind(request_id=rid, names=list(r.names)).info("adopting instances of intent {}", rid)
            if actuate:
                self.store.set_request_state(rid, "launched", now, "adopted on reconcile")
                for n in r.names:
                    self.store.add_history(n, "adopted", now, rid)
            self.metrics.adopted.inc(len(r.names))
        for rid in rec.give_up:
            logger.bind(request_id=rid).warning("giving up intent {} after launch timeout", rid)
            if actuate:
                self.store.set_request_state(rid, "failed", now, "launch timeout")
        for r, missing in rec.relaunch:
            req = LaunchRequest(r.request_id, r.pool, offering_from_dict(r.offering), tuple(r.names))
            err = act.launch(req, f"retry of intent ({len(missing)} missing)", retry=True)
            if err is not None and err.kind in (FailureKind.STOCKOUT, FailureKind.QUOTA, FailureKind.INVALID):
                memory = self._record(memory, req.offering, err.kind, now, str(err))
                if actuate:
                    self.store.set_request_state(r.request_id, "failed", now, f"{err.kind}: {err}")
                    self.store.release_names(r.names, now, f"launch failed: {err.kind}")
        if rec.released and actuate:
            self.store.release_names(rec.released, now, "instance gone")
            for n in rec.released:
                self.store.add_history(n, "gone", now, "instance no longer listed by the cloud")
        for c in rec.adopt_instances:
            logger.bind(name=c.name, pool=c.pool).info("adopting unrecorded instance {} (Slurm uses it)", c.name)
            if actuate:
                rid = c.request_id or f"adopt-{c.name}"
                self.store.record_intent(rid, c.pool, offering_to_dict(c.offering), [c.name], now)
                self.store.set_request_state(rid, "launched", now, "adopted: instance Slurm uses")
                self.store.add_history(c.name, "adopted", now, "unrecorded instance")
                self.store.clear_orphans([c.name])
            self.metrics.adopted.inc()
        if actuate:
            self.store.clear_orphans(rec.not_orphans)
        by_pool: dict[str, list[str]] = defaultdict(list)
        for c in rec.orphans_seen:
            first = self.store.orphan_seen(c.name, c.pool, now) if actuate else now
            if now - first >= self.loop.orphan_grace_s:
                by_pool[c.pool].append(c.name)
            else:
                logger.bind(name=c.name).info(
                    "instance {} is wanted by nobody; deleting after {:.0f}s more",
                    c.name,
                    self.loop.orphan_grace_s - (now - first),
                )
        for pool, names in by_pool.items():
            deleted = act.delete(pool, names, "orphan: no request and Slurm has it powered down", snodes)
            if deleted:
                self.store.clear_orphans(deleted)
                self.metrics.orphans_deleted.inc(len(deleted))
        return memory

    def _make_lost_calls(
        self,
        snodes: dict[str, SlurmNode],
        sjobs: Sequence[SlurmJob] | None,
        power: Sequence[PowerRow],
        requests: Sequence[RequestRow],
        cloud: Sequence[CloudNode],
        now: float,
        actuate: bool,
    ) -> bool:
        """Queue the power calls slurmctld made that never arrived (`lost_calls`): the resume of names it powers up,
        the suspend of names it powered down while their instance runs on, the resume-fail of names ResumeTimeout
        put DOWN; True when rows were queued."""
        rows = {r.name for r in power}
        intents = {n for r in requests if r.state == "intent" for n in r.names}
        live = {c.name for c in cloud if c.status is not CloudNodeStatus.GONE}
        running = {c.name for c in cloud if c.status in (CloudNodeStatus.RUNNING, CloudNodeStatus.PROVISIONING)}
        resume_rows = {r.name for r in power if r.action == "resume"}
        lost = {
            "resume": self.lost_resumes.due(
                self.pools, snodes, resume_rows | {n for r in requests for n in r.names} | live, now
            ),
            "suspend": self.lost_suspends.due(self.pools, snodes, rows | intents | (set(snodes) - running), now),
            "resume_fail": self.lost_resume_fails.due(self.pools, snodes, rows | intents, now),
        }
        if not actuate:
            return False
        for action, names in lost.items():
            if not names:
                continue
            program, what, grace = _LOST_CALLS[action]
            logger.bind(names=names).warning(
                "Slurm has had {} {} for {:g}s with no {} call (a failed hook: see the hook log): making it",
                compress(names), what, getattr(self.loop, grace), program,
            )  # fmt: skip
            self.metrics.power_requests.labels(action=f"{action}_lost").inc(len(names))
            self.store.enqueue_power(action, names, now, bound_jobs(names, sjobs or ()) if action == "resume" else {})
        return any(lost.values())

    def _power_down_requests(
        self,
        power: Sequence[PowerRow],
        cloud: Sequence[CloudNode],
        snodes: SlurmView,
        requests: Sequence[RequestRow],
        now: float,
        act: Actuator,
        memory: Memory,
        actuate: bool,
    ) -> tuple[Memory, set[str]]:
        """Slurm's SuspendProgram and ResumeFailProgram requests: the offering of a timed-out node is backed off,
        instances are deleted by name, and timed-out names go back to service (`state=resume`) or, in held pools,
        are powered down.  Returns the backoff memory and those held names powered down, which the hold drains
        again once slurmctld's power thread has taken them."""
        latest: dict[str, Any] = {}
        for r in power:
            latest[r.name] = r
        superseded = [r.id for r in power if latest[r.name].id != r.id]
        if actuate and superseded:
            self.store.finish_power(superseded, now)
        live = {c.name: c for c in cloud if c.status is not CloudNodeStatus.GONE}
        intent_of = {n: r for r in requests for n in r.names}
        pool_of = {p.node_name_prefix: p.name for p in self.pools}

        def pool_name(n: str) -> str | None:
            parsed = split_node_name(n)
            return pool_of.get(parsed[0]) if parsed else None

        suspend = [r for r in latest.values() if r.action == "suspend"]
        failed = [r for r in latest.values() if r.action == "resume_fail"]
        for r in suspend + failed:
            self.metrics.power_requests.labels(action=r.action).inc()
        if snodes is None:
            if suspend or failed:
                logger.warning(
                    "{} suspend / resume-fail requests wait: Slurm not answering", len(suspend) + len(failed)
                )
            return memory, set()

        # ResumeTimeout: remember the offering as unavailable, then treat the node like a suspend
        for r in failed:
            c = live.get(r.name)
            key = c.offering if c else (offering_from_dict(intent_of[r.name].offering) if r.name in intent_of else None)
            if key is not None:
                self.metrics.offering_failures.labels(kind=str(FailureKind.STOCKOUT)).inc()
                memory = list(resume_failed(memory, key, now, self.policy, self.loop.resume_fail_backoff_s))
            logger.bind(name=r.name, offering=str(key)).warning("node {} failed to resume in time", r.name)

        by_pool: dict[str, list[str]] = defaultdict(list)
        for r in suspend + failed:
            p = pool_name(r.name)
            if p is None:
                continue
            if r.name in live or r.name in intent_of:
                by_pool[p].append(r.name)
        done_ids: list[int] = []
        for pool, names in by_pool.items():
            without_instance = [n for n in names if n not in live]
            if without_instance and actuate:
                self.store.release_names(without_instance, now, "suspended before the instance existed")
            with_instance = [n for n in names if n in live]
            deleted = (
                act.delete(pool, with_instance, "Slurm suspended it (SuspendProgram)", snodes) if with_instance else []
            )
            still = set(with_instance) - set(deleted)
            done_ids += [r.id for r in suspend + failed if r.name in names and r.name not in still]
        done_ids += [r.id for r in suspend + failed if not (r.name in live or r.name in intent_of)]
        back = [r.name for r in failed if r.id in done_ids and pool_name(r.name) is not None]  # never unmanaged names
        held = held_pools(self.pools, self.policy)
        back_held = [n for n in back if pool_name(n) in held]
        timed_out: set[str] = set()
        if back_held and act.scontrol(back_held, "power_down", "gpu-fleet: resume failed; held again"):
            # `state=resume` would clear DOWN and DRAIN together and leave the name allocatable until the hold's
            # drain a few ms later (a pending job can be bound to it meanwhile: seen in CI); a power-down clears
            # DOWN only as the power thread takes it, the name is POWERING_DOWN (never allocatable) meanwhile, and
            # the hold drains it then, as any held name powered down (bench/probe_abort_held_boot.py, 22.05)
            timed_out.update(back_held)
        if back := [n for n in back if n not in back_held]:
            act.scontrol(back, "resume", "gpu-fleet: resume failed; back in service")
        if actuate:
            self.store.finish_power(done_ids, now)
        return memory, timed_out

    def _serve_resumes(
        self,
        view: View,
        offerings: Sequence[Offering],
        now: float,
        act: Actuator,
        memory: Memory,
        res: TickResult,
        actuate: bool,
    ) -> Memory:
        """Slurm's resume requests through the decision core; this method only actuates and keeps the books."""

        def launch(rl: ResumeLaunch) -> tuple[LaunchOutcome, FailureKind | None, str]:
            return self._launch_resume(rl, now, act, actuate)

        out = serve_resumes(view.resume, view.inventory, offerings, self.policy, now, memory, launch, self.planner)
        for u in out.unserved:
            res.unserved.append({"unit": u.unit, "reason": str(u.reason), "detail": u.detail})
            logger.bind(unit=u.unit, reason=str(u.reason)).warning(
                "cannot launch Slurm-resumed nodes for {}: {} ({})", u.unit, u.reason, u.detail
            )
        return list(out.memory)

    def _launch_resume(
        self, rl: ResumeLaunch, now: float, act: Actuator, actuate: bool
    ) -> tuple[LaunchOutcome, FailureKind | None, str]:
        su = rl.scale_up
        if rl.planned != su.count:
            logger.bind(pool=su.pool, planned=rl.planned, resumed=su.count).info(
                "planner sized {} nodes, Slurm resumed {}: launching the resumed names", rl.planned, su.count
            )
        err = act.launch(su.launch_request(), f"Slurm resumed {su.count} node(s): {su.reason}")
        rows = [i for u in rl.units for i in u.row_ids]
        if err is None:
            if actuate:
                self.store.finish_power(rows, now)
            return LaunchOutcome.OK, None, ""
        if err.kind is FailureKind.TRANSIENT:
            return LaunchOutcome.TRANSIENT, err.kind, str(err)  # the intent stays; reconcile retries it
        self.metrics.offering_failures.labels(kind=str(err.kind)).inc()
        if actuate:
            self.store.set_request_state(su.request_id, "failed", now, f"{err.kind}: {err}")
            self.store.release_names(su.names, now, f"launch failed: {err.kind}")
        return LaunchOutcome.REFUSED, err.kind, str(err)  # resume rows stay open: next tick plans another offering

    def _queue_depth(
        self,
        plan: Plan,
        view: View,
        snodes: SlurmView,
        sjobs: Sequence[SlurmJob] | None,
        now: float,
        act: Actuator,
        timed_out: Collection[str] = (),
    ) -> None:
        held = held_pools(self.pools, self.policy)
        late = late_binding(self.pools, self.policy)
        for su in plan.scale_ups:
            if su.minimum and su.pool not in held:
                # the pool's floor: slurmctld powers the names up and calls the ResumeProgram with them, as for any
                # resume with no job (held pools boot theirs below, `_hold`)
                count = floor_count(su.pool, su.count, view.inventory, snodes, self.pools)
                names = standby_names(su.pool, count, view.inventory, snodes, self.pools, view.reserved)
                if names:
                    act.scontrol(names, "power_up", f"gpu-fleet {su.reason}")
                continue
            standby = standby_count(su)
            if standby and not late and not (self.loop.prewarm and su.pool not in held):
                # the policy's standby nodes, powered up ahead of demand whatever loop.prewarm says (with pre-warm
                # on, the pre-warm below powers up the whole scale-up, standby names included)
                names = standby_names(su.pool, standby, view.inventory, snodes, self.pools, view.reserved)
                if names:
                    act.scontrol(names, "power_up", f"gpu-fleet standby: {su.reason}")
            if su.pool in held or standby == len(su.units):
                continue  # held: released below (Slurm allocates the names to the pending jobs)
            if not self.loop.prewarm:
                logger.bind(pool=su.pool, names=list(su.names), offering=str(su.offering)).debug(
                    "queue depth would pre-warm {} (loop.prewarm is off)", list(su.names)
                )
                continue
            act.scontrol(list(su.names), "power_up", f"gpu-fleet pre-warm: {su.reason}")
        drained: dict[str, list[str]] = defaultdict(list)  # pool -> names drained this tick
        powered_down: set[str] = set(timed_out)  # held names this tick powered down (resume failures included)
        for step in scale_down_steps(plan, snodes):
            names = list(step.names)
            if step.action == "drain":
                if act.scontrol(names, "drain", f"gpu-fleet scale-down: {step.reason}"):
                    drained[step.pool].extend(names)
            else:
                powered_down |= self._power_down_and_delete(step.pool, names, step.reason, snodes, act)
        if drained and not self.dry_run:
            # a fresh read: whatever Slurm placed on a node between this tick's read and the drain keeps it
            try:
                fresh = {n.name: n for n in self.slurm.nodes()}
            except SlurmUnavailable:
                return  # deleted next tick, from that tick's view
            for pool, names in drained.items():
                ok = list(deletable_after_drain(names, fresh))
                if ok:
                    powered_down |= self._power_down_and_delete(pool, ok, "drained and empty", fresh, act)
            snodes = fresh
        if held and snodes is not None:
            self._hold(plan, held, snodes, sjobs or (), view, powered_down, now, act)

    def _undrain_held_boots(self, snodes: dict[str, SlurmNode], act: Actuator) -> dict[str, SlurmNode]:
        """Nodes booted drained (`_hold`: late binding's boots, and a held pool's floor under any hold) that
        registered - up, idle, drained for the hold, no work - are undrained, so a pending job of their shape takes
        them (or the next arrival).  The rest of the tick sees them undrained."""
        index = NameIndex(self.pools)
        ready = [
            n.name
            for n in snodes.values()
            if index.pool_of(n.name) is not None and held_drain(n) and registered_idle(n)
        ]
        if not ready or not act.scontrol(sorted(ready), "undrain", "gpu-fleet: booted held, registered"):
            return snodes
        for n in ready:
            self._held_boots.pop(n, None)
        undrained = {n: dataclasses.replace(snodes[n], flags=snodes[n].flags - {"DRAIN"}, reason="") for n in ready}
        return {**snodes, **undrained}

    @property
    def submit_wake(self) -> Path | None:
        """While the daemon holds pools (late binding, the reservation or preemption hold) or gates gangs
        (`Policy.gates_gangs`): the file the rendered job_submit.lua rewrites at every submission (the run loop ticks
        when it changes, `autoscaler.slurm.wake`), so a held pool's job is served, and a gated gang released, within
        a second, not at the next poll; None otherwise (a powered-down name Slurm may allocate calls the
        ResumeProgram, which wakes the daemon)."""
        gates = self.policy.gates_gangs(p.capacity_type for p in self.pools)
        return submit_wake_path(self.store.path) if gates or held_pools(self.pools, self.policy) else None

    @property
    def awaiting_hold_change(self) -> bool:
        """The hold has something in transition (the run loop then looks each second): a node booted drained not
        undrained yet (late binding), a held name powered down and not drained again yet, or a pending job
        slurmctld had not tried when the last tick read the queue."""
        return bool(self._held_boots or self._held_power_downs or self._untried)

    def hold_change_due(self) -> bool:
        """A tick has hold work now: a node booted drained registered (the tick undrains it), slurmctld's power
        thread took a held name's power-down (the tick drains it again before it completes), or slurmctld has tried
        a job the last tick had to leave (its first pass may have started it; if not, the tick releases for it).
        The submit wake-up's tick can come before that pass: without this look the job waited for the next poll.
        One sinfo or squeue read each; a Slurm that does not answer counts as no."""
        names = set(self._held_boots) | self._held_power_downs
        try:
            if names:
                nodes = [n for n in self.slurm.nodes() if n.name in names]
                if any(
                    (n.name in self._held_boots and registered_idle(n))
                    or (n.name in self._held_power_downs and not n.drain and (power_down_taken(n) or n.powered_down))
                    for n in nodes
                ):
                    return True
            if self._untried:
                cap = len(self._untried)  # a record's untried units are its lowest tasks, as `unit_ids` lists them
                still = {u for j in self.slurm.jobs() if j.pending and not j.tried for u in j.unit_ids(limit=cap)}
                return not self._untried <= still
        except SlurmUnavailable:
            return False
        return False

    def _hold(
        self,
        plan: Plan,
        held: frozenset[str],
        snodes: dict[str, SlurmNode],
        sjobs: Sequence[SlurmJob],
        view: View,
        powered_down: set[str],
        now: float,
        act: Actuator,
    ) -> None:
        """The hold (`autoscaler.core.hold`): keep held pools' powered-down names drained; widen the constraint of
        pending jobs the plan serves with another machine type (`view.pending_jobs`: the record of each unit); release
        (undrain) as many names as the plan launches in each pool without late binding; under late binding, boot as
        many drained names as it launches (a gang's together), less those booted that have no instance yet (the
        tick's inventory).  Under late binding, held boots whose instance is up
        and booting that the plan no longer needs are aborted (`core.surplus_held_boots`: `scontrol update
        state=power_down_force`, which slurmctld 22.05 takes within a second on a POWERING_UP+DRAIN node with no
        job, bench/probe_abort_held_boot.py, then the delete by name).  `powered_down`: held names this tick
        powered down after `snodes` was read, watched until slurmctld's power thread has taken their
        power-down."""
        index = NameIndex(self.pools)
        late = late_binding(self.pools, self.policy)
        nodes, units = view.inventory.nodes, view.pending_jobs
        live = {n.name: n.state for n in nodes}
        cands: dict[str, list[str]] = defaultdict(list)
        outstanding: dict[str, int] = defaultdict(int)  # released, not allocated yet
        outstanding_names: set[str] = set()
        booting: dict[str, int] = defaultdict(int)  # booted drained, no instance yet
        boots: dict[str, Pool] = {}  # booted drained, instance booting, no job -> its pool
        to_drain: list[str] = []
        power_downs: set[str] = set()
        for n in sorted(snodes.values(), key=lambda x: name_order(x.name)):
            pool = index.pool_of(n.name)
            if pool is None or pool.name not in held:
                continue
            if n.powering_down and not n.has_work:
                if not power_down_taken(n):
                    power_downs.add(n.name)  # pending: slurmctld's power thread clears any drain as it takes it
                elif not n.drain:
                    to_drain.append(n.name)  # held again: a drain set now survives the power-down
                continue
            if n.name in self._held_boots and not (n.powering_up or held_drain(n)):
                self._held_boots.pop(n.name)  # powered down again, or undrained by someone else
            if n.powering_up and held_drain(n):  # POWER_UP (taken, not started yet) included
                self._held_boots.setdefault(n.name, now)  # also after a restart: sinfo shows the boots under way
                if n.name not in live:
                    booting[pool.name] += 1
                elif live[n.name] is NodeState.BOOTING and not n.has_work:
                    boots[n.name] = pool
                continue
            if not n.powered_down or n.powering_up or n.powering_down or n.has_work:
                continue
            if n.down:
                # never allocatable, so nothing to hold; a drain would overwrite its reason: an admin's, or the
                # "ResumeTimeout reached" the lost-call sweep goes by (autoscaler/daemon/lost_calls.py)
                continue
            if n.drain:
                if own_reason(n.reason):  # never release a node an admin (or slurmctld) drained
                    cands[pool.name].append(n.name)
            elif now - self._released.get(n.name, -RELEASE_GRACE_S - 1) > RELEASE_GRACE_S:
                to_drain.append(n.name)
            else:
                outstanding[pool.name] += 1
                outstanding_names.add(n.name)
        completing = [
            n.name
            for n in snodes.values()
            if (pool := index.pool_of(n.name)) is not None
            and pool.capacity_type is CapacityType.RESERVATION
            and n.completing
        ]
        if completing:
            # a reserved node is finishing a job (one that ended, or spot-tolerant work Slurm preempted for a
            # pending job): the pending job may be about to get it, so this tick releases nothing; the simulated
            # Slurm frees nodes at once, so the replay never meets this
            logger.bind(names=completing).debug("hold: reserved node(s) {} completing, no release", completing)
            cands.clear()
        # a pending job whose nodes are fixed (`-w`, `--reservation`) gets held powered-down ones of them, released
        # as slurmctld would have allocated them at its submission without the hold; the plan has no unit for it
        ordered = sorted((n for names in cands.values() for n in names), key=name_order)
        pinned = fixed_node_releases(sjobs, ordered, outstanding_names)
        if pinned and act.scontrol(pinned, "undrain", FIXED_NODES_RELEASE_REASON):
            self._released.update(dict.fromkeys(pinned, now))
        # names in an advanced reservation are its jobs' alone: never booted or released for the plan's units; names
        # a pending unit avoids (its own --exclude) go last, so that the names it gets are ones it may use
        avoided = frozenset().union(*(u.avoid for u in view.pending))
        cands = defaultdict(
            list,
            {
                p: sorted((n for n in names if n not in pinned and n not in view.reserved), key=lambda n: n in avoided)
                for p, names in cands.items()
            },
        )
        # only the constraints the stack's job_submit.lua set (right-sizing) are widened; a user's own constraint
        # already limits the plan to the pools it matches (`snapshot.job_pools`)
        constraints = {uid: right_sizing(j) for uid, j in units.items() if j.right_sized_by_lua}
        split = held_launches(plan, held, self.pools, self.policy, constraints)
        widen: dict[int, frozenset[str]] = {}  # job id -> terms: a pending array's tasks share one constraint
        for uid, terms in split.widen.items():
            job_id = units[uid].job_id
            widen[job_id] = widen.get(job_id, frozenset()) | terms
        for job_id, terms in sorted(widen.items()):
            act.widen_job(job_id, constraint_expression(terms), "gpu-fleet: the plan falls back to it")
        self._exclude_up_nodes(held, plan, snodes, sjobs, index, act)
        released: set[str] = set()
        for names in take_names(split.release, cands, outstanding).values():
            if act.scontrol(list(names), "undrain", "gpu-fleet: released from the hold"):
                self._released.update(dict.fromkeys(names, now))
                released.update(names)
        bootable = {p: [n for n in ns if n not in released] for p, ns in cands.items()}
        for names in take_names(split.boot, bootable, booting).values():
            if act.scontrol(list(names), "power_up", LATE_BIND_BOOT_REASON):
                self._held_boots.update(dict.fromkeys(names, now))
        surplus: dict[str, list[str]] = defaultdict(list)
        machine = {n: p.machine_type for n, p in boots.items()}
        kept = kept_idle(nodes, plan, self.policy) if late and machine else None
        for name in surplus_held_boots(machine, plan, self.policy, kept) if late else ():
            surplus[boots[name].name].append(name)
        for pool_name, names in surplus.items():
            warm = self.policy.keeps_warm(boots[names[0]].machine_type)
            why = "the warm-node cap is full" if warm else "no idle keep"
            reason = f"held boot no longer needed ({why})"
            aborted = self._power_down_and_delete(pool_name, names, reason, snodes, act, state="power_down_force")
            for name in aborted:  # drained again once the power thread has taken it
                self._held_boots.pop(name, None)
            power_downs |= aborted
        if to_drain:
            act.scontrol(to_drain, "drain", LATE_BIND_REASON if late else HOLD_REASON)
        self._held_power_downs = power_downs | powered_down

    def _exclude_up_nodes(
        self,
        held: frozenset[str],
        plan: Plan,
        snodes: dict[str, SlurmNode],
        sjobs: Sequence[SlurmJob],
        index: NameIndex,
        act: Actuator,
    ) -> None:
        """Before the hold releases names: keep each pending gang off the held pools' nodes that are up or coming up
        (`ExcNodeList`) unless the plan puts it on ready nodes alone (`autoscaler.core.gang_exclusion`: otherwise
        Slurm gives a gang those nodes first and they wait for its boots)."""
        # records go once the job left the queue: Slurm keeps an ExcNodeList across a requeue
        if self.dry_run:
            records = self.store.own_exclusions()
        else:
            records = self.store.forget_gang_exclusions(j.job_id for j in sjobs)
        # not a gang that cannot run yet (a dependency, a hold): no plan places it, so it would be kept off every up
        # node, its ExcNodeList rewritten whenever that set changes (one scontrol call per such gang); once it can
        # run it is one more pending gang, as at its submission
        # a pending array's record has one ExcNodeList for all its tasks: the one its next task needs (its first unit)
        pending = {
            ids[0]: j
            for j in sjobs
            # not a gang whose nodes are fixed (`-w`, `--reservation`): excluding one of them could keep it off for good
            if j.pending and not j.blocked and j.node_count > 1 and not j.nodes_fixed and (ids := j.unit_ids(limit=1))
        }
        if not pending:
            return
        room: dict[str, int] = {}
        for n in snodes.values():
            pool = index.pool_of(n.name)
            # up or coming up (held boots included: undrained once registered); not a name Slurm must power up
            if pool is not None and pool.name in held and not (n.powered_down or n.powering_down or n.down):
                room[n.name] = n.gpus
        excluded = {uid: frozenset(j.excluded_nodes) for uid, j in pending.items()}
        # ours: what the store says this daemon set and Slurm still shows (a user may have changed it since)
        ours = frozenset(uid for uid, j in pending.items() if j.excluded_nodes and not users_exclusion(j, records))
        gangs = {uid: j.gpus_per_node for uid, j in pending.items()}
        untried = frozenset(uid for uid, j in pending.items() if not j.tried)
        # every name of the pools a gang fits (`job_fit`: its partitions, GPUs and constraint), for `leave_schedulable`
        facts = pool_nodes(self.pools, snodes, index)
        names_of: dict[frozenset[str], frozenset[str]] = {}
        fits = {}
        for uid, j in pending.items():
            fit = job_fit(j, self.pools, facts)[1]
            key = frozenset(p.name for p in fit)
            if key not in names_of:
                names_of[key] = configured_names(fit)
            fits[uid] = (j.node_count, names_of[key])
        drained = frozenset(n.name for n in snodes.values() if n.drain)
        bootable = frozenset(n.name for n in snodes.values() if n.powered_down and not (n.drain or n.down))
        changes = gang_exclusions(
            plan, room, gangs, excluded, ours, untried, fits=fits, unschedulable=drained, bootable=bootable
        )
        for uid, names in sorted(changes.items()):
            reason = "gpu-fleet: the gang boots whole" if names else "gpu-fleet: the gang goes on up nodes"
            job_id = pending[uid].job_id
            if names and not self.dry_run:  # write-ahead: a stop after Slurm took it still reads it as ours
                self.store.intend_gang_exclusion(job_id, sorted(names), self.clock())
            if act.exclude_job_nodes(job_id, sorted(names), reason) and not self.dry_run:
                self.store.set_gang_exclusion(job_id, sorted(names), self.clock())

    def _open_gang_gates(
        self, snodes: dict[str, SlurmNode], sjobs: Sequence[SlurmJob], act: Actuator
    ) -> frozenset[str]:
        """Release the gangs the job_submit.lua gated (`autoscaler.slurm.gang_gate`), each with an `ExcNodeList` of
        the nodes that are up or coming up unless nodes ready now hold it whole (`core.gate_exclusion`); a gang with
        an exclusion of the user's own keeps it.  Returns the unit ids released."""
        gangs, up, bootable = gated_gangs(self.pools, snodes, sjobs)
        opened: set[str] = set()
        for g in gangs:
            j = g.job
            names = (
                ()
                if j.excluded_nodes or j.nodes_fixed
                else sorted(gate_exclusion(j.node_count, j.gpus_per_node, g.pools, up, bootable, whole=j.exclusive))
            )
            reason = (
                "gpu-fleet: the gang boots whole (gate opened)"
                if names
                else "gpu-fleet: gate opened, nothing to keep it off"
            )
            if names and not self.dry_run:  # write-ahead, as `_exclude_up_nodes`
                self.store.intend_gang_exclusion(j.job_id, names, self.clock())
            if act.open_gang_gate(j.job_id, names, reason):
                opened.update(j.unit_ids(limit=1))
                if names and not self.dry_run:
                    self.store.set_gang_exclusion(j.job_id, names, self.clock())
        return frozenset(opened)

    def _lease_gang_gates(
        self, snodes: dict[str, SlurmNode], sjobs: Sequence[SlurmJob], now: float, act: Actuator
    ) -> None:
        """Keep gangs the lua gated behind the gate while slurmctld cannot try them (a dependency, a hold), so that
        once they can run they come to `_open_gang_gates` first (`autoscaler.slurm.gang_gate`): each whose BeginTime
        lapses within half a lease is leased `gang_gate.lease_s` ahead, all of them in one ``scontrol update``."""
        length = lease_s(self.loop.interval_s)
        due = gangs_to_lease(self.pools, snodes, sjobs, now, length)
        if due:
            reason = "gpu-fleet: the gang stays behind the gate until it can run"
            act.lease_gang_gates(due, math.ceil(now + length), reason)

    def _reserved_weights(self, snodes: dict[str, SlurmNode], act: Actuator) -> None:
        """Weights of the reservation pools' registered nodes: rendered Weight + free GPUs (the fullest node that
        fits a job wins), one `scontrol update` per Weight for the nodes whose Weight differs.  Nodes that need a
        power-up (or are down) keep theirs: slurmctld puts them after every registered node anyway."""
        if not self._reserved:
            return
        index = NameIndex(self._reserved)
        nodes = []
        for n in snodes.values():
            pool = index.pool_of(n.name)
            if pool is None or n.powered_down or n.powering_up or n.powering_down or n.down:
                continue
            nodes.append(ReservedNode(n.name, pool.name, n.gpus, n.gpus_used))
        desired = reservation_weights(self._reserved, self._base_weights, nodes)
        current = {n.name: snodes[n.name].weight for n in nodes}
        for weight, names in weight_changes(desired, current).items():
            act.set_weight(names, weight, "gpu-fleet: best fit on the reservation (rendered Weight + free GPUs)")

    def _power_down_and_delete(
        self, pool: str, names: list[str], reason: str, snodes: SlurmView, act: Actuator, state: str = "power_down"
    ) -> set[str]:
        """Power `names` down and delete their instances; the held names deleted (none for a pool not held): the
        hold drains them again once slurmctld's power thread has taken the power-down (`_hold`), as a drain set now
        would be cleared with it and the name would come back allocatable.  `state`: `power_down_force` aborts a
        boot under way (a plain `power_down` waits until the node registers)."""
        if not act.scontrol(names, state, f"gpu-fleet scale-down: {reason}"):
            return set()
        deleted = act.delete(pool, names, f"scale-down: {reason}", snodes)
        if pool in held_pools(self.pools, self.policy):
            return set(deleted)
        act.scontrol(deleted, "undrain", "gpu-fleet: powered down, back to the pool")
        return set()

    def _settle_job_ends(
        self,
        rows: Sequence[JobEndRow],
        snodes: SlurmView,
        sjobs: Sequence[SlurmJob] | None,
        now: float,
        res: TickResult,
    ) -> None:
        """Job-end wake-ups whose nodes this tick saw freed (and so scaled down, or kept) are done; the others
        keep the watcher ticking (a node still COMPLETING gets another look about a second later)."""
        done = job_end.settled(rows, snodes, sjobs, now)
        for r in done:
            gave_up = now - r.at >= job_end.GIVE_UP_S
            self.metrics.job_end_wakes.labels(outcome="gave_up" if gave_up else "freed").inc()
            if gave_up:
                logger.bind(job_id=r.job_id, names=list(r.names)).warning(
                    "job {} ended {:.0f}s ago and its nodes are still not free: leaving them to the regular poll",
                    r.job_id,
                    now - r.at,
                )
        if done:
            self.store.finish_job_ends([r.id for r in done], now)
            res.job_ends.extend(r.job_id for r in done)

    def _save_memory(self, memory: Sequence[UnavailableOffering], now: float) -> None:
        for u in memory:
            if u.until > now:
                self.store.mark_unavailable(
                    str(u.key), offering_to_dict(u.key), u.until, str(u.reason), u.failures, u.message
                )

    def _export(
        self,
        view: View,
        cloud: Sequence[CloudNode],
        offerings: Sequence[Offering],
        memory: Memory,
        res: TickResult,
    ) -> None:
        m = self.metrics
        m.nodes.clear()
        counts: dict[tuple[str, str], int] = defaultdict(int)
        usd: dict[str, float] = defaultdict(float)
        prices = {o.key: o.hourly_usd for o in offerings}
        for n in view.inventory.nodes:
            counts[(n.pool, str(n.state))] += 1
            if n.state is not NodeState.GONE:
                usd[str(n.offering.capacity_type)] += (
                    n.hourly_usd if n.hourly_usd is not None else prices.get(n.offering, 0.0)
                )
        for (pool, st), c in counts.items():
            m.nodes.labels(pool=pool, state=st).set(c)
        m.hourly_usd.clear()
        for ct, v in usd.items():
            m.hourly_usd.labels(capacity_type=ct).set(v)
        m.pending_gpus.clear()
        pend: dict[str, int] = defaultdict(int)
        for pool, units in view.resume.items():
            pend[pool] += sum(u.unit.gpus for u in units)
        for u in view.pending:
            pool = next((p.name for p in self.pools if p.serves(u.queue)), "(none)")
            pend[pool] += u.gpus
        for pool in self.pool_names:
            m.pending_gpus.labels(pool=pool).set(pend.get(pool, 0))
        m.unserved_units.clear()
        reasons: dict[str, int] = defaultdict(int)
        for u in res.unserved:
            reasons[u["reason"]] += 1
        for r, c in reasons.items():
            m.unserved_units.labels(reason=r).set(c)
        m.backoffs.clear()
        active: dict[str, int] = defaultdict(int)
        for u in memory:
            if u.until > res.at:
                active[str(u.reason)] += 1
        for r, c in active.items():
            m.backoffs.labels(reason=r).set(c)
