"""Probe, on a real slurmctld 22.05 (tests/harness), the gang gate (`autoscaler.slurm.gang_gate`): the job_submit.lua
`fleet render slurm-conf` writes where a pool may be unheld, and the daemon's release of a gated gang.

    timeout 600 nice -n 10 .venv/bin/python bench/probe_gang_gate.py [--rounds N] [--json]   # the gate
    timeout 600 nice -n 10 .venv/bin/python bench/probe_gang_gate.py --no-gate                # the lua without it

One CLOUD nodeset `pa` of three 8-GPU nodes.  Each round starts a fresh slurmctld, brings pa-0 up with a one-node
job (its slurmd started by hand), then submits a 2-node gang.  With the gate the probe reads the gang as the daemon
does (`CliSlurm.jobs`, `SlurmJob.gated`), releases it as the daemon does (`CliSlurm.start_job_now` with pa-0
excluded: `scontrol update jobid=N ExcNodeList=pa-0 StartTime=now`) and times the allocation; without it, slurmctld
allocates the gang at submission.  The ResumeProgram only logs, so the names it allocates stay POWERING_UP.

Measured on this machine (Slurm 22.05.8, 3 rounds, squeue polled every 50 ms): the gang shows reason BeginTime, the
mark as its AdminComment and an eligible time 30.0 s after its submission; after the release it is allocated pa-[1-2]
(two powered-down names, pa-0 left idle) 0.19-0.24 s later (mean 0.21 s; the replay's
`SlurmSettings.gate_allocation_s`).  Without the gate (`--no-gate`, 1 round) it is allocated pa-[0-1] at
submission: the up node plus one that must boot, which would wait, allocated and idle, for the other's boot."""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

from slurm_probe import Nodeset, Probe, slurm_unavailable_reason, until

from autoscaler.slurm.client import CliSlurm
from autoscaler.slurm.gang_gate import GANG_GATE_S
from autoscaler.slurm.hostlist import expand
from fleet.catalog import CapacityType
from fleet.slurm.job_submit import render_job_submit
from fleet.slurm.weights import PoolShape
from tests.harness.slurm import poll_until


def _lua(gate: bool):  # type: ignore[no-untyped-def]
    shapes = [PoolShape("pa", CapacityType.ON_DEMAND, "a3-highgpu-8g", 8, 11.0)]
    return lambda h: render_job_submit(  # the rendered lua, its wake-up file in the harness's directory
        {"gpu": shapes}, "gpu", wake=True, gate_gangs=gate, wake_path=str(h.root / "submit-wake")
    )


def one_round(gate: bool) -> dict[str, object]:
    with Probe.start([Nodeset("pa", 3)], {"gpu": ["pa"]}, job_submit_lua=_lua(gate)) as p:
        client = CliSlurm(env={"SLURM_CONF": str(p.h.conf_path)})
        p.cloud.boot("pa-0")
        warm = p.sbatch("-p", "gpu", "-N1", "--gres=gpu:8", "-w", "pa-0", "--wrap", "true")
        until(lambda: warm not in p.jobs(), 90)
        gang = p.sbatch("-p", "gpu", "-N2", "--gres=gpu:8", "--wrap", "srun hostname")
        job = next(j for j in client.jobs() if j.job_id == gang)
        out: dict[str, object] = {"gated": job.gated, "reason": job.reason, "admin_comment": job.admin_comment}
        if job.eligible_time is not None:
            out["eligible_after_submit_s"] = job.eligible_time - job.submit_time
        t0 = time.monotonic()
        if job.gated:
            client.start_job_now(gang, ["pa-0"])
        poll_until(lambda: p.jobs().get(gang, {}).get("nodes"), 60, interval=0.05)  # squeue every 50 ms
        out["allocated_after_release_s"] = round(time.monotonic() - t0, 2) if job.gated else None
        out["nodes"] = sorted(expand(str(p.jobs()[gang]["nodes"])))
        out["pa-0"] = sorted(next(n for n in p.h.sinfo_json()["nodes"] if n["name"] == "pa-0").get("state_flags") or [])
        return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--no-gate", action="store_true", help="render the lua without the gang gate")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    if why := slurm_unavailable_reason():
        print(f"skipped: {why}", file=sys.stderr)
        return 2
    rounds = [one_round(not a.no_gate) for _ in range(a.rounds)]
    waits = [r["allocated_after_release_s"] for r in rounds if r["allocated_after_release_s"] is not None]
    summary = {"gate": not a.no_gate, "gate_s": GANG_GATE_S, "rounds": rounds}
    if waits:
        summary["allocated_after_release_s"] = {"min": min(waits), "max": max(waits), "mean": statistics.mean(waits)}
    if a.json:
        print(json.dumps(summary, indent=2))
    else:
        for i, r in enumerate(rounds):
            print(f"round {i}: {r}")
        if waits:
            print(f"allocated after the release: {min(waits)}-{max(waits)} s (mean {statistics.mean(waits):.2f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
