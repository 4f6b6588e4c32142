"""plan() end to end on small snapshots: the behaviours the daemon and the replay rely on."""

from __future__ import annotations

import pytest

from autoscaler.cloud import FailureKind
from autoscaler.model import (
    DeleteNodes,
    Drain,
    Inventory,
    Node,
    NodeState,
    Placement,
    Plan,
    Policy,
    ScaleUp,
    UnavailableOffering,
    UnservedReason,
    record_failure,
    transition,
)
from autoscaler.planner import plan
from fleet.catalog import CapacityType
from tests.planner.factory import ZONES, family_offerings, family_pools, inv, key, node, offering, pool, unit

OD, SPOT, RES = CapacityType.ON_DEMAND, CapacityType.SPOT, CapacityType.RESERVATION


def apply(inventory: Inventory, p: Plan, now: float) -> Inventory:
    """What an actuator does with a plan: requested nodes for scale-ups, drains, deletes."""
    nodes = {n.name: n for n in inventory.nodes}
    for c in p.commands:
        if isinstance(c, ScaleUp):
            g = inventory.pool(c.pool).gpus_per_node
            for name in c.names:
                nodes[name] = Node(name, c.pool, c.offering, NodeState.REQUESTED, g, since=now)
        elif isinstance(c, Drain):
            for name in c.nodes:
                nodes[name] = transition(nodes[name], NodeState.DRAINING, now)
        elif isinstance(c, DeleteNodes):
            for name in c.names:
                nodes[name] = transition(nodes[name], NodeState.DELETING, now)
    return Inventory(inventory.pools, tuple(nodes.values()))


def test_idle_node_before_any_launch() -> None:
    p = pool(8)
    out = plan([unit("u", 8)], inv([p], [node(p, 0)]), [offering(8)], Policy(), 10)
    assert out.scale_ups == () and out.assignments["u"].placement is Placement.READY


def test_booting_capacity_is_not_launched_twice() -> None:
    pools = family_pools()
    i0 = inv(pools)
    demand = [unit("a", 8), unit("b", 2), unit("g", 8, nodes=2)]
    first = plan(demand, i0, family_offerings(), Policy(), 0)
    assert sum(s.count for s in first.scale_ups) == 4
    again = plan(demand, apply(i0, first, 0), family_offerings(), Policy(), 30)
    assert again.scale_ups == ()
    assert {a.placement for a in again.assignments.values()} == {Placement.BOOTING}
    assert again.assignments["g"].nodes == first.assignments["g"].nodes


def test_a_node_that_just_freed_up_takes_the_next_unit() -> None:
    p = pool(4)
    n = transition(node(p, 0, NodeState.BUSY, used=4), NodeState.READY_IDLE, 100)
    out = plan([unit("next", 3)], inv([p], [n]), [offering(4)], Policy(idle_timeout_s=0), 100)
    assert out.assignments["next"].nodes == (n.name,) and out.scale_ups == () and out.drains == ()


def test_right_sizes_a_one_gpu_job() -> None:
    out = plan([unit("u", 1)], inv(family_pools()), family_offerings(caps=(OD,)), Policy(), 0)
    (su,) = out.scale_ups
    assert su.offering.machine_type == "a3-highgpu-1g" and su.count == 1


def test_bin_packs_small_units_when_only_8_gpu_machines_exist() -> None:
    demand = [unit(f"u{i}", 1) for i in range(8)] + [unit("two", 2)]
    out = plan(demand, inv([pool(8)]), [offering(8)], Policy(), 0)
    assert [s.count for s in out.scale_ups] == [2]
    assert len({a.nodes for a in out.assignments.values()}) == 2
    assert set(out.scale_ups[0].units) == {u.id for u in demand}


def test_partly_used_node_takes_small_units_first() -> None:
    p = pool(8)
    busy = node(p, 0, NodeState.BUSY, used=5)
    out = plan([unit("a", 2), unit("b", 1)], inv([p], [busy, node(p, 1)]), [offering(8)], Policy(), 0)
    assert out.assignments["a"].nodes == out.assignments["b"].nodes == (busy.name,)


