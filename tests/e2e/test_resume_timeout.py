"""ResumeTimeout on real Slurm: VMs in us-central1-a come up but their node never registers.  slurmctld gives
up (ResumeTimeout), requeues the job and calls ResumeFailProgram; the daemon backs that offering off, deletes
the stuck instances and puts the nodes back in service (held: through a power-down); the requeued job then gets
instances in us-central1-b and runs.  The same when that ResumeFailProgram call fails: the daemon makes it itself
(autoscaler/daemon/lost_calls.py)."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator

import pytest

from tests.e2e.env import E2E, e2e_env, hook_log, wait_for
from tests.harness.slurm import SlurmHarness

pytestmark = [pytest.mark.slurm, pytest.mark.gce, pytest.mark.slow]


@pytest.fixture(params=[0, 1], ids=["resume-fail-call", "resume-fail-call-lost"])
def env(slurm_factory: Callable[..., SlurmHarness], request: pytest.FixtureRequest) -> Iterator[E2E]:
    with e2e_env(
        slurm_factory,
        suspend_time=6,
        resume_timeout=15,
        boots=lambda name, zone: zone != "us-central1-a",
        resume_fail_failures=request.param,
        loop={"lost_resume_fail_grace_s": 3},
    ) as e:
        yield e


def test_resume_timeout_backs_off_the_offering_and_the_job_runs_elsewhere(
    env: E2E, request: pytest.FixtureRequest
) -> None:
    out = env.root / "log"
    daemon = env.start_daemon()
    job = env.sbatch("-p", "gpu", "-N", "2", "--gres=gpu:8", "-o", f"{out}/job-%j.out", "--wrap",
                     "srun sh -c 'echo ran $SLURMD_NODENAME'")  # fmt: skip

    # slurmctld holds a job requeued after a node failure cred_expire seconds (its BeginTime; 120 s by default,
    # 30 s in the test harness's AuthInfo) before it runs again.
    # (Forcing `scontrol update jobid=.. starttime=now` instead crashed slurmctld 22.05.8 in build_job_info_resp.)
    wait_for(lambda: job not in env.squeue_ids(), 360, "the job to finish after the resume failure", env)
    creates = env.fake.events_of("create")
    zones = [e.zone for e in creates]
    assert zones[:2] == ["us-central1-a"] * 2 and set(zones[2:]) == {"us-central1-b"}, creates
    ran = (out / f"job-{job}.out").read_text().split("\n")
    assert len([x for x in ran if x.startswith("ran ")]) == 2, ran
    # the stuck instances were deleted, the nodes went back to service (these pools are held: through a power-down,
    # drained again once POWERING_DOWN, never allocatable meanwhile; autoscaler/daemon/tick.py), and zone a is
    # remembered
    back = [c for t in env.ticks for c in t.commands if c["command"] == "scontrol-power_down"]
    assert back and back[0]["outcome"] == "ok" and "resume failed" in back[0]["reason"], back
    stuck = {e.name for e in creates[:2]}
    deleted_a = {e.name for e in env.fake.events_of("delete-requested") if e.zone == "us-central1-a"}
    assert stuck <= deleted_a
    backoffs = daemon.store.unavailable(daemon.clock())
    assert any(":us-central1-a:" in u.key and "resume timeout" in u.message for u in backoffs)
    # a name is created again only after its earlier instance was deleted: never two instances at once (the requeued
    # gang may get these names again or, booted while they power down, others)
    for name in stuck:
        kinds = [e.kind for e in env.fake.events if e.name == name and e.kind in ("create", "delete")]
        assert kinds[:2] == ["create", "delete"] and all(a != b for a, b in itertools.pairwise(kinds)), (name, kinds)
    wait_for(lambda: not env.fake.instance_names(), 90, "idle instances to be deleted", env)
    lost = request.node.callspec.id == "resume-fail-call-lost"
    assert (": lost (test)" in hook_log(env.state).read_text()) == lost  # the call failed, and the daemon made it
    assert ('action="resume_fail_lost"' in daemon.metrics.render().decode()) == lost
