"""The reservation hold on a real slurmctld (issue 8, item 1): what the replay scores, the daemon does.

One reserved node (Weight 1) and an on-demand overflow nodeset (Weight 30) in one partition; the policy holds
launches 25 s (`batch_window_s`).  The daemon keeps the overflow's powered-down nodes drained, so:
- a job that finds the reserved node busy stays PENDING instead of Slurm powering up overflow, and runs on the
  reserved node when it frees up: no overflow instance is ever created for it;
- a job that would wait longer than the hold gets an overflow node: the daemon releases (undrains) one once the
  hold ends, Slurm allocates it to the job and resumes it, and the daemon creates exactly that instance.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest

from tests.e2e.env import E2E, ZONES, e2e_env, pool, wait_for
from tests.harness.cloud_nodes import Nodeset
from tests.harness.slurm import SlurmHarness

pytestmark = [pytest.mark.slurm, pytest.mark.gce, pytest.mark.slow]

HOLD_S = 25


@pytest.fixture
def env(slurm_factory: Callable[..., SlurmHarness]) -> Iterator[E2E]:
    with e2e_env(
        slurm_factory,
        suspend_time=600,  # keep the reserved node up between jobs (SuspendExcNodes in production)
        pools=[
            pool("resv", "reservation", "gpu", False, max_nodes=1, reservation="e2e-resv"),
            pool("od", "on-demand", "gpu", False, max_nodes=2),
        ],
        nodesets=[Nodeset("e2e-resv", 1, weight=1), Nodeset("e2e-od", 2, weight=30)],
        partitions={"gpu": ["e2e-resv", "e2e-od"]},
        policy={"idle_timeout_s": 3600, "backoff_s": 120, "batch_window_s": HOLD_S, "batch_idle_s": HOLD_S},
        reservations={"e2e-resv": (ZONES[0], 1)},
    ) as e:
        yield e


def test_jobs_wait_for_the_busy_reserved_node_within_the_hold_and_get_overflow_after_it(env: E2E) -> None:
    env.start_daemon()
    # the daemon holds the overflow: its powered-down nodes are drained before any job comes
    wait_for(
        lambda: all("DRAIN" in env.sinfo()[n]["state_flags"] for n in ("e2e-od-0", "e2e-od-1")),
        30,
        "the overflow nodes to be held (drained)",
        env,
    )
    first = env.gpu_job(12)
    wait_for(lambda: env.job_state(first) == "RUNNING", 90, "the first job to run on the reserved node", env)
    second = env.gpu_job(1)  # the reserved node is busy for ~12 s more, the hold is 25 s: it waits
    time.sleep(5)
    assert env.job_state(second) == "PENDING"
    assert set(env.fake.instance_names()) == {"e2e-resv-0"}  # Slurm powered up no overflow node
    wait_for(lambda: not env.squeue_ids() & {first, second}, 90, "both jobs to finish", env)
    assert env.ran_on(first) == env.ran_on(second) == "e2e-resv-0"
    assert {e.name for e in env.fake.events_of("create")} == {"e2e-resv-0"}

    # a job that would wait longer than the hold: the overflow node is released once the hold ends
    long = env.gpu_job(120)
    wait_for(lambda: env.job_state(long) == "RUNNING", 60, "the long job to run on the reserved node", env)
    submitted = time.monotonic()
    late = env.gpu_job(1)
    wait_for(lambda: env.job_state(late) not in ("PENDING",), 120, "the held job to be given an overflow node", env)
    waited = time.monotonic() - submitted
    assert waited >= HOLD_S - 2, f"released after {waited:.0f}s, before the {HOLD_S}s hold"
    wait_for(lambda: late not in env.squeue_ids(), 120, "the held job to run on overflow and finish", env)
    assert env.ran_on(late) == "e2e-od-0"
    assert long in env.squeue_ids()  # it did not wait for the reserved node
    created = [e.name for e in env.fake.events_of("create")]
    assert sorted(created) == ["e2e-od-0", "e2e-resv-0"] and env.fake.duplicates() == {}
    undrains = [c for t in env.ticks for c in t.commands if c["command"] == "scontrol-undrain" and c["outcome"] == "ok"]
    assert [c["names"] for c in undrains] == [["e2e-od-0"]]
    assert "e2e-od-1" in env.sinfo() and "DRAIN" in env.sinfo()["e2e-od-1"]["state_flags"]  # still held
