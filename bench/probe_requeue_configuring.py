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

from slurm_probe import Nodeset, Probe, slurm_unavailable_reason, until


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--control", action="store_true", help="boot pb-0 instead of requeueing job 2")
    a = ap.parse_args()
    if why := slurm_unavailable_reason():
        print(f"skipped: {why}", file=sys.stderr)
        return 2
    with Probe.start([Nodeset("pa", 1, weight=1), Nodeset("pb", 1, weight=30)], {"gpu": ["pa", "pb"]}) as p:
        t0 = time.time()

        def show(tag: str) -> None:
            nodes = {n["name"]: n for n in p.h.sinfo_json()["nodes"]}
            js = ", ".join(f"job {i} {j['job_state']} on {j.get('nodes')}" for i, j in sorted(p.jobs().items()))
            ns = ", ".join(
                f"{n} {'+'.join(nodes[n].get('state_flags') or [nodes[n]['state']])}" for n in ("pa-0", "pb-0")
            )
            print(f"t={time.time() - t0:5.1f}s {tag}: {js}; {ns}", flush=True)

        out = p.out
        sb = ("-p", "gpu", "-N1", "--gres=gpu:8")
        j1 = p.sbatch(*sb, "-o", f"{out}/j1.out", "--wrap", "srun sleep 25")
        time.sleep(3)
        p.cloud.boot("pa-0")
        until(lambda: p.jobs().get(j1, {}).get("job_state") == "RUNNING", 60)
        script = "echo batch on $SLURMD_NODENAME; srun hostname; echo srun rc $?"
        j2 = p.sbatch(*sb, "-o", f"{out}/j2.out", "--wrap", script)
        time.sleep(4)
        show("job 2 allocated")
        until(lambda: p.jobs().get(j1, {}).get("job_state") not in ("RUNNING", "COMPLETING"), 60)
        show("job 1 ended")
        if a.control:
            p.cloud.boot("pb-0")
        else:
            r = p.h.run("scontrol", "requeue", str(j2))
            print(f"scontrol requeue {j2}: rc {r.returncode} {r.stderr.strip()}", flush=True)
        until(lambda: p.jobs().get(j2, {}).get("job_state") in ("COMPLETED", "FAILED", None), 120)
        show("job 2 done")
        print((out / "j2.out").read_text() if (out / "j2.out").exists() else "job 2 wrote no output")
        print("\n".join(x for x in p.slurmctld_log() if f"JobId={j2}" in x or "powering" in x))
    return 0


if __name__ == "__main__":
    sys.exit(main())