def test_reservations_are_filled_first_even_before_cheaper_spot() -> None:
    res = pool(8, RES, name="res", reservation="r1")
    offs = [*family_offerings(), offering(8, RES, res="r1", available=2)]
    demand = [unit(f"u{i}", 8, spot_ok=True) for i in range(3)]
    out = plan(demand, inv([*family_pools(), res]), offs, Policy(), 0)
    by_cap = {s.offering.capacity_type: s.count for s in out.scale_ups}
    assert by_cap == {RES: 2, SPOT: 1}
    assert next(s for s in out.scale_ups if s.offering.capacity_type is RES).hourly_usd == 0


def test_spot_only_for_spot_tolerant_work() -> None:
    demand = [unit("tolerant", 8, spot_ok=True), unit("strict", 8)]
    out = plan(demand, inv(family_pools()), family_offerings(), Policy(), 0)
    caps = {s.units[0]: s.offering.capacity_type for s in out.scale_ups}
    assert caps == {"tolerant": SPOT, "strict": OD}


def test_gang_in_one_zone_one_request_and_one_placement_group() -> None:
    p = pool(8, compact_placement=True, placement_policy="pp-h8")
    offs = [offering(8, zone=ZONES[0], available=3), offering(8, zone=ZONES[1], available=4)]
    out = plan([unit("g", 8, nodes=4)], inv([p]), offs, Policy(), 0)
    (su,) = out.scale_ups
    assert su.gang and su.count == 4 and su.zone == ZONES[1] and su.placement_group == "pp-h8"
    assert su.units == ("g",) and out.assignments["g"].request_id == su.request_id


def test_gang_is_never_provisioned_in_part() -> None:
    offs = [offering(8, zone=z, available=3) for z in ZONES]
    out = plan([unit("g", 8, nodes=4)], inv([pool(8)]), offs, Policy(), 0)
    assert out.commands == () and "g" not in out.assignments
    (why,) = out.unserved
    assert why.unit == "g" and why.reason is UnservedReason.EXHAUSTED


def test_pool_and_fleet_limits_and_the_reason() -> None:
    demand = [unit(f"u{i}", 8) for i in range(5)]
    out = plan(demand, inv([pool(8, max_nodes=3)]), [offering(8)], Policy(), 0)
    assert sum(s.count for s in out.scale_ups) == 3
    assert {u.reason for u in out.unserved} == {UnservedReason.POOL_LIMIT}
    out = plan(demand, inv([pool(8)]), [offering(8)], Policy(max_gpus=16), 0)
    assert sum(s.count for s in out.scale_ups) == 2 and out.unserved[0].reason is UnservedReason.GPU_LIMIT


def test_budget_cap_counts_running_nodes() -> None:
    p = pool(8)
    running = node(p, 0, NodeState.BUSY, used=8)
    out = plan([unit("a", 8), unit("b", 8)], inv([p], [running]), [offering(8)], Policy(budget_usd_per_hour=200), 0)
    assert sum(s.hourly_usd for s in out.scale_ups) + 88 <= 200
    assert [s.count for s in out.scale_ups] == [1] and out.unserved[0].reason is UnservedReason.BUDGET


def test_budget_falls_back_to_a_cheaper_shape() -> None:
    out = plan(
        [unit("u", 1)], inv(family_pools(caps=(OD,))), [offering(8), offering(1)], Policy(budget_usd_per_hour=20), 0
    )
    assert [s.offering.machine_type for s in out.scale_ups] == ["a3-highgpu-1g"]


def test_higher_priority_is_served_first_under_a_limit() -> None:
    demand = [unit("low", 8, t=0), unit("high", 8, t=50, priority=5)]
    out = plan(demand, inv([pool(8, max_nodes=1)]), [offering(8)], Policy(), 100)
    assert list(out.assignments) == ["high"] and out.unserved[0].unit == "low"


