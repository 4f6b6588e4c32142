"""Each planner pass alone: backoff expiry, headroom and budget, the capacity index, offering
choice, reservations, gangs, cheapest placement, scale-down, explanations, batching."""

from __future__ import annotations

import math

import pytest

from autoscaler.cloud import FailureKind
from autoscaler.model import (
    Inventory,
    NodeState,
    Policy,
    UnavailableOffering,
    UnservedReason,
)
from autoscaler.planner import (
    CapacityIndex,
    NameAllocator,
    OfferBook,
    PlanState,
    Slot,
    UnitClass,
    batch_hold,
    boot_timeouts,
    class_state,
    compute_headroom,
    expire_backoff,
    explain_unserved,
    fill_reservations,
    place_cheapest,
    place_gang,
    place_on_existing,
    scale_down_idle,
    split_backed_off,
)
from fleet.catalog import CapacityType
from tests.planner.factory import ZONES, family_offerings, family_pools, inv, key, node, offering, pool, unit

OD, SPOT, RES, FLEX = CapacityType.ON_DEMAND, CapacityType.SPOT, CapacityType.RESERVATION, CapacityType.FLEX_START


def state(inventory: Inventory, offerings, policy: Policy | None = None, unavailable=(), now: float = 0.0):
    policy = policy or Policy()
    return PlanState(
        now=now,
        policy=policy,
        inventory=inventory,
        headroom=compute_headroom(inventory, offerings, policy),
        index=CapacityIndex.from_inventory(inventory),
        book=OfferBook(offerings, expire_backoff(unavailable, now), inventory.pools),
        names=NameAllocator(inventory),
    )


def cs_for(st: PlanState, u, size: int = 1):
    return class_state(UnitClass.of(u, st.policy, st.now), size, st)


class TestBackoff:
    def test_expired_entries_are_forgotten(self) -> None:
        mem = [UnavailableOffering(key(8), 100, FailureKind.STOCKOUT), UnavailableOffering(key(4), 50, "quota")]
        assert [u.key for u in expire_backoff(mem, 60)] == [key(8)]
        assert expire_backoff(mem, 100) == ()

    def test_split_backed_off(self) -> None:
        offs = family_offerings(caps=(OD,), shapes=(8,))
        usable, blocked = split_backed_off(offs, [UnavailableOffering(key(8), 100, "stockout")])
        assert [o.key.zone for o in usable] == [ZONES[1]] and list(blocked) == [key(8)]


class TestHeadroom:
    def test_counts_live_nodes_against_pool_and_fleet_limits(self) -> None:
        p8, p1 = pool(8, max_nodes=4), pool(1, max_nodes=10)
        nodes = [node(p8, 0, NodeState.BUSY, used=8), node(p8, 1, NodeState.GONE), node(p1, 0, NodeState.BOOTING)]
        h = compute_headroom(inv([p8, p1], nodes), [], Policy(max_nodes=5, max_gpus=20, pool_max_nodes={p1.name: 3}))
        assert h.pool_nodes == {p8.name: 3, p1.name: 2}
        assert (h.nodes, h.gpus) == (3, 11)
        assert h.blocker(p8.name, key(8), 1, 8, 0) is None
        assert h.blocker(p8.name, key(8), 2, 8, 0) is UnservedReason.GPU_LIMIT
        assert h.blocker(p1.name, key(1), 3, 1, 0) is UnservedReason.POOL_LIMIT
        assert h.blocker(p8.name, key(8), 4, 1, 0) is UnservedReason.POOL_LIMIT

    def test_budget_counts_billed_nodes_but_not_reservations(self) -> None:
        od, res = pool(8), pool(8, RES, name="res", reservation="r1")
        nodes = [node(od, 0, NodeState.BUSY, used=1), node(res, 0, NodeState.BUSY, used=8)]
        offs = [offering(8), offering(8, RES, res="r1", available=3)]
        h = compute_headroom(inv([od, res], nodes), offs, Policy(budget_usd_per_hour=100))
        assert h.budget_usd_per_hour == pytest.approx(100 - 88)
        assert h.blocker(od.name, key(8), 1, 8, 88.0) is UnservedReason.BUDGET
        assert h.blocker(res.name, key(8, RES, res="r1"), 1, 8, 0.0) is None  # paid for: not budget-limited
        assert h.blocker(res.name, key(8, RES, res="r1"), 4, 8, 0.0) is UnservedReason.EXHAUSTED

    def test_take_books_every_limit(self) -> None:
        p = pool(8, max_nodes=4)
        h = compute_headroom(inv([p]), [offering(8, available=3)], Policy(max_gpus=64, budget_usd_per_hour=500))
        h.take(p.name, key(8), 2, 8, 176.0)
        assert h.offering_nodes[key(8)] == 1 and h.pool_nodes[p.name] == 2 and h.gpus == 48
        assert h.budget_usd_per_hour == pytest.approx(324) and h.nodes == math.inf


