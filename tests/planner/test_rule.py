"""The settings rule (autoscaler/planner/rule.py): facts in, Policy out, each setting following
from its reasoning (ski-rental idle keep, reservation hold), the wait value moving the trade-off."""

from __future__ import annotations

import math
import re
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from autoscaler.model import Policy, PolicyError, policy_from_mapping
from autoscaler.planner.rule import (
    FleetFacts,
    ShapeFacts,
    break_even_idle_s,
    idle_keep_s,
    policy_for,
    reservation_hold_s,
    right_sized,
    shared_arrivals,
    warm_nodes,
    with_arrivals,
)

SHAPES = tuple(ShapeFacts(f"m-{g}g", g, 11.0 * g) for g in (1, 2, 4, 8))


def test_break_even_is_one_boot_of_billing_plus_its_wait() -> None:
    assert break_even_idle_s(360, 11.0, 0.0) == 360  # wait worth nothing: keep as long as a boot costs
    assert break_even_idle_s(360, 11.0, 11.0) == 720
    assert break_even_idle_s(360, 0.0, 11.0) == math.inf  # free capacity: keep


def test_idle_keep_only_when_jobs_for_the_shape_arrive_faster_than_the_break_even() -> None:
    shape = ShapeFacts("m-1g", 1, 11.0, arrivals_per_hour=6.0)  # one per 10 min
    assert idle_keep_s(shape, 360, 11.0) == 720  # T = 12 min > 10 min between arrivals
    assert idle_keep_s(shape, 360, 0.0) == 0  # T = 6 min: the next job probably comes too late
    assert idle_keep_s(ShapeFacts("m-8g", 8, 88.0, arrivals_per_hour=0.5), 360, 11.0) == 0


def test_reservation_hold_from_the_free_up_rate_and_the_wait_value() -> None:
    budget = {"reservation_hold_max_s": 3600.0}  # the operator allows a hold: the rule picks its length
    facts = FleetFacts(360, SHAPES, 100, 11.0, 20000.0, wait_value_usd_per_gpu_hour=11.0, **budget)
    h = reservation_hold_s(facts)
    mu = 100 / 20000.0
    gain = 11.0 / 11.0  # $/GPU-h x hours between arrivals: reserved time not left idle
    assert h == pytest.approx(math.log(mu * gain / (11.0 / 3600)) / mu)  # w = the GPU's price, per second
    assert 0 < h < 360
    # a higher wait value holds less; past the break-even it launches at once
    dearer = FleetFacts(360, SHAPES, 100, 11.0, 20000.0, wait_value_usd_per_gpu_hour=15.0, **budget)
    assert reservation_hold_s(dearer) < h
    assert (
        reservation_hold_s(FleetFacts(360, SHAPES, 100, 11.0, 20000.0, wait_value_usd_per_gpu_hour=1e4, **budget)) == 0
    )
    assert reservation_hold_s(FleetFacts(360, SHAPES, 0, 11.0, 20000.0, **budget)) == 0  # nothing to wait for
    # fewer reserved nodes free up more rarely: waiting pays less
    fewer = FleetFacts(360, SHAPES, 40, 11.0, 20000.0, wait_value_usd_per_gpu_hour=11.0, **budget)
    assert reservation_hold_s(fewer) < h
    # None: the GPU's price; waiting worth nothing: hold, but never more than one boot nor the budget
    assert (
        reservation_hold_s(FleetFacts(360, SHAPES, 100, 11.0, 20000.0, wait_value_usd_per_gpu_hour=None, **budget)) == h
    )
    assert reservation_hold_s(FleetFacts(360, SHAPES, 100, 11.0, 20000.0, **budget)) == 360
    assert reservation_hold_s(FleetFacts(360, SHAPES, 100, 11.0, 20000.0, reservation_hold_max_s=90.0)) == 90


def test_by_default_nothing_is_held_for_the_reservation_so_no_job_waits_beyond_its_boot() -> None:
    """The default hold budget is 0: at any wait value, a job that does not fit the reservation is launched for
    at once (a held job that then launches would wait the hold plus its boot)."""
    for w in (0.0, 0.5, 11.0, None):
        facts = FleetFacts(360, SHAPES, 100, 11.0, 20000.0, wait_value_usd_per_gpu_hour=w)
        assert reservation_hold_s(facts) == 0
        assert policy_for(facts).batch_window_s == 0
    with pytest.raises(ValueError, match="reservation_hold_max_s"):
        FleetFacts(360, SHAPES, 100, reservation_hold_max_s=-1.0)


