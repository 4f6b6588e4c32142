"""Taking reserved capacity back from spot-tolerant work on a real slurmctld (`Policy.preempt_spot`).

One reserved 8-GPU node (`e2e-resv-0`, Weight 1), one spot node (`e2e-spot-0`) and one on-demand node
(`e2e-od-0`), all CLOUD and powered down.  Slurm's partition-priority preemption as the stack renders it:
`spotq` (spot-tolerant work: the reservation and spot) at PriorityTier 1 with `PreemptMode=REQUEUE`, `odq`
(on-demand-only work: the reservation and on-demand) at PriorityTier 10.  The policy has no reservation hold
(`batch_window_s` 0), so the daemon holds the on-demand pool only because of `preempt_spot` (autoscaler/core/hold.py):
- before any job, the daemon drains the powered-down on-demand node (reason "gpu-fleet ...");
- a spot-tolerant job takes the reserved node;
- an on-demand-only job then finds no powered-down node it may use, so slurmctld requeues the spot-tolerant job
  off the reserved node and runs the on-demand job there: no on-demand instance is created;
- a second on-demand-only job has nothing left to preempt and stays PENDING: the daemon's queue-depth plan
  releases (undrains) `e2e-od-0`, Slurm allocates it to the job, and the daemon creates exactly that instance.
  The daemon polls every 30 s here: it releases within seconds because the job_submit.lua the stack renders for a
  cluster whose pools it may hold wakes it at the submission (`fleet.slurm.policy.submit_wakes_daemon`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from autoscaler.slurm.wake import submit_wake_path
from fleet.slurm.job_submit import render_job_submit
from fleet.slurm.policy import HOLD_SCHEDULER_OPTIONS
from tests.e2e.env import E2E, ZONES, e2e_env, pool, wait_for
from tests.harness.cloud_nodes import Nodeset
from tests.harness.slurm import SlurmHarness

pytestmark = [pytest.mark.slurm, pytest.mark.gce, pytest.mark.slow]


POLL_S = 30.0


def _preemption(harness: SlurmHarness, state: Path) -> list[str]:
    """The preemption keys and the held pools' SchedulerParameters as `fleet render slurm-conf` renders them."""
    return [
        "PreemptType=preempt/partition_prio",
        "PreemptMode=REQUEUE",
        f"SchedulerParameters=preempt_youngest_first,{HOLD_SCHEDULER_OPTIONS}",
    ]


def _wake_lua(state: Path) -> str:
    """The job_submit.lua of a cluster with nothing to prefer whose daemon may hold pools: the submit wake-up."""
    return render_job_submit({}, None, wake=True, wake_path=str(submit_wake_path(state)))


@pytest.fixture
def env(slurm_factory: Callable[..., SlurmHarness]) -> Iterator[E2E]:
    with e2e_env(
        slurm_factory,
        suspend_time=600,  # keep the nodes up between jobs (the daemon's idle keep, 1 h, decides)
        pools=[
            pool("resv", "reservation", "spotq", False, max_nodes=1, reservation="e2e-resv").model_copy(
                update={"slurm_partitions": ["spotq", "odq"]}
            ),
            pool("spot", "spot", "spotq", True, max_nodes=1),
            pool("od", "on-demand", "odq", False, max_nodes=1),
        ],
        nodesets=[
            Nodeset("e2e-resv", 1, weight=1),  # the reservation first
            Nodeset("e2e-spot", 1, weight=10),
            Nodeset("e2e-od", 1, weight=30),
        ],
        partitions={  # the partition name carries its extra attributes into the rendered PartitionName line
            "spotq PriorityTier=1 PreemptMode=REQUEUE": ["e2e-resv", "e2e-spot"],
            "odq PriorityTier=10": ["e2e-resv", "e2e-od"],
        },
        policy={"idle_timeout_s": 3600, "backoff_s": 120},  # no batch_window_s: preempt_spot (default on) holds
        reservations={"e2e-resv": (ZONES[0], 1)},
        slurm_lines=_preemption,
        job_submit_lua=_wake_lua,
        interval_s=POLL_S,
    ) as e:
        yield e


