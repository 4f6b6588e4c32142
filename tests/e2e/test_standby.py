"""Standby nodes on a real slurmctld (issue 8, item 5: the wait knob the replay scores is what the daemon does).

With `standby_by_machine` set, the daemon powers up that many idle nodes of the shape ahead of demand (`scontrol
update state=power_up`: slurmctld calls the ResumeProgram, the daemon launches the names through the fake Compute
API); a job submitted then starts on one at once, without a boot, and the daemon powers up a replacement.  When the
job ends, the extra idle node goes (idle keep 0) and one standby node stays.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest

from tests.e2e.env import E2E, e2e_env, wait_for
from tests.harness.slurm import SlurmHarness

pytestmark = [pytest.mark.slurm, pytest.mark.gce, pytest.mark.slow]


@pytest.fixture
def env(slurm_factory: Callable[..., SlurmHarness]) -> Iterator[E2E]:
    with e2e_env(
        slurm_factory,
        suspend_time=600,  # slurmctld leaves idle nodes up: the daemon's standby and idle keep decide
        policy={"standby_by_machine": {"a3-highgpu-8g": 1}, "idle_timeout_s": 0, "backoff_s": 120},
    ) as e:
        yield e


def _up_idle(env: E2E) -> list[str]:
    return sorted(
        name
        for name, n in env.sinfo().items()
        if name.startswith("e2e-od-") and n["state"] == "idle" and set(n["state_flags"]) == {"CLOUD"}
    )


def test_the_daemon_keeps_one_standby_node_up_and_a_job_starts_on_it_without_a_boot(env: E2E) -> None:
    env.start_daemon()
    wait_for(lambda: _up_idle(env) == ["e2e-od-0"], 90, "the daemon to bring up one standby node", env)
    assert [e.name for e in env.fake.events_of("create")] == ["e2e-od-0"]  # one, not one per tick

    out = env.root / "log" / "job.out"
    job = env.sbatch(
        "-p",
        "gpu",
        "-N",
        "1",
        "--gres=gpu:8",
        "-o",
        str(out),
        "--wrap",
        "hostname_=$SLURMD_NODENAME; echo $hostname_; sleep 8",
    )
    wait_for(lambda: out.exists() and out.read_text().strip(), 30, f"job {job} to start", env)
    assert out.read_text().split()[0] == "e2e-od-0"  # on the standby node
    assert [e.name for e in env.fake.events_of("create")][:1] == ["e2e-od-0"]

    # the replacement: a second node powered up while the job runs, idle once it registers
    wait_for(lambda: _up_idle(env) == ["e2e-od-1"], 90, "a replacement standby node", env)
    assert job in env.squeue_ids()  # up while the job still runs: replenished, not recycled
    wait_for(lambda: job not in env.squeue_ids(), 60, f"job {job} to finish", env)
    # the job's node is idle again: two idle, one is kept, the other deleted (idle keep 0)
    wait_for(lambda: len(_up_idle(env)) == 1 and len(env.fake.events_of("delete")) == 1, 90, "one idle node to go", env)
    assert [e.name for e in env.fake.events_of("create")] == ["e2e-od-0", "e2e-od-1"]


@pytest.fixture
def env_short(slurm_factory: Callable[..., SlurmHarness]) -> Iterator[E2E]:
    with e2e_env(
        slurm_factory,
        suspend_time=6,  # slurmctld powers idle nodes down after 6 s ...
        slurm_lines=lambda h, s: ["SuspendExcNodes=e2e-od-[0-3]:1"],  # ... but one of the pool's, as rendered
        policy={"standby_by_machine": {"a3-highgpu-8g": 1}, "idle_timeout_s": 0, "backoff_s": 120},
    ) as e:
        yield e


def test_suspend_exc_nodes_with_a_count_keeps_the_standby_node_up_past_suspend_time(env_short: E2E) -> None:
    """What `fleet render slurm-conf` writes for on-demand pools when the cluster values waiting
    (`fleet.slurm.suspend.standby_exclusion`): `<pool's nodes>:<count>`.  Without it slurmctld would power the standby
    node down after SuspendTime idle, and the daemon would power up another: a boot wasted per SuspendTime."""
    env_short.start_daemon()
    wait_for(lambda: _up_idle(env_short) == ["e2e-od-0"], 90, "the standby node", env_short)
    time.sleep(20)  # over three SuspendTimes idle
    assert _up_idle(env_short) == ["e2e-od-0"]
    assert [e.name for e in env_short.fake.events_of("create")] == ["e2e-od-0"] and not env_short.fake.events_of(
        "delete"
    )
