"""One tick's view of the world, built from reads the daemon already made (pure, no I/O).

Inputs: the managed pools, the cloud's nodes, Slurm's nodes and jobs (None when Slurm did not answer), the
store's open launch intents and power-save queue.  Outputs: the planner's `Inventory` (each node's
`NodeState` derived from the cloud and Slurm views together), the demand Slurm's power saving asked for
(`resume` units, one per job and pool, carrying the exact node names Slurm resumed), and the queue-depth
demand (PENDING jobs Slurm could not place).

State mapping (cloud x Slurm -> NodeState):
- open intent, no instance yet / instance PROVISIONING -> REQUESTED
- instance RUNNING, Slurm POWERING_UP / NOT_RESPONDING / unknown -> BOOTING
- Slurm idle -> READY_IDLE (since Slurm's last_busy); allocated/mixed -> BUSY (gpus from gres_used)
- Slurm DRAIN -> DRAINING; Slurm POWERING_DOWN or instance STOPPING -> DELETING; instance GONE -> not live.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from autoscaler.cloud import CloudNode, CloudNodeStatus, OfferingKey
from autoscaler.core.decide import ResumeUnit, resume_unit
from autoscaler.core.gang_exclusion import UpNode
from autoscaler.core.hold import ReservedRoom
from autoscaler.daemon.state import PowerRow, RequestRow, UnavailableRow
from autoscaler.model import Inventory, Node, NodeState, Pool, UnavailableOffering, WorkUnit
from autoscaler.node_names import split_node_name
from autoscaler.slurm.constraint import ConstraintUnreadable, matches
from autoscaler.slurm.gang_gate import lease_due
from autoscaler.slurm.readers import CAPACITY_REASONS, SlurmJob, SlurmNode
from fleet.catalog import CapacityType


def offering_to_dict(key: OfferingKey) -> dict:
    return {k: (str(v) if isinstance(v, CapacityType) else v) for k, v in dataclasses.asdict(key).items()}


def offering_from_dict(d: Mapping) -> OfferingKey:
    return OfferingKey(
        provider=d["provider"],
        zone=d["zone"],
        machine_type=d["machine_type"],
        capacity_type=CapacityType(d["capacity_type"]),
        reservation=d.get("reservation"),
    )


def unavailable_from_rows(rows: Iterable[UnavailableRow]) -> tuple[UnavailableOffering, ...]:
    return tuple(
        UnavailableOffering(offering_from_dict(r.offering), r.until, r.reason, r.failures, r.message) for r in rows
    )


class NameIndex:
    """Slurm node / instance name -> pool, over each pool's name space ``prefix-i`` (i < max_nodes)."""

    def __init__(self, pools: Sequence[Pool]) -> None:
        self._by_prefix = {p.node_name_prefix: p for p in pools}

    def pool_of(self, name: str) -> Pool | None:
        """The pool whose name space holds `name` (`autoscaler.node_names`: `e2e-od-0003` is in none)."""
        parsed = split_node_name(name)
        pool = self._by_prefix.get(parsed[0]) if parsed else None
        if pool is None or parsed is None or parsed[1] >= pool.max_nodes:
            return None
        return pool


def node_state(cloud: CloudNode | None, slurm: SlurmNode | None, intent: bool) -> NodeState | None:
    """The autoscaler's state for one name; None when nothing is live under it."""
    if cloud is None or cloud.status is CloudNodeStatus.GONE:
        return NodeState.REQUESTED if intent else None
    if cloud.status is CloudNodeStatus.STOPPING:
        return NodeState.DELETING
    if cloud.status is CloudNodeStatus.PROVISIONING:
        return NodeState.REQUESTED
    if slurm is None or slurm.powering_up or slurm.not_responding or slurm.powered_down:
        # powered_down with a running instance: Slurm has not seen it (yet): count it as booting
        return NodeState.BOOTING
    if slurm.powering_down:
        return NodeState.DELETING
    if slurm.drain:
        return NodeState.DRAINING
    if slurm.has_work:
        return NodeState.BUSY
    return NodeState.READY_IDLE


@dataclass
class View:
    inventory: Inventory
    index: NameIndex
    resume: dict[str, list[ResumeUnit]] = field(default_factory=dict)  # pool -> units
    pending: list[WorkUnit] = field(default_factory=list)
    pending_jobs: dict[str, SlurmJob] = field(default_factory=dict)  # pending unit id -> the squeue record it is of
    slurm_ok: bool = True
    unknown_power_rows: list[PowerRow] = field(default_factory=list)  # names of no managed pool
    preemption_room: tuple[ReservedRoom, ...] = ()  # reserved nodes' room for jobs that may not use spot
    reserved: frozenset[str] = frozenset()  # names in an active advanced reservation: no capacity for the plan's units


