"""Shapes priced the same per GPU up to the price list's rounding are the same price, in every shape choice of the
planner (offer order, right-sizing rule, step down) and of the Slurm render (weights, the lua's constraint): with the
shipped catalog's own prices, where the rounding makes a bigger shape a hair cheaper per GPU."""

from __future__ import annotations

from autoscaler.cloud import Offering, OfferingKey
from autoscaler.model import Inventory, Policy, Pool, WorkUnit
from autoscaler.planner import plan
from autoscaler.planner.defrag import step_down
from autoscaler.planner.rule import right_sized, shapes_from_offerings
from fleet.catalog import CapacityType, load_catalog
from fleet.slurm.job_submit import constraints
from fleet.slurm.weights import pool_shapes, shape_ranks
from tests.planner.factory import pool

OD, SPOT = CapacityType.ON_DEMAND, CapacityType.SPOT


def catalog_family(family: str, region: str, cap: CapacityType) -> tuple[list[Offering], list[Pool]]:
    """One pool and one offering per shape of `family`, at the shipped list price in one zone of `region`."""
    offerings, pools = [], []
    for m in load_catalog().family(family):
        zone, gpu = f"{region}-a", m.gpu.accelerator_type
        key = OfferingKey("gcp", zone, m.name, cap, None)
        offerings.append(Offering(key, m.price(region).hourly(cap), gpu, m.gpu_count))
        kw = {"name": f"{m.name}-{cap}", "machine_type": m.name, "gpu_type": gpu, "zones": (zone,)}
        pools.append(pool(m.gpu_count, cap, **kw))
    return offerings, pools


def launched(offerings: list[Offering], pools: list[Pool], units: list[WorkUnit]) -> dict[str, int]:
    out = plan(units, Inventory(tuple(pools), ()), offerings, Policy(idle_timeout_s=0.0), 100.0)
    counts: dict[str, int] = {}
    for s in out.scale_ups:
        counts[s.pool] = counts.get(s.pool, 0) + s.count
    return counts


def test_two_one_gpu_jobs_get_two_one_gpu_nodes_where_the_two_gpu_shape_is_a_rounding_cheaper() -> None:
    # asia-southeast1: a2-highgpu-2g lists at $8.0275/h, -1g at $4.0138/h ($0.00005/GPU-h dearer)
    offerings, pools = catalog_family("a2-highgpu", "asia-southeast1", OD)
    units = [WorkUnit(f"j{i}", 0.0, 1) for i in range(2)]
    assert launched(offerings, pools, units) == {"a2-highgpu-1g-on-demand": 2}


def test_eight_spot_jobs_get_eight_one_gpu_nodes_not_one_eight_gpu_node() -> None:
    # us-central1 spot: a3-highgpu-8g lists at $6.3261875/GPU-h, -1g at $6.3262
    offerings, pools = catalog_family("a3-highgpu", "us-central1", SPOT)
    units = [WorkUnit(f"j{i}", 0.0, 1, spot_ok=True) for i in range(8)]
    assert launched(offerings, pools, units) == {"a3-highgpu-1g-spot": 8}


def test_really_cheaper_big_shapes_still_take_packed_small_work() -> None:
    # a real discount (not rounding) on the big shape: packing is the saving, as before
    offerings, pools = catalog_family("a3-highgpu", "us-central1", OD)
    cheap = [o if o.gpus_per_node < 8 else Offering(o.key, o.hourly_usd * 0.9, o.gpu_type, 8) for o in offerings]
    units = [WorkUnit(f"j{i}", 0.0, 1) for i in range(8)]
    assert launched(cheap, pools, units) == {"a3-highgpu-8g-on-demand": 1}


def test_the_rule_and_the_step_down_read_the_same_price() -> None:
    offerings, _ = catalog_family("a2-highgpu", "asia-southeast1", OD)
    assert right_sized(shapes_from_offerings(offerings), 1).machine_type == "a2-highgpu-1g"
    spot_offerings, spot_pools = catalog_family("a3-highgpu", "us-central1", SPOT)
    steps = step_down(spot_pools, spot_offerings)
    assert steps["a3-highgpu-8g-spot"] == 4 and steps["a3-highgpu-2g-spot"] == 1  # 1g is $0.0000125 dearer


def test_the_slurm_render_right_sizes_the_same_way() -> None:
    cat = load_catalog()
    rows = [(f"{m.name}-od", OD, m.name) for m in cat.family("a2-highgpu")]
    shapes = pool_shapes(rows, cat, "asia-southeast1")
    assert constraints({"gpu": shapes})["gpu"][1] == "a2-highgpu-1g"
    ranks = shape_ranks(shapes)
    assert ranks["a2-highgpu-1g-od"] < ranks["a2-highgpu-2g-od"] < ranks["a2-highgpu-4g-od"] < ranks["a2-highgpu-8g-od"]