def test_backoff_falls_back_to_the_next_zone_and_expires() -> None:
    pol = Policy(backoff_s=300)
    mem = record_failure((), key(8, zone=ZONES[0]), FailureKind.STOCKOUT, 0, pol)
    offs = [offering(8, zone=z) for z in ZONES]
    out = plan([unit("u", 8)], inv([pool(8)]), offs, pol, 100, mem)
    assert out.scale_ups[0].zone == ZONES[1] and out.unavailable == mem
    later = plan([unit("u", 8)], inv([pool(8)]), offs, pol, 300, out.unavailable)
    assert later.scale_ups[0].zone == ZONES[0] and later.unavailable == ()


def test_everything_backed_off_is_explained() -> None:
    mem = [UnavailableOffering(key(8, zone=z), 1000, FailureKind.QUOTA) for z in ZONES]
    out = plan([unit("u", 8)], inv([pool(8)]), [offering(8, zone=z) for z in ZONES], Policy(), 0, mem)
    assert out.commands == () and out.unserved[0].reason is UnservedReason.BACKED_OFF


def test_scale_down_drains_then_deletes_by_name_and_keeps_busy_nodes() -> None:
    p = pool(8)
    i = inv([p], [node(p, 0, since=0), node(p, 1, NodeState.BUSY, used=8, since=0)])
    pol = Policy(idle_timeout_s=60)
    first = plan([], i, [offering(8)], pol, 1000)
    assert first.drains == (Drain(p.name, ("h8-on-demand-0",), first.drains[0].reason),) and first.deletes == ()
    second = plan([], apply(i, first, 1000), [offering(8)], pol, 1010)
    assert [d.names for d in second.deletes] == [("h8-on-demand-0",)] and second.drains == ()


def test_idle_node_that_demand_needs_is_not_drained() -> None:
    p = pool(8)
    out = plan([unit("u", 4)], inv([p], [node(p, 0, since=0)]), [offering(8)], Policy(idle_timeout_s=1), 1000)
    assert out.drains == () and out.assignments["u"].placement is Placement.READY


def test_batch_window_holds_launches_but_not_placement() -> None:
    p = pool(8)
    pol = Policy(batch_window_s=10, batch_idle_s=2)
    out = plan([unit("a", 8, t=99), unit("b", 8, t=99.5)], inv([p], [node(p, 0)]), [offering(8)], pol, 100)
    assert out.scale_ups == () and len(out.assignments) == 1
    assert out.unserved[0].reason is UnservedReason.BATCHING


def test_new_node_names_come_from_the_pool_name_space() -> None:
    p = pool(8, max_nodes=4, node_name_prefix="c1-gpu")
    i = inv([p], [node(p, 0, NodeState.BUSY, used=8), node(p, 2, NodeState.BUSY, used=8)])
    out = plan([unit("a", 8), unit("b", 8), unit("c", 8)], i, [offering(8)], Policy(), 0)
    assert out.scale_ups[0].names == ("c1-gpu-1", "c1-gpu-3")
    assert out.unserved[0].reason is UnservedReason.POOL_LIMIT


def test_deterministic() -> None:
    demand = [unit(f"u{i}", g, spot_ok=i % 2 == 0) for i, g in enumerate([1, 2, 3, 8, 8, 1, 4])]
    demand.append(unit("g", 8, nodes=3))
    args = (inv(family_pools()), family_offerings(), Policy(), 5.0)
    assert plan(demand, *args) == plan(list(reversed(demand)), *args)


def test_duplicate_unit_ids_are_rejected() -> None:
    with pytest.raises(ValueError, match="duplicate unit id 'u'"):
        plan([unit("u"), unit("u")], inv([pool(8)]), [offering(8)], Policy(), 0)


def test_spot_tolerant_work_leaves_general_capacity_to_strict_work() -> None:
    od, sp = pool(8), pool(8, SPOT)
    nodes = [node(od, 0, NodeState.BOOTING), node(sp, 0, NodeState.BOOTING)]
    demand = [unit("tolerant", 8, spot_ok=True, priority=1), unit("strict", 8)]
    out = plan(demand, inv([od, sp], nodes), [offering(8)], Policy(), 0)
    assert out.assignments["tolerant"].nodes == ("h8-spot-0",) and out.scale_ups == ()


