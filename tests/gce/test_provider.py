"""GceProvider against the fake Compute server, through the real google-cloud-compute client."""

from __future__ import annotations

from typing import Any

import pytest

from autoscaler.cloud import (
    CloudNodeStatus,
    FailureKind,
    InsufficientCapacity,
    InvalidRequest,
    LaunchRequest,
    Provider,
    QuotaExceeded,
    TransientError,
    shared_reads,
)
from autoscaler.gce import GceProvider, RetryPolicy
from fleet.catalog import CapacityType, load_catalog
from tests.fakes.compute_api import FakeCompute
from tests.gce.conftest import REGION, ZONE_A, ZONE_B

pytestmark = pytest.mark.gce


def launch(provider: GceProvider, pool: str, zone: str, names: tuple[str, ...], rid: str = "req-1") -> Any:
    return provider.launch(LaunchRequest(rid, pool, provider.offering_for(pool, zone), names))


def statuses(provider: GceProvider, pool: str | None = None) -> dict[str, CloudNodeStatus]:
    return {n.name: n.status for n in provider.list_nodes([pool] if pool else None)}


def test_is_a_provider(provider: GceProvider) -> None:
    assert isinstance(provider, Provider)
    assert provider.name == "gcp"


def test_launch_creates_named_instances_in_the_zonal_mig(provider: GceProvider, fake: FakeCompute) -> None:
    result = launch(provider, "spot", ZONE_B, ("c1-spot-0", "c1-spot-1"))
    assert result.accepted == ("c1-spot-0", "c1-spot-1")
    assert result.already_existed == ()
    fake.wait_idle()
    assert fake.instance_names(ZONE_B) == {"c1-spot-0", "c1-spot-1"}
    assert fake.instance_names(ZONE_A) == set()
    assert fake.state.migs[(fake.project, ZONE_B, "c1-spot-b")].target_size == 2
    nodes = {n.name: n for n in provider.list_nodes(["spot"])}
    assert {n: x.status for n, x in nodes.items()} == {
        "c1-spot-0": CloudNodeStatus.RUNNING,
        "c1-spot-1": CloudNodeStatus.RUNNING,
    }
    node = nodes["c1-spot-0"]
    assert node.request_id == "req-1"
    assert node.pool == "spot"
    assert node.offering.zone == ZONE_B
    assert node.offering.capacity_type is CapacityType.SPOT
    assert node.created_at > 0


def test_nodes_are_provisioning_until_booted(fake_compute_factory: Any, pools: Any, make_provider: Any) -> None:
    fake = fake_compute_factory(boot_delay=30.0)
    fake.add_inventory(pools)
    provider = make_provider(fake)
    launch(provider, "spot", ZONE_A, ("c1-spot-0",))
    assert statuses(provider, "spot") == {"c1-spot-0": CloudNodeStatus.PROVISIONING}


def test_repeated_launch_creates_each_name_once(provider: GceProvider, fake: FakeCompute) -> None:
    first = launch(provider, "spot", ZONE_A, ("c1-spot-0", "c1-spot-1"))
    again = launch(provider, "spot", ZONE_A, ("c1-spot-0", "c1-spot-1"))
    grown = launch(provider, "spot", ZONE_A, ("c1-spot-1", "c1-spot-2"), rid="req-2")
    assert first.already_existed == ()
    assert again.already_existed == ("c1-spot-0", "c1-spot-1")
    assert grown.already_existed == ("c1-spot-1",)
    assert fake.create_counts() == {"c1-spot-0": 1, "c1-spot-1": 1, "c1-spot-2": 1}


def test_a_name_in_another_zone_of_the_pool_is_refused(provider: GceProvider, fake: FakeCompute) -> None:
    launch(provider, "spot", ZONE_A, ("c1-spot-0",))
    with pytest.raises(InvalidRequest, match=r"LaunchRequest.names: .*c1-spot-0.*another zone"):
        launch(provider, "spot", ZONE_B, ("c1-spot-0", "c1-spot-1"), rid="req-2")
    assert fake.create_counts() == {"c1-spot-0": 1}