def test_policy_for_sets_the_derived_knobs_and_keeps_the_rest() -> None:
    shapes = with_arrivals(SHAPES, [(1, 1)] * 60 + [(8, 8)] * 2, 3600.0)  # per hour: 60 1-GPU, two 64-GPU gangs
    assert [s.arrivals_per_hour for s in shapes] == [60.0, 0.0, 0.0, 16.0]
    base = Policy(max_nodes=7, backoff_s=30.0)
    p = policy_for(FleetFacts(360, shapes, wait_value_usd_per_gpu_hour=0.0), base)
    none = FleetFacts(360, shapes, wait_value_usd_per_gpu_hour=None)
    assert policy_for(none).idle_timeout_for("m-1g") == 720.0  # None: w is the GPU's price
    assert p.max_nodes == 7 and p.backoff_s == 30.0 and p.defragment
    assert p.idle_timeout_by_machine == {"m-1g": 360.0, "m-2g": 0.0, "m-4g": 0.0, "m-8g": 360.0}
    assert p.idle_timeout_for("m-1g") == 360.0 and p.idle_timeout_for("other") == p.idle_timeout_s == 0.0
    assert p.batch_window_s == 0 and p.expected_boot_s == 360


@given(
    st.floats(0, 3600),
    st.floats(0.1, 100),
    st.floats(0, 1000),
    st.floats(0, 500),
    st.floats(0, 1000),
)
def test_more_wait_value_never_keeps_less_nor_holds_more(boot, price, rate, w1, dw) -> None:
    shape = ShapeFacts("m", 1, price, arrivals_per_hour=rate)
    assert idle_keep_s(shape, boot, w1 + dw) >= idle_keep_s(shape, boot, w1)
    f1 = FleetFacts(boot, (shape,), 10, rate, 3600.0, wait_value_usd_per_gpu_hour=w1 + 1e-3, reservation_hold_max_s=1e9)
    f2 = FleetFacts(
        boot, (shape,), 10, rate, 3600.0, wait_value_usd_per_gpu_hour=w1 + 1e-3 + dw, reservation_hold_max_s=1e9
    )
    assert 0 <= reservation_hold_s(f2) <= reservation_hold_s(f1) + 1e-6


def test_right_sized_is_cheapest_per_gpu_then_smallest() -> None:
    assert right_sized(SHAPES, 3).machine_type == "m-4g"
    cheap8 = (*SHAPES[:3], ShapeFacts("m-8g", 8, 50.0))
    assert right_sized(cheap8, 1).machine_type == "m-8g"
    assert right_sized(SHAPES, 9) is None


def test_the_wait_value_is_a_policy_field_config_accepts() -> None:
    p = policy_from_mapping({"wait_value_usd_per_gpu_hour": 25, "idle_timeout_by_machine": {"a3-highgpu-1g": 60}})
    assert p.wait_value_usd_per_gpu_hour == 25 and p.idle_timeout_for("a3-highgpu-1g") == 60
    with pytest.raises(PolicyError, match="wait_value_usd_per_gpu_hour"):
        policy_from_mapping({"wait_value_usd_per_gpu_hour": -1})
    with pytest.raises(ValueError, match="boot_s"):
        FleetFacts(-1, SHAPES)


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ({"standby_by_machine": {"a3-highgpu-1g": "two"}}, "standby_by_machine['a3-highgpu-1g']: must be a whole"),
        ({"standby_by_machine": ["a3-highgpu-1g"]}, "standby_by_machine: must be a mapping"),
        ({"standby_max_nodes": 2.5}, "standby_max_nodes: must be a whole number"),
        (
            {"idle_keep_max_by_machine": {"a3-highgpu-1g": -1}},
            "idle_keep_max_by_machine['a3-highgpu-1g']: must be >= 0",
        ),
        ({"max_nodes": "many"}, "max_nodes: must be a whole number"),
        ({"idle_timeout_by_machine": {"a3-highgpu-1g": True}}, "must be a number"),
    ],
)
def test_bad_policy_values_name_the_field_and_the_reason(raw: dict, field: str) -> None:
    with pytest.raises(PolicyError, match=re.escape(field)):
        policy_from_mapping(raw)
    assert policy_from_mapping({"max_nodes": 3.0, "idle_timeout_by_machine": {"a3-highgpu-1g": 1.5}}).max_nodes == 3


