"""slurm.conf node Weights: which CLOUD node slurmctld allocates a job first.

A node's Weight encodes, most significant first:

1. the capacity tier: reservation < spot < flex-start < on-demand (paid-for capacity first, then the cheapest);
2. the shape's rank within the tier: cheapest $/GPU-hour first (prices within `fleet.catalog.price_ties`' tolerance
   are the same price), then fewer GPUs (right-sizing: with equal per-GPU prices a 1-GPU job takes a 1-GPU node,
   never an 8-GPU node that one small job would pin).

    weight = TIER_BASE[capacity] + rank

Ranks are taken over all pools of a cluster with the same capacity type (a node's Weight is one number, whatever
partitions it is in): the order this gives within any one partition's tier is the order over that partition's own
shapes.  `fleet render slurm-conf` (`fleet.slurm.conf`) and the simulated Slurm (`autoscaler.replay.simslurm`)
both call `pool_weights`.

What real slurmctld 22.05 does with them (tests/e2e/test_weights.py, docs/autoscaler.md "Node weights"): among
nodes that need no power-up the lowest Weight wins, and every such node comes before any powered-down one (so a
node kept warm serves the next job without any weight change); among powered-down nodes Weight is ignored.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from fleet.catalog import CapacityType, Catalog
from fleet.catalog.price_ties import price_tiers
from fleet.slurm.node_size import real_memory_mib

__all__ = [
    "MAX_RANK",
    "TIER_BASE",
    "PoolShape",
    "node_weight",
    "pool_shapes",
    "pool_weights",
    "ranked",
    "ranking_shapes",
    "shape_keys",
    "shape_ranks",
]

#: the first weight of each capacity tier (lower is allocated first); ranks fill the gap up to the next tier
TIER_BASE: Mapping[CapacityType, int] = {
    CapacityType.RESERVATION: 1_000,
    CapacityType.SPOT: 10_000,
    CapacityType.FLEX_START: 20_000,
    CapacityType.ON_DEMAND: 30_000,
}
MAX_RANK = 8_999  # the smallest gap between two tiers' bases, less one: ranks 0..MAX_RANK stay inside their tier


@dataclass(frozen=True)
class PoolShape:
    """What a pool's Weight depends on: its capacity type, GPUs per node and $/GPU-hour at that capacity type
    (None: not priced, ranked after every priced shape)."""

    pool: str
    capacity: CapacityType
    machine_type: str
    gpus: int
    usd_per_gpu_hour: float | None
    cpus: int = 0  # a node's CPUs and RealMemory as slurm.conf renders them (0: not known)
    memory_mib: int = 0


def node_weight(capacity: CapacityType, rank: int) -> int:
    """The Weight of a node of shape `rank` (0: the tier's first) in `capacity`'s tier."""
    if not 0 <= rank <= MAX_RANK:
        raise ValueError(f"rank: must be 0..{MAX_RANK}, got {rank}")
    return TIER_BASE[capacity] + rank


def shape_keys(shapes: Sequence[PoolShape]) -> dict[PoolShape, tuple[float, int]]:
    """Each shape's place in the order of `shapes`: (price tier, GPUs), unpriced shapes after every priced one.
    Prices in one tier are the same price (`fleet.catalog.price_ties`): a3-highgpu-8g spot, $0.0000125/GPU-h under
    -1g by the price list's rounding, is not a reason to put a 1-GPU job on an 8-GPU node."""
    tiers = price_tiers(s.usd_per_gpu_hour for s in shapes if s.usd_per_gpu_hour is not None)
    return {s: (math.inf if s.usd_per_gpu_hour is None else tiers[s.usd_per_gpu_hour], s.gpus) for s in shapes}


def ranked(shapes: Sequence[PoolShape]) -> list[PoolShape]:
    """`shapes` best first: `shape_keys`, then the machine type's name (so renders are stable)."""
    keys = shape_keys(shapes)
    return sorted(shapes, key=lambda s: (*keys[s], s.machine_type))


def shape_ranks(shapes: Iterable[PoolShape]) -> dict[str, int]:
    """Pool -> rank of its shape within its capacity tier: cheapest $/GPU-hour first, then fewer GPUs (dense: equal
    shapes share a rank, and Slurm's node-table order decides between them)."""
    by_tier: dict[CapacityType, list[PoolShape]] = {}
    for s in shapes:
        by_tier.setdefault(s.capacity, []).append(s)
    out: dict[str, int] = {}
    for tier in by_tier.values():
        keys = shape_keys(tier)
        order = sorted(set(keys.values()))
        for s in tier:
            out[s.pool] = order.index(keys[s])
    return out


def pool_shapes(pools: Iterable[tuple[str, CapacityType, str]], catalog: Catalog, region: str) -> list[PoolShape]:
    """`PoolShape`s of (pool name, capacity type, machine type) with the catalog's list prices in `region` (a
    reservation ranks at the on-demand price, flex-start too: `Price.hourly`)."""
    out = []
    for name, capacity, machine_type in pools:
        m = catalog.machine(machine_type)
        price = m.price(region)
        hourly = price.hourly(capacity) if price is not None else None
        per_gpu = hourly / m.gpu_count if hourly else None
        out.append(PoolShape(name, capacity, machine_type, m.gpu_count, per_gpu, m.vcpus, real_memory_mib(m)))
    return out


def ranking_shapes(pools: Iterable[tuple[str, CapacityType, str]], catalog: Catalog, region: str) -> list[PoolShape]:
    """`PoolShape`s of (pool name, capacity type, machine type) priced at the on-demand list price whatever their
    capacity type, each keeping its own: what the job_submit.lua ranks machine types by (`fleet.slurm.job_submit`;
    its spot pin reads the capacity types, `job_submit.spot_pinned`).  `fleet render slurm-conf` and the simulated
    Slurm both build the lua's shapes here."""
    rows = list(pools)
    priced = pool_shapes(((name, CapacityType.ON_DEMAND, m) for name, _, m in rows), catalog, region)
    return [replace(s, capacity=capacity) for s, (_, capacity, _) in zip(priced, rows, strict=True)]


def pool_weights(pools: Iterable[tuple[str, CapacityType, str]], catalog: Catalog, region: str) -> dict[str, int]:
    """Pool name -> the static Weight of its nodes (what `fleet render slurm-conf` writes on its NodeName line)."""
    shapes = pool_shapes(pools, catalog, region)
    ranks = shape_ranks(shapes)
    return {s.pool: node_weight(s.capacity, ranks[s.pool]) for s in shapes}