def test_retried_create_after_client_timeout_is_deduplicated_by_request_id(
    fake: FakeCompute, make_provider: Any
) -> None:
    provider = make_provider(fake, retry=RetryPolicy(initial=0.01, maximum=0.05, deadline=5.0, attempt_timeout=0.3))
    # The server performs the first createInstances but its reply arrives after the client timeout.
    fake.delay_next(0.6, path_contains="createInstances")
    result = launch(provider, "spot", ZONE_A, ("c1-spot-0", "c1-spot-1"))
    assert result.accepted == ("c1-spot-0", "c1-spot-1")
    assert fake.faults_injected["timeout"] == 1
    assert provider.api.stats["retries:createInstances"] == 1
    assert len(fake.events_of("dedup")) == 1
    assert fake.duplicates() == {}
    assert fake.create_counts() == {"c1-spot-0": 1, "c1-spot-1": 1}


def test_429_and_503_are_retried_then_succeed(provider: GceProvider, fake: FakeCompute) -> None:
    fake.fail_next(429, 2, path_contains="createInstances")
    fake.fail_next(503, 1, path_contains="createInstances")
    fake.fail_next(503, 1, path_contains="listManagedInstances")
    launch(provider, "spot", ZONE_A, ("c1-spot-0",))
    assert fake.faults_injected == {"http:429": 2, "http:503": 2}
    assert provider.api.stats["retries:createInstances"] == 3
    assert provider.api.stats["retries:listManagedInstances"] == 1
    assert fake.create_counts() == {"c1-spot-0": 1}


def test_403_rate_limit_is_retried(provider: GceProvider, fake: FakeCompute) -> None:
    fake.fail_next(403, 1, path_contains="listManagedInstances")
    assert statuses(provider, "spot") == {}
    assert provider.api.stats["retry-cause:403"] == 1


def test_retries_give_up_at_the_deadline_with_a_transient_error(fake: FakeCompute, make_provider: Any) -> None:
    provider = make_provider(fake, retry=RetryPolicy(initial=0.01, maximum=0.02, deadline=0.3, attempt_timeout=1.0))
    fake.fail_next(503, 1000, path_contains="createInstances")
    with pytest.raises(TransientError, match="createInstances") as err:
        launch(provider, "spot", ZONE_A, ("c1-spot-0",))
    assert err.value.kind is FailureKind.TRANSIENT
    assert fake.instance_names() == set()


def test_stockout_surfaces_as_provisioning_failure_and_cancels_the_gang(
    provider: GceProvider, fake: FakeCompute
) -> None:
    fake.stockout(ZONE_B, "a3-megagpu-8g", "SPOT")
    result = launch(provider, "spot", ZONE_B, ("c1-spot-0", "c1-spot-1"), rid="gang-7")
    assert result.accepted == ("c1-spot-0", "c1-spot-1")  # GCE accepts, then fails per instance
    assert statuses(provider, "spot") == {
        "c1-spot-0": CloudNodeStatus.PROVISIONING,
        "c1-spot-1": CloudNodeStatus.PROVISIONING,
    }
    failures = provider.poll_errors()
    assert len(failures) == 1
    failure = failures[0]
    assert failure.kind is FailureKind.STOCKOUT
    assert failure.request_id == "gang-7"
    assert failure.offering == provider.offering_for("spot", ZONE_B)
    assert failure.names == ("c1-spot-0", "c1-spot-1")
    assert "ZONE_RESOURCE_POOL_EXHAUSTED" in failure.message
    # cancelled: the MIG no longer retries them behind the planner's back, and nothing is reported twice
    assert statuses(provider, "spot") == {}
    assert provider.poll_errors() == []
    fake.clear_stockouts()
    fake.wait_idle()
    assert fake.instance_names() == set()
    # the on-demand pool of the same machine in that zone is not stocked out (provisioning model given)
    launch(provider, "ondemand", ZONE_B, ("c1-ondemand-0",))
    assert provider.poll_errors() == []


