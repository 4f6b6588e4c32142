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


@pytest.mark.parametrize("marked", [True, False])
def test_an_exclusive_job_falls_back_to_a_larger_shape_taken_whole_when_its_own_stocks_out(
    make_daemon: Callable[..., Daemon], slurm: FakeSlurm, cloud: FakeCloud, clock: Clock, marked: bool
) -> None:
    """A 1-GPU `--exclusive` job whose 1-GPU shape stocks out everywhere: once the launch failed, the daemon boots a
    2-GPU name for it (the job takes that node whole) and widens the lua's constraint, as for a job that shares its
    node (tests/daemon/test_late_binding.py).  Before the thirty-fourth round the job was planned on the smallest
    shape alone and waited for the stockout to end."""
    fleet = held_daemon(make_daemon, slurm, cloud)
    cloud.stocked_out = {o.key for o in cloud.offers if o.key.machine_type == "a3-highgpu-1g"}
    fleet.tick()
    job = _job(7) if marked else replace(_job(7, features=()), admin_comment="")
    slurm.jobs_ = [replace(job, exclusive=True)]
    clock.advance(1)
    first = fleet.tick()
    assert [c["names"] for c in _commands(first, "scontrol-power_up")] == [["c1-od1g-0"]]  # right-sized first
    fleet.store.enqueue_power("resume", ["c1-od1g-0"], clock(), {})  # the launch is refused: backed off
    commands = []
    for _ in range(3):
        clock.advance(1)
        commands += fleet.tick().commands
    boots = [n for c in commands if c["command"] == "scontrol-power_up" and c["outcome"] == "ok" for n in c["names"]]
    assert boots == ["c1-od2g-0"]  # one 2-GPU node, whole: nothing else is planned on its spare GPU
    widened = [(c["job_id"], c["features"]) for c in commands if c["command"] == "scontrol-features"]
    assert widened == ([(7, "a3-highgpu-1g|a3-highgpu-2g")] if marked else [])


@pytest.mark.parametrize(
    ("held", "boots"),
    [
        ({"alloc_cpus": 2}, [["c1-od2g-1"]]),  # every CPU taken: the free GPU cannot start a job
        ({"alloc_cpus": 1, "alloc_memory_mib": 1000}, [["c1-od2g-1"]]),  # `--mem=0`: all its memory
        ({"alloc_cpus": 1, "alloc_memory_mib": 500}, []),  # room left: the job goes there
    ],
)
def test_a_node_whose_cpus_or_memory_are_taken_is_no_place_for_a_job_whatever_gpus_are_free(
    fleet: Daemon, slurm: FakeSlurm, cloud: FakeCloud, clock: Clock, held: dict, boots: list[list[str]]
) -> None:
    """c1-od2g-0 (2 CPUs, 1000 MiB) runs a 1-GPU job; one GPU is free.  slurmctld (CR_Core_Memory, as the stack
    renders it) starts no job there once that job holds every CPU or all the memory (`--mem=0`): measured on
    22.05.8, a 1-GPU job with the partition's DefMemPerGPU went to another node.  Planned by its free GPU, the
    pending job waited under the hold for the running one to end; now a name boots for it."""
    fleet.tick()
    node_up(cloud, slurm, clock, 2, 0, "mixed", gpus_used=1)
    slurm.nodes_["c1-od2g-0"] = replace(slurm.nodes_["c1-od2g-0"], cpus=2, real_memory_mib=1000, **held)
    slurm.jobs_ = [replace(_small(8, exclusive=False), memory_per_node_mib=500)]
    clock.advance(1)
    assert [c["names"] for c in _commands(fleet.tick(), "scontrol-power_up")] == boots
