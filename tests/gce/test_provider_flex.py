"""Flex-start pools: launches are all-or-nothing MIG resize requests (fake server, real client)."""

from __future__ import annotations

from typing import Any

import pytest

from autoscaler.cloud import CloudNodeStatus, FailureKind, LaunchRequest, TransientError
from autoscaler.gce import GceProvider, RetryPolicy
from fleet.inventory import InventoryPool, parse_inventory
from tests.fakes.compute_api import FakeCompute
from tests.gce.conftest import PROJECT, REGION, ZONE_A, pool_dict

pytestmark = pytest.mark.gce

NAMES = ("c1-flex-0", "c1-flex-1")


@pytest.fixture
def flex_pools() -> list[InventoryPool]:
    return parse_inventory([pool_dict("flex", "flex-start", zones=[ZONE_A])])


@pytest.fixture
def make_flex(fake_compute_factory: Any, flex_pools: list[InventoryPool]) -> Any:
    def make(**kw: Any) -> tuple[FakeCompute, GceProvider]:
        fake = fake_compute_factory(PROJECT, **kw)
        fake.add_inventory(flex_pools)
        retry = RetryPolicy(initial=0.01, maximum=0.05, deadline=5.0, attempt_timeout=0.3)
        return fake, GceProvider(flex_pools, endpoint=fake.url, credentials="anonymous", retry=retry)

    return make


def launch(provider: GceProvider, names: tuple[str, ...] = NAMES, rid: str = "flex-1") -> Any:
    return provider.launch(LaunchRequest(rid, "flex", provider.offering_for("flex", ZONE_A), names))


def requests_of(fake: FakeCompute) -> dict[str, str]:
    (store,) = fake.resize_requests.requests.values() or [{}]
    return {name: rr.state for name, rr in store.items()}


def test_launch_queues_one_resize_request_and_creates_all_at_once(make_flex: Any) -> None:
    fake, provider = make_flex()
    assert launch(provider).already_existed == ()
    fake.wait_idle()
    assert list(requests_of(fake).values()) == ["SUCCEEDED"]
    assert fake.instance_names() == set(NAMES)
    nodes = provider.list_nodes()
    assert {n.name: n.status for n in nodes} == dict.fromkeys(NAMES, CloudNodeStatus.RUNNING)
    assert {n.request_id for n in nodes} == {"flex-1"}
    assert launch(provider).already_existed == NAMES
    assert len(fake.events_of("resize-request")) == 1
    assert fake.create_counts() == dict.fromkeys(NAMES, 1)


def test_queued_request_shows_provisioning_nodes_and_repeats_are_no_ops(make_flex: Any) -> None:
    fake, provider = make_flex()
    fake.stockout(ZONE_A, "a3-megagpu-8g", "FLEX_START")
    launch(provider)
    fake.wait_idle()
    assert list(requests_of(fake).values()) == ["ACCEPTED"]
    assert {n.name: n.status for n in provider.list_nodes()} == dict.fromkeys(NAMES, CloudNodeStatus.PROVISIONING)
    assert launch(provider).already_existed == NAMES  # queued names count as existing
    assert provider.poll_errors() == []  # waiting for capacity is not a failure
    fake.clear_stockouts()
    fake.wait_idle()
    assert fake.instance_names() == set(NAMES)


def test_deleting_a_queued_name_cancels_its_request(make_flex: Any) -> None:
    fake, provider = make_flex()
    fake.stockout(ZONE_A, "a3-megagpu-8g")
    launch(provider)
    provider.delete("flex", ["c1-flex-1"])
    assert list(requests_of(fake).values()) == ["CANCELLED"]
    assert provider.list_nodes() == []
    assert provider.poll_errors() == []
    assert requests_of(fake) == {}  # the finished record is removed
    fake.clear_stockouts()
    fake.wait_idle()
    assert fake.instance_names() == set()


