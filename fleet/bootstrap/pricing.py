"""Estimated $/hour of a GPU pool at its minimum and maximum size, by capacity type.

List prices from the catalog (`Price`, one VM with its GPUs, USD/hour).  GPU nodes only: the
Slurm controller, login nodes, storage and network egress are not in the catalog and not
counted.  A reservation bills whether its VMs run or not, so a reservation pool costs its full
size even at min_nodes (the autoscaler fills reservations first for that reason).  Flex-start
is priced at the on-demand rate, an upper bound (DWS discounts vary).
"""

from __future__ import annotations

from dataclasses import dataclass

from fleet.catalog import CapacityType, MachineType


@dataclass(frozen=True)
class PoolPrice:
    per_node: float | None
    at_min: float | None
    at_max: float | None

    def to_json(self) -> dict:
        return {"per_node": _cents(self.per_node), "at_min": _cents(self.at_min), "at_max": _cents(self.at_max)}


def _cents(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


def pool_price(machine: MachineType, region: str, capacity: CapacityType, min_nodes: int, max_nodes: int) -> PoolPrice:
    price = machine.price(region)
    per_node = price.hourly(capacity) if price else None
    if per_node is None:
        return PoolPrice(None, None, None)
    billed_min = max_nodes if capacity is CapacityType.RESERVATION else min_nodes
    return PoolPrice(per_node, per_node * billed_min, per_node * max_nodes)


def price_table(machine: MachineType, region: str, min_nodes: int, max_nodes: int) -> dict[str, PoolPrice]:
    """The pool's price under every capacity type (+ 1- and 3-year committed use for reservations)."""
    table = {c.value: pool_price(machine, region, c, min_nodes, max_nodes) for c in CapacityType}
    price = machine.price(region)
    for label, rate in (("commit-1y", price and price.commit_1y), ("commit-3y", price and price.commit_3y)):
        if rate:
            table[label] = PoolPrice(rate, rate * max_nodes, rate * max_nodes)
    return table
