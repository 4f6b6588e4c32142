"""Standby nodes (autoscaler/planner/standby.py and the rule's `standby_nodes`): idle nodes of a shape kept up and
replenished ahead of demand when waiting is valued, never displacing real work, sized by their measured use."""

from __future__ import annotations

import math

import pytest

from autoscaler.model import NodeState, Placement, Policy
from autoscaler.planner import plan
from autoscaler.planner.reuse import standby_use
from autoscaler.planner.rule import ShapeFacts, erlang_use, standby_nodes
from autoscaler.planner.standby import standby_count
from fleet.catalog import CapacityType
from tests.planner.factory import family_offerings, inv, machine, node, pool, unit

OD = CapacityType.ON_DEMAND
OFFERS = family_offerings(caps=(OD,))
H1 = pool(1)
STANDBY = Policy(idle_timeout_s=0.0, standby_by_machine={machine(1): 2})


def test_standby_nodes_are_launched_when_none_is_up_and_in_flight_ones_count() -> None:
    p = plan([], inv([H1]), OFFERS, STANDBY, 100.0, standby_in_flight={})
    assert [(s.pool, s.count, standby_count(s)) for s in p.scale_ups] == [(H1.name, 2, 2)]
    assert all(u.startswith("standby/") for s in p.scale_ups for u in s.units)
    p = plan([], inv([H1]), OFFERS, STANDBY, 100.0, standby_in_flight={machine(1): 1})
    assert [s.count for s in p.scale_ups] == [1]  # one already powering up
    # a caller that brings no standby nodes up (standby_in_flight None) gets none planned
    assert plan([], inv([H1]), OFFERS, STANDBY, 100.0).scale_ups == ()


def test_idle_standby_nodes_are_kept_past_the_idle_timeout_and_extras_go() -> None:
    nodes = [node(H1, i, since=0.0) for i in range(3)]
    p = plan([], inv([H1], nodes), OFFERS, STANDBY, 1000.0, standby_in_flight={})
    assert p.scale_ups == ()
    assert sum(len(d.nodes) for d in p.drains) == 1  # three idle, two kept as standby
    # a booting node with no work counts too: it will be idle
    booting = [node(H1, 0, NodeState.BOOTING), node(H1, 1, since=0.0)]
    assert plan([], inv([H1], booting), OFFERS, STANDBY, 1000.0, standby_in_flight={}).scale_ups == ()


def test_real_work_takes_the_idle_node_first_and_standby_is_replenished() -> None:
    nodes = [node(H1, 0, since=0.0)]
    p = plan(
        [unit("job/1", 1, machine_types=frozenset({machine(1)}))],
        inv([H1], nodes),
        OFFERS,
        STANDBY,
        10.0,
        standby_in_flight={},
    )
    assert p.assignments["job/1"].placement is Placement.READY and p.assignments["job/1"].nodes == (H1.node_name(0),)
    assert [(s.count, standby_count(s)) for s in p.scale_ups] == [(2, 2)]
    assert not p.unserved  # standby never shows as unserved work


def test_standby_use_replays_arrivals_against_ordered_standby_nodes() -> None:
    # one arrival every 100 s for an hour, boot 360 s: at most 4 standby nodes are ever busy at once
    arrivals = [(100.0 * i, 1) for i in range(36)]
    use = standby_use(arrivals, 360.0, 3600.0)
    assert len(use) == 4 and list(use) == sorted(use, reverse=True)
    assert sum(use) == pytest.approx(36 * 360 / 3600)  # every arrival kept one node busy for a boot
    assert standby_use([], 360.0, 3600.0) == () and standby_use(arrivals, 0.0, 3600.0) == ()


def test_erlang_use_is_the_carried_load_of_each_extra_server() -> None:
    a = 3.0
    use = erlang_use(a, 30)
    assert list(use) == sorted(use, reverse=True) and sum(use) == pytest.approx(a, rel=1e-6)
    assert use[0] == pytest.approx(a / (1 + a))  # Erlang B with one server: E(1) = a / (1 + a)


def test_standby_count_grows_with_the_wait_value_and_is_zero_when_waiting_is_free() -> None:
    shape = ShapeFacts(machine(1), 1, 11.0, arrivals_per_hour=30.0)  # load 3 over a 360 s boot
    counts = [standby_nodes(shape, 360.0, w) for w in (0.0, 5.0, 11.0, 50.0, 1000.0)]
    assert counts[0] == 0 and counts == sorted(counts) and counts[-1] > counts[1] > 0
    # the rule: node j is kept iff its use u_j > p / (p + w)
    use = erlang_use(3.0, 40)
    assert counts[2] == sum(1 for u in use if u > 11.0 / 22.0)
    # measured use wins over Erlang's formula: arrivals that never overlap keep one node at most
    sparse = ShapeFacts(machine(1), 1, 11.0, arrivals_per_hour=30.0, standby_use=(0.9, 0.0))
    assert standby_nodes(sparse, 360.0, 1000.0) == 1
    assert math.isclose(standby_nodes(sparse, 360.0, 0.0), 0)


def test_standby_is_sized_for_the_arrivals_the_idle_keep_leaves_waiting() -> None:
    # every arrival comes 100 s after a job freed a node: an idle keep of 360 s serves them all, standby none
    arrivals = [(1000.0 * i + 100.0, 1) for i in range(30)]
    ends = [(1000.0 * i, 1) for i in range(30)]
    assert standby_use(arrivals, 360.0, 30_000.0, ends, keep_s=360.0) == ()
    # with no keep (or ends after the keep expired) the same arrivals need one standby node each time
    assert len(standby_use(arrivals, 360.0, 30_000.0, ends, keep_s=0.0)) == 1
    assert len(standby_use(arrivals, 360.0, 30_000.0, ends, keep_s=50.0)) == 1
