"""Units that take their nodes whole (`WorkUnit.whole_node`: a Slurm job with ``--exclusive`` or in an
OverSubscribe=EXCLUSIVE partition): which shape each takes, decided once per plan before placement.

Such a unit shares no node, so it occupies every GPU of whatever node it gets: the plan must see it as a unit of
that node's GPUs.  The shape is not the scheduler's to pick here but the planner's, because it depends on what the
planner alone knows: paid-for reservation capacity (a whole reserved node costs nothing at the margin), and which
offerings are backed off (a stocked-out smaller shape is no reason to leave the job waiting when a larger one can
be had).  The rule, in the planner's own order of capacity:

1. reservation capacity: the smallest shape with a reserved node free whole, or free reserved slots to launch;
2. otherwise the smallest shape with a node free whole, or an offering not backed off whose launch every limit
   allows (right-sized first; a larger node only when the smaller cannot be had now);
3. otherwise the smallest shape: the unit is left unserved with the smallest shape's reason (stocked out, no
   pool), as before.

The unit comes out with `gpus_per_node` set to that shape's GPUs and `pools` narrowed to that shape's pools, so
the placement passes (`placement.py`) treat it as any unit that fills its node.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from autoscaler.model import Pool, WorkUnit
from autoscaler.planner.capacity import BOOTING, READY
from autoscaler.planner.offers import CandidateStream, UnitClass
from autoscaler.planner.placement import PlanState
from fleet.catalog import CapacityType


def whole_node_shapes(unit: WorkUnit, pools: Sequence[Pool]) -> dict[int, frozenset[str]]:
    """GPUs per node -> the pools of that shape `unit` may run on (its queue, its `pools`, its GPU and machine types,
    at least its GPUs per node), smallest shape first."""
    cls = UnitClass(unit.gpus_per_node, unit.nodes, unit.gpu_types, unit.machine_types, True, True, unit.queue,
                    unit.pools)  # fmt: skip
    out: dict[int, set[str]] = {}
    for p in pools:
        if cls.may_use_pool(p) and cls.accepts(p.gpu_type, p.machine_type, p.gpus_per_node):
            out.setdefault(p.gpus_per_node, set()).add(p.name)
    return {g: frozenset(out[g]) for g in sorted(out)}


def take_whole(units: Sequence[WorkUnit], st: PlanState) -> list[WorkUnit]:
    """`units`, each that takes its nodes whole as a unit of the shape it takes (module docstring), the others as
    they are.  The shape is decided once per class of identical units (a pending array's tasks are one class), before
    any is placed."""
    shapes: dict[UnitClass, tuple[int, frozenset[str] | None]] = {}
    out = []
    for u in units:
        if u.whole_node:
            cls = UnitClass.of(u, st.policy, st.now)
            if cls not in shapes:
                shapes[cls] = _shape(u, st)
            gpus, pools = shapes[cls]
            u = dataclasses.replace(u, gpus_per_node=gpus, pools=pools)
        out.append(u)
    return out


def _shape(unit: WorkUnit, st: PlanState) -> tuple[int, frozenset[str] | None]:
    """(GPUs per node, pools) of the shape `unit` takes whole."""
    shapes = whole_node_shapes(unit, st.inventory.pools)
    if not shapes:
        return unit.gpus_per_node, unit.pools  # no pool fits it: explained unserved like any unit
    by_name = st.inventory.pool_by_name
    reserved: list[int] = []
    available: list[int] = []
    for gpus, names in shapes.items():
        shaped = dataclasses.replace(unit, gpus_per_node=gpus, pools=names)
        cls = UnitClass.of(shaped, st.policy, st.now)
        usable = st.book.existing_pools(cls)  # the pools its nodes may come from (spot only if it may use spot)
        free = [p for p in usable if _free_whole(st, p, gpus, unit)]
        res_stream, market, _ = st.book.streams(cls, 1)
        to_reserve = _launchable(st, res_stream, unit.nodes)
        if to_reserve or any(by_name[p].capacity_type is CapacityType.RESERVATION for p in free):
            reserved.append(gpus)
        if free or to_reserve or _launchable(st, market, unit.nodes):
            available.append(gpus)
    gpus = min(reserved or available or shapes)
    return gpus, shapes[gpus]


def _launchable(st: PlanState, candidates: CandidateStream, nodes: int) -> bool:
    """Some candidate can launch `nodes` nodes now: not backed off (the stream has none that are) and within every
    limit (`Headroom.blocker`: the pool's and the fleet's, a reservation's free slots, the budget)."""
    return any(
        st.headroom.blocker(c.pool.name, c.key, nodes, c.offering.gpus_per_node, c.hourly_usd * nodes) is None
        for c in candidates.remaining()
    )


def _free_whole(st: PlanState, pool: str, gpus: int, unit: WorkUnit) -> bool:
    """A node of `pool` that is up or coming up has all `gpus` free and is not one `unit` avoids."""
    return any(s.name not in unit.avoid for s in st.index.slots(pool, gpus, (READY, BOOTING)))
