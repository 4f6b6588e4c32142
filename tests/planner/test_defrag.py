"""Fragmentation passes (autoscaler/planner/defrag.py): small work does not pin large nodes when a
smaller shape costs the same per GPU-hour; an oversized partly used node is cordoned, never stopped."""

from __future__ import annotations

from dataclasses import replace

from autoscaler.model import Inventory, NodeState, Placement, Policy, WorkUnit
from autoscaler.planner import plan
from autoscaler.planner.defrag import (
    cordon_oversized,
    placement_caps,
    pool_gpu_prices,
    step_down,
    worth_reusing,
)
from fleet.catalog import CapacityType
from tests.planner.factory import family_offerings, family_pools, machine, node, offering, pool

OD, SPOT = CapacityType.ON_DEMAND, CapacityType.SPOT
#: a policy that keeps no shape warm (what the settings rule gives by default): its oversized nodes are cordoned
NO_KEEP = Policy(idle_timeout_s=0.0)


def test_step_down_is_the_largest_smaller_shape_at_no_higher_price_per_gpu() -> None:
    pools = family_pools()
    steps = step_down(pools, family_offerings())
    assert steps["h8-on-demand"] == 4 and steps["h4-on-demand"] == 2 and steps["h2-on-demand"] == 1
    assert steps["h1-on-demand"] == 0 and steps["h8-spot"] == 4
    # when the small shapes cost more per GPU, packing onto the big node is the saving: no step down
    dear = [offering(g, OD, price=11.0 * g * (1.5 if g < 8 else 1.0)) for g in (1, 2, 4, 8)]
    assert step_down(family_pools(caps=(OD,)), dear)["h8-on-demand"] == 0
    # a shape no pool can launch is no alternative
    assert step_down([pool(8), pool(1)], family_offerings(caps=(OD,), shapes=(1, 8)))["h8-on-demand"] == 1
    assert step_down([pool(8)], family_offerings(caps=(OD,), shapes=(1, 8)))["h8-on-demand"] == 0


def test_reserved_nodes_are_never_oversized() -> None:
    res = pool(8, CapacityType.RESERVATION, name="res8", reservation="r")
    offs = [*family_offerings(caps=(OD,)), offering(8, CapacityType.RESERVATION, res="r", available=4)]
    assert step_down([res, *family_pools(caps=(OD,))], offs)["res8"] == 0


def test_placement_caps_keep_the_node_from_being_left_oversized() -> None:
    pools = {p.name: p for p in family_pools(caps=(OD,))}
    steps = step_down(pools.values(), family_offerings(caps=(OD,)))
    caps = placement_caps(steps, pools, 1)
    # an 8-GPU node (step 4) takes a 1-GPU unit only if it then uses 5+: at most 4 free GPUs before
    assert caps["h8-on-demand"] == 4 and caps["h2-on-demand"] == 1 and "h1-on-demand" not in caps


def test_cordon_drains_busy_oversized_nodes_only() -> None:
    p8, p1 = pool(8), pool(1)
    inv = Inventory(
        (p8, p1),
        (
            node(p8, 0, NodeState.BUSY, used=1),  # one small job on an 8-GPU node: cordon
            node(p8, 1, NodeState.BUSY, used=6),  # well used: keep
            node(p8, 2, NodeState.BUSY, used=8),  # full: nothing to cordon
            node(p8, 3, NodeState.READY_IDLE),  # idle: the idle timeout's business
            node(p8, 4, NodeState.BUSY, used=2),  # placed on by this plan: keep
            node(p1, 0, NodeState.BUSY, used=1),
        ),
    )
    steps = step_down(inv.pools, family_offerings(caps=(OD,)))
    (d,) = cordon_oversized(inv, steps, NO_KEEP, in_use={"h8-on-demand-4"})
    assert d.pool == "h8-on-demand" and d.nodes == ("h8-on-demand-0",) and "oversized" in d.reason and d.cordon
    assert cordon_oversized(inv, steps, replace(NO_KEEP, defragment=False)) == []


def test_a_node_of_a_shape_kept_warm_is_not_cordoned() -> None:
    """Once its work ends such a node is a warm node the settings rule wants, and a drained one could take no job:
    the cordon would delete it (the eleventh round's e2e run on slurmctld did exactly that).  A shape with no idle
    keep is scaled down the moment it empties anyway."""
    p8, p1 = pool(8), pool(1)
    inv = Inventory((p8, p1), (node(p8, 0, NodeState.BUSY, used=1),))
    steps = step_down(inv.pools, family_offerings(caps=(OD,)))
    m8 = p8.machine_type
    assert cordon_oversized(inv, steps, Policy(idle_timeout_s=300.0)) == []
    assert cordon_oversized(inv, steps, replace(NO_KEEP, idle_timeout_by_machine={m8: 600.0})) == []
    assert cordon_oversized(inv, steps, replace(NO_KEEP, standby_by_machine={m8: 1})) == []
    # another shape's keep does not protect it
    (d,) = cordon_oversized(inv, steps, replace(NO_KEEP, idle_timeout_by_machine={p1.machine_type: 600.0}))
    assert d.nodes == ("h8-on-demand-0",)


