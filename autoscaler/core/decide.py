"""The decision steps of one tick, shared by the daemon (`autoscaler/daemon/tick.py`) and the replay
(`autoscaler/replay/gpu_fleet.py` over `autoscaler/replay/simslurm.py`).  See the package docstring."""

from __future__ import annotations

import dataclasses
import enum
import hashlib
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from autoscaler.cloud import FailureKind, Offering, OfferingKey
from autoscaler.model import (
    LIVE_STATES,
    Inventory,
    Plan,
    Policy,
    Pool,
    ScaleUp,
    UnavailableOffering,
    Unserved,
    WorkUnit,
    record_failure,
    request_id_for,
)
from autoscaler.planner.memo import recent_calls

if TYPE_CHECKING:
    from autoscaler.core.hold import ReservedRoom

Planner = Callable[..., Plan]


def default_planner() -> Planner:
    from autoscaler.planner import plan

    return plan


def unbatched(policy: Policy) -> Policy:
    """`policy` without a batch window (`batch_window_s`, `batch_idle_s` 0): for work the scheduler bound already
    or a hold has kept back already."""
    return _without_batch_window(policy) if policy.batch_window_s or policy.batch_idle_s else policy


@recent_calls(2)  # the daemon's policy changes only at a settings refresh: one copy per policy, not per tick
def _without_batch_window(policy: Policy) -> Policy:
    return dataclasses.replace(policy, batch_window_s=0.0, batch_idle_s=0.0)


@dataclass(frozen=True)
class ResumeUnit:
    """Nodes the scheduler bound to one job (or to no job) in one pool: launched together, all or nothing.
    `tag` is the source's bookkeeping (the daemon: its power-queue row ids; the replay: the job)."""

    unit: WorkUnit
    pool: str
    names: tuple[str, ...]
    row_ids: tuple[int, ...] = ()
    tag: Any = None


def resume_unit(
    pool: Pool,
    job_id: object | None,
    names: Sequence[str],
    submit_time: float,
    *,
    row_ids: tuple[int, ...] = (),
    priority: int = 0,
    queue: str | None = None,
    time_limit_s: float | None = None,
    tag: Any = None,
) -> ResumeUnit:
    """The resume unit for `names` the scheduler bound to job `job_id` (None: no job) in `pool`: the pool's own
    shape, so the plan can only pick the pool's offering and zone.  Every source builds its units here."""
    names = tuple(dict.fromkeys(names))
    digest = hashlib.sha1(",".join(names).encode()).hexdigest()[:10]
    unit = WorkUnit(
        id=f"resume/{pool.name}/{job_id if job_id is not None else 'nojob'}/{digest}",
        submit_time=submit_time,
        gpus_per_node=pool.gpus_per_node,
        nodes=len(names),
        gpu_types=frozenset({pool.gpu_type}),
        machine_types=frozenset({pool.machine_type}),
        spot_ok=pool.spot_tolerant,
        priority=min(priority, 2**31 - 1),
        queue=queue if queue is not None else next(iter(sorted(pool.queues or {"default"}))),
        time_limit_s=time_limit_s or None,
    )
    return ResumeUnit(unit, pool.name, names, row_ids, tag if tag is not None else job_id)


@dataclass(frozen=True)
class ResumeLaunch:
    """Create exactly `scale_up.names` (the scheduler's names) for `units`; `planned` is how many nodes the
    planner sized (differs from the names only if the scheduler asked for another count)."""

    scale_up: ScaleUp
    units: tuple[ResumeUnit, ...]
    planned: int


class LaunchOutcome(enum.StrEnum):
    OK = "ok"
    TRANSIENT = "transient"  # retried later with the same request id: no backoff
    REFUSED = "refused"  # stockout / quota / invalid: the offering is backed off


@dataclass(frozen=True)
class ResumeResult:
    memory: tuple[UnavailableOffering, ...]
    unserved: tuple[Unserved, ...]
    launched: tuple[ResumeLaunch, ...]


class SchedulerNode(Protocol):
    """What scale-down needs to know of a node from the scheduler's fresh view (`SlurmNode` has it)."""

    @property
    def idle(self) -> bool: ...

    @property
    def drain(self) -> bool: ...

    @property
    def has_work(self) -> bool: ...


@dataclass(frozen=True)
class ScaleDownStep:
    """`drain`: stop scheduling on `names`.  `delete`: power the scheduler's nodes down, delete the instances by
    name, return the names to the pool (Slurm: `state=power_down`, delete, `state=undrain`)."""

    action: str  # "drain" | "delete"
    pool: str
    names: tuple[str, ...]
    reason: str


