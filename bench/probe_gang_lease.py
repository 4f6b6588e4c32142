"""Probe, on a real slurmctld 22.05 (tests/harness), the gang gate's lease (`autoscaler.slurm.gang_gate`): how a gang
the job_submit.lua gated shows while a dependency or a hold keeps slurmctld from trying it, what a lease update
(`CliSlurm.defer_jobs`) does to it, and what slurmctld does with such a gang once it can run, leased or not.

    timeout 600 nice -n 10 .venv/bin/python bench/probe_gang_lease.py [--json]

One CLOUD nodeset `pa` of five 8-GPU nodes; pa-0 is brought up (its slurmd started by hand) and runs job A, a 40 s
job.  Three gangs of two nodes are submitted through the rendered lua: L and U depend on A, H is held (`-H`).  The
probe leases L and H at once as the daemon does (one `defer_jobs` for both, with a job id that does not exist in
the list), reads the three through the daemon's reader (`CliSlurm.jobs`), and once A ended reads them again.  U,
never leased, is what happens without the lease.  The ResumeProgram only logs, so the names slurmctld allocates stay
POWERING_UP.

Measured on this machine (Slurm 22.05.8, one round):
- at submission: L shows reason `Dependency`, ``dependency`` ``afterok:<A>(unfulfilled)``, BeginTime 30 s ahead and
  the mark; H `JobHeldUser`, priority 0.  Both `blocked`, neither `gated`.
- the lease: scontrol exits 1 naming the missing id ("Invalid job id specified") and updates L and H all the same;
  right after it L's reason is None (its dependency still unfulfilled: `blocked`), H's still `JobHeldUser`.
- once A ended: L shows reason `BeginTime`, an empty ``dependency`` and its lease, and reads as `gated` (the daemon
  releases it off pa-0); U, whose lua BeginTime had lapsed, is allocated pa-0 plus a powered-down name at once: the
  up node waits, allocated and idle, for the other's boot.
- U requeued (`scontrol requeue`, as ResumeTimeout or a preemption would), read once PENDING: the lua's mark kept,
  reason None, ``restart_cnt`` 1, a new submission stamp and a BeginTime 30-31 s after it (the harness's
  ``cred_expire=30``), the gate's own delay.  Read as gated before this round's `restarts` rule (checked by
  patching it out: gated True), not since (`gang_gate.gate_time`: the lua's gate is a first run's only).  Then held
  (`scontrol hold`: reason `JobHeldAdmin`, blocked), leased as the daemon does and released: reason `BeginTime`
  behind the lease, read as gated, as any blocked gang."""

from __future__ import annotations

import argparse
import json
import sys
import time

from slurm_probe import Nodeset, Probe, slurm_unavailable_reason, until

from autoscaler.slurm.client import CliSlurm, SlurmUnavailable
from autoscaler.slurm.gang_gate import lease_mark
from autoscaler.slurm.hostlist import expand
from fleet.catalog import CapacityType
from fleet.slurm.job_submit import render_job_submit
from fleet.slurm.weights import PoolShape

LEASE_S = 90  # longer than A: L stays behind its lease while A runs


def _lua(h):  # type: ignore[no-untyped-def]
    shapes = [PoolShape("pa", CapacityType.ON_DEMAND, "a3-highgpu-8g", 8, 11.0)]
    return render_job_submit({"gpu": shapes}, "gpu", wake=True, gate_gangs=True, wake_path=str(h.root / "submit-wake"))


def _read(client: CliSlurm, p: Probe, ids: dict[str, int]) -> dict[str, dict[str, object]]:
    jobs = {j.job_id: j for j in client.jobs()}
    raw = p.jobs()
    out = {}
    for name, jid in ids.items():
        j = jobs[jid]
        out[name] = {
            "reason": j.reason,
            "dependency": j.dependency,
            "priority": raw[jid].get("priority"),
            "admin_comment": j.admin_comment,
            "eligible_in_s": None if j.eligible_time is None else round(j.eligible_time - time.time(), 1),
            "blocked": j.blocked,
            "gated": j.gated,
            "nodes": sorted(expand(str(raw[jid].get("nodes") or ""))),
        }
    return out


def probe() -> dict[str, object]:
    with Probe.start([Nodeset("pa", 5)], {"gpu": ["pa"]}, job_submit_lua=_lua) as p:
        client = CliSlurm(env={"SLURM_CONF": str(p.h.conf_path)})
        p.cloud.boot("pa-0")
        warm = p.sbatch("-p", "gpu", "-N1", "--gres=gpu:8", "-w", "pa-0", "--wrap", "true")
        until(lambda: warm not in p.jobs(), 90)
        a = p.sbatch("-p", "gpu", "-N1", "--gres=gpu:8", "-w", "pa-0", "--wrap", "sleep 40")
        gang = ("-p", "gpu", "-N2", "--gres=gpu:8")
        ids = {
            "L": p.sbatch(*gang, f"--dependency=afterok:{a}", "--wrap", "srun hostname"),
            "U": p.sbatch(*gang, f"--dependency=afterok:{a}", "--wrap", "srun hostname"),
            "H": p.sbatch(*gang, "-H", "--wrap", "srun hostname"),
        }
        out: dict[str, object] = {"at_submission": _read(client, p, ids)}
        until_s = int(time.time()) + LEASE_S
        try:
            client.defer_jobs([ids["L"], ids["H"], 999_999], until_s, lease_mark(until_s))
            out["lease_error"] = None
        except SlurmUnavailable as exc:
            out["lease_error"] = str(exc).rsplit(": ", 1)[-1]
        out["after_lease"] = _read(client, p, ids)
        until(lambda: a not in p.jobs() or p.jobs()[a]["job_state"] == "COMPLETED", 120)
        until(lambda: p.jobs()[ids["U"]].get("nodes"), 30)
        out["once_a_ended"] = _read(client, p, ids)
        p.h.run("scontrol", "requeue", str(ids["U"]), check=True)  # as ResumeTimeout or a preemption would
        until(lambda: next(j for j in client.jobs() if j.job_id == ids["U"]).pending, 30)
        (u,) = [j for j in client.jobs() if j.job_id == ids["U"]]
        out["U_requeued"] = {
            "state": u.state,
            "reason": u.reason,
            "admin_comment": u.admin_comment,
            "eligible_after_submit_s": None if u.eligible_time is None else u.eligible_time - u.submit_time,
            "restarts": u.restarts,
            "gated": u.gated,
        }
        # then held, leased as the daemon does, and released: gated by its lease, as any blocked gang
        p.h.run("scontrol", "hold", str(ids["U"]), check=True)
        (u,) = [j for j in client.jobs() if j.job_id == ids["U"]]
        held = {"reason": u.reason, "blocked": u.blocked}
        until_s = int(time.time()) + LEASE_S
        client.defer_jobs([ids["U"]], until_s, lease_mark(until_s))
        p.h.run("scontrol", "release", str(ids["U"]), check=True)
        until(lambda: next(j for j in client.jobs() if j.job_id == ids["U"]).reason != "None", 10)
        (u,) = [j for j in client.jobs() if j.job_id == ids["U"]]
        out["U_requeued_held_leased_released"] = {"held": held, "reason": u.reason, "gated": u.gated}
        return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    if why := slurm_unavailable_reason():
        print(f"skipped: {why}", file=sys.stderr)
        return 2
    out = probe()
    if a.json:
        print(json.dumps(out, indent=2))
    else:
        for phase, value in out.items():
            if isinstance(value, dict):
                for name, fields in value.items():
                    print(f"{phase:14s} {name}: {fields}")
            else:
                print(f"{phase:14s} {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
