"""The planner's catalog memo (`autoscaler.planner.memo.recent_calls`): a hit only on equal arguments, any change
recomputed, arguments read once, unordered arguments refused, a repriced catalog seen by `step_down`, and the
remembered mappings read-only."""

from __future__ import annotations

from dataclasses import replace

import pytest

from autoscaler.planner.defrag import pool_gpu_prices, step_down
from autoscaler.planner.memo import recent_calls
from fleet.catalog import CapacityType
from tests.planner.factory import family_offerings, family_pools

OD = CapacityType.ON_DEMAND


def test_equal_arguments_hit_and_any_change_recomputes() -> None:
    calls: list[tuple] = []

    @recent_calls(2)
    def total(items, scale):
        calls.append((items, scale))
        return sum(items) * scale

    assert total([1, 2], 3) == 9
    assert total((1, 2), 3) == 9  # an equal sequence of another type: the same call
    assert len(calls) == 1
    assert total([1, 2, 3], 3) == 18  # one more item
    assert total([1, 2], 4) == 12  # another scalar
    assert len(calls) == 3
    assert total([1, 2, 3], 3) == 18  # still remembered (size 2: the two latest)
    assert len(calls) == 3
    assert total([1, 2], 3) == 9  # evicted by then: computed again
    assert len(calls) == 4


def test_the_arguments_are_read_once_so_a_generator_works() -> None:
    @recent_calls(1)
    def count(items):
        return len(items)

    assert count(x for x in range(5)) == 5
    assert count(x for x in range(5)) == 5


def test_an_unordered_argument_is_refused_rather_than_compared_in_iteration_order() -> None:
    @recent_calls(1)
    def first(items):
        return items[0]

    with pytest.raises(TypeError, match="dict argument is not supported"):
        first({"a": 1})


def test_a_step_down_follows_a_price_change_of_the_same_offering_keys() -> None:
    pools = family_pools(caps=(OD,))
    offs = family_offerings(caps=(OD,))
    before = step_down(pools, offs)
    assert before["h8-on-demand"] > 0
    # the 1/2/4-GPU shapes now dearer per GPU than the 8-GPU one: nothing steps down any more
    dear = [replace(o, hourly_usd=o.hourly_usd * 2) if o.gpus_per_node < 8 else o for o in offs]
    assert step_down(pools, dear)["h8-on-demand"] == 0
    assert step_down(pools, offs) == before


def test_a_remembered_mapping_cannot_be_changed_by_one_caller_under_another() -> None:
    pools = family_pools(caps=(OD,))
    offs = family_offerings(caps=(OD,))
    for remembered in (step_down(pools, offs), pool_gpu_prices(pools, offs)):
        with pytest.raises(TypeError):
            remembered["h8-on-demand"] = 0  # type: ignore[index]
    assert step_down(pools, offs)["h8-on-demand"] > 0
