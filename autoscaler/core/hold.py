"""The reservation hold on a real scheduler: overflow pools kept unavailable until waiting is no longer cheaper.

Slurm allocates powered-down CLOUD nodes at submit, so a job can only wait for busy paid-for (reserved) capacity
if the overflow nodes are not allocatable.  With a reservation and a hold (`Policy.batch_window_s > 0`, the
settings rule's reservation hold), every non-reservation pool is *held*: its powered-down nodes are kept drained
(`idle~` + DRAIN: Slurm leaves jobs PENDING with reason Resources instead of powering them up).  The queue-depth
plan sees those PENDING jobs; while the planner's batch window holds them they wait (a reserved node that frees
up takes them: Slurm schedules it by itself); once the window ends the plan launches for them, and the source
releases (undrains) that many powered-down names of the planned pool, which Slurm then allocates to the pending
jobs and resumes as usual.  A released name that no job took within `release_grace_s` is held again.

The same hold serves `Policy.preempt_spot` without a batch window: Slurm preempts spot-tolerant work off reserved
nodes (partition priority, fleet/slurm/preempt.py) only for a job that cannot start otherwise, so the overflow pools
that share a partition with such a reservation are held (`preemption_held`) and the plan releases a name at once
for a job Slurm has tried and could not place.  Either way nothing is released for a job the scheduler has not
tried yet (`WorkUnit.evaluated`, `autoscaler.core.decide.queue_depth`), nor for one Slurm is placing by preemption
(`preemption_places`): slurmctld requeues the spot-tolerant work in the pass that tried the job, and the job waits,
PENDING and tried, while the reserved node finishes that work; a read of the scheduler falling in that second must
not release overflow for it.

Pure functions; the daemon (`autoscaler/daemon/tick.py`) and the replay (`autoscaler/replay/gpu_fleet.py` over
`simslurm`) both call them."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from autoscaler.model import Node, Plan, Policy, Pool, WorkUnit
from autoscaler.node_names import split_node_name
from autoscaler.planner.offers import UnitClass
from autoscaler.planner.scale_down import name_order, warm_candidate
from fleet.catalog import CapacityType

#: a released name nobody took is held again after this long (Slurm allocates within a scheduling pass)
RELEASE_GRACE_S = 30.0
#: how long after its submission a job is left to preemption (`preemption_places`): slurmctld preempts in the
#: pass that tries the job (at submission, or within `sched_interval`, 60 s by default, slurm.conf(5)); a job
#: still pending after that is not waiting on preemption, and the plan serves it
PREEMPT_GRACE_S = 60.0


def late_binding(pools: Iterable[Pool], policy: Policy) -> bool:
    """Strict late binding is on for the fleet of `pools` (`Policy.binds_late`)."""
    return policy.binds_late(p.capacity_type for p in pools)


def held_pools(pools: Iterable[Pool], policy: Policy) -> frozenset[str]:
    """The pools kept unavailable to the scheduler: every pool under late binding (`late_binding`); when the fleet
    has a reservation pool, every non-reservation pool while the policy holds launches (`batch_window_s > 0`),
    else, with `Policy.preempt_spot`, the overflow pools whose jobs Slurm can preempt spot-tolerant work for
    (`preemption_held`); none otherwise."""
    ps = list(pools)
    if late_binding(ps, policy):
        return frozenset(p.name for p in ps)
    if not any(p.capacity_type is CapacityType.RESERVATION for p in ps):
        return frozenset()
    if policy.batch_window_s > 0:
        return frozenset(p.name for p in ps if p.capacity_type is not CapacityType.RESERVATION)
    if policy.preempt_spot:
        return preemption_held(ps)
    return frozenset()


def preemption_held(pools: Sequence[Pool]) -> frozenset[str]:
    """The overflow pools (neither reservation nor spot) that share a partition, other than a spot-tolerant one,
    with a reservation pool that spot-tolerant work also uses: slurmctld preempts that work off the reservation
    only for a job that cannot start otherwise, and a powered-down CLOUD node of such a pool counts as otherwise
    (fleet/slurm/preempt.py renders the preemption for the same reservation pools).  A pool serving every queue
    (`queues` None) shares them all."""
    spot = [p for p in pools if p.capacity_type is CapacityType.SPOT]
    spot_queues = frozenset(q for p in spot for q in (p.queues or ()))

    def shared(a: Pool, b: Pool, *, besides: frozenset[str] = frozenset()) -> bool:
        if a.queues is None or b.queues is None:
            return True
        return bool((a.queues & b.queues) - besides)

    reserved = [r for r in pools if r.capacity_type is CapacityType.RESERVATION and any(shared(r, s) for s in spot)]
    kinds = (CapacityType.RESERVATION, CapacityType.SPOT)
    return frozenset(
        p.name
        for p in pools
        if p.capacity_type not in kinds and any(shared(p, r, besides=spot_queues) for r in reserved)
    )


@dataclass(frozen=True)
class ReservedRoom:
    """A registered reserved node (not draining) and the GPUs on it a job that may not use spot can have: those
    no job holds, those held by a job that is ending (the scheduler no longer lists it running) and those held by
    spot-tolerant work, which partition-priority preemption takes back (fleet/slurm/preempt.py)."""

    node: str
    pool: str
    gpus: int


def preemption_places(
    pending: Sequence[WorkUnit], room: Sequence[ReservedRoom], pools: Sequence[Pool], policy: Policy, now: float
) -> frozenset[str]:
    """The pending units Slurm is placing on reserved nodes by preempting spot-tolerant work (or will at its next
    pass): units that may not use spot, submitted less than `PREEMPT_GRACE_S` ago, for which `room` has enough
    nodes of pools they may use, served highest priority first (then oldest), each taking its GPUs on its nodes
    (the roomiest first).  slurmctld does this by itself; a release for such a unit would hand it (or the next job)
    an overflow node instead of the reservation."""
    left = {r.node: r.gpus for r in room}
    size = {p.name: p.gpus_per_node for p in pools}
    placed: set[str] = set()
    for u in sorted(pending, key=lambda u: (-u.priority, u.submit_time, u.id)):
        if u.spot_ok or now - u.submit_time >= PREEMPT_GRACE_S:
            continue
        cls = UnitClass.of(u, policy, now)  # the planner's own test of which pools a unit may use
        usable = {
            p.name for p in pools if cls.may_use_pool(p) and cls.accepts(p.gpu_type, p.machine_type, p.gpus_per_node)
        }
        # a unit that takes its nodes whole (`WorkUnit.whole_node`) needs every GPU of the node
        need = {r.node: size[r.pool] if u.whole_node else u.gpus_per_node for r in room if r.pool in usable}
        nodes = sorted((n for n, g in need.items() if left[n] >= g), key=lambda n: (-left[n], n))[: u.nodes]
        if len(nodes) < u.nodes:
            continue
        for n in nodes:
            left[n] -= need[n]
        placed.add(u.id)
    return frozenset(placed)


def kept_idle(nodes: Iterable[Node], plan: Plan | None, policy: Policy) -> dict[str, int]:
    """Machine type -> the nodes the warm-node cap counts (`planner.scale_down.warm_candidate`: ready, idle, no
    work, reserved ones the policy keeps anyway excepted) that the plan keeps up (it places no pending unit on them
    and neither drains nor deletes them): the warm nodes the next arrivals of the shape take first."""
    used: set[str] = set()
    if plan is not None:
        used = {n for a in plan.assignments.values() for n in a.nodes}
        used |= {n for d in plan.drains for n in d.nodes} | {n for dn in plan.deletes for n in dn.names}
    out: dict[str, int] = {}
    for n in nodes:
        if n.name not in used and warm_candidate(n, policy):
            out[n.offering.machine_type] = out.get(n.offering.machine_type, 0) + 1
    return out


def surplus_held_boots(
    boots: Mapping[str, str], plan: Plan | None, policy: Policy, kept: Mapping[str, int] | None = None
) -> tuple[str, ...]:
    """Late binding: the held boots to abort now.  `boots`: name -> machine type of the names booted drained
    (`HeldLaunches.boot`) whose instance exists and has not registered, with no job.  A held boot is surplus when
    no pending unit is planned onto it (`plan`'s assignments; None: nothing was planned, nothing is pending) -
    the job it was booted for took a node that freed up first - and its shape is not kept warm
    (`Policy.keeps_warm`: no idle keep, and no standby nodes, since a booting standby node is counted in flight,
    not assigned): once registered it would be scaled down at once, so the rest of its boot is
    billed for nothing.  The settings rule gives a shape no idle keep when an idle node is not worth keeping for
    the next arrival (`autoscaler/planner/rule.py`); a node still booting is worth less.  Sized before it was
    built (docs/simulate.md, "Surplus held boots").  With `kept` (machine type -> the ready idle nodes the plan
    keeps warm, `kept_idle`), a surplus boot of a shape kept warm under a warm-node cap (`idle_keep_max_by_machine`,
    no standby nodes) is also aborted when the cap has no room left for it: the ready nodes come first (they serve
    the next arrival now), then the boots by name (the lowest first, as Slurm allocates); at registration such a
    boot would be scaled down as over the cap (`planner.scale_down.idle_over_cap`), its whole boot billed for
    nothing (docs/simulate.md, "Surplus boots beyond the warm-node cap")."""
    assigned = {n for a in plan.assignments.values() for n in a.nodes} if plan is not None else set()
    out = [n for n, mt in boots.items() if n not in assigned and not policy.keeps_warm(mt)]
    if kept is not None:
        caps = policy.idle_keep_max_by_machine
        room = {
            mt: max(0, cap - kept.get(mt, 0))
            for mt, cap in caps.items()
            if policy.keeps_warm(mt) and not policy.standby_by_machine.get(mt)
        }
        lowest_first = sorted((n for n in boots if n not in assigned and boots[n] in room), key=name_order)
        for n in lowest_first:
            if room[boots[n]] > 0:
                room[boots[n]] -= 1
            else:
                out.append(n)
    return tuple(sorted(out))


def take_names(
    want: Mapping[str, int], candidates: Mapping[str, Sequence[str]], outstanding: Mapping[str, int] | None = None
) -> dict[str, tuple[str, ...]]:
    """Pool -> the held names to release (or boot) now: `want[pool]` of them (`HeldLaunches`), less `outstanding[pool]`
    already on their way (released and not allocated yet: the scheduler's pass may not have run; or booted with no
    instance yet), taken in order from `candidates` (the pool's powered-down names the scheduler shows held, lowest
    index first: those it will allocate).  The plan's own names are not used: the planner does not know which names
    the scheduler still has powering down."""
    out: dict[str, tuple[str, ...]] = {}
    for pool, n in want.items():
        n -= (outstanding or {}).get(pool, 0)
        if n > 0 and candidates.get(pool):
            out[pool] = tuple(candidates[pool][:n])
    return out


@dataclass(frozen=True)
class HeldLaunches:
    """What the queue-depth plan launches in held pools, split by how the names reach the scheduler.

    `release`: pool -> names to undrain while powered down, so that Slurm allocates them to the pending jobs and
    resumes them (every launch of the reservation and preemption holds). `boot`: pool -> names to power up
    *drained* under late binding, a gang's included, and a pool's floor under any hold (`scontrol update
    state=power_up` on drained nodes: ResumeProgram runs with the names of one tick's boots together, which the
    resume path launches as one unit, all or nothing in one zone; the nodes register IDLE+DRAIN with no job),
    undrained once registered (the daemon's `_undrain_held_boots`, `SimSlurm.undrain_held`), so that the pending
    job takes whichever node of its shape is free first.  A gang was released until the twenty-ninth round: Slurm
    then binds it to the booting names and launches it only at its next periodic pass after they registered (every
    30 s on 22.05.8, `bench/late_bind_latency.py --bind`), where a job given nodes that are up starts at once.
    `widen`: unit id -> the alternatives its hard constraint must allow (`constraint_allows`), for units the plan
    serves with a pool their constraint does not allow (a stockout fallback, or spot-tolerant work the plan puts on
    another capacity type), as `widened` makes them."""

    release: Mapping[str, int]
    boot: Mapping[str, int]
    widen: Mapping[str, frozenset[str]]


def held_launches(
    plan: Plan,
    held: frozenset[str],
    pools: Iterable[Pool],
    policy: Policy,
    constraints: Mapping[str, frozenset[str]] | None = None,
) -> HeldLaunches:
    """Split the plan's scale-ups in held pools (see `HeldLaunches`).  `constraints`: pending unit id -> the
    alternatives its hard constraint allows (`constraint_allows`; units the stack's job_submit.lua constrained,
    others are absent)."""
    ps = list(pools)
    late = late_binding(ps, policy)
    release: dict[str, int] = {}
    boot: dict[str, int] = {}
    for su in plan.scale_ups:
        if su.pool not in held:
            continue
        # standby nodes too: booted, or released, held; a floor's launch (`ScaleUp.minimum`) has no job to take a
        # released name, so it is booted under any hold (released, it would be held again after the grace)
        side = boot if late or su.minimum else release
        side[su.pool] = side.get(su.pool, 0) + su.count
    # every node the plan puts a constrained unit on, new or existing (a node booting for another job, an idle
    # one): the unit's constraint must allow its pool, or Slurm never starts the job there
    by_prefix = {p.node_name_prefix: p for p in ps}
    widen: dict[str, frozenset[str]] = {}
    for uid, allowed in (constraints or {}).items():
        a = plan.assignments.get(uid)
        if a is None:
            continue
        used = [p for n in a.nodes if (s := split_node_name(n)) and (p := by_prefix.get(s[0])) is not None]
        if not all(constraint_allows(allowed, p) for p in used):
            widen[uid] = widened(allowed, (p.machine_type for p in used))
    return HeldLaunches(release, boot, widen)


def constraint_allows(terms: frozenset[str], pool: Pool) -> bool:
    """Whether a right-sizing constraint allows `pool`'s nodes.  `terms` are its alternatives (ORed): a machine type
    (any capacity type), or `<machine type>&<capacity type>` (spot-tolerant work pinned to spot: the capacity the
    daemon booted for a job that may not use spot is not Slurm's to give away, `fleet.slurm.job_submit`)."""
    return pool.machine_type in terms or f"{pool.machine_type}&{pool.capacity_type}" in terms


def widened(terms: frozenset[str], machine_types: Iterable[str]) -> frozenset[str]:
    """`terms` widened by `machine_types` (a fallback the plan chose): every alternative loses its capacity pin, so
    the job may take any capacity type of the machine types it allows (the plan decided it is worth it)."""
    return frozenset(t.partition("&")[0] for t in terms) | frozenset(machine_types)
