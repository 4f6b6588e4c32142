"""How long strict late binding's two reactions take on a real slurmctld: submission -> instance created, and a
drained boot registering -> its job running; with `--bind`, the same two on the path every Slurm-bound policy
takes (jobs allocated powered-down names at submit, ResumeProgram, the job CONFIGURING until its node registers).

    .venv/bin/python bench/late_bind_latency.py [--rounds 2] [--spacing 3] [--bind] [--json]

The e2e setup of tests/e2e (real slurmctld 22.05, one real slurmd per "instance" of the fake Compute API, the
daemon in this process) with `policy.late_bind: true`, the job_submit.lua `fleet render slurm-conf` writes under
late binding (hard constraint + submit wake-up file), EpilogSlurmctld, `idle_timeout_s: 0` and a 120 s poll, so
only the run loop's 1 s watcher starts ticks.  Each round submits 4 one-node jobs, `--spacing` (3 s) apart, each
long enough that the next one finds no free node: every job gets its own drained boot.  A sampler reads sinfo and squeue
every 0.1 s.  Per job:

- **submit -> power_up**: sbatch returned -> the tick that ran `scontrol update state=power_up` for its node
  (the replay's `SUBMIT_WAKE_LATENCY_S`, autoscaler/replay/gpu_fleet.py);
- **submit -> create**: sbatch returned -> the fake Compute API's instances.insert for that node (the replay:
  the wake-up latency plus `SlurmSettings.resume_batch_s`, the ResumeProgram round trip);
- **registered -> running**: the node's slurmd registered (sinfo: no longer POWERING_UP / NOT_RESPONDING) -> the
  job RUNNING (the replay's `HELD_BOOT_LATENCY_S`: the watcher's undrain tick, then slurmctld schedules the job).

And the run's boots: names powered up and instances created against jobs (each job needs exactly one).

`--bind` runs the same rounds with `policy.late_bind: false` and what the stack renders then (no job_submit.lua
constraint, no hold, Slurm's default `batch_sched_delay`; EpilogSlurmctld kept): slurmctld allocates a powered-down
name at submission and calls ResumeProgram, the daemon creates the instance, and the job is CONFIGURING until the node
registers.  Its figures are what the simulated Slurm assumes for every policy bound at submit (slurm-power-save,
gpu-fleet with a reservation): submit -> create `SlurmSettings.resume_batch_s` plus the daemon's reaction to the hook
(the replay's gpu-fleet: `BOUND_RESUME_LATENCY_S`; slurm-power-save: none), registered -> running up to
`SlurmSettings.launch_pass_s` (slurmctld's next periodic pass; this bench's measurement, docs/simulate.md twenty-ninth
round).  Submit -> create is split in three there: submit -> resume (slurmctld calls ResumeProgram and the hook has
queued the name in the daemon's store: what every bound policy pays, slurm-gcp's resume.py included), resume -> tick
(the daemon's watcher picks the row up: gpu-fleet's own) and tick -> create (the tick's insert call).

The sampler's 0.1 s period bounds each figure's resolution.  Needs root and Slurm (scripts/setup.sh); exits 0 with
a note otherwise.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.e2e.env import (
    E2E,
    late_bind_lines,
    late_bind_lua,
    pool,
    standalone_e2e,
    standalone_unavailable_reason,
    wait_for,
)
from tests.harness.cloud_nodes import Nodeset
from tests.harness.slurm import SlurmHarness

POLL_S = 120
NODES = 4
JOB_S = 25  # long enough that the jobs of a round overlap: each needs its own boot
SPACING_S = 3.0
SAMPLE_S = 0.1
MODEL = {  # what the replay assumes (autoscaler/replay/gpu_fleet.py, autoscaler/replay/simslurm.py)
    "submit_to_power_up_s": "SUBMIT_WAKE_LATENCY_S",
    "submit_to_create_s": "SUBMIT_WAKE_LATENCY_S + SlurmSettings.resume_batch_s",
    "registered_to_running_s": "HELD_BOOT_LATENCY_S",
    "registered_to_step_s": "HELD_BOOT_LATENCY_S",
}
BOUND_MODEL = {  # the same, for a job bound at submit (`--bind`)
    "submit_to_create_s": "SlurmSettings.resume_batch_s + BOUND_RESUME_LATENCY_S (gpu-fleet's hook watcher)",
    "submit_to_allocated_s": "0 (slurmctld allocates powered-down names at submission)",
    "submit_to_resume_s": "SlurmSettings.resume_batch_s (slurmctld calls ResumeProgram, for every bound policy)",
    "resume_to_tick_s": "BOUND_RESUME_LATENCY_S with the next (the 1 s power_queue watcher; slurm-gcp: none)",
    "tick_to_create_s": "BOUND_RESUME_LATENCY_S with the previous (the tick's instances.insert)",
    "registered_to_running_s": "up to SlurmSettings.launch_pass_s (slurmctld's next periodic pass)",
    "registered_to_step_s": "up to SlurmSettings.launch_pass_s (slurmctld's next periodic pass)",
}


class Sampler(threading.Thread):
    """First time each node was seen registered and each job RUNNING, from sinfo/squeue every `SAMPLE_S`."""

    def __init__(self, env: E2E) -> None:
        super().__init__(daemon=True)
        self.env = env
        self.registered: dict[str, float] = {}
        self.running: dict[int, float] = {}
        self.allocated: dict[int, float] = {}
        self._down: set[str] = set()
        self.stop_event = threading.Event()

    def run(self) -> None:
        while not self.stop_event.wait(SAMPLE_S):
            now = time.time()
            try:
                nodes = self.env.sinfo()
                jobs = self.env.slurm.squeue_json()["jobs"]
            except Exception:
                continue
            for name, n in nodes.items():
                flags = set(n["state_flags"])
                if flags & {"POWERING_UP", "POWERED_DOWN", "NOT_RESPONDING", "POWERING_DOWN"}:
                    self._down.add(name)  # a later registration is a new boot
                elif name in self._down:
                    self._down.discard(name)
                    self.registered[name] = now
            for j in jobs:
                if j.get("nodes"):
                    self.allocated.setdefault(int(j["job_id"]), now)
                if j["job_state"] == "RUNNING":
                    self.running.setdefault(int(j["job_id"]), now)


def run_round(env: E2E, sampler: Sampler, spacing_s: float = SPACING_S, bind: bool = False) -> list[dict[str, Any]]:
    submitted: dict[int, float] = {}
    for _ in range(NODES):
        job = env.gpu_job(JOB_S, stamp=True)
        submitted[job] = time.time()
        time.sleep(spacing_s)
    wait_for(lambda: not env.squeue_ids() & set(submitted), 240, "the round's jobs to finish", env)
    settled = {"POWERED_DOWN"} if bind else {"POWERED_DOWN", "DRAIN"}
    wait_for(
        lambda: all(
            settled <= set(n["state_flags"]) and not {"POWERING_DOWN"} & set(n["state_flags"])
            for name, n in env.sinfo().items()
            if name.startswith("e2e-od-")
        ),
        120,
        "the nodes to be powered down" + ("" if bind else " and held again"),
        env,
    )
    out = []
    for job, t0 in submitted.items():
        name = env.ran_on(job)
        power_up = min(
            (
                t.at
                for t in env.ticks
                for c in t.commands
                if c["command"] == "scontrol-power_up" and name in c["names"] and t.at >= t0 - 1
            ),
            default=None,
        )
        create = min((e.at for e in env.fake.events_of("create") if e.name == name and e.at >= t0 - 1), default=None)
        registered = sampler.registered.get(name)
        running = sampler.running.get(job)
        step = env.step_started(job)
        queued, consumed = _resume_row(env.state, name, t0) if bind else (None, None)
        out.append(
            {
                "job": job,
                "node": name,
                "booted_for_it": create is not None,
                "submit_to_power_up_s": _d(t0, power_up),
                "submit_to_create_s": _d(t0, create),
                "submit_to_allocated_s": _d(t0, sampler.allocated.get(job)),
                "submit_to_resume_s": _d(t0, queued),
                "resume_to_tick_s": _d(queued, consumed),
                "tick_to_create_s": _d(consumed, create),
                "registered_to_running_s": _d(registered, running) if create is not None else None,
                "registered_to_step_s": _d(registered, step) if create is not None else None,
                "submitted_at": round(t0, 3),
                "running_at": None if running is None else round(running, 3),
            }
        )
        sampler.registered.pop(name, None)
    return out


def _resume_row(state: Path, name: str, since: float) -> tuple[float | None, float | None]:
    """When the ResumeProgram hook queued `name` (the first `power_queue` row at or after `since`, less a second of
    clock slack) and when the daemon's tick consumed that row: the hook writes `at` once slurmctld has called it
    (after the ~50 ms Python start, autoscaler/slurm/hook.py), the daemon `done_at` in the tick that acts on it."""
    with sqlite3.connect(f"file:{state}?mode=ro", uri=True) as conn:
        row = conn.execute(
            "SELECT at, done_at FROM power_queue WHERE action = 'resume' AND name = ? AND at >= ? ORDER BY at LIMIT 1",
            (name, since - 1),
        ).fetchone()
    return (None, None) if row is None else (row[0], row[1])


def _d(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else round(b - a, 3)


def _bound_lines(harness: SlurmHarness, state: Path) -> list[str]:
    """What the stack renders without late binding (and no reservation): EpilogSlurmctld, no SchedulerParameters."""
    return [line for line in late_bind_lines(harness, state) if line.startswith("EpilogSlurmctld=")]


def measure(
    rounds: int, spacing_s: float = SPACING_S, bind: bool = False
) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """The per-job samples, and the run's boots: names powered up (one per `scontrol update state=power_up` name),
    instances created, jobs (a name powered up twice, or more creates than jobs, is a boot the jobs did not need).
    `bind`: late binding off (jobs bound at submit)."""
    samples: list[dict[str, Any]] = []
    boots: dict[str, int] = {}
    with standalone_e2e(
        suspend_time=600,
        pools=[pool("od", "on-demand", "gpu", False, max_nodes=NODES)],
        nodesets=[Nodeset("e2e-od", NODES, features="a3-highgpu-8g")],
        partitions={"gpu": ["e2e-od"]},
        policy={"idle_timeout_s": 0, "backoff_s": 120, "late_bind": not bind},
        job_submit_lua=None if bind else late_bind_lua,
        slurm_lines=_bound_lines if bind else late_bind_lines,
        interval_s=POLL_S,
    ) as env:
        sampler = Sampler(env)
        try:
            env.start_daemon()
            if not bind:
                wait_for(
                    lambda: all("DRAIN" in n["state_flags"] for n in env.sinfo().values()),
                    60,
                    "the pool to be held (its powered-down names drained)",
                    env,
                )
            sampler.start()
            for _ in range(rounds):
                samples += run_round(env, sampler, spacing_s, bind)
            boots = {
                "power_up_names": sum(
                    len(c["names"]) for t in env.ticks for c in t.commands if c["command"] == "scontrol-power_up"
                ),
                "instances_created": len(env.fake.events_of("create")),
                "jobs": len(samples),
            }
        finally:
            sampler.stop_event.set()
    return samples, boots


def summary(samples: list[dict[str, Any]], bind: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, model in (BOUND_MODEL if bind else MODEL).items():
        xs = [s[key] for s in samples if s.get(key) is not None]
        out[key] = {
            "n": len(xs),
            "median_s": round(statistics.median(xs), 2) if xs else None,
            "mean_s": round(statistics.fmean(xs), 2) if xs else None,
            "max_s": max(xs) if xs else None,
            "replay_models_it_as": model,
        }
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--spacing", type=float, default=SPACING_S, help="seconds between a round's submissions")
    ap.add_argument("--bind", action="store_true", help="late binding off: jobs bound to powered-down names at submit")
    a = ap.parse_args()
    reason = standalone_unavailable_reason()
    if reason:
        print(f"skip: {reason}")
        return 0
    samples, boots = measure(a.rounds, a.spacing, a.bind)
    report = {"late_bind": not a.bind, "summary": summary(samples, a.bind), "boots": boots, "samples": samples}
    if a.json:
        print(json.dumps(report, indent=2))
    else:
        for key, v in report["summary"].items():
            print(
                f"{key}: median {v['median_s']} s, mean {v['mean_s']} s, max {v['max_s']} s over {v['n']} jobs "
                f"(replay: {v['replay_models_it_as']})"
            )
        print(f"jobs not booted for: {sum(1 for s in samples if not s['booted_for_it'])} of {len(samples)}")
        print(f"boots: {boots['power_up_names']} names powered up, {boots['instances_created']} instances created"
              f" for {boots['jobs']} jobs")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