class TestCapacityIndex:
    def test_best_fit_prefers_ready_then_booting_then_new_and_the_fullest_node(self) -> None:
        idx = CapacityIndex()
        idx.add(Slot("boot", "p", "z", 1, 1))
        idx.add(Slot("new", "p", "z", 1, 2))
        idx.add(Slot("ready8", "p", "z", 8, 0))
        idx.add(Slot("ready2", "q", "z", 2, 0))
        order = {"p": (2, 0), "q": (2, 1)}
        assert idx.best_fit(order, 1).name == "ready2"  # ready before booting; tightest ready fit
        assert idx.best_fit(order, 4).name == "ready8"
        assert idx.best_fit(order, 9) is None
        assert idx.best_fit({"p": (2, 0)}, 1).name == "ready8"
        assert idx.best_fit({"p": (0, 0), "q": (2, 1)}, 1).name == "ready8"  # a lower tier beats a tighter fit

    def test_take_shrinks_and_removes(self) -> None:
        idx = CapacityIndex()
        s = Slot("n", "p", "z", 4, 0)
        idx.add(s)
        idx.take(s, 3)
        assert idx.best_fit({"p": (2, 0)}, 2) is None and idx.best_fit({"p": (2, 0)}, 1) is s
        idx.take(s, 1)
        assert idx.best_fit({"p": (2, 0)}, 1) is None
        with pytest.raises(ValueError, match="cannot take"):
            idx.take(s, 1)

    def test_gang_fit_needs_one_pool_and_one_zone(self) -> None:
        idx = CapacityIndex()
        idx.add(Slot("a1", "p", "za", 8, 0))
        idx.add(Slot("b1", "p", "zb", 8, 0))
        idx.add(Slot("b2", "p", "zb", 8, 1))
        idx.add(Slot("q1", "q", "za", 8, 0))
        order = {"p": (2, 0), "q": (2, 1)}
        assert idx.gang_fit(order, 8, 3) is None
        assert sorted(s.name for s in idx.gang_fit(order, 8, 2)) == ["b1", "b2"]

    def test_from_inventory_skips_full_and_leaving_nodes(self) -> None:
        p = pool(8)
        nodes = [
            node(p, 0, NodeState.BUSY, used=8),
            node(p, 1, NodeState.DRAINING),
            node(p, 2, NodeState.BUSY, used=5),
            node(p, 3, NodeState.BOOTING),
        ]
        idx = CapacityIndex.from_inventory(inv([p], nodes))
        assert {s.name: (s.free, s.rank) for s in idx.slots(p.name, 1)} == {
            "h8-on-demand-2": (3, 0),
            "h8-on-demand-3": (8, 1),
        }


