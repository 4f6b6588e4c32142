"""The tick over the real `GceProvider` and the fake Compute API (real google-cloud-compute client), with a fake
Slurm: what happens to a launch request's other VMs when one member fails after acceptance, to a spot VM the cloud
preempted, and to a reservation found full at creation."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from autoscaler.cloud import FailureKind
from autoscaler.daemon.tick import Daemon
from autoscaler.gce import GceProvider, RetryPolicy
from autoscaler.model import Pool
from fleet.inventory import InventoryPool, parse_inventory
from tests.daemon.fakes import FakeSlurm
from tests.fakes.compute_api import FakeCompute
from tests.fakes.fixtures import fake_compute_factory  # noqa: F401
from tests.gce.conftest import PROJECT, REGION, ZONE_A, pool_dict

pytestmark = pytest.mark.gce

OD = ["c1-ondemand-0", "c1-ondemand-1"]


@pytest.fixture
def inventory() -> list[InventoryPool]:
    return parse_inventory(
        [
            pool_dict("ondemand", "on-demand", zones=[ZONE_A], slurm_partitions=["gpu"]),
            pool_dict("spot", "spot", zones=[ZONE_A], slurm_partitions=["gpu"], spot_tolerant=True),
            pool_dict("resv", "reservation", zones=[ZONE_A], slurm_partitions=["gpu"], reservation="h100-resv"),
        ]
    )


@pytest.fixture
def fake(fake_compute_factory: Callable[..., FakeCompute], inventory: list[InventoryPool]) -> FakeCompute:  # noqa: F811
    fake = fake_compute_factory(PROJECT)
    fake.add_inventory(inventory)
    return fake


@pytest.fixture
def gce(fake: FakeCompute, inventory: list[InventoryPool]) -> GceProvider:
    retry = RetryPolicy(initial=0.01, maximum=0.05, deadline=5.0, attempt_timeout=1.0)
    return GceProvider(inventory, endpoint=fake.url, credentials="anonymous", retry=retry)


@pytest.fixture
def daemon(make_daemon: Callable[..., Daemon], slurm: FakeSlurm, gce: GceProvider, inventory: Any) -> Iterator[Daemon]:
    slurm.add_cloud_nodes([*OD, "c1-resv-0"])  # the conftest's Slurm has c1-spot-0..3
    yield make_daemon(pools=[Pool.from_inventory(p) for p in inventory], provider=gce)


def resume(d: Daemon, slurm: FakeSlurm, names: list[str], job: int | None = None) -> None:
    """What `fleet slurm resume` does, plus Slurm's side: a job's nodes are allocated to it while they power up
    (work on them); a name powered up with no job (a floor, standby, a held pool's boot) is idle."""
    d.store.enqueue_power("resume", names, d.clock(), {n: (job,) for n in names} if job else {})
    for n in names:
        if job:
            slurm.set(n, "mixed", "POWERING_UP", "NOT_RESPONDING", gpus_used=8)
        else:
            slurm.set(n, "idle", "POWERING_UP", "NOT_RESPONDING")


def commands(res: Any, command: str) -> list[dict[str, Any]]:
    return [c for c in res.commands if c["command"] == command]


def after_the_offerings_read(gce: GceProvider, change: Callable[[], None]) -> None:
    """Run `change` (another consumer of the project's capacity) right after each offerings read: the plan sees room
    that is gone when the VMs are created."""
    read = gce.offerings

    def read_then_change() -> Any:
        out = read()
        change()
        return out

    gce.offerings = read_then_change  # type: ignore[method-assign]


def one_node_of_quota_left(fake: FakeCompute, gce: GceProvider) -> None:
    """16 GPUs of quota when the plan reads it, 8 of them used by another VM when the daemon's two are created."""
    fake.set_quota(REGION, "NVIDIA_H100_MEGA_GPUS", 16)
    after_the_offerings_read(gce, lambda: fake.set_quota(REGION, "NVIDIA_H100_MEGA_GPUS", 16, usage=8))


def test_a_sibling_running_a_job_outlives_the_failure_of_its_request(
    daemon: Daemon, slurm: FakeSlurm, fake: FakeCompute, gce: GceProvider, clock: Any
) -> None:
    """Two independent jobs' nodes launched in one request; one is over quota.  The VM of the other job is not
    deleted (never a busy node): it stays held by the request, while the failed name is asked for again."""
    one_node_of_quota_left(fake, gce)
    resume(daemon, slurm, OD[:1], job=1)
    resume(daemon, slurm, OD[1:], job=2)
    (launch,) = [c for c in commands(daemon.tick(), "launch") if c["outcome"] == "ok"]
    assert launch["names"] == OD  # one request for both units
    fake.wait_idle()
    clock.advance(5)
    res = daemon.tick()
    fake.wait_idle()
    assert [e.name for e in fake.events_of("delete-requested")] == ["c1-ondemand-1"]  # the failed member only
    assert fake.instance_status(ZONE_A, "c1-ondemand-0") == "RUNNING"
    assert commands(res, "delete") == []
    held = daemon.store.open_request_for("c1-ondemand-0")
    assert held is not None and held.request_id == launch["request_id"] and held.names == ("c1-ondemand-0",)
    assert [(r.name, r.jobs) for r in daemon.store.open_power()] == [("c1-ondemand-1", (2,))]  # asked for again


def test_a_failed_request_s_idle_siblings_are_deleted_through_the_busy_check(
    daemon: Daemon, slurm: FakeSlurm, fake: FakeCompute, gce: GceProvider, clock: Any
) -> None:
    """A request whose nodes have no work (powered up with no job: a gang the daemon boots before releasing it) is
    all or nothing: the sibling that has a VM is deleted by the daemon's delete path, which checks Slurm first."""
    one_node_of_quota_left(fake, gce)
    resume(daemon, slurm, OD)
    (launch,) = [c for c in commands(daemon.tick(), "launch") if c["outcome"] == "ok"]
    assert launch["names"] == OD
    fake.wait_idle()
    clock.advance(5)
    res = daemon.tick()
    (delete,) = commands(res, "delete")
    assert (delete["names"], delete["outcome"]) == (["c1-ondemand-0"], "ok")
    fake.wait_idle()
    assert fake.instance_names() == set()
    assert daemon.store.request(launch["request_id"]).state == "failed"
    assert sorted(r.name for r in daemon.store.open_power()) == OD  # Slurm still waits for both: asked for again


def test_a_preempted_spot_vm_is_deleted_once_slurm_let_it_go_and_its_name_launches_again(
    daemon: Daemon, slurm: FakeSlurm, fake: FakeCompute, clock: Any
) -> None:
    """The stack's spot template stops a preempted VM and its MIG repairs nothing: the TERMINATED member keeps its
    disk and its name.  The daemon powers the Slurm node down, deletes the stopped VM once Slurm shows no work on
    it, and a later resume of the name creates a new VM (a launch of a name still in the group creates nothing)."""
    resume(daemon, slurm, ["c1-spot-0"], job=3)
    assert [c["outcome"] for c in commands(daemon.tick(), "launch")] == ["ok"]
    fake.wait_idle()
    slurm.set("c1-spot-0", "allocated", gpus_used=8)
    fake.preempt(ZONE_A, "c1-spot-0")
    assert fake.instance_status(ZONE_A, "c1-spot-0") == "TERMINATED"
    clock.advance(5)
    res = daemon.tick()
    assert [u[1] for u in slurm.updates if u[0] == ("c1-spot-0",)][-2:] == ["down", "power_down"]  # DOWN first
    assert commands(res, "delete") == []  # Slurm still shows the job on it this tick
    slurm.set("c1-spot-0", "idle", "POWERING_DOWN")  # slurmctld requeued the job and powers the node down
    clock.advance(5)
    (delete,) = commands(daemon.tick(), "delete")
    assert (delete["names"], delete["outcome"]) == (["c1-spot-0"], "ok")
    fake.wait_idle()
    assert fake.instance_names() == set()
    slurm.set("c1-spot-0", "idle", "POWERED_DOWN")
    resume(daemon, slurm, ["c1-spot-0"], job=3)  # the requeued job is given the node again
    clock.advance(5)
    daemon.tick()
    fake.wait_idle()
    assert fake.create_counts() == {"c1-spot-0": 2}
    assert fake.instance_status(ZONE_A, "c1-spot-0") == "RUNNING"


def test_a_reservation_found_full_at_creation_is_backed_off(
    daemon: Daemon, slurm: FakeSlurm, fake: FakeCompute, gce: GceProvider, clock: Any
) -> None:
    """The offering read showed a free slot; another consumer took it before the VM was created.  The MIG reports
    GCE's "does not have available resources" for the member: a capacity failure, so the reservation is backed off
    (an INVALID one is not remembered, and the planner would choose the full reservation every tick)."""
    fake.add_reservation(ZONE_A, "h100-resv", "a3-megagpu-8g", count=1)
    after_the_offerings_read(gce, lambda: fake.add_reservation(ZONE_A, "h100-resv", "a3-megagpu-8g", 1, in_use=1))
    resume(daemon, slurm, ["c1-resv-0"], job=4)
    assert [c["outcome"] for c in commands(daemon.tick(), "launch")] == ["ok"]
    fake.wait_idle()
    clock.advance(5)
    daemon.tick()
    (backoff,) = daemon.store.unavailable(clock())
    assert backoff.offering["reservation"] == "h100-resv" and backoff.reason == str(FailureKind.STOCKOUT)
    assert "does not have available resources" in backoff.message
