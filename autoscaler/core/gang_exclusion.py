"""Keep a gang off nodes that are up while the rest of it boots: the pending gang's `ExcNodeList`.

slurmctld gives a multi-node job the nodes that need no power-up first and powers up only the rest
(docs/autoscaler.md "Node weights"), all in one pool (`fleet.slurm.topology`).  In a held pool (late binding, the
reservation hold) a pending gang can get a node that is up and idle plus names the daemon released: released for
it (the plan launches a gang whole when the ready nodes cannot hold it, `planner.capacity.gang_fit`), or for
another job (Slurm hands released names to the first pending job they fit).  The up node then waits for the boots,
allocated and idle: partial-gang waste.  It costs what booting that node would have (the node is billed either way:
`bench/reserve_whatif.py --what gang-fresh` removed it all at the same cost), but the gang is no longer all or
nothing and the node is lost to the single-node jobs it was kept warm for.  So every pending gang carries an
`ExcNodeList` of the held pools' nodes that are up or coming up and could take one of its members (busy ones
too, and boots the daemon will undrain: a job can end, or a boot register, in the second between the daemon's read
and Slurm's pass), except while the plan puts it on ready nodes alone: then it is cleared, and Slurm starts the
gang on them.

Only exclusions the daemon set are changed: a job whose own `--exclude` the daemon did not write is left alone
(`ours`).  Nor is the exclusion of a gang Slurm has not tried yet (`untried`: pending with no reason, which the
core does not plan in held pools): the held pools' powered-down names are drained, so Slurm's first pass can give
it only nodes that are up, all it needs or none, and excluding them before that pass kept a gang that warm nodes
alone could hold off them until they were scaled down, and a gang whose booted nodes had registered was excluded
and cleared again tick after tick (tests/e2e/test_late_binding.py, test_end_to_end.py; twenty-ninth round).

In a pool the daemon does not hold, a gang's first try at submission would already give it the nodes that are up
and powered-down names for the rest.  There the stack's job_submit.lua gates it (`autoscaler.slurm.gang_gate`) and
the daemon releases it with `gate_exclusion`: none when nodes ready now, in one of its pools, hold it whole (Slurm
starts it on them) or when no pool has the powered-down names to boot it whole, else every node of its pools that
is up or coming up and could take a member, so it boots whole.  Pure: the daemon's tick and the replay call both
with what Slurm shows them."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from autoscaler.model import Placement, Plan, Pool


def gang_exclusions(
    plan: Plan,
    room: Mapping[str, int],
    gangs: Mapping[str, int],
    excluded: Mapping[str, frozenset[str]],
    ours: frozenset[str],
    untried: frozenset[str] = frozenset(),
    *,
    fits: Mapping[str, tuple[int, frozenset[str]]] | None = None,
    unschedulable: frozenset[str] = frozenset(),
    bootable: frozenset[str] = frozenset(),
) -> dict[str, frozenset[str]]:
    """The `ExcNodeList` changes for pending gangs: unit id -> the names to exclude (empty: clear it).

    `room`: name -> GPUs of the held pools' nodes that are up or coming up (not powered down or powering down), busy
    or idle; `gangs`: pending gang unit id -> its GPUs per node; `excluded`: unit id -> the exclusion Slurm shows
    for it; `ours`: the units whose exclusion the daemon set (any other non-empty exclusion is the user's and is
    never touched); `untried`: the units Slurm has not tried yet (left as they are).  `fits`: unit id -> (its node
    count, every node of its partitions that could take a member, in any state), `unschedulable`: nodes Slurm
    cannot give a job now (drained: held boots not registered yet), and `bootable`: names Slurm could power up for a
    job (powered down, not drained), for `leave_schedulable`.  Returns only units whose exclusion changes."""
    out: dict[str, frozenset[str]] = {}
    for uid, gpus in sorted(gangs.items()):
        have = excluded.get(uid, frozenset())
        if have and uid not in ours:
            continue  # the user's own exclusion
        if uid in untried:
            continue  # Slurm's first pass first: it can only start the gang whole on nodes that are up
        a = plan.assignments.get(uid)
        if a is not None and a.placement is Placement.READY:
            want: frozenset[str] = frozenset()  # on ready nodes alone: Slurm must be free to give it them
        else:
            want = frozenset(n for n, free in room.items() if free >= gpus)
            if fits and uid in fits:
                want = leave_schedulable(want, *fits[uid], unschedulable, bootable)
        if want != have:
            out[uid] = want
    return out


def configured_names(pools: Iterable[Pool]) -> frozenset[str]:
    """Every CLOUD node name slurm.conf configures for `pools`, in any state: a gang's `leave_schedulable`
    candidates are those of the pools it fits."""
    return frozenset(p.node_name(i) for p in pools for i in range(p.max_nodes))


def leave_schedulable(
    want: frozenset[str],
    nodes: int,
    candidates: frozenset[str],
    unschedulable: frozenset[str] = frozenset(),
    bootable: frozenset[str] = frozenset(),
) -> frozenset[str]:
    """`want` with enough names taken out that `nodes` of `candidates` (the nodes of the gang's partitions that could
    take a member, in any state) stay outside it.  slurmctld holds a job whose `ExcNodeList` leaves its partitions
    fewer nodes than it asks, "Requested node configuration is not available": Reason=BadConstraints, priority 0
    (job_scheduler.c), until the next update of it.  That happened when every node of a gang's partition was up or
    booting for it and the scheduler ran after the daemon undrained the gang's boots but before it cleared the
    exclusion (tests/e2e/test_late_binding.py; the daemon recovers such a gang: `snapshot.held_by_own_exclusion`).

    Only when no name outside is `bootable` (powered down and not drained: Slurm could pair an up node with its
    boot, the partial gang the exclusion is there to prevent; then the exclusion stays and the daemon recovers a
    hold).  Otherwise Slurm can start the gang only whole, on nodes that are up and undrained, so the names taken
    out are the `unschedulable` ones first (drained: Slurm cannot give them until the daemon undrains them, and
    they are the boots the plan meant for the gang), then the rest by name."""
    outside = candidates - want
    if len(outside) >= nodes or outside & bootable:
        return want
    order = sorted(want & candidates, key=lambda n: (n not in unschedulable, n))
    return want - frozenset(order[: nodes - len(outside)])


@dataclass(frozen=True)
class UpNode:
    """A node that is up or coming up (not powered down, powering down or down), as the gang gate reads it."""

    name: str
    pool: str
    gpus: int
    free_gpus: int  # GPUs no job holds
    ready: bool  # registered and taking work now (not booting, not drained)
    reserved: bool = False  # of a reservation pool: paid for whether it waits or not, never excluded


def gate_exclusion(
    nodes: int,
    gpus_per_node: int,
    pools: frozenset[str] | None,
    up: Iterable[UpNode],
    bootable: Mapping[str, int],
    *,
    whole: bool = False,
) -> frozenset[str]:
    """The `ExcNodeList` a gated gang of `nodes` x `gpus_per_node` is released with (empty: none).  None when nodes
    ready now with the room, in one of `pools` (None: any; a gang stays in one pool, `fleet.slurm.topology`), hold it
    whole, nor when no such pool has `nodes` names powered down to boot (`bootable`: pool -> names powered down and
    not down; then what Slurm can give it is all there is).  Else the nodes of `pools` that are up or coming up and
    could take a member (busy ones too: a job can end in the second before Slurm's pass), so that Slurm gives it
    powered-down names only and it boots whole; reserved nodes excepted (`UpNode.reserved`): a reserved node
    waiting for the others' boot bills nothing more, and excluding it would push the gang off the reservation
    onto paid capacity (the reservation floor launches reserved names up front, so they seldom wait).  `whole`: the
    gang takes its nodes whole (`--exclusive`): a ready node holds a member only with every GPU free."""
    mine = [n for n in up if pools is None or n.pool in pools]
    ready = Counter(
        n.pool for n in mine if n.ready and n.free_gpus >= gpus_per_node and (not whole or n.free_gpus >= n.gpus)
    )
    if any(count >= nodes for count in ready.values()):
        return frozenset()
    if not any(count >= nodes for pool, count in bootable.items() if pools is None or pool in pools):
        return frozenset()
    return frozenset(n.name for n in mine if n.gpus >= gpus_per_node and not n.reserved)
