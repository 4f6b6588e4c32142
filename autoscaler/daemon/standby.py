"""The Slurm side of standby nodes (`autoscaler.planner.standby`): what slurmctld is already bringing up, and
which names to power up.

Standby nodes are brought up with `scontrol update nodename=... state=power_up`: slurmctld then calls the
ResumeProgram with the names, and the daemon launches them as it launches any resumed name (a resume with no job).
Between the power-up and the instance being listed, a name is POWERING_UP in Slurm with no job and absent from the
inventory: `standby_in_flight` counts those per machine type, so the next tick does not power up more.  A pool's
floor (its `min_nodes`, a reservation's slots) is brought up the same way (`floor_count`).  The names
powered up are the lowest-numbered powered-down free names of the pool (the ones slurmctld allocates first)."""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping, Sequence

from autoscaler.core import name_index
from autoscaler.daemon.snapshot import NameIndex
from autoscaler.model import Inventory, NodeState, Pool
from autoscaler.slurm.readers import SlurmNode


def _live(inventory: Inventory) -> set[str]:
    return {n.name for n in inventory.nodes if n.state is not NodeState.GONE}


def _unlisted_power_ups(
    pools: Sequence[Pool], inventory: Inventory, snodes: Mapping[str, SlurmNode] | None
) -> Iterator[tuple[Pool, SlurmNode]]:
    """The names Slurm is powering up that the inventory does not list yet, with their pool."""
    if not snodes:
        return
    index, live = NameIndex(pools), _live(inventory)
    for name, n in snodes.items():
        pool = index.pool_of(name)
        if pool is not None and name not in live and n.powering_up:
            yield pool, n


def standby_in_flight(
    pools: Sequence[Pool], inventory: Inventory, snodes: Mapping[str, SlurmNode] | None
) -> dict[str, int]:
    """Machine type -> names Slurm is powering up with no job that the inventory does not list yet."""
    out: dict[str, int] = {}
    for pool, n in _unlisted_power_ups(pools, inventory, snodes):
        if not n.has_work:
            out[pool.machine_type] = out.get(pool.machine_type, 0) + 1
    return out


def floor_count(
    pool: str, count: int, inventory: Inventory, snodes: Mapping[str, SlurmNode] | None, pools: Sequence[Pool]
) -> int:
    """How many names to power up for a plan's launch to a pool's floor (`ScaleUp.minimum`,
    `planner.minimum.pool_floor`) of `count` nodes: the plan counts the nodes the inventory lists, so names Slurm is
    already powering up for the pool (for a job or for an earlier tick's floor) come off; `standby_names` picks
    them."""
    return count - sum(1 for p, _ in _unlisted_power_ups(pools, inventory, snodes) if p.name == pool)


def standby_names(
    pool: str,
    count: int,
    inventory: Inventory,
    snodes: Mapping[str, SlurmNode] | None,
    pools: Sequence[Pool],
    reserved: Collection[str] = (),
) -> list[str]:
    """Up to `count` names of `pool` to power up: powered down, not powering up or down, no job, not drained or
    down, not live, in no Slurm advanced reservation (`reserved`: only its jobs could use the node); lowest index
    first.  None when Slurm did not answer (nothing is powered up blind)."""
    if not snodes or count <= 0:
        return []
    index, live = NameIndex(pools), _live(inventory)
    free = [
        name
        for name, n in snodes.items()
        if (p := index.pool_of(name)) is not None
        and p.name == pool
        and name not in live
        and name not in reserved
        and n.powered_down
        and not (n.powering_up or n.powering_down or n.has_work or n.drain or n.state == "down")
    ]
    return sorted(free, key=name_index)[:count]
