"""Units that take their nodes whole (`WorkUnit.whole_node`, a Slurm job with ``--exclusive``): the shape the planner
gives each (`autoscaler.planner.whole_node`): reservation capacity first, then the smallest shape it can have now,
a larger one taken whole when the smaller is stocked out, and never a node another unit shares."""

from __future__ import annotations

from autoscaler.model import NodeState, Policy, UnavailableOffering
from autoscaler.planner import plan
from fleet.catalog import CapacityType
from tests.planner.factory import ZONES, inv, key, node, offering, pool, unit

OD, RES = CapacityType.ON_DEMAND, CapacityType.RESERVATION
POOLS = [pool(1), pool(2), pool(8)]
OFFERS = [offering(g, OD, z) for g in (1, 2, 8) for z in ZONES]


def _stocked_out(gpus: int, now: float = 10) -> list[UnavailableOffering]:
    return [UnavailableOffering(key(gpus, OD, z), now + 600, "stockout") for z in ZONES]


def test_two_exclusive_one_gpu_units_get_a_one_gpu_node_each() -> None:
    out = plan([unit(u, 1, whole_node=True) for u in "ab"], inv(POOLS), OFFERS, Policy(), 10)
    assert [(s.pool, s.count) for s in out.scale_ups] == [("h1-on-demand", 2)]
    assert out.assignments["a"].nodes != out.assignments["b"].nodes


def test_when_the_smallest_shape_is_stocked_out_the_next_one_is_taken_whole() -> None:
    demand = [unit("a", 1, whole_node=True), unit("b", 1, whole_node=True), unit("shares", 1)]
    out = plan(demand, inv(POOLS), OFFERS, Policy(), 10, unavailable=_stocked_out(1))
    a, b, shares = (out.assignments[u] for u in ("a", "b", "shares"))
    assert {a.gpus_per_node, b.gpus_per_node} == {2} and len({*a.nodes, *b.nodes}) == 2  # each a whole 2-GPU node
    assert not set(shares.nodes) & {*a.nodes, *b.nodes}  # no other unit on their spare GPU
    assert sum(s.count for s in out.scale_ups if s.pool == "h2-on-demand") == 3


def test_every_shape_stocked_out_leaves_it_unserved_as_stocked_out() -> None:
    out_everywhere = [u for g in (1, 2, 8) for u in _stocked_out(g)]
    out = plan([unit("a", 1, whole_node=True)], inv(POOLS), OFFERS, Policy(), 10, unavailable=out_everywhere)
    shares = plan([unit("a", 1)], inv(POOLS), OFFERS, Policy(), 10, unavailable=out_everywhere)
    assert out.scale_ups == () and [u.unit for u in out.unserved] == ["a"]
    assert out.unserved[0].reason == shares.unserved[0].reason  # the reason a unit that shares its node gets


def test_an_idle_reserved_node_is_taken_whole_before_a_right_sized_node_is_bought() -> None:
    res = pool(8, RES, name="res", reservation="r1")
    out = plan([unit("a", 1, whole_node=True)], inv([*POOLS, res], [node(res, 0)]), OFFERS, Policy(), 10)
    assert out.assignments["a"].nodes == ("res-0",) and out.assignments["a"].gpus_per_node == 8
    assert out.scale_ups == ()


def test_a_partly_used_node_is_no_place_for_it_and_an_idle_larger_one_is_not_bought_over() -> None:
    """A 2-GPU node with one GPU in use cannot take it; an idle 8-GPU on-demand node is not taken whole either
    while the right-sized shape can be launched (eight GPUs billed for one)."""
    two, eight = pool(2), pool(8)
    nodes = [node(two, 0, NodeState.BUSY, used=1), node(eight, 0)]
    out = plan([unit("a", 1, whole_node=True)], inv(POOLS, nodes), OFFERS, Policy(), 10)
    assert [(s.pool, s.count) for s in out.scale_ups] == [("h1-on-demand", 1)]


def test_a_full_reservation_or_a_pool_at_its_limit_is_no_reason_to_take_a_larger_node() -> None:
    """A reservation with no free slot is no reservation capacity (an 8-GPU on-demand node would be bought whole for
    one GPU); a shape whose pool is at its limit is passed over like a stocked-out one."""
    res = pool(8, RES, name="res", reservation="r1", max_nodes=2)
    offers = [*OFFERS, offering(8, RES, res="r1", available=0)]
    out = plan([unit("a", 1, whole_node=True)], inv([*POOLS, res], [node(res, 0, NodeState.BUSY, used=8)]), offers,
               Policy(), 10)  # fmt: skip
    assert [(s.pool, s.count) for s in out.scale_ups] == [("h1-on-demand", 1)]
    full = [pool(1, max_nodes=1), pool(2), pool(8)]
    out = plan([unit("a", 1, whole_node=True)], inv(full, [node(full[0], 0, NodeState.BUSY, used=1)]), OFFERS,
               Policy(), 10)  # fmt: skip
    assert [(s.pool, s.count) for s in out.scale_ups] == [("h2-on-demand", 1)]
