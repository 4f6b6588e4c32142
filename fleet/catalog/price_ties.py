"""When two per-GPU prices are the same price: the one tolerance every choice of machine shape uses.

The shapes of one GPU type (a2-highgpu-1g/2g/4g/8g, a3-highgpu-1g/2g/4g/8g) are priced per GPU alike: Google
bills the GPU, vCPU and memory SKUs, and the shapes are multiples of one another.  The price list quotes each
machine's $/h to four decimals (`data/gcp_prices.csv`), so the per-GPU prices that come out of it differ by the
rounding: a2-highgpu-2g in asia-southeast1 is $4.01375/GPU-h against -1g's $4.0138, a3-highgpu-8g spot
$6.3261875 against -1g's $6.3262.  Compared exactly, that hundredth of a cent decides that two 1-GPU jobs share a
2-GPU node, which then stays up, half idle, until the longer of the two ends.

Every shape choice reads "the same per-GPU price" through this module: the planner's offer order
(`autoscaler.planner.offers`), its right-sizing rule (`autoscaler.planner.rule.right_sized`) and step-down shapes
(`autoscaler.planner.defrag.step_down`), and the Slurm render's node weights and job_submit.lua right-sizing
(`fleet.slurm.weights`, `fleet.slurm.job_submit`), so the daemon and the slurm.conf it runs under agree.

The tolerance: over the shipped catalog, every two shapes of one GPU type, region and capacity type either
differ by at most $0.0001 per GPU-hour (the list's rounding) or by at least $0.01 (really different prices: the
g2-standard shapes, whose vCPUs per GPU differ).  Half a cent sits in that gap; `tests/test_price_ties.py`
checks that the catalog still has it.  Prices are grouped into *tiers*, not rounded to a grid: sorted, a tier is
every price within the tolerance of the tier's cheapest, so two prices a hair apart never land on either side of a
rounding boundary.
"""

from __future__ import annotations

from collections.abc import Iterable

#: $/GPU-hour within which two per-GPU prices are the same price (module docstring)
SAME_PRICE_USD_PER_GPU_HOUR = 0.005


def price_tiers(prices: Iterable[float], tolerance: float = SAME_PRICE_USD_PER_GPU_HOUR) -> dict[float, int]:
    """Each distinct price -> its tier (0: the cheapest): sorted, a new tier starts at the first price more than
    `tolerance` above the current tier's cheapest."""
    out: dict[float, int] = {}
    tier, start = -1, None
    for p in sorted(set(prices)):
        if start is None or p > start + tolerance:
            tier, start = tier + 1, p
        out[p] = tier
    return out