def test_request_that_never_gets_capacity_fails_once_as_stockout(make_flex: Any) -> None:
    fake, provider = make_flex(flex_start_max_wait=0.1)
    fake.stockout(ZONE_A, "a3-megagpu-8g")
    launch(provider)
    fake.wait_idle()
    (failure,) = provider.poll_errors()
    assert (failure.kind, failure.names, failure.request_id) == (FailureKind.STOCKOUT, NAMES, "flex-1")
    assert failure.offering == provider.offering_for("flex", ZONE_A)
    assert provider.poll_errors() == []
    assert requests_of(fake) == {}


def test_request_over_quota_fails_as_quota(make_flex: Any) -> None:
    fake, provider = make_flex()
    fake.set_quota(REGION, "PREEMPTIBLE_NVIDIA_H100_MEGA_GPUS", 8)  # two nodes need 16
    launch(provider)
    fake.wait_idle()
    (failure,) = provider.poll_errors()
    assert failure.kind is FailureKind.QUOTA
    assert fake.instance_names() == set()


def test_insert_retried_after_timeout_queues_one_request(make_flex: Any) -> None:
    fake, provider = make_flex()
    fake.delay_next(0.6, method="POST", path_contains="resizeRequests")
    launch(provider)
    fake.wait_idle()
    assert len(fake.events_of("resize-request")) == 1
    assert len(fake.events_of("dedup")) == 1
    assert fake.create_counts() == dict.fromkeys(NAMES, 1)


def test_flex_start_draws_on_preemptible_gpu_quota(make_flex: Any) -> None:
    """Flex-start VMs consume preemptible quota (Google's flex-start GA announcement): with no standard GPU quota
    and 16 preemptible GPUs, two 8-GPU nodes are created, and the offering shows that headroom."""
    fake, provider = make_flex()
    fake.set_quota(REGION, "NVIDIA_H100_MEGA_GPUS", 0)
    fake.set_quota(REGION, "PREEMPTIBLE_NVIDIA_H100_MEGA_GPUS", 16)
    (offer,) = provider.offerings()
    assert offer.available_nodes == 2
    launch(provider)
    fake.wait_idle()
    assert provider.poll_errors() == []
    assert fake.instance_names() == set(NAMES)
    (offer,) = provider.offerings()
    assert offer.available_nodes == 0


def test_deleting_a_name_whose_request_is_still_being_created_keeps_it_for_a_retry(make_flex: Any) -> None:
    """A resize request is CREATING until its insert completes ("may still fail creation"), and only an ACCEPTED one
    can be cancelled.  Deleting a name it holds raises a transient error and changes nothing, so the daemon keeps the
    name and asks again; reporting success would leave the VMs it then creates held by nobody."""
    fake, provider = make_flex(operation_delay=1.5)
    fake.stockout(ZONE_A, "a3-megagpu-8g")  # once accepted, it waits for capacity
    slow = GceProvider(
        provider.pools.values(),
        endpoint=fake.url,
        credentials="anonymous",
        retry=RetryPolicy(initial=0.01, maximum=0.02, deadline=0.2, attempt_timeout=0.1),
        operation_timeout=0.1,
    )
    with pytest.raises(TransientError, match="not done after"):
        launch(slow)  # the insert was taken; its operation is still running
    assert list(requests_of(fake).values()) == ["CREATING"]
    with pytest.raises(TransientError, match="CREATING") as err:
        slow.delete("flex", ["c1-flex-1"])
    assert err.value.code == "RESIZE_REQUEST_CREATING"
    assert list(requests_of(fake).values()) == ["CREATING"]
    assert {n.name: n.status for n in slow.list_nodes()} == dict.fromkeys(NAMES, CloudNodeStatus.PROVISIONING)
    fake.wait_idle()  # the insert completes: the request is queued and can be cancelled now
    assert list(requests_of(fake).values()) == ["ACCEPTED"]
