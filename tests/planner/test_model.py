"""The model: validation of work units, pools, inventory and policy; the node state machine;
the backoff memory; deterministic request ids."""

from __future__ import annotations

import pytest

from autoscaler.cloud import FailureKind
from autoscaler.model import (
    TRANSITIONS,
    IllegalTransition,
    Inventory,
    NodeState,
    Policy,
    Pool,
    WorkUnit,
    active_unavailable,
    record_failure,
    request_id_for,
    transition,
)
from fleet.catalog import CapacityType, load_catalog
from tests.planner.factory import H100, key, node, pool


class TestWorkUnit:
    def test_gang_and_totals(self) -> None:
        u = WorkUnit("j", 0, 8, nodes=3)
        assert u.is_gang and u.gpus == 24
        assert not WorkUnit("s", 0, 2).is_gang

    @pytest.mark.parametrize(
        ("kw", "field"),
        [({"nodes": 0}, "WorkUnit.nodes"), ({"gpus_per_node": 0}, "WorkUnit.gpus_per_node"), ({"id": ""}, "id")],
    )
    def test_bad_values_name_the_field(self, kw: dict, field: str) -> None:
        args = {"id": "j", "submit_time": 0.0, "gpus_per_node": 1, **kw}
        with pytest.raises(ValueError, match=field):
            WorkUnit(**args)

    def test_type_sets_are_frozen(self) -> None:
        u = WorkUnit("j", 0, 1, gpu_types={"a"}, machine_types=["m"])  # type: ignore[arg-type]
        assert u.gpu_types == frozenset({"a"}) and u.machine_types == frozenset({"m"})
        hash(u)

    @pytest.mark.parametrize(("gpus", "nodes", "per"), [(1, 1, 1), (8, 1, 8), (9, 2, 8), (64, 8, 8), (20, 3, 8)])
    def test_from_gpus_splits_big_asks_into_8_gpu_gangs(self, gpus: int, nodes: int, per: int) -> None:
        u = WorkUnit.from_gpus("j", 0, gpus)
        assert (u.nodes, u.gpus_per_node) == (nodes, per)


class TestStateMachine:
    def test_every_edge_has_a_reason_and_is_legal(self) -> None:
        assert all(why.strip() for why in TRANSITIONS.values())
        p = pool(8)
        for frm, to in TRANSITIONS:
            used = 3 if frm in (NodeState.BUSY,) else 0
            n = node(p, 0, frm, used=used)
            kw = {"gpus_used": 2} if to is NodeState.BUSY else {}
            out = transition(n, to, 10.0, **kw)
            assert out.state is to and out.since == 10.0 and out.history[-1] == (to, 10.0)

    def test_every_missing_edge_is_illegal(self) -> None:
        p = pool(8)
        for frm in NodeState:
            for to in NodeState:
                if (frm, to) in TRANSITIONS:
                    continue
                n = node(p, 0, frm, used=2 if frm is NodeState.BUSY else 0)
                with pytest.raises(IllegalTransition, match=f"{frm} -> {to}"):
                    transition(n, to, 1.0, gpus_used=1)

    def test_gone_is_terminal(self) -> None:
        assert not [t for (f, t) in TRANSITIONS if f is NodeState.GONE]

    def test_no_delete_without_drain(self) -> None:
        n = node(pool(8), 0, NodeState.READY_IDLE)
        with pytest.raises(IllegalTransition):
            transition(n, NodeState.DELETING, 1.0)

    def test_cannot_delete_a_draining_node_with_work(self) -> None:
        n = node(pool(8), 0, NodeState.DRAINING, used=4, units=("j",))
        with pytest.raises(IllegalTransition, match="still has work"):
            transition(n, NodeState.DELETING, 1.0)

    def test_history_accumulates_and_idle_clears_usage(self) -> None:
        n = node(pool(8), 0, NodeState.REQUESTED, since=1.0)
        n = transition(n, NodeState.BOOTING, 2.0)
        n = transition(n, NodeState.BUSY, 3.0, gpus_used=8)
        n = transition(n, NodeState.READY_IDLE, 4.0)
        assert [s for s, _ in n.history] == [
            NodeState.REQUESTED,
            NodeState.BOOTING,
            NodeState.BUSY,
            NodeState.READY_IDLE,
        ]
        assert n.gpus_used == 0 and n.idle_for(10.0) == 6.0

    def test_busy_needs_work(self) -> None:
        with pytest.raises(ValueError, match="gpus_used > 0"):
            transition(node(pool(8), 0, NodeState.READY_IDLE), NodeState.BUSY, 1.0)

    def test_node_validation(self) -> None:
        with pytest.raises(ValueError, match=r"Node\.gpus_used"):
            node(pool(8), 0, NodeState.BUSY, used=9)
        with pytest.raises(ValueError, match="ready-idle"):
            node(pool(8), 0, NodeState.READY_IDLE, used=1)


