"""A SuspendProgram call that fails on real Slurm: slurmctld powers an idle node down (SuspendTime) and runs the
suspend hook, which exits 1 queuing nothing; slurmctld never calls it again, and the node reads POWERED_DOWN while
its instance, a GPU VM, runs on.  The daemon must still delete that instance, and the name must boot again for the
next job."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from tests.e2e.env import E2E, e2e_env, hook_log, wait_for
from tests.harness.slurm import SlurmHarness

pytestmark = [pytest.mark.slurm, pytest.mark.gce, pytest.mark.slow]


@pytest.fixture
def env(slurm_factory: Callable[..., SlurmHarness]) -> Iterator[E2E]:
    with e2e_env(
        slurm_factory,
        suspend_failures=1,
        loop={"lost_suspend_grace_s": 3},
        policy={"idle_timeout_s": 3600, "late_bind": False},  # only Slurm's SuspendTime (6 s) powers it down
    ) as e:
        yield e


def test_a_failed_suspend_call_still_deletes_the_instance_and_the_name_boots_again(env: E2E) -> None:
    env.start_daemon()
    job = env.gpu_job(1)
    wait_for(lambda: job not in env.squeue_ids(), 90, "the job to run", env)
    [name] = {e.name for e in env.fake.events_of("create")}
    wait_for(lambda: "POWERED_DOWN" in env.sinfo()[name]["state_flags"], 60, "Slurm to suspend the idle node", env)
    hooks = hook_log(env.state).read_text()
    assert f"suspend {name}: lost (test)" in hooks, hooks
    wait_for(lambda: not env.fake.instance_names(), 60, "the instance behind the powered-down node to be deleted", env)
    assert [e.name for e in env.fake.events_of("delete-requested")] == [name]
    again = env.gpu_job(1)
    wait_for(lambda: again not in env.squeue_ids(), 90, "a second job on the name, booted again", env)
    assert sorted(e.name for e in env.fake.events_of("create")) == [name, name]
