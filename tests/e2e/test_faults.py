"""Faults end to end: the fake Compute API answers 429/503, stalls past the client timeout and stocks out a
zone; slurmctld stops answering for a while; the daemon (its own process) is SIGKILLed between requesting an
instance and recording it, then restarted.  Afterwards: every job ran exactly once to the end (so no busy
node was deleted), no instance was created twice, no instance is left, and the counts are reported."""

from __future__ import annotations

import json
import os
import signal
import time
from collections import Counter
from collections.abc import Callable, Iterator

import pytest

from tests.e2e.env import E2E, e2e_env, wait_for
from tests.harness.slurm import SlurmHarness

pytestmark = [pytest.mark.slurm, pytest.mark.gce, pytest.mark.slow]


@pytest.fixture
def env(slurm_factory: Callable[..., SlurmHarness]) -> Iterator[E2E]:
    """The shared env with late binding off: the SIGKILL is timed on the resume path, where Slurm binds the jobs at
    submit and the first instance created is the one whose reply stalls (late binding's own e2e:
    test_late_binding.py)."""
    with e2e_env(
        slurm_factory, suspend_time=6, policy={"idle_timeout_s": 3600, "backoff_s": 120, "late_bind": False}
    ) as e:
        yield e


def slurmctld_pid(env: E2E) -> int:
    return env.slurm._procs["slurmctld"].pid  # the harness started it; we only pause and resume it


def test_faults_no_busy_node_deleted_no_duplicate_no_orphan_work_served(env: E2E) -> None:
    fake, out = env.fake, env.root / "log"
    # Compute API faults on the first launches: 2 x 429, 1 x 503, then a reply stalled past the 2 s client timeout
    fake.fail_next(429, 2, path_contains="createInstances")
    fake.fail_next(503, 1, path_contains="createInstances")
    fake.delay_next(6.0, 1, after=True, path_contains="createInstances")
    fake.stockout("us-central1-a", "a3-highgpu-8g", "SPOT")  # spot in zone a: per-instance creation failures

    first = env.spawn_daemon()
    job = "srun sh -c 'echo start $SLURMD_NODENAME; sleep 8; echo end $SLURMD_NODENAME'"
    gang = env.sbatch("-p", "gpu", "-N", "2", "--gres=gpu:8", "-o", f"{out}/job-%j.out", "--wrap", job)
    spot = [env.sbatch("-p", "spot", "-N", "1", "--gres=gpu:8", "-o", f"{out}/job-%j.out", "--wrap", job) for _ in "ab"]
    jobs = [gang, *spot]

    # SIGKILL the daemon while its createInstances reply is stalled: the cloud has the request, the store
    # only the intent
    wait_for(lambda: fake.events_of("create"), 60, "the first createInstances to reach the fake", env)
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=10)
    killed_at = time.time()
    second = env.spawn_daemon()

    # once the jobs run, slurmctld stops answering for 8 s (SIGSTOP) while the daemon keeps ticking
    wait_for(lambda: any((out / f"job-{j}.out").exists() for j in jobs), 120, "a job to start", env)
    os.kill(slurmctld_pid(env), signal.SIGSTOP)
    time.sleep(8)
    os.kill(slurmctld_pid(env), signal.SIGCONT)

    wait_for(lambda: not env.squeue_ids() & set(jobs), 240, "all jobs to finish", env)
    wait_for(lambda: not fake.instance_names(), 120, "idle instances to be deleted", env)

    # work served, each job exactly once, to the end: a deleted busy node would have killed or requeued it
    for j in jobs:
        lines = (out / f"job-{j}.out").read_text().split("\n")
        starts = [x for x in lines if x.startswith("start")]
        ends = [x for x in lines if x.startswith("end")]
        want = 2 if j == gang else 1
        assert len(starts) == want and len(ends) == want, (j, lines)
    creates = fake.create_counts()
    assert fake.duplicates() == {}, creates
    assert all(c == 1 for c in creates.values()), creates
    assert not fake.instance_names()  # no orphan left
    spot_zones = {e.zone for e in fake.events_of("create") if e.name.startswith("e2e-spot-")}
    assert "us-central1-b" in spot_zones  # fell back from the stocked-out zone

    second.send_signal(signal.SIGTERM)  # finishes the tick, saves state, exits 0
    assert second.wait(timeout=60) == 0
    from autoscaler.daemon.state import OPEN_REQUEST_STATES, StateStore

    store = StateStore(env.state)
    assert store.requests(OPEN_REQUEST_STATES) == [] and store.open_power() == []

    log = env.daemon_log()
    counts = {
        "faults_injected": dict(fake.faults_injected),
        "api_replies": {f"{m} {s}": c for (m, s), c in fake.request_counts().items() if "Instances" in m},
        "dedup_by_request_id": len(fake.events_of("dedup")),
        "instances_created": sum(creates.values()),
        "create_failed(stockout)": len(fake.events_of("create-failed")),
        "duplicates": sum(fake.duplicates().values()),
        "deleted_by_name": len(fake.events_of("delete-requested")),
        "adopted_after_sigkill": sum("adopting" in e.get("message", "") for e in log),
        "ticks_without_slurm": sum("Slurm not answering" in e.get("message", "") for e in log),
        "refused_deletes": sum("refusing to delete" in e.get("message", "") for e in log),
        "launch_failures_logged": Counter(
            e.get("kind") for e in log if e.get("command") == "launch" and e.get("error")
        ),
        "restart_after_sigkill_s": round(killed_at - first.args and killed_at, 1) if False else None,
    }
    counts.pop("restart_after_sigkill_s")
    (out / "fault-report.json").write_text(json.dumps(counts, indent=2, default=str))
    print("fault report:", json.dumps(counts, default=str))
    assert counts["adopted_after_sigkill"] >= 1
    assert counts["ticks_without_slurm"] >= 1
