"""One notion of "the same per-GPU price" (fleet/catalog/price_ties.py), and the catalog gap it rests on."""

from __future__ import annotations

import itertools
from collections import defaultdict

from fleet.catalog import CapacityType, load_catalog
from fleet.catalog.price_ties import SAME_PRICE_USD_PER_GPU_HOUR, price_tiers

ROUNDING = 1e-4  # the price list quotes $/h to four decimals


def test_tiers_start_at_their_cheapest_price() -> None:
    # a chain of small steps does not make one tier: each tier spans the tolerance from its own cheapest
    assert price_tiers([1.0, 1.004, 1.008, 1.012, 2.0], tolerance=0.005) == {
        1.0: 0,
        1.004: 0,
        1.008: 1,
        1.012: 1,
        2.0: 2,
    }
    assert price_tiers([]) == {}
    assert price_tiers([4.0138, 4.01375, 8.0]) == {4.01375: 0, 4.0138: 0, 8.0: 1}  # the default tolerance


def test_the_catalog_has_a_gap_the_tolerance_sits_in() -> None:
    """Shapes of one GPU type in one region and capacity type are either the same per-GPU price to the list's
    rounding or at least a cent apart: the tolerance (half a cent) decides nothing the rounding does not."""
    cat = load_catalog()
    per_gpu: dict[tuple[str, str, CapacityType], list[tuple[float, str]]] = defaultdict(list)
    for m in cat.machines():
        for region, price in m.prices.items():
            for cap in (CapacityType.ON_DEMAND, CapacityType.SPOT):
                hourly = price.hourly(cap)
                if hourly:
                    per_gpu[(m.gpu.accelerator_type, region, cap)].append((hourly / m.gpu_count, m.name))
    pairs = 0
    for group in per_gpu.values():
        for (a, ma), (b, mb) in itertools.combinations(group, 2):
            pairs += 1
            d = abs(a - b)
            assert d <= ROUNDING or d >= 2 * SAME_PRICE_USD_PER_GPU_HOUR, (ma, mb, a, b)
    assert pairs > 1000
    # and the rounding is real: some shapes of one GPU type differ by it, in either direction
    a2 = {m.name: m.price("asia-southeast1").on_demand / m.gpu_count for m in cat.family("a2-highgpu")}
    assert a2["a2-highgpu-2g"] < a2["a2-highgpu-1g"] <= a2["a2-highgpu-2g"] + ROUNDING