def _since(cloud: CloudNode | None, slurm: SlurmNode | None, state: NodeState, now: float) -> float:
    if state is NodeState.READY_IDLE and slurm is not None:
        last_busy = slurm.extra.get("last_busy")
        if isinstance(last_busy, int | float) and last_busy > 0:
            return min(float(last_busy), now)
    return cloud.created_at if cloud is not None else now


@dataclass(frozen=True)
class PoolNodes:
    """What a pool's nodes offer a job, as slurmctld reports them: features (the stack renders
    `<gpu>,<machine type>,<capacity type>`, `fleet.slurm.conf`), CPUs and RealMemory (0: not reported)."""

    features: frozenset[str]
    cpus: int = 0
    real_memory_mib: int = 0


def pool_nodes(pools: Sequence[Pool], slurm_nodes: Mapping[str, SlurmNode], index: NameIndex) -> dict[str, PoolNodes]:
    """Pool -> `PoolNodes` from the first of its nodes sinfo reports; a pool none of whose nodes Slurm reports gets
    its machine type and capacity type as features, and no CPU or memory figure."""
    out: dict[str, PoolNodes] = {}
    for name, node in slurm_nodes.items():
        pool = index.pool_of(name)
        if pool is not None and pool.name not in out and node.features:
            out[pool.name] = PoolNodes(frozenset(node.features), node.cpus, node.real_memory_mib)
    for p in pools:
        out.setdefault(p.name, PoolNodes(frozenset({p.machine_type, str(p.capacity_type)})))
    return out


def job_pools(job: SlurmJob, fit: Sequence[Pool], nodes: Mapping[str, PoolNodes]) -> frozenset[str] | None:
    """The pools of `fit` whose nodes the job can run on, or None when that is every one of them:
    - its own `--constraint` must hold on their features: not when the stack's job_submit.lua set it (right-sizing,
      which the hold widens on a fallback: `autoscaler.core.hold`) or when the expression cannot be read for certain
      (`autoscaler.slurm.constraint`);
    - they must have the CPUs and memory it asks per node (a pool Slurm reports no figure for is not ruled out)."""
    empty = PoolNodes(frozenset())
    facts = [(p.name, nodes.get(p.name, empty)) for p in fit]
    expr = job.constraint_expression
    featured = {name for name, _ in facts}  # the pools whose features satisfy the job's own constraint
    if expr and not job.right_sized_by_lua:
        with contextlib.suppress(ConstraintUnreadable):  # unreadable: planned as unconstrained
            featured = {name for name, n in facts if matches(expr, n.features)}
    ok = frozenset(
        name
        for name, n in facts
        if name in featured
        and (not n.cpus or n.cpus >= job.cpus_per_node)
        and (not n.real_memory_mib or n.real_memory_mib >= job.memory_per_node_mib)
    )
    return None if len(ok) == len(facts) else ok


def job_fit(
    job: SlurmJob, pools: Sequence[Pool], facts: Mapping[str, PoolNodes]
) -> tuple[frozenset[str] | None, list[Pool]]:
    """The pools that serve one of `job`'s partitions with its GPUs per node and whose nodes it can run on
    (`job_pools`): (their names, or None when no node rule narrowed them; the pools)."""
    parts = job.partition.split(",")
    fit = [p for p in pools if any(p.serves(q) for q in parts) and p.gpus_per_node >= job.gpus_per_node]
    allowed = job_pools(job, fit, facts)
    return allowed, fit if allowed is None else [p for p in fit if p.name in allowed]


@dataclass(frozen=True)
class GatedGang:
    """A gang the job_submit.lua gated (`SlurmJob.gated`) and the pools it may run on."""

    job: SlurmJob
    pools: frozenset[str]