def test_siblings_of_a_failed_member_that_have_a_vm_are_left_to_the_caller(
    provider: GceProvider, fake: FakeCompute
) -> None:
    """createInstances' per-instance outcomes are independent: of a request whose second member failed, the member
    that is RUNNING (a batch packs independent units in one request: it may run someone's job) is neither deleted nor
    reported as failed; only what has no VM is cancelled.  The daemon deletes such a sibling, if at all, through its
    own busy check (`autoscaler.daemon.actuate.Actuator.delete`)."""
    fake.set_quota(REGION, "NVIDIA_H100_MEGA_GPUS", 8)  # room for one 8-GPU node
    launch(provider, "ondemand", ZONE_A, ("c1-ondemand-0", "c1-ondemand-1"), rid="batch-1")
    fake.wait_idle()
    (failure,) = provider.poll_errors()
    fake.wait_idle()
    assert (failure.kind, failure.request_id, failure.names) == (FailureKind.QUOTA, "batch-1", ("c1-ondemand-1",))
    assert statuses(provider, "ondemand") == {"c1-ondemand-0": CloudNodeStatus.RUNNING}
    assert fake.instance_names() == {"c1-ondemand-0"}
    assert [e.name for e in fake.events_of("delete-requested")] == ["c1-ondemand-1"]
    assert provider.poll_errors() == []


def test_partial_gang_stockout_cancels_the_rest_and_leaves_the_member_that_was_created(
    provider: GceProvider, fake: FakeCompute
) -> None:
    launch(provider, "spot", ZONE_A, ("c1-spot-0",), rid="gang-1")
    fake.stockout(ZONE_A, "a3-megagpu-8g")
    launch(provider, "spot", ZONE_A, ("c1-spot-0", "c1-spot-1"), rid="gang-1")  # the rest of the same gang
    failures = provider.poll_errors()
    assert [(f.request_id, f.names) for f in failures] == [("gang-1", ("c1-spot-1",))]
    fake.wait_idle()
    assert fake.instance_names() == {"c1-spot-0"}
    assert fake.events_of("delete") == []
    assert statuses(provider, "spot") == {"c1-spot-0": CloudNodeStatus.RUNNING}


def test_failures_are_kept_when_cancelling_is_off(fake: FakeCompute, make_provider: Any) -> None:
    provider = make_provider(fake, cancel_failed_requests=False)
    fake.stockout(ZONE_A, "a3-megagpu-8g")
    launch(provider, "spot", ZONE_A, ("c1-spot-0",))
    assert [f.names for f in provider.poll_errors()] == [("c1-spot-0",)]
    assert provider.poll_errors() == []  # reported once
    assert statuses(provider, "spot") == {"c1-spot-0": CloudNodeStatus.PROVISIONING}


def test_quota_exceeded_is_reported_as_quota(provider: GceProvider, fake: FakeCompute) -> None:
    fake.set_quota(REGION, "NVIDIA_H100_MEGA_GPUS", 8)
    launch(provider, "ondemand", ZONE_A, ("c1-ondemand-0", "c1-ondemand-1"))
    failures = provider.poll_errors()
    assert [(f.kind, f.names) for f in failures] == [(FailureKind.QUOTA, ("c1-ondemand-1",))]
    assert "Quota 'NVIDIA_H100_MEGA_GPUS' exceeded" in failures[0].message


def test_synchronous_stockout_and_quota_errors_are_typed(provider: GceProvider, fake: FakeCompute) -> None:
    fake.fail_operations("ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS", "no capacity", operation_type="createInstances")
    with pytest.raises(InsufficientCapacity) as stockout:
        launch(provider, "spot", ZONE_A, ("c1-spot-0",))
    assert stockout.value.offering == provider.offering_for("spot", ZONE_A)
    assert stockout.value.code == "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS"
    fake.fail_operations("QUOTA_EXCEEDED", "Quota 'CPUS' exceeded.  Limit: 24.0 in region us-central1.")
    with pytest.raises(QuotaExceeded, match="CPUS"):
        launch(provider, "spot", ZONE_A, ("c1-spot-0",), rid="req-2")
    assert fake.instance_names() == set()


