"""A job that names its nodes (``-w``/``--nodelist``, `SlurmJob.required_nodes`) runs on them or not at all, in the
daemon's tick under late binding, over the in-memory Slurm.

The plan used to have a unit for it like any job: it booted the lowest held name, which the job cannot use (pending
for good), or kept a gang that names an up node off that node.  Now no unit is planned for it, and the held
powered-down names it names are released, as slurmctld would have allocated them at submission without a hold
(tests/e2e/test_late_binding.py shows it on a real slurmctld)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest

from autoscaler.cloud import CloudNode, CloudNodeStatus
from autoscaler.daemon.tick import Daemon
from fleet.catalog import CapacityType
from tests.daemon.conftest import ZONE_A, Clock
from tests.daemon.fakes import FakeCloud, FakeSlurm, offering
from tests.daemon.test_late_binding import _commands, _gang, _job, held_daemon

RELEASED = "gpu-fleet: released for a job that names it"


@pytest.fixture
def fleet(make_daemon: Callable[..., Daemon], slurm: FakeSlurm, cloud: FakeCloud) -> Daemon:
    return held_daemon(make_daemon, slurm, cloud)


def test_the_held_name_a_job_names_is_released_and_nothing_is_booted(
    fleet: Daemon,
    slurm: FakeSlurm,
    clock: Clock,
) -> None:
    fleet.tick()  # the hold
    slurm.jobs_ = [replace(_job(7), reason="None", required_nodes=("c1-od1g-2",))]
    clock.advance(1)
    res = fleet.tick()  # slurmctld has not tried it yet: its first pass may start it
    assert _commands(res, "scontrol-undrain") == [] and res.pending_units == 0
    slurm.jobs_ = [replace(_job(7), reason="ReqNodeNotAvail", required_nodes=("c1-od1g-2",))]
    clock.advance(1)
    res = fleet.tick()
    assert [(c["names"], c["reason"]) for c in _commands(res, "scontrol-undrain")] == [(["c1-od1g-2"], RELEASED)]
    assert _commands(res, "scontrol-power_up") == [] and res.pending_units == 0


def test_a_job_that_names_a_busy_node_waits_for_it_and_boots_nothing(
    fleet: Daemon,
    slurm: FakeSlurm,
    cloud: FakeCloud,
    clock: Clock,
) -> None:
    fleet.tick()
    key = offering(ZONE_A, CapacityType.ON_DEMAND, "a3-highgpu-1g")
    cloud.nodes_["c1-od1g-0"] = CloudNode("c1-od1g-0", "od-1g", key, CloudNodeStatus.RUNNING, clock() - 60, "i-1")
    slurm.set("c1-od1g-0", "allocated")
    slurm.jobs_ = [replace(_job(7), required_nodes=("c1-od1g-0",))]
    clock.advance(1)
    res = fleet.tick()
    assert _commands(res, "scontrol-power_up") == [] and _commands(res, "scontrol-undrain") == []


def test_a_gang_that_names_an_up_node_is_not_kept_off_it(
    fleet: Daemon,
    slurm: FakeSlurm,
    cloud: FakeCloud,
    clock: Clock,
) -> None:
    fleet.tick()
    key = offering(ZONE_A, CapacityType.ON_DEMAND, "a3-highgpu-2g")
    cloud.nodes_["c1-od2g-0"] = CloudNode("c1-od2g-0", "od-2g", key, CloudNodeStatus.RUNNING, clock() - 60, "i-1")
    slurm.set("c1-od2g-0", "idle")
    slurm.jobs_ = [replace(_gang(9), required_nodes=("c1-od2g-0", "c1-od2g-1"))]
    clock.advance(1)
    res = fleet.tick()
    assert slurm.exclusion_updates == []
    assert [c["names"] for c in _commands(res, "scontrol-undrain") if c["reason"] == RELEASED] == [["c1-od2g-1"]]
    assert _commands(res, "scontrol-power_up") == []