def test_warm_pool_is_the_arrival_fluctuation_over_the_break_even() -> None:
    busy = ShapeFacts("m-1g", 1, 11.0, arrivals_per_hour=54.0)  # T = 720 s: 10.8 arrivals, +-3.3
    assert warm_nodes(busy, 360, 11.0) == 3
    p = policy_for(FleetFacts(360, (busy,), wait_value_usd_per_gpu_hour=11.0))
    assert p.idle_timeout_by_machine == {"m-1g": 720.0} and p.idle_keep_max_by_machine == {"m-1g": 3}
    # over windows longer than a run the busy count does not drift further: the pool stops growing with T
    assert warm_nodes(busy, 360, 1e4, mean_run_s=600.0) == warm_nodes(busy, 600, 0.0) == 3
    rare = ShapeFacts("m-1g", 1, 11.0, arrivals_per_hour=1.0)
    assert policy_for(FleetFacts(360, (rare,))).idle_keep_max_by_machine == {}  # not kept at all


def test_without_the_warm_cap_the_rule_keeps_every_idle_node_of_a_kept_shape_for_the_break_even() -> None:
    from autoscaler.core.settings import settings_policy

    busy = ShapeFacts("m-1g", 1, 11.0, arrivals_per_hour=54.0)
    facts = FleetFacts(360, (busy,), wait_value_usd_per_gpu_hour=11.0)
    capped, uncapped = policy_for(facts), policy_for(facts, base=Policy(warm_cap=False))
    assert capped.idle_keep_max_by_machine == {"m-1g": 3} and uncapped.idle_keep_max_by_machine == {}
    assert uncapped.idle_timeout_by_machine == capped.idle_timeout_by_machine == {"m-1g": 720.0}
    # an operator's setting: the settings tracker's rule keeps it (it is not one of the fields the rule derives)
    pinned = settings_policy(policy_from_mapping({"warm_cap": False}), {"warm_cap"}, facts)
    assert pinned.warm_cap is False and pinned.idle_keep_max_by_machine == {}
    with pytest.raises(PolicyError, match=re.escape("warm_cap: must be true or false")):
        policy_from_mapping({"warm_cap": "no"})


def test_scale_down_keeps_the_newest_idle_nodes_up_to_the_cap_per_machine_type() -> None:
    from autoscaler.model import Inventory, NodeState
    from autoscaler.planner import scale_down_idle
    from tests.planner.factory import machine, node, pool

    p1, p8 = pool(1), pool(8)
    nodes = tuple(node(p1, i, NodeState.READY_IDLE, since=1000.0 - 100 * i) for i in range(4))
    nodes += (node(p8, 0, NodeState.READY_IDLE, since=999.0),)
    pol = Policy(
        idle_timeout_s=0.0,
        idle_timeout_by_machine={machine(1): 720.0},
        idle_keep_max_by_machine={machine(1): 2},
    )
    drains, _ = scale_down_idle(Inventory((p1, p8), nodes), pol, 1000.0)
    drained = {name for d in drains for name in d.nodes}
    # the two most recently idle 1g nodes stay warm; the older ones and the 8g node (timeout 0) go
    assert drained == {"h1-on-demand-2", "h1-on-demand-3", "h8-on-demand-0"}
    assert any("warm-node cap" in d.reason for d in drains)
    # past the timeout even a kept node goes
    drains, _ = scale_down_idle(Inventory((p1, p8), nodes), pol, 1000.0 + 720.0)
    assert {name for d in drains for name in d.nodes} == {n.name for n in nodes}