def pool_policy(policy: Policy, inventory: Inventory, extra_nodes: Iterable[tuple[int, float | None]] = ()) -> Policy:
    """The policy for one pool's resume plan: fleet-wide limits minus what live nodes already hold (and
    `extra_nodes`, (gpus, $/h) of nodes launched earlier in the same pass)."""
    other = [(n.gpus, n.hourly_usd, n.offering.capacity_type) for n in inventory.nodes if n.state in LIVE_STATES]
    extra = list(extra_nodes)
    changes: dict[str, Any] = {}
    if policy.max_nodes is not None:
        changes["max_nodes"] = max(0, policy.max_nodes - len(other) - len(extra))
    if policy.max_gpus is not None:
        changes["max_gpus"] = max(0, policy.max_gpus - sum(g for g, _, _ in other) - sum(g for g, _ in extra))
    if policy.budget_usd_per_hour is not None:
        spent = sum(h or 0.0 for _, h, ct in other if ct != "reservation") + sum(h or 0.0 for _, h in extra)
        changes["budget_usd_per_hour"] = max(0.0, policy.budget_usd_per_hour - spent)
    return dataclasses.replace(policy, **changes) if changes else policy


def plan_pool_resumes(
    pool_name: str,
    units: Sequence[ResumeUnit],
    inventory: Inventory,
    offerings: Sequence[Offering],
    policy: Policy,
    now: float,
    memory: Sequence[UnavailableOffering],
    planner: Planner | None = None,
) -> tuple[list[ResumeLaunch], tuple[Unserved, ...]]:
    """One `plan()` over the units the scheduler resumed in one pool.  The scheduler bound these names to jobs,
    so existing nodes may not absorb them: the plan sees the pool without its nodes and without its floor (the limits
    still count every live node, through `policy`, see `pool_policy`), and no batch window holds them.  Each ScaleUp
    is renamed to the resumed names."""
    planner = planner or default_planner()
    # the plan sees the pool empty, so it must not bring it up to its floor too: a floor's launches would take the
    # headroom (free reserved slots, the pool's max) the resumed names need; the queue-depth plan keeps floors
    pool = dataclasses.replace(inventory.pool(pool_name), min_nodes=0)
    offs = [o for o in offerings if pool.can_launch(o.key)]
    # the names are bound to jobs already: holding their launch cannot move a job elsewhere, only delay it
    policy = dataclasses.replace(unbatched(policy), launch_reserved_nodes=False)
    p = planner([u.unit for u in units], Inventory((pool,), ()), offs, policy, now, unavailable=tuple(memory))
    by_unit = {u.unit.id: u for u in units}
    out: list[ResumeLaunch] = []
    for su in p.scale_ups:
        mine = tuple(by_unit[u] for u in su.units if u in by_unit)
        names = tuple(n for u in mine for n in u.names)
        if not names:
            continue
        first = min(u.unit.submit_time for u in mine)
        rid = request_id_for(su.pool, su.offering, names, first)
        renamed = dataclasses.replace(su, names=names, request_id=rid)
        out.append(ResumeLaunch(renamed, mine, su.count))
    return out, p.unserved


def serve_resumes(
    resume: Mapping[str, Sequence[ResumeUnit]],
    inventory: Inventory,
    offerings: Sequence[Offering],
    policy: Policy,
    now: float,
    memory: Sequence[UnavailableOffering],
    launch: Callable[[ResumeLaunch], tuple[LaunchOutcome, FailureKind | None, str]],
    planner: Planner | None = None,
) -> ResumeResult:
    """Serve every pool's resume units, pools in the order given: plan, then `launch` each ResumeLaunch (the
    caller's actuator; it returns the outcome, the failure kind and a message).  A refused launch backs its
    offering off in the memory the next pools' plans see; the units stay wanted (the next tick plans again)."""
    mem = tuple(memory)
    unserved: list[Unserved] = []
    launched: list[ResumeLaunch] = []
    extra: list[tuple[int, float | None]] = []
    for pool_name, units in resume.items():
        if not units:
            continue
        pol = pool_policy(policy, inventory, extra)
        plans, why = plan_pool_resumes(pool_name, units, inventory, offerings, pol, now, mem, planner)
        unserved.extend(why)
        gpus = inventory.pool(pool_name).gpus_per_node
        for rl in plans:
            outcome, kind, message = launch(rl)
            if outcome is LaunchOutcome.OK:
                launched.append(rl)
                each = rl.scale_up.hourly_usd / max(1, rl.planned)
                extra.extend((gpus, each) for _ in rl.scale_up.names)
            elif outcome is LaunchOutcome.REFUSED and kind is not None:
                mem = record_failure(mem, rl.scale_up.offering, kind, now, policy, message)
    return ResumeResult(mem, tuple(unserved), tuple(launched))


def resume_failed(
    memory: Sequence[UnavailableOffering], key: OfferingKey, now: float, policy: Policy, min_backoff_s: float
) -> tuple[UnavailableOffering, ...]:
    """ResumeTimeout (ResumeFailProgram): the offering the node was launched with is backed off like a stockout,
    for at least `min_backoff_s`, so the next attempt goes to another zone or offering."""
    mem = record_failure(memory, key, FailureKind.STOCKOUT, now, policy, "resume timeout (ResumeFailProgram)")
    hold = now + min_backoff_s
    return tuple(dataclasses.replace(u, until=max(u.until, hold)) if u.key == key else u for u in mem)


