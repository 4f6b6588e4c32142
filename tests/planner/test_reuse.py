"""Whether keeping an idle node pays, from measured reuse (autoscaler/planner/reuse.py): the ski-rental test
E[min(d, T)] < T * P(d < T) over the fleet's own freed nodes, which for Poisson arrivals is the rule's lambda*T > 1
and for bursty arrivals is not."""

from __future__ import annotations

from autoscaler.planner.reuse import MIN_SPELLS, free_gaps, keep_pays
from autoscaler.planner.rule import ShapeFacts, idle_keep_s


def test_each_freed_node_waits_until_an_arrival_of_its_shape_takes_it() -> None:
    events = [("s", 0.0, 100.0, 2), ("s", 130.0, None, 1), ("t", 140.0, None, 1), ("s", 1000.0, None, 1)]
    gaps = free_gaps(events, at=2000.0, horizons={"s": 360.0, "t": 360.0})
    # two nodes freed at 100: one taken at 130 (30 s), the other at 1000 (900 s, capped at the 360 s horizon)
    assert sorted(gaps["s"]) == [30.0, 360.0]
    assert gaps["t"] == ()  # nothing of that shape was freed
    # a node freed less than T before the point of judgement is not judged yet
    assert free_gaps([("s", 0.0, 1900.0, 1)], at=2000.0, horizons={"s": 360.0})["s"] == ()


def test_jobs_smaller_than_the_node_share_it_and_free_it_only_when_the_last_one_ends() -> None:
    """1-GPU jobs right-sized to an 8-GPU machine (the family has nothing smaller) pack onto one node, as Slurm
    packs them: b's end frees no node and c needs no idle one, so nothing here says keeping an idle node pays.
    Counted a node each, b's end looked like a freed node that c reused 100 s later."""
    small = [("s", 0.0, 1000.0, 1, 1), ("s", 100.0, 200.0, 1, 1), ("s", 300.0, None, 1, 1)]
    assert free_gaps(small, at=5000.0, horizons={"s": 360.0}, node_gpus={"s": 8})["s"] == ()
    assert sorted(free_gaps(small, at=5000.0, horizons={"s": 360.0})["s"]) == [100.0, 360.0]  # a node per job
    # the node is freed when its last job ends (c's, at 1500), and an arrival after that takes it
    small[2] = ("s", 300.0, 1500.0, 1, 1)
    gaps = free_gaps([*small, ("s", 1600.0, None, 1, 1)], at=5000.0, horizons={"s": 360.0}, node_gpus={"s": 8})
    assert gaps["s"] == (100.0,)
    # jobs that fill the node are counted node for node, as before
    whole = [("s", 0.0, 100.0, 2, 8), ("s", 130.0, None, 1, 8), ("s", 1000.0, None, 1, 8)]
    assert sorted(free_gaps(whole, at=2000.0, horizons={"s": 360.0}, node_gpus={"s": 8})["s"]) == [30.0, 360.0]


def test_keeping_pays_only_when_the_measured_reuse_says_so() -> None:
    soon = [30.0] * MIN_SPELLS  # every freed node is taken within half a minute
    assert keep_pays(soon, 360.0) is True
    never = [360.0] * MIN_SPELLS  # freed after a burst, nothing comes
    assert keep_pays(never, 360.0) is False
    assert keep_pays(soon[:3], 360.0) is None  # too few to judge
    # bursty: half the nodes are taken at once, half never: cost 0.5*10 + 0.5*360 > saving 0.5*360
    assert keep_pays([10.0, 360.0] * MIN_SPELLS, 360.0) is False


def test_the_measured_reuse_overrides_the_daily_arrival_rate() -> None:
    # 60 arrivals an hour averaged over the day say "keep" (lambda * T = 6) ...
    busy = ShapeFacts("m-1g", 1, 11.0, arrivals_per_hour=60.0)
    assert idle_keep_s(busy, 360.0, 0.0) == 360.0
    # ... but they came in bursts and the freed nodes were never taken: keep nothing
    bursty = ShapeFacts("m-1g", 1, 11.0, arrivals_per_hour=60.0, reuse_gaps=(360.0,) * MIN_SPELLS)
    assert idle_keep_s(bursty, 360.0, 0.0) == 0.0
    # and a rate too low for the Poisson test, with nodes in fact taken at once, keeps
    steady = ShapeFacts("m-1g", 1, 11.0, arrivals_per_hour=2.0, reuse_gaps=(20.0,) * MIN_SPELLS)
    assert idle_keep_s(steady, 360.0, 0.0) == 360.0
