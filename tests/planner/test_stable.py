"""`core.stable.stable_until`: the decision core's commands do not change before the bound, and each clock threshold
it lists is one the core really crosses there (the commands just after it differ).  The replay relies on it to
answer the daemon's repeated polls (tests/replay/test_quiet_polls.py)."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from autoscaler.core import queue_depth
from autoscaler.core.hold import PREEMPT_GRACE_S
from autoscaler.core.stable import stable_until
from autoscaler.model import NodeState, Plan, Policy, UnavailableOffering
from fleet.catalog import CapacityType
from tests.planner.factory import family_offerings, family_pools, inv, key, node, offering, pool, unit


def commands(plan: Plan) -> tuple:
    """What a plan makes the caller do, without the request ids (they are dated)."""
    ups = tuple((su.pool, su.offering, su.names, su.units) for su in plan.scale_ups)
    return ups, tuple(plan.drains), tuple(plan.deletes)


def decide(pending, nodes, policy: Policy, now: float, memory=()) -> tuple:
    pools = family_pools()
    return commands(queue_depth(pending, inv(pools, nodes), family_offerings(), policy, now, memory))


def test_nothing_timed_means_stable_for_ever() -> None:
    pools = family_pools()
    busy = node(pools[0], 0, NodeState.BUSY, used=1, since=0.0)
    assert stable_until(100.0, [], [busy], Policy(idle_timeout_s=300.0)) == 300.0  # its idle timeout, if it idled
    assert stable_until(100.0, [], [], Policy()) == math.inf


def _cases() -> list[tuple[str, float, tuple]]:
    """(name, the instant T the case's threshold is crossed, (pending, nodes, policy, now, memory))."""
    od1 = family_pools()[0]
    early = Policy(late_bind=False)  # the planner's own batch hold (late binding plans bound work unbatched)
    stocked_out = tuple(
        UnavailableOffering(key(1, c, z), 500.0, "stockout")
        for c in ("on-demand", "spot")
        for z in ("us-central1-a", "us-central1-b")
    )
    return [
        # a pending unit waits out the batch idle time, then launches
        ("batch idle", 10.0, ([unit("a")], [], replace(early, batch_window_s=60.0, batch_idle_s=10.0), 1.0, ())),
        # the batch window caps the wait while arrivals keep coming
        (
            "batch window",
            30.0,
            ([unit("a"), unit("b", t=25.0)], [], replace(early, batch_window_s=30.0, batch_idle_s=20.0), 26.0, ()),
        ),
        # under late binding each job waits its own batch window before the plan serves it
        ("held job's window", 30.0, ([unit("a")], [], Policy(batch_window_s=30.0), 1.0, ())),
        # an idle node is drained at its idle timeout
        ("idle timeout", 300.0, ([], [node(od1, 0, since=0.0)], Policy(idle_timeout_s=300.0), 100.0, ())),
        # a node stuck booting is deleted at its boot timeout
        (
            "boot timeout",
            600.0,
            ([], [node(od1, 0, NodeState.BOOTING, since=0.0)], Policy(boot_timeout_s=600.0), 100.0, ()),
        ),
        # a backed-off shape comes back when its backoff expires: the unit launches on it instead of a larger one
        ("backoff", 500.0, ([unit("a")], [], Policy(), 70.0, stocked_out)),
    ]


@pytest.mark.parametrize("name,threshold,case", _cases(), ids=[c[0] for c in _cases()])
def test_commands_hold_until_the_bound_and_the_threshold_is_within_it(name: str, threshold: float, case) -> None:
    pending, nodes, policy, now, memory = case
    until = stable_until(now, pending, nodes, policy, memory)
    assert now < until <= threshold, f"{name}: the bound {until} passes the threshold at {threshold}"
    at_now = decide(pending, nodes, policy, now, memory)
    for t in (now + (until - now) / 3, now + 2 * (until - now) / 3, until - 1e-6):
        assert decide(pending, nodes, policy, t, memory) == at_now, f"{name}: changed at {t} before {until}"
    assert decide(pending, nodes, policy, threshold + 1e-6, memory) != at_now, f"{name}: {threshold} changes nothing"


def test_a_flex_start_wait_is_a_threshold() -> None:
    """A job in a flex-start queue may wait for flex-start capacity until its wait is used up, then it gets
    on-demand: the plan's scale-up changes pool there."""
    flex = CapacityType.FLEX_START
    pools = [pool(8), pool(8, flex)]
    offs = [offering(8), offering(8, flex, price=50.0)]
    policy = Policy(flex_start_queues=frozenset({"train"}), flex_start_max_wait_s=30.0)
    u = unit("a", 8, queue="train")
    until = stable_until(1.0, [u], [], policy)
    assert until == 30.0

    def pools_launched(t: float) -> list[str]:
        return [su.pool for su in queue_depth([u], inv(pools), offs, policy, t, ()).scale_ups]

    assert pools_launched(1.0) == pools_launched(until - 1e-6) == [pool(8, flex).name]
    assert pools_launched(until + 1e-6) == [pool(8).name]


def test_the_preemption_grace_of_a_pending_job_is_a_threshold() -> None:
    u = unit("a", t=0.0)
    assert stable_until(1.0, [u], [], Policy()) == PREEMPT_GRACE_S


def test_a_released_name_s_grace_is_a_threshold() -> None:
    assert stable_until(10.0, [], [], Policy(), released_at=[5.0]) == 35.0


def test_thresholds_already_crossed_do_not_count_but_one_crossed_exactly_now_does() -> None:
    u = unit("a", t=0.0)
    policy = Policy(batch_window_s=30.0, batch_idle_s=10.0)
    assert stable_until(20.0, [u], [], policy) == 30.0  # batch idle (10) is past
    assert stable_until(30.0, [u], [], policy) == 30.0  # `<=` tests flip just after the instant they name