def test_delete_touches_only_the_named_instances(provider: GceProvider, fake: FakeCompute) -> None:
    launch(provider, "spot", ZONE_A, ("c1-spot-0", "c1-spot-1"))
    launch(provider, "spot", ZONE_B, ("c1-spot-2", "c1-spot-3"), rid="req-2")
    provider.delete("spot", ["c1-spot-1", "c1-spot-3", "c1-spot-99", "someone-else-1"])
    fake.wait_idle()
    assert fake.instance_names() == {"c1-spot-0", "c1-spot-2"}
    assert sorted(e.name for e in fake.events_of("delete")) == ["c1-spot-1", "c1-spot-3"]
    assert fake.events_of("resize") == []
    assert {k[0] for k in fake.request_counts()} >= {"deleteInstances"}
    assert statuses(provider, "spot") == {"c1-spot-0": CloudNodeStatus.RUNNING, "c1-spot-2": CloudNodeStatus.RUNNING}


def test_deleting_nodes_are_stopping(fake_compute_factory: Any, pools: Any, make_provider: Any) -> None:
    fake = fake_compute_factory(delete_delay=30.0)
    fake.add_inventory(pools)
    provider = make_provider(fake)
    launch(provider, "spot", ZONE_A, ("c1-spot-0",))
    fake.wait_idle()
    provider.delete("spot", ["c1-spot-0"])
    assert statuses(provider, "spot") == {"c1-spot-0": CloudNodeStatus.STOPPING}


def test_preempted_spot_node_is_gone_and_flagged(provider: GceProvider, fake: FakeCompute) -> None:
    """The stack's spot template stops a preempted VM (`instance_termination_action: STOP`) and its MIG repairs
    nothing (`default_action_on_failure: DO_NOTHING`): the member stays, TERMINATED, with no current action."""
    launch(provider, "spot", ZONE_A, ("c1-spot-0",))
    fake.wait_idle()
    fake.preempt(ZONE_A, "c1-spot-0")
    member = fake.state.migs[(fake.project, ZONE_A, "c1-spot-a")].members["c1-spot-0"]
    assert (fake.instance_status(ZONE_A, "c1-spot-0"), member.current_action) == ("TERMINATED", "NONE")
    (node,) = provider.list_nodes(["spot"])
    assert (node.status, node.preempted) == (CloudNodeStatus.GONE, True)


def test_a_reservation_s_free_slots_bound_a_launch_and_the_rest_is_a_stockout(
    provider: GceProvider, fake: FakeCompute
) -> None:
    """A specific reservation with 4 free slots and 5 members launched into it: GCE creates 4 and fails the fifth
    with "Specified reservation ... does not have available resources", a capacity failure the planner backs off
    from (not an INVALID request, which it would send again every tick)."""
    fake.add_reservation(ZONE_A, "h100-resv", "a3-megagpu-8g", count=4)
    names = tuple(f"c1-resv-{i}" for i in range(5))
    launch(provider, "resv", ZONE_A, names, rid="resv-1")
    fake.wait_idle()
    (failure,) = provider.poll_errors()
    assert (failure.kind, failure.request_id, failure.names) == (FailureKind.STOCKOUT, "resv-1", ("c1-resv-4",))
    assert failure.offering == provider.offering_for("resv", ZONE_A)
    assert "does not have available resources for the request" in failure.message
    fake.wait_idle()
    assert fake.instance_names() == set(names[:4])
    (resv,) = [o for o in provider.offerings() if o.key.capacity_type is CapacityType.RESERVATION]
    assert (resv.reservation_size, resv.available_nodes) == (4, 0)


