"""The cloud preempts a spot instance under a running job, on a real slurmctld (`Daemon._preempted`).

A spot-tolerant job runs on a spot node the daemon booted; the fake Compute API preempts its VM (the stack's spot
template stops it: TERMINATED), which stops the node's slurmd and the job's processes, as a preempted VM's die.  The
daemon reads the preemption at its next tick and marks the Slurm node DOWN, then powers it down.  slurmctld then
requeues the job at once: squeue shows it PENDING within seconds, well before the harness's SlurmdTimeout (30 s)
would have slurmctld find the node dead by itself.  A `power_down_force` alone (the daemon's command before) left
the requeued job COMPLETING, waiting on a terminate RPC to the dead slurmd, and the node unsuspendable, until
slurmctld's ping set the node DOWN after SlurmdTimeout (22.05's node_mgr.c `update_node`, node_scheduler.c
`deallocate_nodes`).  The power thread then suspends the DOWN node: SuspendProgram reaches the daemon, the stopped
VM is deleted, and with `idle_on_node_suspend` the name comes back POWERED_DOWN, no longer DOWN.
"""

from __future__ import annotations

import sqlite3
import time
from contextlib import closing

import pytest

from tests.e2e.env import E2E, wait_for

pytestmark = [pytest.mark.slurm, pytest.mark.gce, pytest.mark.slow]

#: well under the harness's SlurmdTimeout (30 s, tests/harness/cloud_nodes.py): only the daemon's DOWN requeues
#: the job this soon
REQUEUED_WITHIN_S = 15.0


def _job(env: E2E, job: int) -> dict:
    for j in env.slurm.squeue_json()["jobs"]:
        if j["job_id"] == job:
            return j
    return {"job_state": "GONE", "nodes": "", "restart_cnt": 0}


def _suspend_calls(env: E2E, name: str) -> int:
    """The SuspendProgram calls for `name` that reached the daemon's store (the hook queues one row per name)."""
    with closing(sqlite3.connect(f"file:{env.state}?mode=ro", uri=True, timeout=10)) as conn:
        sql = "SELECT COUNT(*) FROM power_queue WHERE action = 'suspend' AND name = ?"
        return int(conn.execute(sql, (name,)).fetchone()[0])


def _commands(env: E2E, command: str) -> list[dict]:
    return [c for t in list(env.ticks) for c in t.commands if c["command"] == command and c["outcome"] == "ok"]


def test_a_preempted_spot_instance_has_its_job_requeued_at_once_and_its_node_powered_down(env: E2E) -> None:
    env.start_daemon()
    out = env.root / "log"
    job = env.sbatch("-p", "spot", "-N", "1", "--gres=gpu:8", "--requeue", "-o", f"{out}/job-%j.out",
                     "--wrap", "srun sh -c 'echo $SLURMD_NODENAME; sleep 600'")  # fmt: skip
    wait_for(lambda: _job(env, job)["job_state"] == "RUNNING", 120, "the spot job to run", env)
    name = env.ran_on(job)  # its step started on the node's slurmd
    assert name.startswith("e2e-spot-") and _job(env, job)["nodes"] == name
    (created,) = [e for e in env.fake.events_of("create") if e.name == name]
    assert _suspend_calls(env, name) == 0

    time.sleep(2)  # the job well under way
    assert _job(env, job)["job_state"] == "RUNNING"

    # the cloud takes the VM back: its processes gone at once, the VM TERMINATED (the fake's stop hook: the slurmd,
    # already dead, is reaped)
    preempted = time.monotonic()
    env.nodes.vanish(name)
    env.fake.preempt(created.zone, name)
    assert name not in env.nodes.running()

    seen: list[str] = []

    def requeued() -> bool:
        state = str(_job(env, job)["job_state"])
        if not seen or seen[-1] != state:
            seen.append(state)
        return state == "PENDING"

    deadline = preempted + REQUEUED_WITHIN_S
    while not requeued() and time.monotonic() < deadline:
        time.sleep(0.25)
    assert seen[-1] == "PENDING", (
        f"job {job} not requeued (PENDING) within {REQUEUED_WITHIN_S:.0f} s of the preemption; states seen: {seen}, "
        f"daemon commands on {name}: {[c for t in env.ticks for c in t.commands if name in c['names']]}\n"
        f"{env.slurm.logs(15)}"
    )
    assert "COMPLETING" not in seen, seen
    assert _job(env, job)["restart_cnt"] >= 1
    # the daemon's commands: DOWN (with the reason scontrol wants), then the power-down; no power_down_force
    downs = [c for c in _commands(env, "scontrol-down") if name in c["names"]]
    assert [c["reason"] for c in downs] == ["gpu-fleet: instance preempted"], downs
    assert [c["names"] for c in _commands(env, "scontrol-power_down") if name in c["names"]] == [[name]]
    assert not [c for c in _commands(env, "scontrol-power_down_force") if name in c["names"]]

    # the power thread suspends the DOWN node: SuspendProgram reaches the daemon, the stopped VM is deleted (once),
    # and, after SuspendTimeout, Slurm shows the name powered down and no longer DOWN (idle_on_node_suspend)
    wait_for(lambda: _suspend_calls(env, name) >= 1, 30, f"SuspendProgram for {name} to reach the daemon", env)
    wait_for(lambda: name not in env.fake.instance_names(), 30, f"the preempted instance {name} to be deleted", env)
    assert [e.name for e in env.fake.events_of("delete-requested")] == [name]
    assert env.fake.duplicates() == {}

    def powered_down() -> bool:
        n = env.sinfo()[name]
        return "POWERED_DOWN" in n["state_flags"] and n["state"] != "down"

    wait_for(powered_down, 40, f"Slurm to show {name} powered down (SuspendTimeout), not DOWN", env)