def _job(env: E2E, partition: str) -> int:
    out = env.root / "log"
    return env.sbatch("-p", partition, "-N", "1", "--gres=gpu:8", "-o", f"{out}/job-%j.out", "--wrap", "sleep 600")


def _job_info(env: E2E, job: int) -> dict[str, Any]:
    for j in env.slurm.squeue_json()["jobs"]:
        if j["job_id"] == job:
            return j
    return {"job_state": "GONE", "nodes": ""}


def _state(env: E2E, job: int) -> tuple[str, str]:
    j = _job_info(env, job)
    return str(j["job_state"]), str(j.get("nodes") or "")


def _held(env: E2E, name: str) -> bool:
    n = env.sinfo()[name]
    return "DRAIN" in n["state_flags"] and n.get("reason", "").startswith("gpu-fleet")


def _created(env: E2E) -> list[str]:
    return sorted(e.name for e in env.fake.events_of("create"))


def _commands(env: E2E, command: str) -> list[list[str]]:
    return [c["names"] for t in env.ticks for c in t.commands if c["command"] == command and c["outcome"] == "ok"]


def test_an_on_demand_job_preempts_spot_work_off_the_reservation_before_on_demand_is_created(env: E2E) -> None:
    env.start_daemon()
    # 1. the daemon holds the on-demand overflow (nobody else drains it here)
    wait_for(lambda: _held(env, "e2e-od-0"), 30, "the daemon to hold (drain) e2e-od-0", env)
    assert ["e2e-od-0"] in _commands(env, "scontrol-drain")
    assert not _held(env, "e2e-spot-0") and not _held(env, "e2e-resv-0")  # spot and the reservation stay free

    # 2. spot-tolerant work takes the reserved node
    spot = _job(env, "spotq")
    wait_for(lambda: _state(env, spot) == ("RUNNING", "e2e-resv-0"), 90, "the spot job on e2e-resv-0", env)
    assert _created(env) == ["e2e-resv-0"]

    # 3. an on-demand-only job: slurmctld requeues the spot job and runs it on the reserved node
    first = _job(env, "odq")
    wait_for(lambda: _state(env, first) == ("RUNNING", "e2e-resv-0"), 60, "the on-demand job on e2e-resv-0", env)
    requeued = _job_info(env, spot)  # pending until its BeginTime (cred_expire, 30 s), then on the spot node
    assert _state(env, spot) in {("PENDING", ""), ("CONFIGURING", "e2e-spot-0"), ("RUNNING", "e2e-spot-0")}, requeued
    assert requeued["restart_cnt"] >= 1, requeued
    assert not [n for n in _created(env) if n.startswith("e2e-od-")]  # no on-demand instance for it
    assert not [n for n in _commands(env, "scontrol-undrain") if "e2e-od-0" in n]
    assert _held(env, "e2e-od-0")

    # 4. a second on-demand-only job: nothing to preempt (the reservation runs on-demand work), so the daemon
    # releases the held on-demand node at its next tick and Slurm gives it to the job
    submitted = time.time()
    second = _job(env, "odq")
    wait_for(lambda: _state(env, second) == ("RUNNING", "e2e-od-0"), 120, "the second job on e2e-od-0", env)
    assert [n for n in _commands(env, "scontrol-undrain") if "e2e-od-0" in n] == [["e2e-od-0"]]
    release = next(t for t in env.ticks for c in t.commands if c["command"] == "scontrol-undrain")
    assert release.at - submitted < 5, f"released {release.at - submitted:.1f} s after the submission, not woken by it"
    assert [n for n in _created(env) if n.startswith("e2e-od-")] == ["e2e-od-0"]
    assert env.fake.duplicates() == {}
    assert _state(env, first) == ("RUNNING", "e2e-resv-0")  # the reservation keeps its on-demand job
    assert _state(env, spot)[0] in ("PENDING", "RUNNING", "CONFIGURING")  # spot work is requeued, never lost
