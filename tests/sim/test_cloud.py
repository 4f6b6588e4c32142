"""The sim cloud behaves like a cloud the autoscaler can trust: boots, billing, refusals, seeds."""

from __future__ import annotations

import pytest

from autoscaler.cloud import (
    CloudNodeStatus,
    InsufficientCapacity,
    InvalidRequest,
    LaunchRequest,
    OfferingKey,
    Provider,
    QuotaExceeded,
)
from autoscaler.sim import BootProfile, NodeEventKind, SimClock, SimCloud, SimConfig, SimReservation, StockoutWindow
from fleet.catalog import CapacityType, load_catalog

ZONE = "us-central1-a"
OD_8G = OfferingKey("sim", ZONE, "a3-highgpu-8g", CapacityType.ON_DEMAND)
SPOT_1G = OfferingKey("sim", ZONE, "a3-highgpu-1g", CapacityType.SPOT)
PRICE_8G = load_catalog().machine("a3-highgpu-8g").price("us-central1")


def make(**kw: object) -> tuple[SimCloud, SimClock]:
    clock = SimClock()
    kw.setdefault("capacity_types", (CapacityType.ON_DEMAND, CapacityType.SPOT))
    return SimCloud(SimConfig(**kw), clock), clock  # type: ignore[arg-type]


def req(rid: str, *names: str, key: OfferingKey = OD_8G, pool: str = "p") -> LaunchRequest:
    return LaunchRequest(rid, pool, key, names)


def test_implements_the_provider_protocol() -> None:
    cloud, _ = make()
    assert isinstance(cloud, Provider)
    keys = {o.key for o in cloud.offerings()}
    assert OD_8G in keys and SPOT_1G in keys
    od = next(o for o in cloud.offerings() if o.key == OD_8G)
    assert od.hourly_usd == PRICE_8G.on_demand and od.gpus_per_node == 8


def test_boot_then_register_then_bill_per_second_until_delete() -> None:
    cloud, clock = make(boot={"a3-highgpu-8g": BootProfile(boot_s=100, register_s=20)})
    cloud.launch(req("r1", "n-0"))
    assert [n.status for n in cloud.list_nodes()] == [CloudNodeStatus.PROVISIONING]
    assert cloud.next_event_time() == 100
    clock.advance_to(100)
    assert [e.kind for e in cloud.advance(100)] == [NodeEventKind.RUNNING]
    assert not cloud.is_registered("n-0")
    clock.advance_to(120)
    assert [e.kind for e in cloud.advance(120)] == [NodeEventKind.REGISTERED]
    assert cloud.is_registered("n-0")
    clock.advance_to(3600)
    cloud.delete("p", ["n-0"])
    assert cloud.ledger.cost(10_000) == pytest.approx(PRICE_8G.on_demand)  # one hour, launch to delete
    assert [n.status for n in cloud.list_nodes()] == [CloudNodeStatus.GONE]


def test_launch_is_idempotent_by_request_id_and_by_name() -> None:
    cloud, _ = make()
    first = cloud.launch(req("r1", "n-0", "n-1"))
    again = cloud.launch(req("r1", "n-0", "n-1"))
    assert again == first
    third = cloud.launch(req("r2", "n-1", "n-2"))
    assert third.already_existed == ("n-1",)
    assert sorted(n.name for n in cloud.list_nodes()) == ["n-0", "n-1", "n-2"]


def test_bad_requests_are_rejected_and_nothing_is_created() -> None:
    cloud, _ = make()
    with pytest.raises(InvalidRequest, match="not offered"):
        cloud.launch(req("r1", "x-0", key=OfferingKey("sim", "us-east1-b", "a3-highgpu-8g", CapacityType.ON_DEMAND)))
    with pytest.raises(InvalidRequest, match="repeats"):
        cloud.launch(req("r2", "x-0", "x-0"))
    assert cloud.list_nodes() == []


def test_quota_refuses_the_whole_request() -> None:
    cloud, _ = make(gpu_quota={CapacityType.ON_DEMAND: 16})
    cloud.launch(req("r1", "n-0"))
    with pytest.raises(QuotaExceeded) as exc:
        cloud.launch(req("r2", "n-1", "n-2"))
    assert exc.value.code == "QUOTA_EXCEEDED" and exc.value.offering == OD_8G
    assert [n.name for n in cloud.list_nodes()] == ["n-0"]
    assert next(o for o in cloud.offerings() if o.key == OD_8G).available_nodes == 1


def test_stockout_window_keeps_the_offering_out_then_it_comes_back() -> None:
    cloud, clock = make(stockout_windows=(StockoutWindow(zone=ZONE, start=0, end=600, machine_type="a3-highgpu-8g"),))
    with pytest.raises(InsufficientCapacity) as exc:
        cloud.launch(req("r1", "n-0"))
    assert exc.value.code == "ZONE_RESOURCE_POOL_EXHAUSTED"
    cloud.launch(req("r2", "s-0", key=SPOT_1G))  # other machine types are not affected
    clock.advance_to(600)
    cloud.launch(req("r3", "n-0"))


def test_stockout_rate_is_seeded_and_failures_open_a_window() -> None:
    def outcomes(seed: int) -> list[bool]:
        cloud, clock = make(stockout_rate=0.3, stockout_window_s=50, seed=seed)
        out = []
        for i in range(200):
            clock.advance_to(i * 100.0)
            try:
                cloud.launch(req(f"r{i}", f"n-{i}"))
                out.append(True)
            except InsufficientCapacity:
                out.append(False)
                assert cloud.stocked_out(OD_8G)  # stays out for a while...
                with pytest.raises(InsufficientCapacity):
                    cloud.launch(req(f"again{i}", f"m-{i}"))
        return out

    a, b = outcomes(1), outcomes(1)
    assert a == b
    assert 0.15 < a.count(False) / len(a) < 0.45
    assert outcomes(2) != a


