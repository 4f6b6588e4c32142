"""Standby nodes: idle nodes of a shape kept up and replenished, so the next jobs start without waiting a boot.

`Policy.standby_by_machine` (machine type -> nodes; the settings rule derives it from the wait value,
`autoscaler.planner.rule.standby_nodes`) asks for that many idle nodes of the shape at all times.  A job that takes
one starts at once; the planner then launches a replacement, which is ready a boot later.  The idle keep
(`idle_timeout_by_machine`) only decides how long a node a job *freed* is kept; standby nodes are brought up ahead
of demand, which is what lowers the wait of the jobs that arrive while no freed node is idle.

The planner serves standby as phantom units, one full node of the shape each, planned after all real work (the
lowest priority): a unit placed on an idle or booting node with no work keeps that node (it is in use for the
plan, so the scale-down leaves it); a unit with no such node launches one.  `in_flight` (machine type -> nodes)
counts the standby nodes the scheduler is already bringing up that the inventory does not show yet (on Slurm: names
powered up whose instance is not listed yet); they count against the target.  Pure."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from autoscaler.model import Inventory, Policy, ScaleUp, WorkUnit

#: the id prefix of standby units (`standby/<machine type>/<i>`)
STANDBY_PREFIX = "standby/"
#: below every real job's priority (Slurm and Kueue priorities are >= 0): standby never displaces work
STANDBY_PRIORITY = -1


def is_standby_unit(unit_id: str) -> bool:
    return unit_id.startswith(STANDBY_PREFIX)


def standby_count(scale_up: ScaleUp) -> int:
    """How many of a scale-up's nodes are standby (the rest serve real units)."""
    return sum(1 for u in scale_up.units if is_standby_unit(u))


def standby_units(
    policy: Policy, inventory: Inventory, now: float, in_flight: Mapping[str, int] | None = None
) -> list[WorkUnit]:
    """One unit per standby node still wanted: `policy.standby_by_machine` less `in_flight`, for machine types some
    pool launches (non-spot: a standby node must not vanish under the job it is kept for)."""
    out: list[WorkUnit] = []
    flying = in_flight or {}
    for machine, want in sorted(policy.standby_by_machine.items()):
        pools = [p for p in inventory.pools if p.machine_type == machine and p.max_nodes > 0]
        if not pools:
            continue
        gpus = pools[0].gpus_per_node
        queues = sorted({q for p in pools for q in (p.queues or {"default"})})
        for i in range(max(0, want - flying.get(machine, 0))):
            out.append(
                WorkUnit(
                    id=f"{STANDBY_PREFIX}{machine}/{i}",
                    submit_time=now,
                    gpus_per_node=gpus,
                    machine_types=frozenset({machine}),
                    gpu_types=frozenset({pools[0].gpu_type}),
                    priority=STANDBY_PRIORITY,
                    queue=queues[0],
                )
            )
    return out


def real_demand(units: Iterable[WorkUnit]) -> list[WorkUnit]:
    """The units that are jobs (not standby)."""
    return [u for u in units if not is_standby_unit(u.id)]
