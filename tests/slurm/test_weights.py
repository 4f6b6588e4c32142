"""Node Weights (fleet/slurm/weights.py): capacity tier first, then the shape's rank (cheapest per GPU, then
fewer GPUs), as `fleet render slurm-conf` writes them and the simulated Slurm reads them."""

from __future__ import annotations

import itertools

import pytest

from fleet.catalog import CapacityType, load_catalog
from fleet.slurm.weights import MAX_RANK, TIER_BASE, PoolShape, node_weight, pool_weights, shape_ranks

TIERS = [CapacityType.RESERVATION, CapacityType.SPOT, CapacityType.FLEX_START, CapacityType.ON_DEMAND]


def test_every_rank_of_a_tier_comes_before_the_next_tier() -> None:
    for lower, higher in itertools.pairwise(TIERS):
        assert node_weight(lower, MAX_RANK) < node_weight(higher, 0)
    assert [node_weight(t, 0) for t in TIERS] == sorted(TIER_BASE.values())
    assert node_weight(CapacityType.SPOT, 0) < node_weight(CapacityType.SPOT, 1)


@pytest.mark.parametrize("rank", [-1, MAX_RANK + 1])
def test_a_rank_outside_the_tier_is_refused(rank: int) -> None:
    with pytest.raises(ValueError, match="rank: must be"):
        node_weight(CapacityType.ON_DEMAND, rank)


def test_ranks_put_the_cheapest_per_gpu_first_then_fewer_gpus_per_tier() -> None:
    od = CapacityType.ON_DEMAND
    shapes = [
        PoolShape("big", od, "m-8g", 8, 10.0),
        PoolShape("small", od, "m-1g", 1, 10.0),  # same per-GPU price: fewer GPUs first
        PoolShape("cheap-big", od, "n-8g", 8, 9.0),  # cheaper per GPU: first whatever its size
        PoolShape("small-again", od, "m-1g", 1, 10.0),  # the same shape shares the rank
        PoolShape("unpriced", od, "x-1g", 1, None),
        PoolShape("spot-big", CapacityType.SPOT, "m-8g", 8, 4.0),  # ranked within its own tier
    ]
    assert shape_ranks(shapes) == {
        "cheap-big": 0,
        "small": 1,
        "small-again": 1,
        "big": 2,
        "unpriced": 3,
        "spot-big": 0,
    }


def test_pool_weights_right_size_whatever_the_pool_order() -> None:
    """a3-highgpu-1g and -8g cost the same per GPU in us-central1 (to the cent): the 1-GPU pool gets the lower
    Weight though the 8-GPU pool is listed first; a reservation stays below every spot and on-demand pool."""
    od, spot, resv = CapacityType.ON_DEMAND, CapacityType.SPOT, CapacityType.RESERVATION
    pools = [
        ("od8", od, "a3-highgpu-8g"),
        ("od1", od, "a3-highgpu-1g"),
        ("spot8", spot, "a3-highgpu-8g"),
        ("spot1", spot, "a3-highgpu-1g"),
        ("resv8", resv, "a3-highgpu-8g"),
    ]
    w = pool_weights(pools, load_catalog(), "us-central1")
    assert w["od1"] < w["od8"] and w["spot1"] < w["spot8"]
    assert w["resv8"] < w["spot1"] < w["spot8"] < w["od1"] < w["od8"]
    assert w == pool_weights(list(reversed(pools)), load_catalog(), "us-central1")  # order does not matter
