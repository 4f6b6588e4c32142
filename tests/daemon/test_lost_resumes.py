"""A ResumeProgram call that never reached the daemon (autoscaler/daemon/lost_resumes.py): Slurm powers a name up,
no resume row arrives, and nothing would ask again before ResumeTimeout (1800 s in the stacks) put the node DOWN.
The daemon resumes such a name itself after `loop.lost_resume_grace_s`, with the job Slurm bound it to, and
never a name that a row, a launch or an instance explains.  On real slurmctld: tests/e2e/test_resume_timeout.py."""

from __future__ import annotations

from autoscaler.daemon.config import LoopConfig
from autoscaler.slurm.readers import SlurmJob
from tests.daemon.conftest import NAMES
from tests.daemon.test_tick import launches, resume

GRACE_S = 30.0


def _powering_up(slurm, names, job: int) -> None:  # type: ignore[no-untyped-def]
    """Slurm's side of a power-up whose hook call failed: the names POWERING_UP, the job CONFIGURING on them."""
    for n in names:
        slurm.set(n, "mixed", "POWERING_UP", "NOT_RESPONDING", gpus_used=8)
    slurm.jobs_ = [SlurmJob(job, "j", "CONFIGURING", "None", "gpu", len(names), 8, None, (), 0, None, 1.0,
                            nodes=tuple(names))]  # fmt: skip


def test_a_lost_resume_call_is_resumed_after_the_grace_with_its_job(make_daemon, cloud, slurm, clock) -> None:
    d = make_daemon(loop=LoopConfig(orphan_grace_s=120, lost_resume_grace_s=GRACE_S))
    _powering_up(slurm, NAMES[:2], job=9)
    assert launches(d.tick()) == [] and cloud.nodes_ == {}  # first seen: the hook may still be writing
    clock.advance(GRACE_S - 1)
    assert launches(d.tick()) == []
    clock.advance(1)
    (launch,) = launches(d.tick())  # the rows it queued are served in the same tick
    assert launch["names"] == NAMES[:2] and sorted(cloud.nodes_) == NAMES[:2]  # one gang, one request
    assert d.store.resume_jobs_of(NAMES[:2]) == {n: (9,) for n in NAMES[:2]}
    assert 'action="resume_lost"' in d.metrics.render().decode()
    clock.advance(GRACE_S * 3)
    assert launches(d.tick()) == [] and cloud.creates[NAMES[0]] == 1  # explained by its instance from now on


def test_a_name_with_a_row_a_launch_or_an_instance_is_never_resumed_again(make_daemon, cloud, slurm, clock) -> None:
    d = make_daemon(loop=LoopConfig(orphan_grace_s=120, lost_resume_grace_s=GRACE_S))
    resume(d, NAMES[:1], job=3)  # the hook's row arrived; Slurm shows the name POWERING_UP until it registers
    assert len(launches(d.tick())) == 1
    for _ in range(4):
        clock.advance(GRACE_S)
        assert launches(d.tick()) == []
    assert cloud.creates[NAMES[0]] == 1 and d.store.open_power() == []
    assert "resume_lost" not in d.metrics.render().decode()


def test_a_name_slurm_stops_powering_up_is_forgotten(make_daemon, cloud, slurm, clock) -> None:
    d = make_daemon(loop=LoopConfig(orphan_grace_s=120, lost_resume_grace_s=GRACE_S))
    _powering_up(slurm, NAMES[:1], job=4)
    d.tick()
    clock.advance(GRACE_S - 5)
    slurm.set(NAMES[0], "idle", "POWERED_DOWN")  # cancelled, powered down again
    slurm.jobs_ = []
    d.tick()
    _powering_up(slurm, NAMES[:1], job=5)  # a new power-up: its own grace
    clock.advance(10)
    assert launches(d.tick()) == [] and cloud.nodes_ == {}