def test_observed_facts_from_offerings_and_recent_jobs_for_the_daemon() -> None:
    from autoscaler.planner.rule import observed_facts, shapes_from_offerings
    from tests.planner.factory import family_offerings

    offs = family_offerings()
    assert [(s.machine_type, s.gpus, s.usd_per_hour) for s in shapes_from_offerings(offs)] == [
        ("a3-highgpu-1g", 1, 11.0),
        ("a3-highgpu-2g", 2, 22.0),
        ("a3-highgpu-4g", 4, 44.0),
        ("a3-highgpu-8g", 8, 88.0),
    ]
    jobs = [(t, 1, 1, 600.0) for t in range(0, 3600, 60)] + [(10.0, 2, 8, None), (-5000.0, 1, 1, 1.0)]
    f = observed_facts(offs, 360, jobs, now=3600.0, window_s=3600.0, wait_value_usd_per_gpu_hour=11.0)
    by = {s.machine_type: s.arrivals_per_hour for s in f.shapes}
    assert by["a3-highgpu-1g"] == 60 and by["a3-highgpu-8g"] == 2  # the job before the window is left out
    assert f.mean_run_s == 600.0 and f.arrivals_per_hour == 61
    p = policy_for(f)
    assert p.idle_timeout_for("a3-highgpu-1g") == 720.0 and p.idle_timeout_for("a3-highgpu-8g") == 0.0


def test_the_warm_nodes_kept_are_the_lowest_numbered_the_ones_slurm_allocates_first() -> None:
    from autoscaler.model import Inventory, NodeState
    from autoscaler.planner import idle_over_cap
    from tests.planner.factory import machine, node, pool

    p1 = pool(1)
    # node 0 has been idle longest, node 3 went idle last: Slurm still hands out name 0 first
    nodes = tuple(node(p1, i, NodeState.READY_IDLE, since=100.0 * i) for i in range(4))
    pol = Policy(idle_timeout_by_machine={machine(1): 720.0}, idle_keep_max_by_machine={machine(1): 2})
    assert idle_over_cap(Inventory((p1,), nodes), pol, 400.0) == {"h1-on-demand-2", "h1-on-demand-3"}


def test_shared_nodes_keep_the_family_s_largest_shape_warm_for_every_size() -> None:
    """`Policy.share_nodes`: the 8-GPU shape's keep and warm cap count the GPU-weighted arrivals of its family at its
    price (a warm 8-GPU node takes any of their jobs); a shape of another price or family is left alone; standby
    nodes stay sized on each shape's own arrivals."""
    shapes = (
        ShapeFacts("a3-highgpu-1g", 1, 11.0, arrivals_per_hour=80.0),
        ShapeFacts("a3-highgpu-2g", 2, 22.0, arrivals_per_hour=4.0),
        ShapeFacts("a3-highgpu-8g", 8, 88.0, arrivals_per_hour=1.0, reuse_gaps=(10.0,)),
        ShapeFacts("a2-highgpu-8g", 8, 30.0, arrivals_per_hour=2.0),
        ShapeFacts("g2-standard-96", 8, 200.0, arrivals_per_hour=3.0),
    )
    out = {s.machine_type: s for s in shared_arrivals(shapes)}
    assert out["a3-highgpu-8g"].arrivals_per_hour == pytest.approx((80 + 8 + 8) / 8)
    assert out["a3-highgpu-8g"].reuse_gaps is None  # measured on its own jobs: the Poisson test decides
    assert (
        out["a3-highgpu-1g"] == shapes[0] and out["a2-highgpu-8g"] == shapes[3] and out["g2-standard-96"] == shapes[4]
    )
    facts = FleetFacts(boot_s=360.0, shapes=shapes[:3])
    alone, shared = policy_for(facts), policy_for(facts, Policy(share_nodes=True))
    assert alone.idle_timeout_by_machine["a3-highgpu-8g"] == 0.0  # one 8-GPU job an hour: not worth a keep
    assert shared.idle_timeout_by_machine["a3-highgpu-8g"] == 360.0  # twelve nodes' worth an hour: kept
    assert shared.idle_keep_max_by_machine["a3-highgpu-8g"] == 1
    assert alone.defragment and not shared.defragment and shared.share_nodes
    valued = Policy(share_nodes=True, wait_value_usd_per_gpu_hour=50.0)
    assert (
        policy_for(facts, valued).standby_by_machine
        == policy_for(facts, replace(valued, share_nodes=False)).standby_by_machine
    )