def test_offerings_price_every_pool_zone_and_count_free_slots(provider: GceProvider, fake: FakeCompute) -> None:
    fake.set_quota(REGION, "PREEMPTIBLE_NVIDIA_H100_MEGA_GPUS", 40, usage=8)
    price = load_catalog().machine("a3-megagpu-8g").price(REGION)
    assert price is not None
    offers = {(o.key.zone, o.key.capacity_type): o for o in provider.offerings()}
    assert set(offers) == {
        (ZONE_A, CapacityType.SPOT),
        (ZONE_B, CapacityType.SPOT),
        (ZONE_A, CapacityType.ON_DEMAND),
        (ZONE_B, CapacityType.ON_DEMAND),
        (ZONE_A, CapacityType.RESERVATION),
    }
    resv = offers[(ZONE_A, CapacityType.RESERVATION)]
    assert (resv.key.reservation, resv.reservation_size, resv.available_nodes) == ("h100-resv", 4, 3)
    spot = offers[(ZONE_A, CapacityType.SPOT)]
    assert (spot.hourly_usd, spot.available_nodes, spot.gpus_per_node) == (price.spot, 4, 8)
    ondemand = offers[(ZONE_B, CapacityType.ON_DEMAND)]
    assert (ondemand.hourly_usd, ondemand.available_nodes) == (price.on_demand, None)  # no quota metric reported
    # using a reserved slot shows up in the next read
    launch(provider, "resv", ZONE_A, ("c1-resv-0",))
    after = {(o.key.zone, o.key.capacity_type): o for o in provider.offerings()}
    assert after[(ZONE_A, CapacityType.RESERVATION)].available_nodes == 2


def test_missing_reservation_offers_no_slots(provider: GceProvider, fake: FakeCompute) -> None:
    del fake.state.reservations[(fake.project, ZONE_A, "h100-resv")]
    (resv,) = [o for o in provider.offerings() if o.key.capacity_type is CapacityType.RESERVATION]
    assert (resv.available_nodes, resv.reservation_size) == (0, 0)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"zone": "europe-west4-b"}, "offering.zone"),
        ({"machine_type": "a3-highgpu-8g"}, "offering.machine_type"),
        ({"capacity_type": CapacityType.ON_DEMAND}, "offering.capacity_type"),
        ({"names": ()}, "names"),
        ({"names": ("c1-spot-0", "c1-spot-0")}, "names"),
        ({"names": ("other-0",)}, "names"),
        ({"names": ("C1-SPOT-0",)}, "names"),
        ({"pool": "nope"}, "pool"),
        ({"request_id": ""}, "request_id"),
        ({"placement_group": "compact-1"}, "placement_group"),
    ],
)
def test_bad_launch_requests_name_the_field_and_change_nothing(
    provider: GceProvider, fake: FakeCompute, change: dict[str, Any], field: str
) -> None:
    from dataclasses import replace

    off = provider.offering_for("spot", ZONE_A)
    req = LaunchRequest("req-1", "spot", off, ("c1-spot-0",))
    off_change = {k: v for k, v in change.items() if k in ("zone", "machine_type", "capacity_type")}
    req = replace(req, offering=replace(off, **off_change), **{k: v for k, v in change.items() if k not in off_change})
    with pytest.raises(InvalidRequest, match=rf"LaunchRequest\.{field}"):
        provider.launch(req)
    assert fake.instance_names() == set()
    assert fake.events_of("create") == []


def test_unknown_pools_are_not_listed(provider: GceProvider) -> None:
    assert provider.list_nodes(["not-a-gce-pool"]) == []


def test_qualified_pool_names_when_names_repeat_across_clusters(
    fake: FakeCompute, pools: Any, make_provider: Any
) -> None:
    other = pools[0].model_copy(update={"cluster": "c2", "instance_groups": {ZONE_A: "c2-spot-a"}, "zones": [ZONE_A]})
    fake.state.add_mig(fake.project, ZONE_A, "c2-spot-a", machine_type="a3-megagpu-8g", provisioning_model="SPOT")
    provider = make_provider(fake, pools=[*pools, other])
    assert set(provider.pools) == {"c1/spot", "c1/ondemand", "c1/resv", "c2/spot"}
    launch(provider, "c2/spot", ZONE_A, ("c1-spot-0",))
    assert fake.state.migs[(fake.project, ZONE_A, "c2-spot-a")].members.keys() == {"c1-spot-0"}
    assert [n.pool for n in provider.list_nodes(["c2/spot"])] == ["c2/spot"]


