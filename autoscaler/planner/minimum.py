"""Minimum pass: launch nodes up to each pool's floor (`pool_floor`) before placing demand.

A pool's floor is its `min_nodes`; with `Policy.launch_reserved_nodes` a reservation pool's floor is every slot
it has (`max_nodes`), as Cluster Toolkit's reservation blueprints run reserved nodes static
(`node_count_static` = the reservation's size): the reservation bills whether its slots run VMs or not, so a
reserved node kept up costs nothing more and spares every job that lands on it a boot (and a gang, reserved
nodes that wait for the boot of its other nodes).  The free slots the reservation reports cap the launches.

The new nodes go into the capacity index as capacity of this plan, so pending units fill them
before anything else is bought.  Each launch goes through the same limits, budget, backoff and
name space as any other launch; a pool that cannot reach its floor simply stays below it."""

from __future__ import annotations

from autoscaler.model import NodeState, Policy, Pool
from autoscaler.planner.capacity import NEW, Slot
from autoscaler.planner.offers import marginal_hourly
from autoscaler.planner.placement import Batch, PlanState
from fleet.catalog import CapacityType

#: states of nodes that count toward a pool's minimum (not leaving)
STAYING = frozenset({NodeState.REQUESTED, NodeState.BOOTING, NodeState.READY_IDLE, NodeState.BUSY})


def pool_floor(pool: Pool, policy: Policy) -> int:
    """The nodes `pool` keeps up whatever the queue: its `min_nodes`, or every slot of a reservation pool while
    `policy.launch_reserved_nodes` and `policy.keep_reserved_nodes` (a fleet that scales reserved nodes down does
    not launch them ahead of work either)."""
    if policy.launch_reserved_nodes and policy.keep_reserved_nodes and pool.capacity_type is CapacityType.RESERVATION:
        return pool.max_nodes
    return pool.min_nodes


def keep_min_nodes(st: PlanState) -> None:
    for pool in st.inventory.pools:
        floor = pool_floor(pool, st.policy)
        if floor == 0:
            continue
        have = sum(1 for n in st.inventory.nodes_by_pool[pool.name] if n.state in STAYING)
        need = floor - have
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