def gated_gangs(
    pools: Sequence[Pool], slurm_nodes: Mapping[str, SlurmNode], slurm_jobs: Sequence[SlurmJob]
) -> tuple[list[GatedGang], list[UpNode], dict[str, int]]:
    """The gated gangs (with a GPU count some pool serves); every managed node that is up or coming up (not
    powered down, powering down or down: `UpNode.ready` when registered, idle or mixed, and not drained); and per
    pool its names powered down and not down (drained ones too: the hold boots those), for
    `autoscaler.core.gang_exclusion.gate_exclusion`."""
    gated = [j for j in slurm_jobs if j.gated and j.gpus_per_node >= 1]
    if not gated:
        return [], [], {}
    index = NameIndex(pools)
    facts = pool_nodes(pools, slurm_nodes, index)
    gangs = []
    for j in gated:
        _, fit = job_fit(j, pools, facts)
        if fit:
            gangs.append(GatedGang(j, frozenset(p.name for p in fit)))
    up = []
    bootable = dict.fromkeys((p.name for p in pools), 0)
    for n in slurm_nodes.values():
        pool = index.pool_of(n.name)
        if pool is None or n.down:
            continue
        if n.powered_down and not n.powering_up:
            bootable[pool.name] += 1
        if n.powered_down or n.powering_down:
            continue
        ready = n.state in ("idle", "mixed") and not (n.powering_up or n.drain or n.not_responding)
        reserved = pool.capacity_type is CapacityType.RESERVATION
        gpus, free = n.gpus or pool.gpus_per_node, max(n.gpus - n.gpus_used, 0)
        if n.real_memory_mib and n.alloc_memory_mib >= n.real_memory_mib:
            free = 0  # its memory is all held (`--mem=0`): no job starts there, whatever GPUs are free
        up.append(UpNode(n.name, pool.name, gpus, free, ready, reserved))
    return gangs, up, bootable


def gangs_to_lease(
    pools: Sequence[Pool],
    slurm_nodes: Mapping[str, SlurmNode],
    slurm_jobs: Sequence[SlurmJob],
    now: float,
    length_s: float,
) -> list[int]:
    """The job ids of the gangs the lua gated that cannot run yet (`SlurmJob.blocked`) and whose gate lapses within
    half a lease (`gang_gate.lease_due`), among those some managed pool serves (another daemon's gangs are its
    own to lease)."""
    due = [j for j in slurm_jobs if j.blocked and lease_due(j.admin_comment, j.eligible_time, now, length_s)]
    if not due:
        return []
    facts = pool_nodes(pools, slurm_nodes, NameIndex(pools))
    return [j.job_id for j in due if j.gpus_per_node >= 1 and job_fit(j, pools, facts)[1]]


def work_pools(
    pools: Sequence[Pool], facts: Mapping[str, PoolNodes], slurm_jobs: Sequence[SlurmJob]
) -> dict[str, frozenset[str]]:
    """Node name -> the pools every restricted job running on it could also run on (`Node.work_pools`): read as the
    pending jobs are (`job_pools`: its own constraint, CPUs and memory per node, over the pools serving its partition
    with its GPUs per node).  Nodes running only unrestricted work are absent."""
    out: dict[str, frozenset[str]] = {}
    for j in slurm_jobs:
        if j.state not in HOLDING_STATES or not j.nodes:
            continue
        allowed, _ = job_fit(j, pools, facts)
        if allowed is None:
            continue
        for n in j.nodes:
            out[n] = out[n] & allowed if n in out else allowed
    return out


#: squeue states of a job that holds its nodes' GPUs
HOLDING_STATES = frozenset({"RUNNING", "CONFIGURING", "SUSPENDED"})


def preemption_room(
    pools: Sequence[Pool], slurm_nodes: Mapping[str, SlurmNode], slurm_jobs: Sequence[SlurmJob], index: NameIndex
) -> tuple[ReservedRoom, ...]:
    """The registered, undrained reserved nodes and the GPUs on each that a job which may not use spot can have
    (`autoscaler.core.hold.ReservedRoom`): all of them less those held by jobs squeue lists running there in a
    partition no spot-tolerant pool serves.  squeue is read after sinfo, so a job that ended, or that slurmctld
    requeued for a preemption, between the two reads frees its GPUs here even where sinfo still shows them
    allocated; a job that started in between holds them."""
    spot = [p for p in pools if p.spot_tolerant]  # a job is spot-tolerant as the pending units are (`build_view`)
    held: dict[str, int] = defaultdict(int)
    for j in slurm_jobs:
        if j.state in HOLDING_STATES and not any(p.serves(j.partition) for p in spot):
            for n in j.nodes:
                held[n] += j.gpus_per_node
    out = []
    for n in slurm_nodes.values():
        pool = index.pool_of(n.name)
        if pool is None or pool.capacity_type is not CapacityType.RESERVATION:
            continue
        if n.powered_down or n.powering_up or n.powering_down or n.down or n.drain:
            continue
        room = min(n.gpus or pool.gpus_per_node, pool.gpus_per_node) - held[n.name]
        if room > 0:
            out.append(ReservedRoom(n.name, pool.name, room))
    return tuple(out)


