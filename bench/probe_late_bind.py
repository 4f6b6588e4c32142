"""Probe, on a real slurmctld 22.05 (tests/harness), whether a powered-down CLOUD node can boot while drained and
whether a pending job then takes whichever node is ready first: Kubernetes' late binding, done with a drain.

    timeout 400 nice -n 10 .venv/bin/python bench/probe_late_bind.py

Two CLOUD nodesets in one partition: `pa` (Weight 1) and `pb` (Weight 30), one 8-GPU node each.  Job 1 runs 25 s
on pa-0 (its slurmd started by hand: the "boot").  pb-0 is drained while powered down (the hold), then
`scontrol update state=power_up` is run on it.  Job 2 is submitted: nothing is allocatable (pa-0 busy, pb-0
drained), so it stays PENDING.  When job 1 ends, job 2 should get pa-0, and pb-0, booted by hand, should come up
IDLE+DRAIN with no job.  Then job 3 is submitted (PENDING: pa-0 busy, pb-0 drained) and pb-0 is undrained: job 3
should run there.  Each batch script runs one `srun` step (the step that fails after a requeue of a CONFIGURING
job, bench/probe_requeue_configuring.py).

Measured on this machine (Slurm 22.05.8): `state=power_up` on the drained powered-down node is accepted (rc 0),
slurmctld logs "powering up node pb-0" and shows it DRAIN+POWERING_UP; job 2 stays PENDING (Resources) meanwhile,
takes pa-0 about 1 s after job 1 ends and runs its `srun` step (rc 0); pb-0 then registers as IDLE+DRAIN with no
job.  (Job 3 found pa-0 free and ran there, so the undrain step shows nothing this probe did not already know from
tests/e2e/test_hold.py: an undrained node takes pending work.)  The mechanism works; what it costs is in
docs/simulate.md, "Late binding"."""

from __future__ import annotations

import sys
import time

from slurm_probe import Nodeset, Probe, slurm_unavailable_reason, until


def main() -> int:
    if why := slurm_unavailable_reason():
        print(f"skipped: {why}", file=sys.stderr)
        return 2
    with Probe.start([Nodeset("pa", 1, weight=1), Nodeset("pb", 1, weight=30)], {"gpu": ["pa", "pb"]}) as p:
        t0 = time.time()
        h, jobs = p.h, p.jobs

        def show(tag: str) -> None:
            nodes = {n["name"]: n for n in h.sinfo_json()["nodes"]}
            js = ", ".join(
                f"job {i} {j['job_state']} ({j.get('state_reason')}) on {j.get('nodes')!r}"
                for i, j in sorted(jobs().items())
            )
            ns = ", ".join(
                f"{n} {'+'.join(nodes[n].get('state_flags') or [])}/{nodes[n]['state']}" for n in ("pa-0", "pb-0")
            )
            print(f"t={time.time() - t0:5.1f}s {tag}: {js}; {ns}", flush=True)

        out = p.out
        script = "echo batch on $SLURMD_NODENAME; srun hostname; echo srun rc $?"
        sb = ("-p", "gpu", "-N1", "--gres=gpu:8")
        j1 = p.sbatch(*sb, "-o", f"{out}/j1.out", "--wrap", "srun sleep 25")
        time.sleep(3)
        p.cloud.boot("pa-0")
        until(lambda: jobs().get(j1, {}).get("job_state") == "RUNNING", 60)
        show("job 1 running")
        r = h.run("scontrol", "update", "nodename=pb-0", "state=drain", "reason=gpu-fleet:hold")
        print(f"drain pb-0: rc {r.returncode} {r.stderr.strip()}", flush=True)
        r = h.run("scontrol", "update", "nodename=pb-0", "state=power_up")
        print(f"power_up pb-0: rc {r.returncode} {r.stderr.strip()}", flush=True)
        time.sleep(2)
        show("pb-0 powered up while drained")
        j2 = p.sbatch(*sb, "-o", f"{out}/j2.out", "--wrap", script)
        time.sleep(4)
        show("job 2 submitted")
        until(lambda: jobs().get(j2, {}).get("job_state") in ("RUNNING", "COMPLETED"), 60)
        show("job 1 ended")
        p.cloud.boot("pb-0")
        until(lambda: "IDLE" in str(next(n for n in h.sinfo_json()["nodes"] if n["name"] == "pb-0")["state"]), 60)
        time.sleep(3)
        show("pb-0 booted")
        j3 = p.sbatch(*sb, "-o", f"{out}/j3.out", "--wrap", script)
        time.sleep(4)
        show("job 3 submitted")
        r = h.run("scontrol", "update", "nodename=pb-0", "state=undrain")
        print(f"undrain pb-0: rc {r.returncode} {r.stderr.strip()}", flush=True)
        until(lambda: all(jobs().get(j, {}).get("job_state") in ("COMPLETED", "FAILED", None) for j in (j2, j3)), 90)
        show("jobs 2 and 3 done")
        for j in ("j2", "j3"):
            f = out / f"{j}.out"
            print(f"{j}: " + (f.read_text().strip().replace("\n", " | ") if f.exists() else "no output"))
        log = p.slurmctld_log()
        print("\n".join(x for x in log if "pb-0" in x and ("power" in x.lower() or "resume" in x.lower()))[-3000:])
    return 0


if __name__ == "__main__":
    sys.exit(main())