def test_nothing_is_cordoned_in_a_fleet_with_a_reservation() -> None:
    """There Slurm binds small jobs at submit with --prefer while the overflow is held: a job kept off a cordoned
    node falls back to whatever node is free, often another big one (measured worse on the res40 replays)."""
    p8, p1 = pool(8), pool(1)
    res = pool(8, CapacityType.RESERVATION, name="res8", reservation="r")
    inv = Inventory((p8, p1, res), (node(p8, 0, NodeState.BUSY, used=1),))
    offs = [*family_offerings(caps=(OD,)), offering(8, CapacityType.RESERVATION, res="r", available=4)]
    steps = step_down(inv.pools, offs)
    assert steps["h8-on-demand"] == 1 and cordon_oversized(inv, steps, NO_KEEP) == []
    assert cordon_oversized(Inventory((p8, p1), inv.nodes), steps, NO_KEEP) != []


def test_a_node_whose_work_could_not_run_on_the_smaller_shape_is_not_cordoned() -> None:
    """A 1-GPU job asking more CPUs (or memory, or a constraint) than the 1-GPU machine has can only run on the
    big node: cordoning it would only send the next small job to a new node while a GPU here stays free."""
    p8, p1 = pool(8), pool(1)
    pinned = replace(node(p8, 0, NodeState.BUSY, used=1), work_pools=frozenset({"h8-on-demand"}))
    movable = replace(node(p8, 1, NodeState.BUSY, used=1), work_pools=frozenset({"h8-on-demand", "h1-on-demand"}))
    inv = Inventory((p8, p1), (pinned, movable))
    steps = step_down(inv.pools, family_offerings(caps=(OD,)))
    (d,) = cordon_oversized(inv, steps, NO_KEEP)
    assert d.nodes == ("h8-on-demand-1",)


def test_plan_right_sizes_instead_of_pinning_a_big_node_and_cordons_it() -> None:
    p8, p1 = pool(8), pool(1)
    big = node(p8, 0, NodeState.BUSY, used=1)
    inv = Inventory((p8, p1), (big,))
    offs = family_offerings(caps=(OD,), shapes=(1, 8))
    out = plan([WorkUnit("small", 0.0, 1)], inv, offs, NO_KEEP, 100.0)
    a = out.assignments["small"]
    assert a.placement is Placement.NEW and out.scale_ups[0].pool == "h1-on-demand"
    assert [d.nodes for d in out.drains] == [("h8-on-demand-0",)]
    assert out.deletes == ()  # its job still runs
    # without defragmentation the small unit fills the big node's free GPUs
    old = plan([WorkUnit("small", 0.0, 1)], inv, offs, Policy(defragment=False), 100.0)
    assert old.assignments["small"].nodes == ("h8-on-demand-0",) and old.drains == ()


def test_a_well_used_big_node_still_takes_small_work() -> None:
    p8, p1 = pool(8), pool(1)
    inv = Inventory((p8, p1), (node(p8, 0, NodeState.BUSY, used=5),))
    out = plan([WorkUnit("small", 0.0, 1)], inv, family_offerings(caps=(OD,), shapes=(1, 8)), Policy(), 100.0)
    assert out.assignments["small"].nodes == ("h8-on-demand-0",) and out.commands == ()


def test_a_cordoned_node_is_deleted_once_its_work_ends() -> None:
    p8 = pool(8)
    drained = node(p8, 0, NodeState.DRAINING)
    out = plan([], Inventory((p8,), (drained,)), family_offerings(caps=(OD,)), Policy(), 100.0)
    assert [d.names for d in out.deletes] == [("h8-on-demand-0",)]
    busy = node(p8, 0, NodeState.DRAINING, used=1)
    assert plan([], Inventory((p8,), (busy,)), family_offerings(caps=(OD,)), Policy(), 100.0).deletes == ()


def test_reuse_only_when_cheaper_over_the_expected_run() -> None:
    pol = Policy(expected_run_s=36000.0, expected_boot_s=360.0, wait_value_usd_per_gpu_hour=11.0)
    assert not worth_reusing(11.0, 4.0, pol)  # 10 h on on-demand vs spot + one boot: launch spot
    assert worth_reusing(11.0, 4.0, Policy(expected_run_s=100.0, expected_boot_s=360.0))  # short: reuse
    # what the boot's wait is worth tips it: a 300 s job reuses only when waiting is worth something
    assert not worth_reusing(
        11.0, 4.0, Policy(expected_run_s=300.0, expected_boot_s=360.0, wait_value_usd_per_gpu_hour=0)
    )
    assert worth_reusing(
        11.0, 4.0, Policy(expected_run_s=300.0, expected_boot_s=360.0, wait_value_usd_per_gpu_hour=None)
    )
    assert worth_reusing(11.0, 4.0, Policy())  # no expectation known: existing capacity first
    # in a plan: an idle on-demand node is not used for a long spot-tolerant unit; spot is launched
    p1, s1 = pool(1), pool(1, SPOT)
    inv = Inventory((p1, s1), (node(p1, 0),))
    offs = family_offerings(shapes=(1,))
    assert pool_gpu_prices(inv.pools, offs) == {"h1-on-demand": 11.0, "h1-spot": 4.0}
    out = plan([WorkUnit("long", 0.0, 1, spot_ok=True)], inv, offs, pol, 100.0)
    assert out.assignments["long"].placement is Placement.NEW and out.scale_ups[0].pool == "h1-spot"
    short = Policy(expected_run_s=100.0, expected_boot_s=360.0)
    out = plan([WorkUnit("short", 0.0, 1, spot_ok=True)], inv, offs, short, 100.0)
    assert out.assignments["short"].nodes == ("h1-on-demand-0",)
    assert machine(1) == "a3-highgpu-1g"