def users_exclusion(job: SlurmJob, own: Mapping[int, Collection[frozenset[str]]]) -> frozenset[str]:
    """The nodes a job's own ``--exclude`` keeps it off: its ExcNodeList unless it is one this daemon set or was
    setting (`StateStore.own_exclusions`)."""
    excluded = frozenset(job.excluded_nodes)
    return excluded if excluded and excluded not in own.get(job.job_id, ()) else frozenset()


def held_by_own_exclusion(job: SlurmJob, own: Mapping[int, Collection[frozenset[str]]]) -> bool:
    """A gang this daemon's ExcNodeList left no node to (`core.gang_exclusion`: every node of its partition up or
    booting for it): if slurmctld's scheduler tries it in that window it finds "Requested node configuration is not
    available" and holds it, Reason=BadConstraints and priority 0 (job_scheduler.c, 22.05 and 23.11; seen on 23.11
    in tests/e2e/test_late_binding.py).  It is still the daemon's to place: the next change of its exclusion lifts
    the hold (slurmctld resets a BadConstraints job's priority on any update of it, job_mgr.c `_update_job`).
    Read as a capacity reason it was dropped from the plan, so its exclusion never changed and it stayed held."""
    excluded = frozenset(job.excluded_nodes)
    return job.reason == "BadConstraints" and bool(excluded) and excluded in own.get(job.job_id, ())


