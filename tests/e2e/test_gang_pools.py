"""A multi-node job stays in one pool, on a real slurmctld (23.11 and 22.05) with the rendered topology.conf.

`fleet.slurm.topology` writes one tree per pool and no root over them, the pool of the lowest Weight last.  What
slurmctld then does with powered-down CLOUD names (no daemon runs: slurmctld's choices only), and the simulated
Slurm replays (`autoscaler.replay.simslurm`, tests/replay/test_simslurm.py):
- a gang gets all its names from one pool: the last tree that can hold it whole, never a mix of two pools;
- so a 2-node gang takes the reservation-like pool (the lowest Weight), a 3-node gang the one pool with 3 names;
- a gang larger than every pool of its partition is refused at submission (the daemon reports it unservable).
With one root over both pools (slurm-gcp's shape, the stack's before the twenty-fourth round) the 3-node gang got
both reserved names and one on-demand name (`bench/probe_gang_topology.py`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from tests.e2e.env import E2E, e2e_env, pool, wait_for
from tests.harness.cloud_nodes import Nodeset
from tests.harness.slurm import SlurmHarness

pytestmark = [pytest.mark.slurm, pytest.mark.gce]


@pytest.fixture
def env(slurm_factory: Callable[..., SlurmHarness]) -> Iterator[E2E]:
    with e2e_env(
        slurm_factory,
        suspend_time=600,
        resume_timeout=600,
        pools=[pool("od", "on-demand", "gpu", False, max_nodes=3)],
        # the reservation-like pool (lowest Weight) listed first, as the render lists pools
        nodesets=[Nodeset("e2e-resv", 2, weight=1000), Nodeset("e2e-od", 3, weight=30000)],
        partitions={"gpu": ["e2e-resv", "e2e-od"]},
        topology=True,
    ) as e:
        yield e


def _nodes(env: E2E, job: int) -> str:
    return next(str(j.get("nodes") or "") for j in env.slurm.squeue_json()["jobs"] if j["job_id"] == job)


def _powered_down(env: E2E, names: list[str]) -> bool:
    flags = [set(env.sinfo()[n]["state_flags"]) for n in names]
    return all("POWERED_DOWN" in f and "POWERING_DOWN" not in f for f in flags)


def _gang(env: E2E, nodes: int) -> int:
    return env.sbatch("-p", "gpu", "-N", str(nodes), "--gres=gpu:8", "-o", "/dev/null", "--wrap", "sleep 600")


def test_a_gang_gets_every_name_from_one_pool(env: E2E) -> None:
    three = _gang(env, 3)
    assert wait_for(lambda: _nodes(env, three), 20, f"job {three} allocated", env) == "e2e-od-[0-2]"
    env.slurm.run("scancel", str(three), check=True)
    # Its names stay POWERING_UP (ResumeProgram was called; nothing boots them here), and slurmctld 23.11 may give
    # names already powering up to the next gang once the cancel has released them (seen once in CI, depending on
    # how fast the release came): power them down again, so that the next gang chooses between two powered-down
    # pools, the rule this test is about.
    env.slurm.run("scontrol", "update", "nodename=e2e-od-[0-2]", "state=power_down_force", check=True)
    wait_for(lambda: _powered_down(env, [f"e2e-od-{i}" for i in range(3)]), 90, "e2e-od-[0-2] powered down", env)
    two = _gang(env, 2)
    assert wait_for(lambda: _nodes(env, two), 20, f"job {two} allocated", env) == "e2e-resv-[0-1]"


def test_a_gang_no_pool_can_hold_is_refused_at_submission(env: E2E) -> None:
    refused = env.slurm.run("sbatch", "-p", "gpu", "-N", "4", "--gres=gpu:8", "--wrap", "sleep 1")
    assert refused.returncode != 0
    assert "Requested node configuration is not available" in refused.stderr
    # slurmctld keeps the refused record (FAILED) for MinJobAge: nothing waits or runs
    states = {j["job_state"] for j in env.slurm.squeue_json()["jobs"]}
    assert states <= {"FAILED"}, states