def test_a_unit_limited_to_bigger_nodes_takes_a_booting_one_instead_of_launching_another() -> None:
    """A 1-GPU unit that may only use the 2-GPU pool (its CPUs or memory, or its own constraint: `WorkUnit.pools`)
    is not oversizing a 2-GPU node: it takes the one booting for it; a 1-GPU unit free to use the 1-GPU pool still
    gets a right-sized node of its own."""
    p2, p1 = pool(2), pool(1)
    inv = Inventory((p2, p1), (node(p2, 0, NodeState.BOOTING),))
    offs = family_offerings(caps=(OD,), shapes=(1, 2))
    out = plan([WorkUnit("cpu-heavy", 0.0, 1, pools=frozenset({"h2-on-demand"}))], inv, offs, Policy(), 100.0)
    assert out.assignments["cpu-heavy"].nodes == ("h2-on-demand-0",) and out.scale_ups == ()
    out = plan([WorkUnit("small", 0.0, 1)], inv, offs, Policy(), 100.0)
    assert out.scale_ups[0].pool == "h1-on-demand"


def test_a_long_spot_tolerant_gang_launches_spot_rather_than_taking_idle_on_demand_nodes() -> None:
    """The price-over-the-run check applies to gangs too (before the eighteenth round only to 1-node units): two
    idle on-demand 8-GPU nodes are not taken by a spot-tolerant 2-node gang expected to run 10 hours (spot plus a
    boot is far cheaper), and are taken by one expected to run 100 s (a boot would cost more than the run)."""
    p8, s8 = pool(8), pool(8, SPOT)
    inv = Inventory((p8, s8), (node(p8, 0), node(p8, 1)))
    offs = family_offerings(shapes=(8,))
    gang = WorkUnit("gang", 0.0, 8, nodes=2, spot_ok=True)
    long_run = Policy(expected_run_s=36000.0, expected_boot_s=360.0, wait_value_usd_per_gpu_hour=11.0)
    out = plan([gang], inv, offs, long_run, 100.0)
    assert out.assignments["gang"].placement is Placement.NEW and out.scale_ups[0].pool == s8.name
    out = plan([gang], inv, offs, replace(long_run, expected_run_s=100.0), 100.0)
    assert sorted(out.assignments["gang"].nodes) == [f"{p8.name}-0", f"{p8.name}-1"] and out.scale_ups == ()


def test_shared_nodes_launch_the_largest_shape_for_small_work_and_fill_its_free_gpus() -> None:
    """`Policy.share_nodes` (the operator's choice): a lone 1-GPU unit gets the family's 8-GPU node, not a 1-GPU one,
    and the next small units take its free GPUs, even when that packing would otherwise not pay over a long run;
    nothing is cordoned.  Without it the same unit is right-sized."""
    p8, p1 = pool(8), pool(1)
    offs = family_offerings(caps=(OD,), shapes=(1, 8))
    shared = Policy(idle_timeout_s=0.0, defragment=False, share_nodes=True, expected_run_s=36000.0)
    out = plan([WorkUnit("small", 0.0, 1)], Inventory((p8, p1), ()), offs, shared, 100.0)
    assert [(s.pool, s.count) for s in out.scale_ups] == [("h8-on-demand", 1)]
    out = plan([WorkUnit("small", 0.0, 1)], Inventory((p8, p1), ()), offs, NO_KEEP, 100.0)
    assert [(s.pool, s.count) for s in out.scale_ups] == [("h1-on-demand", 1)]
    # a long run on a busy node: packing does not pay (`pack_pays`), unless the operator shares nodes
    busy = Inventory((p8, p1), (node(p8, 0, NodeState.BUSY, used=1),))
    out = plan([WorkUnit("small", 0.0, 1)], busy, offs, shared, 100.0)
    assert out.assignments["small"].nodes == ("h8-on-demand-0",) and out.commands == ()
    unshared = replace(shared, share_nodes=False)
    assert plan([WorkUnit("small", 0.0, 1)], busy, offs, unshared, 100.0).assignments["small"].placement is (
        Placement.NEW
    )
