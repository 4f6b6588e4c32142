"""A pending job array is as many jobs as the tasks slurmctld may start, in the daemon's tick under late binding
(`autoscaler.slurm.job_array`, `SlurmJob.unit_ids`), over the in-memory Slurm.

slurmctld lists an array's pending tasks in one record; read as one job, a held pool booted its tasks' nodes one at a
time (tests/e2e/test_late_binding.py shows the array on a real slurmctld).  Updates of the record (a constraint
widened, a gang's ExcNodeList) apply to all its tasks, so each is sent once per record."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest

from autoscaler.daemon.tick import Daemon
from autoscaler.slurm.job_array import ArrayTasks
from autoscaler.slurm.readers import SlurmJob
from tests.daemon.conftest import Clock
from tests.daemon.fakes import FakeCloud, FakeSlurm
from tests.daemon.test_late_binding import POOLS, _commands, _gang, _job, held_daemon, node_up


@pytest.fixture
def fleet(make_daemon: Callable[..., Daemon], slurm: FakeSlurm, cloud: FakeCloud) -> Daemon:
    return held_daemon(make_daemon, slurm, cloud)


def _array(job: SlurmJob, *tasks: range, throttle: int = 0, running: int = 0) -> SlurmJob:
    """`job` as a pending array's record holding `tasks`."""
    return replace(job, array_job_id=job.job_id, array_tasks=ArrayTasks(tasks, throttle), array_running=running)


def test_a_pending_arrays_tasks_each_boot_a_node_in_one_tick(fleet: Daemon, slurm: FakeSlurm, clock: Clock) -> None:
    fleet.tick()  # the hold
    slurm.jobs_ = [_array(_job(7), range(0, 3))]
    clock.advance(1)
    res = fleet.tick()
    assert res.pending_units == 3
    assert [c["names"] for c in _commands(res, "scontrol-power_up")] == [["c1-od1g-0", "c1-od1g-1", "c1-od1g-2"]]


def test_a_throttled_array_boots_only_the_tasks_it_may_start(fleet: Daemon, slurm: FakeSlurm, clock: Clock) -> None:
    """``--array=0-9%2`` with one task running: one more may start."""
    fleet.tick()
    slurm.jobs_ = [_array(_job(7), range(1, 10), throttle=2, running=1)]
    clock.advance(1)
    res = fleet.tick()
    assert res.pending_units == 1 and [c["names"] for c in _commands(res, "scontrol-power_up")] == [["c1-od1g-0"]]


def test_an_array_is_no_more_units_than_its_pools_could_run(fleet: Daemon, slurm: FakeSlurm, clock: Clock) -> None:
    """A million-task array of 1-GPU tasks over pools of three 1-GPU and three 2-GPU nodes: at most 9 at once."""
    fleet.tick()
    slurm.jobs_ = [replace(_array(_job(7), range(1_000_000)), features=(), admin_comment="")]
    clock.advance(1)
    assert fleet.tick().pending_units == 9


def test_an_arrays_constraint_is_widened_once_for_all_its_tasks(
    fleet: Daemon, slurm: FakeSlurm, cloud: FakeCloud, clock: Clock
) -> None:
    cloud.stocked_out = {o.key for o in cloud.offers if o.key.machine_type == "a3-highgpu-1g"}
    fleet.tick()
    slurm.jobs_ = [_array(_job(7), range(0, 2))]
    clock.advance(1)
    fleet.tick()  # boots two 1g names; their launch is refused below and the offering backed off
    fleet.store.enqueue_power("resume", ["c1-od1g-0", "c1-od1g-1"], clock(), {})
    clock.advance(1)
    fleet.tick()
    clock.advance(1)
    res = fleet.tick()
    assert [(c["job_id"], c["features"]) for c in _commands(res, "scontrol-features")] == [
        (7, "a3-highgpu-1g|a3-highgpu-2g")
    ]
    assert [c["names"] for c in _commands(res, "scontrol-power_up")] == [["c1-od2g-0"]]  # both tasks on one node


def test_a_gang_arrays_exclusion_is_its_next_tasks(
    make_daemon: Callable[..., Daemon], slurm: FakeSlurm, cloud: FakeCloud, clock: Clock
) -> None:
    """An array of three 2-node gangs and one 2-GPU node up and idle (seven 2-GPU names): the record is kept off the
    up node once (its ExcNodeList is every task's), and each task's gang boots whole."""
    fleet = held_daemon(make_daemon, slurm, cloud, [POOLS[0], replace(POOLS[1], max_nodes=7)])
    fleet.tick()
    node_up(cloud, slurm, clock, 2, 0, "idle")
    slurm.jobs_ = [_array(_gang(9), range(0, 3))]
    clock.advance(1)
    res = fleet.tick()
    assert res.pending_units == 3
    assert slurm.exclusion_updates == [(9, ("c1-od2g-0",))]
    assert [c["names"] for c in _commands(res, "scontrol-power_up")] == [[f"c1-od2g-{i}" for i in range(1, 7)]]


@pytest.mark.parametrize(
    ("stderr", "forgiven"),
    [
        # measured on slurmctld 22.05.8: ExcNodeList on array 1's record with tasks 0-1 running and 2-9 pending
        ("1_0-1: Job is no longer pending execution\n1_2-9: No error", True),
        # ... and a constraint no node has: the pending tasks refused it
        ("1_0-1: Job is no longer pending execution\n1_2-9: Invalid feature specification", False),
        ("1_0-9: Job is no longer pending execution", True),
        ("slurm_update error: Invalid job id specified", True),
        ("slurm_update error: Invalid feature specification", False),
        ("", False),
    ],
)
def test_an_update_refused_only_for_jobs_that_moved_on_is_no_failure(stderr: str, forgiven: bool) -> None:
    from autoscaler.daemon.actuate import moved_on
    from autoscaler.slurm.client import SlurmUnavailable

    assert moved_on(SlurmUnavailable(f"scontrol update jobid=1 ExcNodeList=pa-3 exited 1: {stderr}")) is forgiven
