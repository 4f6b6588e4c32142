"""Scale-down pass: drain ready-idle nodes past the idle timeout, delete drained empty nodes by name.

The idle timeout is per machine type (`Policy.idle_timeout_for`: the settings rule keeps shapes whose
jobs arrive often warm, others not).  Never a node with work on it (or one that this plan just placed
work on); reservation-backed nodes are kept while `policy.keep_reserved_nodes` (they are paid for
either way); each pool keeps its floor (`minimum.pool_floor`).  Nodes stuck requested/booting past
`policy.boot_timeout_s` are deleted by name.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

from autoscaler.model import COMING_STATES, DeleteNodes, Drain, Inventory, Node, NodeState, Policy
from autoscaler.node_names import split_node_name
from autoscaler.planner.minimum import pool_floor
from fleet.catalog import CapacityType

#: the states of a node that stays up unless scaled down (counted against the pool's `min_nodes`)
STAYING_STATES = COMING_STATES | {NodeState.READY_IDLE, NodeState.BUSY}


def boot_timeouts(inventory: Inventory, policy: Policy, now: float) -> list[str]:
    """Names of nodes requested/booting for longer than the boot timeout (none when unset)."""
    if policy.boot_timeout_s is None:
        return []
    return [n.name for n in inventory.nodes if n.state in COMING_STATES and now - n.since > policy.boot_timeout_s]


def idle_timeout_text(policy: Policy, nodes: Iterable[Node]) -> str:
    """The idle timeout(s) that applied to `nodes`, e.g. ``300s`` or ``0s/720s``."""
    vals = sorted({policy.idle_timeout_for(n.offering.machine_type) for n in nodes})
    return "/".join(f"{v:g}s" for v in vals) or f"{policy.idle_timeout_s:g}s"


def name_index(name: str) -> int:
    """The number of a `prefix-i` node name (a large number when there is none): Slurm hands out the lowest free
    name of a nodeset first, so the order of reuse is this number's."""
    parsed = split_node_name(name)
    return parsed[1] if parsed else 1 << 30


def name_order(name: str) -> tuple[str, int, str]:
    """Nodeset, then index (`name_index`), then the name: the order Slurm hands out free names in."""
    parsed = split_node_name(name)
    return (parsed[0], parsed[1], name) if parsed else (name.rpartition("-")[0], 1 << 30, name)


def warm_candidate(node: Node, policy: Policy) -> bool:
    """A node the warm-node cap counts: ready, idle and with no work, reserved nodes the policy keeps anyway
    (`Policy.keep_reserved_nodes`) excepted."""
    if node.state is not NodeState.READY_IDLE or node.has_work:
        return False
    return not (policy.keep_reserved_nodes and node.offering.capacity_type is CapacityType.RESERVATION)


def idle_over_cap(inventory: Inventory, policy: Policy, now: float, in_use: Collection[str] = ()) -> set[str]:
    """Idle nodes beyond `Policy.idle_keep_max_by_machine` for their machine type go now.  The ones kept warm
    are those the scheduler allocates first: Slurm takes the lowest-numbered free name of a nodeset (powered
    up or not), so the lowest-numbered idle nodes are the ones a next job reuses; deleting the high-numbered
    ones keeps the low names dense and up.  Ties (other name schemes): the most recently idle first."""
    caps = policy.idle_keep_max_by_machine
    if not caps:
        return set()
    by_machine: dict[str, list[Node]] = {}
    for n in inventory.nodes:
        if n.name not in in_use and warm_candidate(n, policy) and n.offering.machine_type in caps:
            by_machine.setdefault(n.offering.machine_type, []).append(n)
    out: set[str] = set()
    for m, nodes in by_machine.items():
        nodes.sort(key=lambda n: (name_index(n.name), -n.since, n.name))
        out.update(n.name for n in nodes[caps[m] :])
    return out


def scale_down_idle(
    inventory: Inventory,
    policy: Policy,
    now: float,
    in_use: Collection[str] = (),
    timed_out: Collection[str] = (),
) -> tuple[list[Drain], list[DeleteNodes]]:
    """Drain and delete commands, one of each per pool at most, names sorted.

    `in_use`: nodes this plan places work on (never drained); `timed_out`: boot-timeout victims."""
    drains: list[Drain] = []
    deletes: list[DeleteNodes] = []
    timed = set(timed_out)
    over_cap = idle_over_cap(inventory, policy, now, in_use)
    for pool in inventory.pools:
        # one pass over the pool's nodes (this runs every tick over the whole fleet)
        staying = 0
        idle: list[Node] = []
        drained: list[str] = []
        for n in inventory.nodes_by_pool[pool.name]:
            state = n.state
            if state in STAYING_STATES and n.name not in timed:
                staying += 1
            if state is NodeState.READY_IDLE:
                if (
                    not n.has_work
                    and n.name not in in_use
                    and (n.idle_for(now) >= policy.idle_timeout_for(n.offering.machine_type) or n.name in over_cap)
                    and not (policy.keep_reserved_nodes and n.offering.capacity_type is CapacityType.RESERVATION)
                ):
                    idle.append(n)
            elif state is NodeState.DRAINING and not n.has_work:
                drained.append(n.name)
        spare = staying - pool_floor(pool, policy)
        idle.sort(key=lambda n: (n.since, n.name))  # longest idle first
        victims = sorted(n.name for n in idle[: max(0, spare)])
        if victims:
            drains.append(
                Drain(
                    pool.name,
                    tuple(victims),
                    f"idle for >= {idle_timeout_text(policy, [n for n in idle if n.name in victims])} (idle timeout)"
                    f"{' or beyond the warm-node cap' if over_cap & set(victims) else ''}; drain then delete",
                )
            )
        drained.sort()
        stuck = sorted(n.name for n in inventory.nodes_by_pool[pool.name] if n.name in timed) if timed else []
        if drained:
            deletes.append(DeleteNodes(pool.name, tuple(drained), "drained and empty"))
        if stuck:
            deletes.append(
                DeleteNodes(pool.name, tuple(stuck), f"not ready after {policy.boot_timeout_s:g}s (boot timeout)")
            )
    return drains, deletes
