"""Jobs that take their nodes whole (`--exclusive`, an OverSubscribe=EXCLUSIVE partition: squeue's ``shared`` "none",
`SlurmJob.exclusive`) and nodes Slurm shows ALLOCATED, in the daemon's tick under late binding, over the in-memory
Slurm.  Read by their GPUs alone, small exclusive jobs were packed onto one node and booted one node at a time
(tests/e2e/test_late_binding.py shows it on a real slurmctld)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest

from autoscaler.daemon.tick import Daemon
from autoscaler.slurm.readers import SlurmJob, parse_job
from tests.daemon.conftest import Clock
from tests.daemon.fakes import FakeCloud, FakeSlurm
from tests.daemon.test_late_binding import POOLS, _commands, _job, held_daemon, node_up


@pytest.fixture
def fleet(make_daemon: Callable[..., Daemon], slurm: FakeSlurm, cloud: FakeCloud) -> Daemon:
    """Late binding over three 2-GPU names (one shape: as in an EXCLUSIVE partition of one machine type)."""
    return held_daemon(make_daemon, slurm, cloud, [POOLS[1]])


def _small(job_id: int, *, exclusive: bool) -> SlurmJob:
    return replace(_job(job_id, features=("a3-highgpu-2g",)), exclusive=exclusive)


@pytest.mark.parametrize(("exclusive", "boots"), [(False, ["c1-od2g-0"]), (True, ["c1-od2g-0", "c1-od2g-1"])])
def test_two_one_gpu_jobs_share_a_node_unless_they_take_it_whole(
    fleet: Daemon, slurm: FakeSlurm, clock: Clock, exclusive: bool, boots: list[str]
) -> None:
    fleet.tick()  # the hold
    slurm.jobs_ = [_small(7, exclusive=exclusive), _small(8, exclusive=exclusive)]
    clock.advance(1)
    assert [c["names"] for c in _commands(fleet.tick(), "scontrol-power_up")] == [boots]


def test_an_exclusive_job_takes_the_smallest_shape_that_fits_it_whole(
    make_daemon: Callable[..., Daemon], slurm: FakeSlurm, cloud: FakeCloud, clock: Clock
) -> None:
    """A 1-GPU job with `--exclusive` in a partition of 1- and 2-GPU pools: a whole 1-GPU node."""
    fleet = held_daemon(make_daemon, slurm, cloud)
    fleet.tick()
    slurm.jobs_ = [replace(_job(7, features=()), admin_comment="", exclusive=True)]
    clock.advance(1)
    assert [c["names"] for c in _commands(fleet.tick(), "scontrol-power_up")] == [["c1-od1g-0"]]


@pytest.mark.parametrize(("state", "boots"), [("allocated", [["c1-od2g-1"]]), ("mixed", [])])
def test_a_node_slurm_shows_allocated_takes_no_other_job(
    fleet: Daemon, slurm: FakeSlurm, cloud: FakeCloud, clock: Clock, state: str, boots: list[list[str]]
) -> None:
    """c1-od2g-0 runs a 1-GPU job, one GPU of two in use.  ALLOCATED (the job took it whole, or every CPU): a pending
    1-GPU job cannot go there, so a node boots for it; MIXED: it takes the free GPU."""
    fleet.tick()
    node_up(cloud, slurm, clock, 2, 0, state, gpus_used=1)
    slurm.jobs_ = [_small(8, exclusive=False)]
    clock.advance(1)
    assert [c["names"] for c in _commands(fleet.tick(), "scontrol-power_up")] == boots


@pytest.mark.parametrize(("shared", "exclusive"), [("none", True), (["none"], True), (None, False), ("user", False)])
def test_squeue_shared_none_is_a_job_that_takes_its_nodes_whole(shared: object, exclusive: bool) -> None:
    """22.05.8 shows ``shared`` "none" for ``--exclusive`` and for every job of an EXCLUSIVE partition, "user" for
    ``--exclusive=user``, None otherwise (bench probe in this round's note)."""
    assert parse_job({"job_id": 1, "job_state": "PENDING", "shared": shared}).exclusive is exclusive