def test_hints_keep_units_on_the_nodes_they_were_given() -> None:
    p = pool(8)
    nodes = [node(p, 0, NodeState.BOOTING), node(p, 1, NodeState.BUSY, used=4)]
    i = inv([p], nodes)
    assert plan([unit("u", 2)], i, [offering(8)], Policy(), 0).assignments["u"].nodes == ("h8-on-demand-1",)
    prev = plan([unit("u", 2)], inv([p], nodes[:1]), [offering(8)], Policy(), 0)
    out = plan([unit("u", 2)], i, [offering(8)], Policy(), 1, hints=prev.assignments)
    assert out.assignments["u"].nodes == ("h8-on-demand-0",)
    full = inv([p], [node(p, 0, NodeState.BUSY, used=8), nodes[1]])  # the hinted node filled up meanwhile
    assert plan([unit("u", 2)], full, [offering(8)], Policy(), 1, hints=prev.assignments).assignments["u"].nodes == (
        "h8-on-demand-1",
    )


def test_policy_limits_for_unknown_pools_are_rejected() -> None:
    with pytest.raises(ValueError, match=r"Policy\.pool_max_nodes: unknown pools \['nope'\]"):
        plan([unit("u", 8)], inv([pool(8)]), [offering(8)], Policy(pool_max_nodes={"nope": 1}), 0)


def test_duplicate_offerings_are_rejected() -> None:
    with pytest.raises(ValueError, match="offerings: duplicate offering keys"):
        plan([unit("u", 8)], inv([pool(8)]), [offering(8), offering(8)], Policy(), 0)


def test_scale_up_reasons_read_well() -> None:
    out = plan([unit("u", 8)], inv([pool(8)]), [offering(8)], Policy(), 0)
    assert out.scale_ups[0].reason.startswith("1 pending unit needs 1 new node: on-demand a3-highgpu-8g")
    out = plan([unit("a", 8), unit("b", 8)], inv([pool(8)]), [offering(8)], Policy(), 0)
    assert out.scale_ups[0].reason.startswith("2 pending units need 2 new nodes")


def test_running_reservation_capacity_is_used_before_paid_by_the_hour_nodes() -> None:
    od, res = pool(8), pool(8, RES, name="res", reservation="r1")
    nodes = [node(od, 0), node(od, 1, NodeState.BUSY, used=4), node(res, 0)]
    out = plan([unit("big", 8), unit("small", 2)], inv([od, res], nodes), [offering(8)], Policy(), 0)
    assert out.assignments["big"].nodes == ("res-0",)
    assert out.assignments["small"].nodes == ("h8-on-demand-1",)  # no reserved room left: best fit on on-demand


def test_long_spot_tolerant_gangs_can_be_kept_off_spot() -> None:
    demand = [
        unit("short", 8, nodes=2, spot_ok=True, time_limit_s=3600),
        unit("long", 8, nodes=4, spot_ok=True, time_limit_s=48 * 3600),
    ]
    out = plan(demand, inv(family_pools()), family_offerings(), Policy(spot_max_node_hours=64), 0)
    caps = {s.units[0]: s.offering.capacity_type for s in out.scale_ups}
    assert caps == {"short": SPOT, "long": OD}


def test_stale_hints_naming_nodes_this_plan_launches_are_ignored() -> None:
    """The previous plan's gang launch never happened, and its names are free again."""
    p = pool(8)
    stale = {"g": ("h8-on-demand-0", "h8-on-demand-1")}
    demand = [unit("a", 5, priority=2), unit("b", 5, priority=1), unit("g", 3, nodes=2)]  # a, b: -0, -1
    out = plan(demand, inv([p]), [offering(8)], Policy(), 0, hints=stale)
    gang = next(s for s in out.scale_ups if s.gang)
    assert out.assignments["g"].nodes == gang.names and set(gang.names).isdisjoint(stale["g"])


