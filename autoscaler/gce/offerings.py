"""Offerings of GCE pools: one per (pool, zone), priced from the machine catalog.

Pure: the caller reads reservations (count, inUseCount) and regional quotas (limit, usage) and
passes them in.  `available_nodes` is the free slots of a reservation pool, or the GPU quota
headroom in whole nodes for spot/on-demand pools when the region reports that quota metric;
None (unknown) otherwise.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from autoscaler.cloud import Offering, OfferingKey
from autoscaler.gce.translate import gpu_quota_metric
from fleet.catalog import CapacityType

Quotas = Mapping[tuple[str, str], Mapping[str, tuple[float, float]]]  # (project, region) -> metric -> (limit, usage)
Slots = Mapping[tuple[str, str, str], tuple[int, int] | None]  # (project, zone, reservation) -> (count, in use)


def offering_key(pool: Any, zone: str) -> OfferingKey:
    capacity = CapacityType(pool.capacity_type)
    reservation = pool.reservation if capacity is CapacityType.RESERVATION else None
    return OfferingKey(pool.provider, zone, pool.machine_type, capacity, reservation)


def build_offerings(
    pools: Sequence[Any], catalog: Any, *, reservations: Slots, quotas: Quotas
) -> tuple[list[Offering], list[str]]:
    """(offerings, warnings).  Pools are `InventoryPool`s; a pool without a catalog price for its
    capacity type in its region yields a warning instead of an offering."""
    out: dict[OfferingKey, Offering] = {}
    warnings: list[str] = []
    for pool in pools:
        capacity = CapacityType(pool.capacity_type)
        try:
            machine = catalog.machine(pool.machine_type)
        except (KeyError, ValueError) as exc:
            warnings.append(f"pool {pool.name}: machine_type {pool.machine_type!r} not in the catalog ({exc})")
            continue
        price = machine.price(pool.region)
        hourly = price.hourly(capacity) if price is not None else None
        if hourly is None:
            warnings.append(f"pool {pool.name}: no {capacity} price for {pool.machine_type} in {pool.region}")
            continue
        metric = gpu_quota_metric(pool.gpu_type, capacity)
        for zone in pool.zones:
            key = offering_key(pool, zone)
            if key in out:
                continue
            available: int | None = None
            size: int | None = None
            if capacity is CapacityType.RESERVATION and pool.reservation:
                slots = reservations.get((pool.project, zone, pool.reservation))
                size, used = slots if slots is not None else (0, 0)
                available = max(0, size - used)
            elif metric is not None:
                limit_usage = quotas.get((pool.project, pool.region), {}).get(metric)
                if limit_usage is not None:
                    limit, usage = limit_usage
                    available = max(0, math.floor((limit - usage) / pool.gpus_per_node))
            out[key] = Offering(
                key=key,
                hourly_usd=hourly,
                gpu_type=pool.gpu_type,
                gpus_per_node=pool.gpus_per_node,
                available_nodes=available,
                reservation_size=size,
            )
    return sorted(out.values(), key=lambda o: o.key), warnings
