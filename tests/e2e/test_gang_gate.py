"""The gang gate on a real slurmctld (issue 8: gangs all or nothing, in pools the daemon does not hold).

One on-demand pool of three CLOUD names with late binding off, so the daemon holds nothing: slurmctld may allocate
powered-down names at submission.  The job_submit.lua `fleet render slurm-conf` writes for such a pool gates every
gang (`autoscaler.slurm.gang_gate`: a BeginTime 30 s ahead, the AdminComment mark, the submit wake-up), and the
daemon, woken by the submission, releases it in one `scontrol update` with the nodes it may not get.  Without the
gate slurmctld gave a 2-node gang the warm node plus one powered-down name, and the warm node waited, allocated and
idle, for the other's boot (bench/probe_gang_gate.py --no-gate, and the replay's held-out `res4-on-demand-rate`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from autoscaler.slurm.gang_gate import GANG_GATE_MARK, GANG_GATE_S
from autoscaler.slurm.hostlist import expand
from autoscaler.slurm.wake import submit_wake_path
from fleet.catalog import CapacityType, load_catalog
from fleet.slurm.job_submit import render_job_submit
from fleet.slurm.weights import pool_shapes
from tests.e2e.env import E2E, REGION, e2e_env, late_bind_lines, pool, wait_for
from tests.harness.cloud_nodes import Nodeset
from tests.harness.slurm import SlurmHarness

pytestmark = [pytest.mark.slurm, pytest.mark.gce, pytest.mark.slow]


def _gate_lua(state: Path) -> str:
    """What `fleet render slurm-conf` writes for one on-demand a3-highgpu-8g pool with late binding off: nothing to
    prefer, the submit wake-up and the gang gate."""
    shapes = pool_shapes([("od", CapacityType.ON_DEMAND, "a3-highgpu-8g")], load_catalog(), REGION)
    return render_job_submit({"gpu": shapes}, "gpu", wake=True, gate_gangs=True, wake_path=str(submit_wake_path(state)))


@pytest.fixture
def env(slurm_factory: Callable[..., SlurmHarness]) -> Iterator[E2E]:
    """Three a3-highgpu-8g names, late binding off (nothing held), idle nodes kept 5 minutes, a 10 s poll (the gate
    must open from the submit wake-up, not the poll)."""
    with e2e_env(
        slurm_factory,
        suspend_time=600,
        pools=[pool("od", "on-demand", "gpu", False, max_nodes=3)],
        nodesets=[Nodeset("e2e-od", 3, features="a3-highgpu-8g")],
        partitions={"gpu": ["e2e-od"]},
        job_submit_lua=_gate_lua,
        slurm_lines=late_bind_lines,
        policy={"idle_timeout_s": 300, "backoff_s": 120, "late_bind": False},
        interval_s=10.0,
    ) as e:
        yield e


def _job(env: E2E, job: int) -> dict:
    return next(j for j in env.slurm.squeue_json()["jobs"] if j["job_id"] == job)


#: the ways a user asks for a 2-node gang of 8-GPU nodes: a node count, or GPUs alone (slurmctld makes it 2 nodes)
GANG_FORMS = {"nodes": ("-N", "2", "--gres=gpu:8"), "gpus": ("--gpus=16",)}


def _gang(env: E2E, form: str = "nodes") -> int:
    out = env.root / "log"
    return env.sbatch("-p", "gpu", *GANG_FORMS[form], "-o", f"{out}/job-%j.out", "--wrap",
                      "srun sh -c 'echo $SLURMD_NODENAME; sleep 5'")  # fmt: skip


def _gate_commands(env: E2E, job: int) -> list[dict]:
    return [
        c
        for t in env.ticks
        for c in t.commands
        if c["command"] == "scontrol-gang-gate" and c["job_id"] == job and c["outcome"] == "ok"
    ]


def _warm(env: E2E, count: int) -> list[str]:
    """`count` single jobs at once, each booting a node; their nodes left idle and kept warm."""
    first = [env.gpu_job(5) for _ in range(count)]
    wait_for(lambda: not env.squeue_ids() & set(first), 120, f"{count} single job(s) to boot, run and end", env)
    warm = sorted(env.ran_on(j) for j in first)
    wait_for(lambda: all(env.sinfo()[n]["state"] == "idle" for n in warm), 30, "the nodes idle and kept warm", env)
    return warm


@pytest.mark.parametrize("form", sorted(GANG_FORMS))
def test_a_gang_boots_whole_instead_of_pinning_a_warm_node(env: E2E, form: str) -> None:
    """A warm node and a 2-node gang, asked for by node count or by GPUs alone: the lua gates the gang, the daemon
    releases it within seconds with the warm node excluded, and slurmctld gives it two powered-down names, booted
    together; the warm node stays idle for the next single job, which starts on it with no boot."""
    env.start_daemon()
    (warm,) = _warm(env, 1)
    gang = _gang(env, form)
    job = _job(env, gang)
    if job["job_state"] == "PENDING" and job.get("state_reason") == "BeginTime":  # the gate, unless already opened
        assert job.get("admin_comment") == GANG_GATE_MARK
    # within 5 s with a 10 s poll: the submit wake-up's tick released it (not the poll, nor the gate's 30 s)
    wait_for(lambda: _job(env, gang).get("nodes"), 5, "the gang released and allocated", env)
    nodes = sorted(expand(_job(env, gang)["nodes"]))
    assert warm not in nodes and len(nodes) == 2  # two names booted for it, the warm node not among them
    (opened,) = _gate_commands(env, gang)
    assert opened["names"] == [warm]
    assert env.sinfo()[warm]["state"] == "idle"  # not allocated to wait for the boots
    single = env.gpu_job(5)
    wait_for(lambda: single not in env.squeue_ids(), 30, "a single job on the warm node, no boot", env)
    assert env.ran_on(single) == warm
    wait_for(lambda: gang not in env.squeue_ids(), 120, "the gang to boot, run and end", env)
    assert sorted(e.name for e in env.fake.events_of("create")) == ["e2e-od-0", "e2e-od-1", "e2e-od-2"]


def test_a_gang_that_warm_nodes_hold_is_released_onto_them(env: E2E) -> None:
    """Two warm nodes and a 2-node gang: the gate opens with no exclusion and slurmctld starts the gang on them at
    once; nothing boots for it."""
    env.start_daemon()
    warm = _warm(env, 2)
    creates = len(env.fake.events_of("create"))
    gang = _gang(env)
    wait_for(lambda: _job(env, gang).get("nodes"), 5, "the gang released onto the warm nodes", env)
    assert sorted(expand(_job(env, gang)["nodes"])) == warm
    (opened,) = _gate_commands(env, gang)
    assert opened["names"] == []
    wait_for(lambda: gang not in env.squeue_ids(), 60, "the gang to run and end", env)
    assert len(env.fake.events_of("create")) == creates


def _lease_commands(env: E2E, job: int) -> list[dict]:
    return [
        c
        for t in env.ticks
        for c in t.commands
        if c["command"] == "scontrol-gang-lease" and job in c["job_ids"] and c["outcome"] == "ok"
    ]


@pytest.mark.parametrize("how", ["dependency", "hold"])
def test_a_gang_blocked_past_the_gate_still_boots_whole(env: E2E, how: str) -> None:
    """A gang that cannot run for longer than the lua's 30 s (a dependency on a 40 s job, or the user's hold
    released after 35 s): without the daemon's lease slurmctld tries it the moment it can run, with the gate long
    lapsed, and gives it the warm node plus a powered-down name.  With it the gang is still behind the gate then; the
    daemon releases it off the warm node and it boots whole."""
    env.start_daemon()
    (warm,) = _warm(env, 1)
    out = env.root / "log"
    if how == "dependency":
        first = env.gpu_job(40)  # takes the warm node at once
        gang = env.sbatch("-p", "gpu", "-N", "2", "--gres=gpu:8", f"--dependency=afterok:{first}", "-o",
                          f"{out}/job-%j.out", "--wrap", "srun sh -c 'echo $SLURMD_NODENAME; sleep 5'")  # fmt: skip
        assert _job(env, gang)["state_reason"] == "Dependency"
        wait_for(lambda: first not in env.squeue_ids(), 120, "the job the gang depends on to end", env)
        assert env.ran_on(first) == warm
        # slurmctld marks the dependency met at a later pass (14 s after the job left squeue in one run here)
        wait_for(lambda: not _job(env, gang).get("dependency"), 60, "slurmctld to see the dependency met", env)
    else:
        gang = env.sbatch("-p", "gpu", "-N", "2", "--gres=gpu:8", "-H", "-o", f"{out}/job-%j.out", "--wrap",
                          "srun sh -c 'echo $SLURMD_NODENAME; sleep 5'")  # fmt: skip
        wait_for(lambda: time.time() > _job(env, gang)["submit_time"] + GANG_GATE_S + 5, 60, "the gate's 30 s", env)
        assert _job(env, gang)["state_reason"] == "JobHeldUser"
        env.slurm.run("scontrol", "release", str(gang), check=True)
    assert _lease_commands(env, gang)  # kept behind the gate past the lua's 30 s
    wait_for(lambda: _job(env, gang).get("nodes"), 15, "the gang released by the daemon's next poll", env)
    nodes = sorted(expand(_job(env, gang)["nodes"]))
    assert warm not in nodes and len(nodes) == 2
    (opened,) = _gate_commands(env, gang)
    assert opened["names"] == [warm]
    wait_for(lambda: gang not in env.squeue_ids(), 120, "the gang to boot, run and end", env)