class TestOfferChoice:
    def test_right_sizes_when_per_gpu_prices_are_equal(self) -> None:
        st = state(inv(family_pools()), family_offerings())
        for g, want in [(1, 1), (2, 2), (3, 4), (5, 8)]:
            cs = cs_for(st, unit("u", g), size=10)
            assert cs.market.peek().offering.gpus_per_node == want

    def test_bin_packs_when_only_big_shapes_are_cheap(self) -> None:
        offs = [offering(1, price=20.0), offering(8, price=40.0)]
        st = state(inv(family_pools(caps=(OD,))), offs)
        assert cs_for(st, unit("u", 1), size=1).market.peek().offering.gpus_per_node == 1  # one unit: smallest
        assert cs_for(st, unit("u", 1), size=8).market.peek().offering.gpus_per_node == 8  # eight: one 8g node

    def test_spot_only_for_spot_tolerant_units_of_allowed_queues(self) -> None:
        st = state(inv(family_pools()), family_offerings(), Policy(spot_queues=frozenset({"batch"})))
        first = cs_for(st, unit("u", 8, spot_ok=True, queue="batch")).market.peek()
        assert first.key.capacity_type is SPOT
        assert all(c.key.capacity_type is OD for c in cs_for(st, unit("u", 8)).market.remaining())
        assert all(
            c.key.capacity_type is OD for c in cs_for(st, unit("u", 8, spot_ok=True, queue="x")).market.remaining()
        )

    def test_flex_start_only_where_the_policy_allows_the_wait(self) -> None:
        offs = [offering(8), offering(8, FLEX, price=50.0)]
        pools = [pool(8), pool(8, FLEX)]
        pol = Policy(flex_start_queues=frozenset({"train"}), flex_start_max_wait_s=600)
        st = state(inv(pools), offs, pol, now=1000)
        assert cs_for(st, unit("u", 8, queue="train", t=900)).market.peek().key.capacity_type is FLEX
        assert cs_for(st, unit("u", 8, queue="train", t=0)).market.peek().key.capacity_type is OD  # waited too long
        assert [c.key.capacity_type for c in cs_for(st, unit("u", 8)).market.remaining()] == [OD]

    def test_gpu_and_machine_type_constraints(self) -> None:
        st = state(inv(family_pools()), family_offerings())
        cs = cs_for(st, unit("u", 1, machine_types=frozenset({"a3-highgpu-4g"})))
        assert {c.offering.key.machine_type for c in cs.market.remaining()} == {"a3-highgpu-4g"}
        none = cs_for(st, unit("u", 1, gpu_types=frozenset({"nvidia-b200"})))
        assert not none.market.peek() and none.none.reason is UnservedReason.NO_OFFERING

    def test_no_pool_and_backed_off_reasons(self) -> None:
        st = state(inv([pool(8, queues=frozenset({"a"}))]), [offering(8)])
        assert cs_for(st, unit("u", 8, queue="b")).none.reason is UnservedReason.NO_POOL
        mem = [UnavailableOffering(key(8), 10, "stockout")]
        st = state(inv([pool(8)]), [offering(8)], unavailable=mem)
        assert cs_for(st, unit("u", 8)).none.reason is UnservedReason.BACKED_OFF

    def test_gang_larger_than_the_placement_limit(self) -> None:
        st = state(inv([pool(8, compact_placement=True, placement_max_vms=4)]), [offering(8)])
        cs = cs_for(st, unit("g", 8, nodes=5))
        assert cs.none.reason is UnservedReason.GANG_TOO_LARGE
        assert cs_for(st, unit("g", 8, nodes=4)).market.peek()


class TestPlacementPasses:
    def test_place_on_existing_uses_idle_before_booting(self) -> None:
        p = pool(8)
        st = state(inv([p], [node(p, 0, NodeState.BOOTING), node(p, 1, NodeState.READY_IDLE)]), [offering(8)])
        u = unit("u", 8)
        assert place_on_existing(u, cs_for(st, u), st)
        assert st.placed["u"][0] == ("h8-on-demand-1",)

    def test_place_on_existing_bin_packs_partly_used_nodes(self) -> None:
        p = pool(8)
        nodes = [node(p, 0, NodeState.READY_IDLE), node(p, 1, NodeState.BUSY, used=6)]
        st = state(inv([p], nodes), [offering(8)])
        u = unit("u", 2)
        assert place_on_existing(u, cs_for(st, u), st) and st.placed["u"][0] == ("h8-on-demand-1",)

    def test_spot_nodes_are_not_used_by_intolerant_units(self) -> None:
        p = pool(8, SPOT)
        st = state(inv([p], [node(p, 0)]), [])
        u = unit("u", 8)
        assert not place_on_existing(u, cs_for(st, u), st)
        v = unit("v", 8, spot_ok=True)
        assert place_on_existing(v, cs_for(st, v), st)

    def test_fill_reservations_first_and_only_free_slots(self) -> None:
        res = pool(8, RES, name="res", reservation="r1")
        offs = [offering(8), offering(8, RES, res="r1", available=1)]
        st = state(inv([pool(8), res]), offs)
        a, b = unit("a", 8), unit("b", 8)
        cs = cs_for(st, a, size=2)
        assert fill_reservations(a, cs, st) and st.placed["a"][0] == ("res-0",)
        assert not fill_reservations(b, cs, st)
        assert cs.failed[UnservedReason.EXHAUSTED] == 1
        assert place_cheapest(b, cs, st) and st.placed["b"][0] == ("h8-on-demand-0",)

    def test_place_gang_all_nodes_from_one_offering_or_none(self) -> None:
        p = pool(8, compact_placement=True)
        offs = [offering(8, zone=ZONES[0], available=2), offering(8, zone=ZONES[1], available=3)]
        st = state(inv([p]), offs)
        g = unit("g", 8, nodes=3)
        cs = cs_for(st, g)
        assert not place_cheapest(g, cs, st)  # singles pass leaves gangs alone
        assert place_gang(g, cs, st)
        names, _, _, batch = st.placed["g"]
        assert len(names) == 3 and batch.offering.key.zone == ZONES[1] and batch.gang
        h = unit("h", 8, nodes=3)
        assert not place_gang(h, cs_for(st, h), st)  # 2 left in a, 0 in b: nothing partial
        assert "h" not in st.placed and st.headroom.offering_nodes[offs[0].key] == 2

    def test_place_cheapest_leftovers_take_the_next_small_units(self) -> None:
        st = state(inv([pool(8)]), [offering(8)])
        units = [unit(f"u{i}", 2) for i in range(5)]
        cs = cs_for(st, units[0], size=5)
        for u in units:
            assert place_on_existing(u, cs, st) or place_cheapest(u, cs, st)
        assert sorted({st.placed[u.id][0][0] for u in units}) == ["h8-on-demand-0", "h8-on-demand-1"]

    def test_names_exhausted(self) -> None:
        p = pool(8, max_nodes=1)
        st = state(inv([p], [node(p, 0, NodeState.BUSY, used=8)]), [offering(8)])
        st.headroom.pool_nodes[p.name] = 5  # a policy override larger than the name space
        u = unit("u", 8)
        cs = cs_for(st, u)
        assert not place_cheapest(u, cs, st) and cs.failed[UnservedReason.NAMES_EXHAUSTED] == 1