def queue_depth(
    pending: Sequence[WorkUnit],
    inventory: Inventory,
    offerings: Sequence[Offering],
    policy: Policy,
    now: float,
    memory: Sequence[UnavailableOffering],
    planner: Planner | None = None,
    *,
    standby_in_flight: Mapping[str, int] | None = None,
    preemption_room: Sequence[ReservedRoom] = (),
    unusable: Collection[str] = (),
    scheduler_holds: bool = True,
) -> Plan:
    """One `plan()` over the work the scheduler could not place plus the whole inventory: unserved reasons,
    pre-warm and standby scale-ups, and the idle scale-down (drains, deletes).  `standby_in_flight`: standby
    nodes the scheduler is bringing up that the inventory does not list (`autoscaler.planner.standby`); None: the
    caller does not bring standby nodes up, and none are planned.  Under a reservation hold (`hold.py`) each job
    waits its own hold: only jobs the scheduler has tried (`WorkUnit.evaluated`) and pending for at least
    `batch_window_s` are planned, without a batch window (the others wait on: a reserved node may still free up
    for them, or Slurm may preempt spot-tolerant work for them).  With `Policy.preempt_spot`, jobs Slurm is
    placing on reserved nodes by preemption (`preemption_room`: the reserved nodes' room for such jobs,
    `autoscaler.core.hold.preemption_places`) are not planned either.  `unusable`: node names none of `pending` may
    run on (Slurm advanced reservations: `autoscaler.daemon.named_nodes`), no capacity for them.
    `scheduler_holds` False: no scheduler places work on the fleet by itself (Kubernetes: a ProvisioningRequest is
    booked by the daemon or by nothing), so there is nothing to hold capacity back from and no unit waits out of
    the plan; the planner's own batch window (`Policy.batch_window_s`, which delays paid launches only) applies.
    Until the forty-eighth round the Kubernetes daemon took Slurm's hold: under a reservation hold a request was
    left unbooked for the whole window even with a reserved node idle, where its replay booked it at once."""
    planner = planner or default_planner()
    from autoscaler.core.hold import held_pools, preemption_places

    if scheduler_holds and held_pools(inventory.pools, policy):
        # a unit the scheduler has not tried yet may start by itself (a reserved node, preemption): never
        # release held capacity for it before its first scheduling pass
        pending = [u for u in pending if u.evaluated and now - u.submit_time >= policy.batch_window_s]
        if policy.preempt_spot and preemption_room:
            by_preemption = preemption_places(pending, preemption_room, inventory.pools, policy, now)
            pending = [u for u in pending if u.id not in by_preemption]
        policy = unbatched(policy)
    # None: this caller brings no standby nodes up (the Kubernetes paths), so the planner plans none
    extra: dict[str, Any] = {"standby_in_flight": dict(standby_in_flight)} if standby_in_flight is not None else {}
    if unusable:  # only then: a planner of the replay's never meets one
        extra["unusable"] = frozenset(unusable)
    return planner(list(pending), inventory, list(offerings), policy, now, unavailable=tuple(memory), **extra)


def scale_down_steps(plan: Plan, facts: Mapping[str, SchedulerNode] | None) -> list[ScaleDownStep]:
    """The plan's drains and deletes, cut to what the scheduler's fresh view allows: drain only nodes it reports
    idle, or, for a cordon (`Drain.cordon`), busy and not drained yet (Slurm's drain and Kubernetes' cordon let
    running work finish); delete only nodes with no work that it reports drained or idle (or does not know).  No
    view (the scheduler did not answer): no scale-down at all."""
    if facts is None:
        return []
    steps: list[ScaleDownStep] = []
    for d in plan.drains:
        idle = tuple(
            n
            for n in d.nodes
            if n in facts and (facts[n].idle or (d.cordon and facts[n].has_work and not facts[n].drain))
        )
        if idle:
            steps.append(ScaleDownStep("drain", d.pool, idle, d.reason))
    for dn in plan.deletes:
        ok = tuple(
            n for n in dn.names if n not in facts or (not facts[n].has_work and (facts[n].drain or facts[n].idle))
        )
        if ok:
            steps.append(ScaleDownStep("delete", dn.pool, ok, dn.reason))
    return steps


def deletable_after_drain(names: Iterable[str], fresh: Mapping[str, SchedulerNode] | None) -> tuple[str, ...]:
    """Nodes drained this tick that a fresh re-read of the scheduler shows drained and without work: they are
    powered down and deleted in the same tick instead of one tick later.  A job the scheduler placed between the
    tick's first read and the drain shows in the re-read and keeps its node.  No re-read: nothing."""
    if fresh is None:
        return ()
    return tuple(n for n in names if n in fresh and fresh[n].drain and not fresh[n].has_work)
