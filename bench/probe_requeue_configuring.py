"""Probe, on a real slurmctld 22.05 (tests/harness), whether the daemon could move a CONFIGURING job onto a node
that just freed (`scontrol requeue`), the mechanism that would let Slurm do what Kubernetes' late binding does.

    timeout 400 nice -n 10 .venv/bin/python bench/probe_requeue_configuring.py            # requeue
    timeout 400 nice -n 10 .venv/bin/python bench/probe_requeue_configuring.py --control  # no requeue

Two CLOUD nodesets in one partition: `pa` (Weight 1) and `pb` (Weight 30), one 8-GPU node each.  Job 1 runs 25 s
on pa-0 (its slurmd is started by hand: the "boot").  Job 2 is submitted meanwhile: Slurm allocates it pb-0 and
powers that up (the ResumeProgram only logs, so pb-0 never comes up).  When job 1 ends the probe runs `scontrol
requeue` on job 2 and reports where and how it ran (`--control`: it boots pb-0 instead).  Job 2's batch script
prints its node, then runs one `srun` step.

Measured on this machine (Slurm 22.05.8): the requeued job is allocated pa-0 about 2 s later (no BeginTime hold,
unlike a requeue after a node failure), pb-0 stays POWERING_UP until powered down, but the job's `srun` step fails
("Invalid generic resource (gres) specification"; slurmctld logs `_step_get_gres_cnt ... node offset invalid`).
The control run's step succeeds.  So the requeue cannot be relied on for GPU jobs on 22.05."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> int:
    from tests.harness.cloud_nodes import CloudNodes, Nodeset, cloud_slurm_conf
    from tests.harness.slurm import SlurmHarness, slurm_unavailable_reason

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--control", action="store_true", help="boot pb-0 instead of requeueing job 2")
    a = ap.parse_args()
    if why := slurm_unavailable_reason():
        print(f"skipped: {why}", file=sys.stderr)
        return 2
    h = SlurmHarness()
    cloud = CloudNodes(h, [Nodeset("pa", 1, weight=1), Nodeset("pb", 1, weight=30)])
    cloud.prepare()
    h.start(cloud_slurm_conf(h, cloud, {"gpu": ["pa", "pb"]}, suspend_time=600, resume_timeout=300), cloud.gres_conf())
    t0 = time.time()

    def jobs() -> dict[int, dict[str, Any]]:
        return {j["job_id"]: j for j in h.squeue_json()["jobs"]}

    def until(pred: Any, timeout: float) -> None:
        end = time.time() + timeout
        while time.time() < end and not pred():
            time.sleep(1)

    def show(tag: str) -> None:
        nodes = {n["name"]: n for n in h.sinfo_json()["nodes"]}
        js = ", ".join(f"job {i} {j['job_state']} on {j.get('nodes')}" for i, j in sorted(jobs().items()))
        ns = ", ".join(f"{n} {'+'.join(nodes[n].get('state_flags') or [nodes[n]['state']])}" for n in ("pa-0", "pb-0"))
        print(f"t={time.time() - t0:5.1f}s {tag}: {js}; {ns}", flush=True)

    out = h.root / "log"
    try:
        sb = ("sbatch", "-p", "gpu", "-N1", "--gres=gpu:8")
        j1 = int(h.run(*sb, "-o", f"{out}/j1.out", "--wrap", "srun sleep 25", check=True).stdout.split()[-1])
        time.sleep(3)
        cloud.boot("pa-0")
        until(lambda: jobs().get(j1, {}).get("job_state") == "RUNNING", 60)
        script = "echo batch on $SLURMD_NODENAME; srun hostname; echo srun rc $?"
        j2 = int(h.run(*sb, "-o", f"{out}/j2.out", "--wrap", script, check=True).stdout.split()[-1])
        time.sleep(4)
        show("job 2 allocated")
        until(lambda: jobs().get(j1, {}).get("job_state") not in ("RUNNING", "COMPLETING"), 60)
        show("job 1 ended")
        if a.control:
            cloud.boot("pb-0")
        else:
            r = h.run("scontrol", "requeue", str(j2))
            print(f"scontrol requeue {j2}: rc {r.returncode} {r.stderr.strip()}", flush=True)
        until(lambda: jobs().get(j2, {}).get("job_state") in ("COMPLETED", "FAILED", None), 120)
        show("job 2 done")
        print((out / "j2.out").read_text() if (out / "j2.out").exists() else "job 2 wrote no output")
        log = (out / "slurmctld.log").read_text().splitlines()
        print("\n".join(x for x in log if f"JobId={j2}" in x or "powering" in x))
    finally:
        cloud.stop_all()
        h.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
