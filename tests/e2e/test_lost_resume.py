"""A ResumeProgram call that fails on real Slurm (autoscaler/daemon/lost_resumes.py): slurmctld powers the job's
nodes up and runs the resume hook, which exits 1 queuing nothing; slurmctld never calls it again for those names.
The daemon sees names POWERING_UP that no row, launch or instance explains, resumes them itself after
`loop.lost_resume_grace_s`, and the job runs long before ResumeTimeout would have put the nodes DOWN."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest

from tests.e2e.env import E2E, e2e_env, hook_log, wait_for
from tests.harness.slurm import SlurmHarness

pytestmark = [pytest.mark.slurm, pytest.mark.gce, pytest.mark.slow]

GRACE_S = 3
RESUME_TIMEOUT_S = 300


@pytest.fixture
def env(slurm_factory: Callable[..., SlurmHarness]) -> Iterator[E2E]:
    with e2e_env(
        slurm_factory,
        resume_timeout=RESUME_TIMEOUT_S,
        resume_failures=1,
        loop={"lost_resume_grace_s": GRACE_S},
        policy={"idle_timeout_s": 3600, "backoff_s": 120, "late_bind": False},  # Slurm binds the job at submit
    ) as e:
        yield e


def test_a_failed_resume_call_is_recovered_by_the_daemon_long_before_resume_timeout(env: E2E) -> None:
    out = env.root / "log"
    env.start_daemon()
    submitted = time.monotonic()
    job = env.sbatch("-p", "gpu", "-N", "2", "--gres=gpu:8", "-o", f"{out}/job-%j.out", "--wrap",
                     "srun sh -c 'echo ran $SLURMD_NODENAME'")  # fmt: skip
    wait_for(lambda: job not in env.squeue_ids(), 120, "the job to run after its lost resume call", env)
    assert time.monotonic() - submitted < RESUME_TIMEOUT_S / 2  # not ResumeTimeout's DOWN and requeue
    hooks = hook_log(env.state).read_text()
    assert "resume e2e-od-[0-1]: lost (test)" in hooks and "queued" not in hooks.split("lost (test)")[0], hooks
    lines = (out / f"job-{job}.out").read_text().splitlines()
    ran = sorted(line.split()[1] for line in lines if line.startswith("ran"))
    assert ran == ["e2e-od-0", "e2e-od-1"]  # the names Slurm bound at submit, created by name
    launches = [c for t in env.ticks for c in t.commands if c["command"] == "launch" and c["outcome"] == "ok"]
    assert [sorted(c["names"]) for c in launches] == [["e2e-od-0", "e2e-od-1"]]  # one gang, one request
    assert sorted(e.name for e in env.fake.events_of("create")) == ["e2e-od-0", "e2e-od-1"]
    assert " Restarts=0 " in env.slurm.run("scontrol", "show", "job", str(job)).stdout  # never requeued