class TestScaleDown:
    def test_drains_only_idle_nodes_past_the_timeout(self) -> None:
        p = pool(8)
        nodes = [
            node(p, 0, NodeState.READY_IDLE, since=0),
            node(p, 1, NodeState.READY_IDLE, since=950),
            node(p, 2, NodeState.BUSY, used=1, since=0),
        ]
        drains, deletes = scale_down_idle(inv([p], nodes), Policy(idle_timeout_s=100), 1000)
        assert [d.nodes for d in drains] == [("h8-on-demand-0",)] and deletes == []

    def test_deletes_drained_empty_nodes_by_name_never_ones_with_work(self) -> None:
        p = pool(8)
        nodes = [node(p, 0, NodeState.DRAINING), node(p, 1, NodeState.DRAINING, used=2, units=("j",))]
        drains, deletes = scale_down_idle(inv([p], nodes), Policy(), 1000)
        assert drains == [] and [d.names for d in deletes] == [("h8-on-demand-0",)]

    def test_keeps_min_nodes_and_reserved_nodes(self) -> None:
        p = pool(8, min_nodes=1)
        r = pool(8, RES, name="res", reservation="r1")
        nodes = [node(p, 0), node(p, 1), node(r, 0)]
        drains, _ = scale_down_idle(inv([p, r], nodes), Policy(idle_timeout_s=0), 1000)
        assert [(d.pool, len(d.nodes)) for d in drains] == [(p.name, 1)]
        drains, _ = scale_down_idle(inv([p, r], nodes), Policy(idle_timeout_s=0, keep_reserved_nodes=False), 1000)
        assert ("res", ("res-0",)) in [(d.pool, d.nodes) for d in drains]

    def test_nodes_this_plan_uses_are_kept(self) -> None:
        p = pool(8)
        drains, _ = scale_down_idle(inv([p], [node(p, 0)]), Policy(idle_timeout_s=0), 1000, in_use={"h8-on-demand-0"})
        assert drains == []

    def test_boot_timeout(self) -> None:
        p = pool(8)
        i = inv([p], [node(p, 0, NodeState.BOOTING, since=0), node(p, 1, NodeState.REQUESTED, since=900)])
        pol = Policy(boot_timeout_s=600)
        assert boot_timeouts(i, pol, 1000) == ["h8-on-demand-0"]
        assert boot_timeouts(i, Policy(), 1000) == []
        _, deletes = scale_down_idle(i, pol, 1000, timed_out=["h8-on-demand-0"])
        assert [d.names for d in deletes] == [("h8-on-demand-0",)] and "boot timeout" in deletes[0].reason


