"""Limits pass: how much the fleet may still grow, and the budget check.

`compute_headroom` turns the policy's limits, every pool's max, the offerings' known limits (free
reservation slots, quota in nodes) and the $/h budget into one `Headroom`; `Headroom.blocker`
says which limit (if any) a launch would break, and `Headroom.take` books a launch.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field

from autoscaler.cloud import Offering, OfferingKey
from autoscaler.model import Inventory, Policy, UnservedReason
from fleet.catalog import CapacityType

INF = math.inf
_EPS = 1e-9


def _cap(*limits: float | None) -> float:
    vals = [float(v) for v in limits if v is not None]
    return min(vals) if vals else INF


@dataclass
class Headroom:
    """Remaining room per limit (math.inf = unlimited).  Mutable: one plan books launches into it."""

    pool_nodes: dict[str, float]
    pool_gpus: dict[str, float]
    nodes: float = INF
    gpus: float = INF
    budget_usd_per_hour: float = INF
    offering_nodes: dict[OfferingKey, float] = field(default_factory=dict)

    def blocker(
        self, pool: str, key: OfferingKey, count: int, gpus_per_node: int, hourly_usd: float
    ) -> UnservedReason | None:
        """The UnservedReason a launch of `count` nodes would hit, or None when it fits.
        `hourly_usd` is the $/h the launch adds (0 for reservation capacity)."""
        gpus = count * gpus_per_node
        if self.offering_nodes.get(key, INF) < count:
            return UnservedReason.EXHAUSTED
        if self.pool_nodes.get(pool, 0) < count or self.pool_gpus.get(pool, INF) < gpus:
            return UnservedReason.POOL_LIMIT
        if self.nodes < count:
            return UnservedReason.NODE_LIMIT
        if self.gpus < gpus:
            return UnservedReason.GPU_LIMIT
        if hourly_usd > 0 and hourly_usd > self.budget_usd_per_hour + _EPS:
            return UnservedReason.BUDGET
        return None

    def take(self, pool: str, key: OfferingKey, count: int, gpus_per_node: int, hourly_usd: float) -> None:
        gpus = count * gpus_per_node
        if key in self.offering_nodes:
            self.offering_nodes[key] -= count
        self.pool_nodes[pool] -= count
        if pool in self.pool_gpus:
            self.pool_gpus[pool] -= gpus
        self.nodes -= count
        self.gpus -= gpus
        self.budget_usd_per_hour -= hourly_usd


def node_hourly(node_price: float | None, key: OfferingKey, prices: dict[OfferingKey, float]) -> float:
    """$/h a live node bills toward the budget: 0 for reservation capacity (paid regardless)."""
    if key.capacity_type is CapacityType.RESERVATION:
        return 0.0
    if node_price is not None:
        return node_price
    return prices.get(key, 0.0)


def compute_headroom(inventory: Inventory, offerings: Iterable[Offering], policy: Policy) -> Headroom:
    """Room left under every limit, counting every live node (requested .. deleting)."""
    offerings = list(offerings)
    for name in ("pool_max_nodes", "pool_max_gpus"):
        unknown = sorted(set(getattr(policy, name)) - set(inventory.pool_by_name))
        if unknown:
            raise ValueError(f"Policy.{name}: unknown pools {unknown} (known: {sorted(inventory.pool_by_name)})")
    budgeted = policy.budget_usd_per_hour is not None  # the spend below only limits a budget
    prices = {o.key: o.hourly_usd for o in offerings} if budgeted else {}
    pool_nodes: dict[str, float] = {}
    pool_gpus: dict[str, float] = {}
    total_nodes = total_gpus = 0
    spend = 0.0
    for pool in inventory.pools:
        live = inventory.live_nodes(pool.name)
        n, g = len(live), sum(x.gpus for x in live)
        total_nodes += n
        total_gpus += g
        if budgeted:
            spend += sum(node_hourly(x.hourly_usd, x.offering, prices) for x in live)
        pool_nodes[pool.name] = max(0.0, _cap(pool.max_nodes, policy.pool_max_nodes.get(pool.name)) - n)
        gcap = _cap(pool.max_gpus, policy.pool_max_gpus.get(pool.name))
        if gcap < INF:
            pool_gpus[pool.name] = max(0.0, gcap - g)
    return Headroom(
        pool_nodes=pool_nodes,
        pool_gpus=pool_gpus,
        nodes=max(0.0, _cap(policy.max_nodes) - total_nodes),
        gpus=max(0.0, _cap(policy.max_gpus) - total_gpus),
        budget_usd_per_hour=max(0.0, _cap(policy.budget_usd_per_hour) - spend),
        offering_nodes={o.key: float(o.available_nodes) for o in offerings if o.available_nodes is not None},
    )