class TestPoolsAndInventory:
    def test_pool_validation_names_the_field(self) -> None:
        with pytest.raises(ValueError, match=r"Pool\.max_nodes"):
            pool(8, min_nodes=5, max_nodes=2)
        with pytest.raises(ValueError, match=r"Pool\.zones"):
            pool(8, zones=())
        with pytest.raises(ValueError, match=r"Pool\.gpus_per_node"):
            Pool("p", "m", H100, 0, ("z",), CapacityType.SPOT, 1)

    def test_can_launch_matches_machine_capacity_zone_and_reservation(self) -> None:
        p = pool(8)
        assert p.can_launch(key(8))
        assert not p.can_launch(key(4))
        assert not p.can_launch(key(8, "spot"))
        assert not p.can_launch(key(8, zone="europe-west4-a"))
        r = pool(8, CapacityType.RESERVATION, name="r", reservation="res-1")
        assert r.can_launch(key(8, "reservation", res="res-1")) and not r.can_launch(key(8, "reservation", res="x"))

    def test_inventory_rejects_unknown_pools_and_duplicates(self) -> None:
        p = pool(8)
        with pytest.raises(ValueError, match="unknown pool"):
            Inventory((p,), (node(pool(4), 0),))
        with pytest.raises(ValueError, match="duplicate node name"):
            Inventory((p,), (node(p, 0), node(p, 0)))
        with pytest.raises(ValueError, match="duplicate pool names"):
            Inventory((p, p))

    def test_free_names_skip_live_nodes_but_reuse_gone_ones(self) -> None:
        p = pool(8, max_nodes=4)
        inv = Inventory((p,), (node(p, 0), node(p, 1, NodeState.GONE), node(p, 2, NodeState.DELETING)))
        assert inv.free_names(p.name, 5) == ["h8-on-demand-1", "h8-on-demand-3"]
        assert inv.free_names(p.name, 1, taken=["h8-on-demand-1"]) == ["h8-on-demand-3"]

    def test_from_inventory_pool(self) -> None:
        from fleet.inventory import InventoryPool

        ip = InventoryPool(
            name="gpu",
            cluster="c1",
            provider="gcp",
            project="p",
            region="us-central1",
            zones=["us-central1-a"],
            machine_type="a3-highgpu-8g",
            gpu_type=H100,
            gpus_per_node=8,
            capacity_type="spot",
            min_nodes=0,
            max_nodes=16,
            instance_group="mig",
            node_name_prefix="c1-gpu",
            slurm_partitions=["batch"],
            spot_tolerant=True,
        )
        p = Pool.from_inventory(ip, qualified=True)
        assert p.name == "c1/gpu" and p.node_name(3) == "c1-gpu-3" and p.queues == frozenset({"batch"})
        assert p.capacity_type is CapacityType.SPOT and p.serves("batch") and not p.serves("other")
        assert p.placement_max_vms is None
        compact = ip.model_copy(update={"compact_placement": True})
        assert Pool.from_inventory(compact, catalog=load_catalog()).placement_max_vms == 1500
        assert Pool.from_inventory(compact, catalog=load_catalog(), placement_max_vms=8).placement_max_vms == 8


class TestPolicyAndBackoff:
    @pytest.mark.parametrize("field", ["max_nodes", "budget_usd_per_hour", "idle_timeout_s", "backoff_s"])
    def test_negative_limits_name_the_field(self, field: str) -> None:
        with pytest.raises(ValueError, match=f"Policy.{field}"):
            Policy(**{field: -1})

    def test_spot_and_flex_rules(self) -> None:
        pol = Policy(spot_queues=frozenset({"batch"}), flex_start_queues=frozenset({"r"}), flex_start_max_wait_s=60)
        assert pol.spot_allowed("batch") and not pol.spot_allowed("x")
        assert Policy().spot_allowed("anything")
        assert pol.flex_start_allowed("r", 30) and not pol.flex_start_allowed("r", 61)
        assert not pol.flex_start_allowed("batch", 0)

    def test_spot_for_long_jobs_can_be_refused(self) -> None:
        pol = Policy(spot_max_node_hours=16)
        assert pol.spot_ok(WorkUnit("a", 0, 8, nodes=2, spot_ok=True, time_limit_s=8 * 3600))
        assert not pol.spot_ok(WorkUnit("b", 0, 8, nodes=4, spot_ok=True, time_limit_s=8 * 3600))
        assert pol.spot_ok(WorkUnit("c", 0, 8, nodes=4, spot_ok=True))  # time limit unknown
        assert not pol.spot_ok(WorkUnit("d", 0, 1))  # not tolerant

    def test_backoff_doubles_while_in_force_and_caps(self) -> None:
        pol = Policy(backoff_s=100, backoff_max_s=250)
        k = key(8)
        m = record_failure((), k, FailureKind.STOCKOUT, 0, pol)
        assert m[0].until == 100 and m[0].failures == 1
        m = record_failure(m, k, FailureKind.STOCKOUT, 50, pol)
        assert m[0].until == 250 and m[0].failures == 2
        m = record_failure(m, k, FailureKind.QUOTA, 60, pol)
        assert m[0].until == 310 and m[0].failures == 3  # capped at backoff_max_s

    def test_backoff_memory_expires_and_restarts(self) -> None:
        pol = Policy(backoff_s=100)
        k = key(8)
        m = record_failure((), k, FailureKind.STOCKOUT, 0, pol)
        assert active_unavailable(m, 99.9) and not active_unavailable(m, 100)
        m = record_failure(m, k, FailureKind.STOCKOUT, 500, pol)
        assert m[0].failures == 1 and m[0].until == 600

    def test_invalid_requests_are_not_capacity_failures(self) -> None:
        assert record_failure((), key(8), FailureKind.INVALID, 0, Policy()) == ()


def test_request_ids_are_deterministic() -> None:
    a = request_id_for("p", key(8), ("p-0", "p-1"), 10.0)
    assert a == request_id_for("p", key(8), ("p-0", "p-1"), 10.0)
    assert a != request_id_for("p", key(8), ("p-0", "p-2"), 10.0)
    assert a != request_id_for("p", key(8), ("p-0", "p-1"), 11.0)
