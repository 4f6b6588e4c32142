"""Power-hook calls that never reached the daemon (autoscaler/daemon/lost_calls.py).

A lost ResumeProgram call: Slurm powers a name up, no resume row arrives, and nothing would ask again before
ResumeTimeout (1800 s in the stacks) put the node DOWN.  The daemon resumes such a name itself after
`loop.lost_resume_grace_s`, with the job Slurm bound it to, and never a name that a row, a launch or an instance
explains.  A lost SuspendProgram call: Slurm powers an idle name down and its instance runs on; the daemon deletes
it after `loop.lost_suspend_grace_s`, and never one a row or a launch in flight explains.  On real slurmctld:
tests/e2e/test_lost_resume.py, tests/e2e/test_lost_suspend.py."""

from __future__ import annotations

import dataclasses

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


def _running_then_suspended(d, slurm, names) -> None:  # type: ignore[no-untyped-def]
    """Instances launched for `names`; then Slurm powered them down (SuspendTime after their job, or the job
    cancelled) and the SuspendProgram call was lost (no row)."""
    resume(d, names)
    assert len(launches(d.tick())) == 1
    for n in names:
        slurm.set(n, "idle", "POWERED_DOWN")


def test_a_lost_suspend_call_deletes_the_instance_after_the_grace(make_daemon, cloud, slurm, clock) -> None:
    d = make_daemon(loop=LoopConfig(orphan_grace_s=120, lost_suspend_grace_s=GRACE_S))
    _running_then_suspended(d, slurm, NAMES[:2])
    d.tick()  # first seen: the hook may still be writing
    clock.advance(GRACE_S - 1)
    d.tick()
    assert cloud.deleted == [] and d.store.open_power() == []
    clock.advance(1)
    d.tick()  # queues the suspend the hook would have
    assert sorted(r.name for r in d.store.open_power() if r.action == "suspend") == NAMES[:2]
    assert 'action="suspend_lost"' in d.metrics.render().decode()
    d.tick()  # and serves it as the hook's row: the instances deleted, the names free again
    assert sorted(cloud.deleted) == NAMES[:2] and d.store.open_power() == []
    clock.advance(GRACE_S * 3)
    d.tick()
    assert sorted(cloud.deleted) == NAMES[:2]  # once


def test_a_powered_down_name_a_row_or_a_launch_explains_is_left_to_it(make_daemon, cloud, slurm, clock) -> None:
    d = make_daemon(loop=LoopConfig(orphan_grace_s=3600, lost_suspend_grace_s=GRACE_S))
    _running_then_suspended(d, slurm, NAMES[:1])
    d.store.enqueue_power("suspend", NAMES[:1], clock(), {})  # the hook's row did arrive
    d.tick()
    assert cloud.deleted == NAMES[:1]
    assert "suspend_lost" not in d.metrics.render().decode()
    _running_then_suspended(d, slurm, NAMES[1:2])
    _down(slurm, NAMES[1], "broken GPU")  # an admin's DOWN: left to the admin
    for _ in range(4):
        clock.advance(GRACE_S)
        d.tick()
    assert cloud.deleted == NAMES[:1] and "_lost" not in d.metrics.render().decode()


def _down(slurm, name: str, reason: str) -> None:  # type: ignore[no-untyped-def]
    slurm.set(name, "down", "POWERED_DOWN")
    slurm.nodes_[name] = dataclasses.replace(slurm.nodes_[name], reason=reason)


def test_a_lost_resume_fail_call_is_made_after_the_grace(make_daemon, cloud, slurm, clock) -> None:
    """ResumeTimeout put the node DOWN and its ResumeFailProgram call was lost: after the grace the daemon does
    what that call would have made it do: remember the offering as failing, delete the late instance, and put the
    name back in service."""
    d = make_daemon(loop=LoopConfig(orphan_grace_s=3600, lost_resume_fail_grace_s=GRACE_S))
    _running_then_suspended(d, slurm, NAMES[:1])
    # 23.11 appends its reason to the node's own (22.05 replaces it)
    _down(slurm, NAMES[0], "gpu-fleet: late binding boot (drained until it registers) : ResumeTimeout reached")
    d.tick()
    clock.advance(GRACE_S)
    d.tick()  # queued
    assert [r.action for r in d.store.open_power()] == ["resume_fail"]
    assert 'action="resume_fail_lost"' in d.metrics.render().decode()
    d.tick()  # served
    assert cloud.deleted == NAMES[:1] and d.store.open_power() == []
    assert (NAMES[0], "resume") in [(u[0][0], u[1]) for u in slurm.updates]  # back in service
    assert d.store.unavailable(clock())  # the offering that failed to boot in time is avoided for a while