def test_pools_are_kept_at_min_nodes_and_demand_fills_them_first() -> None:
    p = pool(8, min_nodes=2)
    i = inv([p], [node(p, 0, NodeState.BUSY, used=8), node(p, 1, NodeState.DRAINING)])
    out = plan([unit("u", 8)], i, [offering(8)], Policy(), 0)
    (su,) = out.scale_ups
    assert su.count == 1 and su.reason.startswith("pool minimum (2 nodes)") and su.units == ("u",)
    assert out.assignments["u"].nodes == su.names


def test_min_nodes_respect_the_limits() -> None:
    out = plan([], inv([pool(8, min_nodes=3)]), [offering(8)], Policy(max_gpus=16), 0)
    assert [s.count for s in out.scale_ups] == [2]


def test_every_free_reserved_slot_is_launched_up_front_and_the_reservation_caps_it() -> None:
    """`Policy.launch_reserved_nodes`: a reservation bills whether its slots run VMs or not, so the plan launches
    every slot of a reservation pool with no work waiting (Cluster Toolkit's static reserved nodes); the slots the
    reservation reports free cap it, and a node already up counts."""
    r = pool(8, CapacityType.RESERVATION, name="res", reservation="r1", zones=(ZONES[0],), max_nodes=4)
    res_offer = offering(8, CapacityType.RESERVATION, res="r1", available=3)
    i = inv([r, pool(8)], [node(r, 0, NodeState.READY_IDLE)])
    out = plan([], i, [res_offer, offering(8)], Policy(), 0)
    (su,) = out.scale_ups
    assert su.pool == "res" and su.count == 3 and su.minimum and su.hourly_usd == 0
    assert su.reason.startswith("reserved capacity launched up front: 3 new nodes")
    # pending work fills the reserved nodes being launched before anything is bought
    out = plan([unit("u", 8), unit("v", 8)], i, [res_offer, offering(8)], Policy(), 0)
    assert [s.pool for s in out.scale_ups] == ["res"]
    assert {n for a in out.assignments.values() for n in a.nodes} <= {"res-0", *su.names}
    # off, or with reserved nodes scaled down like any other: launched for work only
    for pol in (Policy(launch_reserved_nodes=False), Policy(keep_reserved_nodes=False)):
        assert plan([], i, [res_offer, offering(8)], pol, 0).scale_ups == ()


def test_per_pool_gpu_cap_and_fallback_to_another_pool() -> None:
    pools = [pool(8), pool(4)]
    offs = [offering(8), offering(4, price=44.0)]
    out = plan([unit("a", 4), unit("b", 4)], inv(pools), offs, Policy(pool_max_gpus={"h4-on-demand": 4}), 0)
    assert {s.pool: s.count for s in out.scale_ups} == {"h4-on-demand": 1, "h8-on-demand": 1}
    assert out.unserved == ()


def test_a_unit_never_counts_on_nor_gets_a_node_it_avoids() -> None:
    """`WorkUnit.avoid` (a Slurm job's own --exclude): the idle node it avoids is no capacity for it, and the node
    launched for it is not that name; another unit still takes the avoided node, and a gang avoids it too."""
    p = pool(8)
    idle = node(p, 0)
    out = plan([unit("u", 8, avoid={idle.name})], inv([p], [idle]), [offering(8)], Policy(), 10)
    (su,) = out.scale_ups
    assert su.names == (p.node_name(1),) and out.assignments["u"].nodes == (p.node_name(1),)
    both = plan([unit("u", 8, avoid={idle.name}), unit("v", 8)], inv([p], [idle]), [offering(8)], Policy(), 10)
    assert both.assignments["v"].nodes == (idle.name,) and both.assignments["u"].nodes == (p.node_name(1),)
    gang = plan([unit("g", 8, nodes=2, avoid={p.node_name(1)})], inv([p], [idle]), [offering(8)], Policy(), 10)
    assert p.node_name(1) not in gang.assignments["g"].nodes and len(set(gang.assignments["g"].nodes)) == 2