def array_unit_cap(job: SlurmJob, fit: Sequence[Pool]) -> int:
    """The most work units a pending array's record becomes: as many of its tasks as the pools it fits could run at
    once, each task a node to itself if it takes its nodes whole (an array may hold a million tasks; the plan could
    serve no more than these)."""
    gpus = max(1, job.gpus_per_node)
    per_pool = (p.max_nodes * (1 if job.exclusive else max(1, p.gpus_per_node // gpus)) for p in fit)
    return max(1, sum(per_pool) // max(1, job.node_count))


def build_view(
    pools: Sequence[Pool],
    cloud_nodes: Sequence[CloudNode],
    slurm_nodes: Mapping[str, SlurmNode] | None,
    slurm_jobs: Sequence[SlurmJob] | None,
    open_requests: Sequence[RequestRow],
    power_rows: Sequence[PowerRow],
    now: float,
    *,
    prices: Mapping[OfferingKey, float] | None = None,
    reserved: frozenset[str] = frozenset(),
    own_exclusions: Mapping[int, Collection[frozenset[str]]] | None = None,
) -> View:
    """The tick's view (see the module docstring).  `reserved`: names in an active advanced reservation;
    `own_exclusions`: job id -> the ExcNodeLists this daemon set (or was setting) on it (`core.gang_exclusion`,
    `StateStore.own_exclusions`), which are no node the
    job may not run on (it is cleared when ready nodes alone hold the gang); any other exclusion a pending job shows
    is its own ``--exclude``, names its units avoid (`WorkUnit.avoid`)."""
    index = NameIndex(pools)
    by_name = {p.name: p for p in pools}
    cloud_by_name = {c.name: c for c in cloud_nodes if c.status is not CloudNodeStatus.GONE}
    intents: dict[str, RequestRow] = {n: r for r in open_requests for n in r.names}
    snodes = slurm_nodes or {}
    facts = pool_nodes(pools, snodes, index)
    restricted = work_pools(pools, facts, slurm_jobs) if slurm_jobs else {}

    nodes: list[Node] = []
    for name in sorted(set(cloud_by_name) | set(intents)):
        pool = index.pool_of(name)
        if pool is None:
            continue
        c, s, r = cloud_by_name.get(name), snodes.get(name), intents.get(name)
        st = node_state(c, s, r is not None)
        if st is None:
            continue
        offering = c.offering if c is not None else offering_from_dict(r.offering)  # type: ignore[union-attr]
        used = 0
        if st is NodeState.BUSY or (st in (NodeState.BOOTING, NodeState.DRAINING) and s is not None):
            used = min(pool.gpus_per_node, s.gpus_used if s is not None else 0)
            if (st is NodeState.BUSY and used == 0) or (s is not None and s.state == "allocated"):
                # a CPU-only allocation, or Slurm's ALLOCATED: no CPU left, or a job that takes its node whole
                # (`--exclusive`, an EXCLUSIVE partition) with GPUs to spare that no other job may use: full
                used = pool.gpus_per_node
        nodes.append(
            Node(
                name=name,
                pool=pool.name,
                offering=offering,
                state=st,
                gpus=pool.gpus_per_node,
                gpus_used=used,
                since=_since(c, s, st, now),
                hourly_usd=(prices or {}).get(offering),
                work_pools=restricted.get(name) if used else None,
            )
        )
    room = preemption_room(pools, snodes, slurm_jobs, index) if slurm_jobs is not None else ()
    view = View(
        Inventory(tuple(pools), tuple(nodes)),
        index,
        slurm_ok=slurm_nodes is not None,
        preemption_room=room,
        reserved=reserved,
    )

    # Slurm's resume requests -> one unit per (pool, job); nodes with no job id form one unit per pool.
    # A name that is live (requested .. draining) needs nothing; one still being deleted waits for the delete.
    live = {n.name for n in nodes if n.state is not NodeState.DELETING}
    deleting = {n.name for n in nodes if n.state is NodeState.DELETING}
    jobs_by_id = {j.job_id: j for j in slurm_jobs or ()}
    groups: dict[tuple[str, int | None], list[PowerRow]] = defaultdict(list)
    for row in power_rows:
        if row.action != "resume":
            continue
        pool = index.pool_of(row.name)
        if pool is None:
            view.unknown_power_rows.append(row)
            continue
        if row.name in live or row.name in deleting:  # nothing to launch (yet)
            continue
        groups[(pool.name, row.jobs[0] if row.jobs else None)].append(row)
    for (pool_name, job_id), rows in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1] or -1)):
        pool = by_name[pool_name]
        names = tuple(dict.fromkeys(r.name for r in rows))
        job = jobs_by_id.get(job_id) if job_id is not None else None
        ru = resume_unit(
            pool,
            job_id,
            names,
            min(r.at for r in rows),
            row_ids=tuple(r.id for r in rows),
            priority=job.priority if job else 0,
            queue=job.partition.split(",")[0] if job else None,
            time_limit_s=job.time_limit_s if job else None,
        )
        view.resume.setdefault(pool_name, []).append(ru)

    # Queue depth: PENDING jobs that more capacity could serve, in partitions some pool serves; a pending array's
    # record is one unit per task slurmctld may start now (`SlurmJob.unit_ids`)
    # nodes with GPUs free and some CPUs or memory held: no place for a job their free CPUs or memory cannot hold
    partly = [n for n in snodes.values() if n.gpus > n.gpus_used and (n.alloc_cpus or n.alloc_memory_mib)]
    for j in slurm_jobs or ():
        capacity = j.reason in CAPACITY_REASONS or held_by_own_exclusion(j, own_exclusions or {})
        if not j.pending or not capacity or j.blocked or j.gpus_per_node < 1:
            continue
        if j.nodes_fixed:  # it runs on the names it gives, or its reservation's: no node the plan picks serves it
            continue  # (the hold releases those names when held: `autoscaler.daemon.named_nodes`)
        parts = j.partition.split(",")
        allowed, fit = job_fit(j, pools, facts)
        if not fit:
            continue
        if j.exclusive:  # it takes a node whole, of any shape that fits it: the planner picks which
            allowed = frozenset(p.name for p in fit)  # (`autoscaler.planner.whole_node`)
        unit = WorkUnit(  # the record's first unit; a pending array's tasks differ in their ids alone
            id=f"job/{j.job_id}",
            submit_time=j.submit_time or now,
            gpus_per_node=j.gpus_per_node,
            nodes=j.node_count,
            gpu_types=frozenset({j.gpu_type}) if j.gpu_type and j.gpu_type.startswith("nvidia-") else None,
            spot_ok=any(p.spot_tolerant for p in fit),
            priority=min(j.priority, 2**31 - 1),
            queue=parts[0],
            pools=allowed,
            time_limit_s=j.time_limit_s,
            # reason None: slurmctld has not tried it yet (its first pass may start it, preempting included)
            evaluated=j.tried,
            avoid=users_exclusion(j, own_exclusions or {}).union(n.name for n in partly if n.lacks_room_for(j)),
            whole_node=j.exclusive,
        )
        for uid in j.unit_ids(limit=array_unit_cap(j, fit) if j.array_tasks.ranges else None):
            view.pending_jobs[uid] = j
            view.pending.append(unit if uid == unit.id else dataclasses.replace(unit, id=uid))
    return view