class TestExplainAndBatching:
    def test_explains_the_binding_limit(self) -> None:
        st = state(inv([pool(8)]), [offering(8, zone=z) for z in ZONES], Policy(budget_usd_per_hour=10))
        u = unit("u", 8)
        cs = cs_for(st, u)
        assert not place_cheapest(u, cs, st)
        why = explain_unserved(u, cs)
        assert why.reason is UnservedReason.BUDGET and "budget: 2" in why.detail

    def test_batching_reason(self) -> None:
        st = state(inv([pool(8)]), [offering(8)])
        u = unit("u", 8)
        assert explain_unserved(u, cs_for(st, u), held=True).reason is UnservedReason.BATCHING

    def test_batch_hold_waits_for_idle_or_the_window(self) -> None:
        pol = Policy(batch_window_s=30, batch_idle_s=5)
        assert batch_hold([unit("a", t=98)], pol, 100)  # newest 2 s old
        assert not batch_hold([unit("a", t=90)], pol, 100)  # quiet for 10 s
        assert not batch_hold([unit("a", t=60), unit("b", t=99)], pol, 100)  # oldest waited 40 s
        assert not batch_hold([unit("a", t=99)], Policy(), 100)


def test_class_key_matches_unit_class() -> None:
    from autoscaler.planner.core import class_key

    pol = Policy(spot_queues=frozenset({"a"}), flex_start_queues=frozenset({"a"}), flex_start_max_wait_s=100)
    for u in [unit("x", 2, spot_ok=True, queue="a", t=950), unit("y", 8, nodes=2, queue="b"), unit("z", 1, t=0)]:
        assert UnitClass(*class_key(u, pol, 1000)) == UnitClass.of(u, pol, 1000)


def test_per_constraint_caches_do_not_leak_between_unit_sizes() -> None:
    """A big unit seen first must not hide the small shapes from the small units after it."""
    p1 = pool(1)
    st = state(inv([*family_pools(caps=(OD,))], [node(p1, 0)]), family_offerings(caps=(OD,)))
    big, small = unit("big", 8), unit("small", 1)
    cs_for(st, big)
    cs = cs_for(st, small)
    assert "h1-on-demand" in cs.pool_order
    assert cs.market.peek().offering.gpus_per_node == 1


class TestMinimumAndStreams:
    def test_keep_min_nodes_alone(self) -> None:
        from autoscaler.planner import keep_min_nodes

        p = pool(8, min_nodes=3)
        offs = [offering(8, zone=ZONES[0], price=100.0), offering(8, zone=ZONES[1], price=90.0, available=1)]
        st = state(inv([p], [node(p, 0, NodeState.BUSY, used=8)]), offs)
        keep_min_nodes(st)
        got = {b.offering.key.zone: list(b.names) for b in st.batches.values()}
        assert got == {ZONES[1]: ["h8-on-demand-1"], ZONES[0]: ["h8-on-demand-2"]}  # cheapest first, then fallback
        assert all(b.minimum and not b.units for b in st.batches.values())
        assert st.index.best_fit(st.book.existing_pools(UnitClass.of(unit("u", 8), st.policy, 0)), 8).rank == 2

    def test_candidate_stream_is_lazy_and_ordered(self) -> None:
        st = state(inv(family_pools(caps=(OD,))), family_offerings(caps=(OD,)))
        cls = UnitClass.of(unit("u", 2), st.policy, 0)
        _, market, none = st.book.streams(cls, class_size=1)
        assert none is None
        order = [(c.offering.gpus_per_node, c.key.zone) for c in market.remaining()]
        assert order == [(2, ZONES[0]), (2, ZONES[1]), (4, ZONES[0]), (4, ZONES[1]), (8, ZONES[0]), (8, ZONES[1])]
        market.advance()
        assert market.peek().key.zone == ZONES[1] and len(market.remaining()) == 5

    def test_name_allocator_skips_live_names_and_never_hands_out_twice(self) -> None:
        p = pool(8, max_nodes=4)
        names = NameAllocator(inv([p], [node(p, 1, NodeState.BUSY, used=1), node(p, 2, NodeState.GONE)]))
        assert names.take(p, 2) == ["h8-on-demand-0", "h8-on-demand-2"]
        assert names.take(p, 2) is None  # only one left: all or nothing
        assert names.take(p, 1) == ["h8-on-demand-3"]

    def test_no_offering_detail_names_the_constraints(self) -> None:
        st = state(inv([pool(8)]), [offering(8)])
        u = unit("u", 1, gpu_types=frozenset({"nvidia-b200"}))
        why = explain_unserved(u, cs_for(st, u))
        assert why.reason is UnservedReason.NO_OFFERING and "nvidia-b200" in why.detail
