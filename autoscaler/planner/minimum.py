"""Minimum pass: launch nodes up to each pool's `min_nodes` before placing demand.

The new nodes go into the capacity index as capacity of this plan, so pending units fill them
before anything else is bought.  Each launch goes through the same limits, budget, backoff and
name space as any other launch; a pool that cannot reach its minimum simply stays below it."""

from __future__ import annotations

from autoscaler.model import NodeState
from autoscaler.planner.capacity import NEW, Slot
from autoscaler.planner.offers import marginal_hourly
from autoscaler.planner.placement import Batch, PlanState

#: states of nodes that count toward a pool's minimum (not leaving)
STAYING = frozenset({NodeState.REQUESTED, NodeState.BOOTING, NodeState.READY_IDLE, NodeState.BUSY})


def keep_min_nodes(st: PlanState) -> None:
    for pool in st.inventory.pools:
        if pool.min_nodes == 0:
            continue
        have = sum(1 for n in st.inventory.nodes_by_pool[pool.name] if n.state in STAYING)
        need = pool.min_nodes - have
        if need <= 0:
            continue
        offers = sorted(
            (o for o in st.book.usable if pool in st.book.launchers.get(o.key, ())),
            key=lambda o: (marginal_hourly(o), o.key.zone, o.key.reservation or ""),
        )
        for o in offers:
            hourly = marginal_hourly(o)
            while need > 0 and st.headroom.blocker(pool.name, o.key, 1, o.gpus_per_node, hourly) is None:
                names = st.names.take(pool, 1)
                if not names:
                    return
                st.headroom.take(pool.name, o.key, 1, o.gpus_per_node, hourly)
                key = ("min", pool.name, o.key)
                batch = st.batches.get(key)
                if batch is None:
                    batch = st.batches[key] = Batch(pool, o, hourly, minimum=True)
                batch.names.extend(names)
                st.add_capacity(Slot(names[0], pool.name, o.key.zone, o.gpus_per_node, NEW, batch))
                need -= 1
