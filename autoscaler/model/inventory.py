"""Inventory: the pools the autoscaler may resize and the nodes they hold.

A `Pool` is one resizable group of identical nodes (one machine type and capacity type, one or
more zones); its node names come from a fixed name space ``f"{node_name_prefix}-{i}"`` for
``i < max_nodes`` (Slurm CLOUD nodes are pre-declared that way), so new nodes are named by
picking free indices (`Inventory.free_names`), never by inventing ids.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from autoscaler.cloud import OfferingKey
from autoscaler.model.nodes import LIVE_STATES, Node
from autoscaler.node_names import node_name
from fleet.catalog import CapacityType, Catalog


@dataclass(frozen=True)
class Pool:
    """One resizable pool.

    - `queues`: the queues / partitions it serves (None = every queue).
    - `spot_tolerant`: for a spot pool, every queue it backs tolerates preemption.
    - `compact_placement` / `placement_policy` / `placement_max_vms`: the machine wants a compact
      placement policy; a gang must fit in one (at most `placement_max_vms` VMs, None = no limit).
    - `max_gpus`: optional cap on the pool's GPUs, on top of `max_nodes`.
    """

    name: str
    machine_type: str
    gpu_type: str
    gpus_per_node: int
    zones: tuple[str, ...]
    capacity_type: CapacityType
    max_nodes: int
    provider: str = "gcp"
    min_nodes: int = 0
    reservation: str | None = None
    node_name_prefix: str = ""
    queues: frozenset[str] | None = None
    spot_tolerant: bool = False
    compact_placement: bool = False
    placement_policy: str | None = None
    placement_max_vms: int | None = None
    max_gpus: int | None = None

    def __post_init__(self) -> None:
        where = f"(pool {self.name!r})"
        if not self.name:
            raise ValueError("Pool.name: must be a non-empty string")
        if self.gpus_per_node < 1:
            raise ValueError(f"Pool.gpus_per_node: must be >= 1, got {self.gpus_per_node} {where}")
        if not self.zones:
            raise ValueError(f"Pool.zones: at least one zone is needed {where}")
        if self.min_nodes < 0 or self.max_nodes < self.min_nodes:
            raise ValueError(
                f"Pool.max_nodes: need 0 <= min_nodes <= max_nodes, got {self.min_nodes}..{self.max_nodes} {where}"
            )
        object.__setattr__(self, "capacity_type", CapacityType(self.capacity_type))
        object.__setattr__(self, "zones", tuple(self.zones))
        if not self.node_name_prefix:
            object.__setattr__(self, "node_name_prefix", self.name.replace("/", "-"))
        if self.queues is not None and not isinstance(self.queues, frozenset):
            object.__setattr__(self, "queues", frozenset(self.queues))

    def serves(self, queue: str) -> bool:
        return self.queues is None or queue in self.queues

    def can_launch(self, key: OfferingKey) -> bool:
        """True when this pool can create nodes of offering `key`."""
        return (
            key.provider == self.provider
            and key.machine_type == self.machine_type
            and key.capacity_type == self.capacity_type
            and key.zone in self.zones
            and (self.reservation is None or key.reservation == self.reservation)
        )

    def node_name(self, index: int) -> str:
        return node_name(self.node_name_prefix, index)

    @classmethod
    def from_inventory(
        cls, p: Any, *, qualified: bool = False, placement_max_vms: int | None = None, catalog: Catalog | None = None
    ) -> Pool:
        """Build from a `fleet.inventory.InventoryPool` (duck-typed, so this module stays free of
        pydantic).  `qualified` names the pool "cluster/pool" for inventories spanning clusters.
        With `catalog`, a compact-placement pool's VM limit comes from the machine type unless given."""
        if placement_max_vms is None and catalog is not None and p.compact_placement and p.machine_type in catalog:
            placement_max_vms = catalog.machine(p.machine_type).compact_placement_max_vms or None
        return cls(
            name=f"{p.cluster}/{p.name}" if qualified else p.name,
            machine_type=p.machine_type,
            gpu_type=p.gpu_type,
            gpus_per_node=p.gpus_per_node,
            zones=tuple(p.zones),
            capacity_type=CapacityType(p.capacity_type),
            max_nodes=p.max_nodes,
            provider=p.provider,
            min_nodes=p.min_nodes,
            reservation=p.reservation,
            node_name_prefix=p.node_name_prefix,
            queues=frozenset(p.slurm_partitions) if p.slurm_partitions else None,
            spot_tolerant=p.spot_tolerant,
            compact_placement=p.compact_placement,
            placement_policy=p.placement_policy,
            placement_max_vms=placement_max_vms,
        )


@dataclass(frozen=True)
class Inventory:
    """Every pool and node.  Node pools must name pools of `pools`; node names are unique."""

    pools: tuple[Pool, ...]
    nodes: tuple[Node, ...] = field(default=())

    def __post_init__(self) -> None:
        object.__setattr__(self, "pools", tuple(self.pools))
        object.__setattr__(self, "nodes", tuple(self.nodes))
        names = {p.name for p in self.pools}
        if len(names) != len(self.pools):
            dup = sorted({p.name for p in self.pools if sum(q.name == p.name for q in self.pools) > 1})
            raise ValueError(f"Inventory.pools: duplicate pool names {dup}")
        if {n.pool for n in self.nodes} <= names and len({n.name for n in self.nodes}) == len(self.nodes):
            return  # the common case, checked in bulk; the loop below names the first offender
        seen: set[str] = set()
        for n in self.nodes:
            if n.pool not in names:
                raise ValueError(f"Inventory.nodes: node {n.name!r} names unknown pool {n.pool!r}")
            if n.name in seen:
                raise ValueError(f"Inventory.nodes: duplicate node name {n.name!r}")
            seen.add(n.name)

    @cached_property
    def pool_by_name(self) -> dict[str, Pool]:
        return {p.name: p for p in self.pools}

    @cached_property
    def nodes_by_pool(self) -> dict[str, tuple[Node, ...]]:
        out: dict[str, list[Node]] = {p.name: [] for p in self.pools}
        for n in self.nodes:
            out[n.pool].append(n)
        return {k: tuple(v) for k, v in out.items()}

    def pool(self, name: str) -> Pool:
        try:
            return self.pool_by_name[name]
        except KeyError:
            raise KeyError(f"unknown pool {name!r} (known: {sorted(self.pool_by_name)})") from None

    def live_nodes(self, pool: str) -> list[Node]:
        """Nodes of `pool` that are billed and hold their name (not GONE)."""
        return [n for n in self.nodes_by_pool[pool] if n.state in LIVE_STATES]

    def used_names(self, pool: str) -> set[str]:
        return {n.name for n in self.live_nodes(pool)}

    def free_names(self, pool: str, count: int, taken: Iterable[str] = ()) -> list[str]:
        """The lowest `count` free names of the pool's name space (`prefix-i`, i < max_nodes),
        skipping live nodes and `taken`.  Fewer are returned when the name space runs out."""
        return free_names(self.pool(pool), self.used_names(pool) | set(taken), count)


def free_names(pool: Pool, used: set[str], count: int, start: int = 0) -> list[str]:
    """The lowest `count` names ``prefix-i`` (start <= i < pool.max_nodes) not in `used`."""
    out: list[str] = []
    for i in range(start, pool.max_nodes):
        if len(out) >= count:
            break
        name = pool.node_name(i)
        if name not in used:
            out.append(name)
    return out