def test_reservation_slots_are_limited_and_covered_nodes_add_nothing_to_the_bill() -> None:
    res = SimReservation(name="res", zone=ZONE, machine_type="a3-highgpu-8g", nodes=2, hourly_usd=60.0)
    cloud, clock = make(reservations=(res,))
    key = OfferingKey("sim", ZONE, "a3-highgpu-8g", CapacityType.RESERVATION, "res")
    cloud.launch(req("r1", "r-0", "r-1", key=key))
    with pytest.raises(InsufficientCapacity):
        cloud.launch(req("r2", "r-2", key=key))
    assert next(o for o in cloud.offerings() if o.key == key).available_nodes == 0
    clock.advance_to(7200)
    assert cloud.ledger.cost(7200) == 0.0
    assert cloud.reservation_cost(7200) == pytest.approx(2 * 60.0 * 2)
    cloud.delete("p", ["r-0"])
    assert next(o for o in cloud.offerings() if o.key == key).available_nodes == 1


def test_spot_nodes_are_preempted_at_the_rate_and_stop_billing() -> None:
    cloud, clock = make(preemption_rate_per_hour=1.0, seed=3, gone_retention_s=10_000)
    for i in range(200):
        cloud.launch(req(f"r{i}", f"s-{i}", key=SPOT_1G))
    clock.advance_to(3600 + 360)
    events = cloud.advance(clock.now)
    preempted = [e for e in events if e.kind is NodeEventKind.PREEMPTED]
    # P(preempted within an hour of running) = 1 - e^-1 = 0.63
    assert 0.5 < len(preempted) / 200 < 0.75
    gone = {n.name for n in cloud.list_nodes() if n.preempted}
    assert gone == {e.name for e in preempted}
    billed_h = sum(rec_h for rec_h in cloud.ledger.gpu_hours_by_capacity(clock.now).values())
    assert billed_h < 200 * (3600 + 360) / 3600  # preempted nodes stopped billing


def test_deleted_name_can_be_reused_without_inheriting_old_events() -> None:
    cloud, clock = make(default_boot=BootProfile(boot_s=100, register_s=0))
    cloud.launch(req("r1", "n-0"))
    cloud.delete("p", ["n-0"])
    clock.advance_to(50)
    cloud.launch(req("r2", "n-0"))
    clock.advance_to(100)
    assert cloud.advance(100) == []  # the first n-0's boot is stale
    clock.advance_to(150)
    assert {e.kind for e in cloud.advance(150)} == {NodeEventKind.RUNNING, NodeEventKind.REGISTERED}


def test_config_errors_name_the_field() -> None:
    with pytest.raises(ValueError, match=r"machine_types\[0\].*did you mean"):
        SimConfig(machine_types=("a3-highgpu-9g",))
    with pytest.raises(ValueError, match="stockout_rate"):
        SimConfig(stockout_rate=1.5)
    with pytest.raises(ValueError, match=r"reservations\[0\].zone"):
        SimConfig(
            reservations=(
                SimReservation(name="r", zone="us-central1-z", machine_type="a3-highgpu-8g", nodes=1, hourly_usd=1),
            )
        )


def test_timeline_stockouts_are_the_same_weather_however_often_anyone_asks() -> None:
    busy, _ = make(stockout_rate=0.25, stockout_window_s=600, seed=5)
    quiet, _ = make(stockout_rate=0.25, stockout_window_s=600, seed=5)
    a, b = [], []
    for t in range(0, 2000 * 3600, 60):  # one client polls every minute, the other hourly (time moves forward)
        out = busy.stocked_out(OD_8G, float(t))
        if t % 3600 == 0:
            a.append(out)
            b.append(quiet.stocked_out(OD_8G, float(t)))
    assert a == b
    assert 0.2 < sum(a) / len(a) < 0.3  # out about a quarter of the time
    assert not busy.stocked_out(OfferingKey("sim", ZONE, "a3-highgpu-8g", CapacityType.RESERVATION, "r"), 0.0)


def test_per_attempt_stockouts_open_a_window_on_each_failure() -> None:
    cloud, clock = make(stockout_rate=1.0, stockout_window_s=100, stockout_mode="per-attempt")
    assert not cloud.stocked_out(OD_8G)
    with pytest.raises(InsufficientCapacity):
        cloud.launch(req("r1", "n-0"))
    assert cloud.stocked_out(OD_8G)
    clock.advance_to(100)
    assert not cloud.stocked_out(OD_8G)


def test_the_bill_of_a_window_is_the_part_of_each_record_inside_it() -> None:
    from autoscaler.cloud import OfferingKey
    from autoscaler.sim.billing import BillingLedger, BillingRecord
    from fleet.catalog import CapacityType

    key = OfferingKey("sim", "z", "m", CapacityType.ON_DEMAND)
    led = BillingLedger()
    led.open(BillingRecord("a", key, 8, 36.0, start=0.0))
    led.open(BillingRecord("b", key, 8, 72.0, start=1800.0))
    led.open(BillingRecord("r", key, 8, 99.0, start=0.0, covered_by_reservation=True))
    led.close("a", 3600.0)
    # [1800, 5400): a for 1800 s at $36/h, b for 3600 s at $72/h (open, counted up to now), r covered
    assert led.cost_between(1800.0, 5400.0, now=7200.0) == 36.0 / 2 + 72.0
    assert led.cost_between(0.0, 10**9, now=7200.0) == led.cost(7200.0)