def test_constructor_rejects_bad_pools(pools: Any) -> None:
    with pytest.raises(ValueError, match=r"pools: need at least one"):
        GceProvider([], api=object())  # type: ignore[arg-type]
    aws = pools[0].model_copy(update={"provider": "aws"})
    with pytest.raises(ValueError, match=r"pools\[0\]\.provider"):
        GceProvider([aws], api=object())  # type: ignore[arg-type]
    bad = pools[2].model_copy(update={"reservation": None})
    with pytest.raises(ValueError, match=r"pools\[0\]\.reservation"):
        GceProvider([bad], api=object())  # type: ignore[arg-type]


def test_slow_operations_are_awaited_across_timed_out_waits(
    fake_compute_factory: Any, pools: Any, make_provider: Any
) -> None:
    fake = fake_compute_factory(operation_delay=0.8)
    fake.add_inventory(pools)
    retry = RetryPolicy(initial=0.01, maximum=0.02, deadline=0.3, attempt_timeout=0.2)
    provider = make_provider(fake, retry=retry, operation_timeout=10.0)
    assert launch(provider, "spot", ZONE_A, ("c1-spot-0",)).accepted == ("c1-spot-0",)
    assert provider.api.stats["retry-cause:ReadTimeout"] >= 1  # zoneOperations.wait outlived its attempt


def test_operation_timeout_bounds_the_wait(fake_compute_factory: Any, pools: Any, make_provider: Any) -> None:
    fake = fake_compute_factory(operation_delay=30.0)
    fake.add_inventory(pools)
    retry = RetryPolicy(initial=0.01, maximum=0.02, deadline=0.2, attempt_timeout=0.1)
    provider = make_provider(fake, retry=retry, operation_timeout=0.3)
    with pytest.raises(TransientError, match="not done after"):
        launch(provider, "spot", ZONE_A, ("c1-spot-0",))


def test_relaunching_a_name_still_being_deleted_waits(
    fake_compute_factory: Any, pools: Any, make_provider: Any
) -> None:
    fake = fake_compute_factory(delete_delay=30.0)
    fake.add_inventory(pools)
    provider = make_provider(fake)
    launch(provider, "spot", ZONE_A, ("c1-spot-0",))
    provider.delete("spot", ["c1-spot-0"])
    for zone in (ZONE_A, ZONE_B):  # neither "already existed" (it is going away) nor a second copy elsewhere
        with pytest.raises(TransientError, match=r"LaunchRequest.names: \['c1-spot-0'\] are still being deleted"):
            launch(provider, "spot", zone, ("c1-spot-0", "c1-spot-1"), rid="req-2")
    assert fake.create_counts() == {"c1-spot-0": 1}


def test_a_tick_s_reads_of_a_group_list_it_once_and_a_write_makes_the_next_read_list_again(
    provider: GceProvider, fake: FakeCompute
) -> None:
    """Inside `shared_reads()` (one daemon tick) listing the nodes, polling errors and a launch's check of the taken
    names read each zonal group once; the launch's own write drops the pool's listings, so the nodes it created are
    listed.  Outside, every read lists."""
    lists = lambda: fake.request_counts()[("listManagedInstances", 200)]  # noqa: E731
    zones = len(provider.pools["spot"].zones)
    before = lists()
    with shared_reads([provider]):
        provider.list_nodes(["spot"])
        provider.poll_errors()
        assert lists() - before == sum(len(p.zones) for p in provider.pools.values())  # each group once
        before = lists()
        launch(provider, "spot", ZONE_A, ("c1-spot-0",))
        assert lists() == before  # the launch's check of the taken names read the shared listing
        fake.wait_idle()
        assert "c1-spot-0" in statuses(provider, "spot")  # the write dropped it: listed again
        assert lists() - before == zones
    before = lists()
    provider.list_nodes(["spot"])
    provider.list_nodes(["spot"])
    assert lists() - before == 2 * zones
