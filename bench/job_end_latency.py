"""How soon after a job ends the daemon deletes its freed node, on a real slurmctld (the EpilogSlurmctld wake-up).

    .venv/bin/python bench/job_end_latency.py [--rounds 2] [--node-epilog 0,3] [--json]

The e2e setup of tests/e2e (real slurmctld 22.05, one real slurmd per "instance" of the fake Compute API, the
daemon in this process, `policy.idle_timeout_s: 0`, poll every 120 s so only the 1 s watcher starts ticks after
the first) with slurm.conf's EpilogSlurmctld = deploy/slurm/epilog_slurmctld.sh.  Each round runs 4 one-node
jobs of different lengths (2, 5, 8, 11 s) on 4 nodes; for each job: hook time (the wake-up row's `at`: slurmctld
runs EpilogSlurmctld as the job turns COMPLETING, ~0.03 s after its end), the deleteInstances request for its
node, and the ticks in between.  `--node-epilog S,...`: a compute-node Epilog of S seconds (the node stays
COMPLETING that long after the hook).  Prints per setting the median / mean / max hook -> delete latency: the
figure the replay's gpu-fleet driver uses for its job-end tick (`autoscaler/replay/gpu_fleet.py`
JOB_END_LATENCY_S).  Needs root and Slurm (scripts/setup.sh); exits 0 with a note otherwise.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.e2e.env import epilog_slurmctld_hook, pool, standalone_e2e, standalone_unavailable_reason, wait_for
from tests.harness.cloud_nodes import Nodeset
from tests.harness.slurm import SlurmHarness

POLL_S = 120
DURATIONS = (2, 5, 8, 11)


def run_setting(node_epilog_s: float, rounds: int) -> list[dict[str, Any]]:
    def lines(h: SlurmHarness, state: Path) -> list[str]:
        out = [f"EpilogSlurmctld={epilog_slurmctld_hook(h.root / 'bin', state)}"]
        if node_epilog_s:
            script = h.root / "bin" / "node-epilog.sh"
            script.write_text(f"#!/bin/sh\nsleep {node_epilog_s}\n")
            script.chmod(0o755)
            out.append(f"Epilog={script}")
        return out

    samples: list[dict[str, Any]] = []
    with standalone_e2e(
        suspend_time=600,
        pools=[pool("od", "on-demand", "gpu", False)],
        nodesets=[Nodeset("e2e-od", 4)],
        partitions={"gpu": ["e2e-od"]},
        policy={"idle_timeout_s": 0, "backoff_s": 120},
        slurm_lines=lines,
        interval_s=POLL_S,
    ) as env:
        env.start_daemon()
        for _ in range(rounds):
            out = f"{env.root}/log/job-%j.out"
            jobs = [
                env.sbatch("-p", "gpu", "-N", "1", "--gres=gpu:8", "-o", out, "--wrap", f"srun sleep {d}")
                for d in DURATIONS
            ]
            wait_for(lambda js=set(jobs): not env.squeue_ids() & js, 180, "the jobs to finish", env)
            wait_for(lambda: not env.fake.instance_names(), 60, "the freed instances to be deleted", env)
            assert env.daemon is not None
            rows = {
                r["job_id"]: r
                for r in map(dict, env.daemon.store.conn.execute("SELECT * FROM job_end_wakes"))
                if r["job_id"] in jobs
            }
            deletes = env.fake.events_of("delete-requested")
            for j in jobs:
                row = rows[j]
                (name,) = json.loads(row["names"])
                d = min((e.at for e in deletes if e.name == name and e.at >= row["at"]), default=None)
                ticks = [t for t in env.ticks if row["at"] <= t.at <= (d or row["at"])]
                samples.append(
                    {
                        "job": j,
                        "node": name,
                        "hook_to_delete_s": None if d is None else round(d - row["at"], 3),
                        "ticks": len(ticks),
                    }
                )
            wait_for(
                lambda: all("POWERED_DOWN" in env.sinfo()[n]["state_flags"] for n in Nodeset("e2e-od", 4).names),
                60,
                "the names to be powered down again",
                env,
            )
    return samples


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--node-epilog", default="0,3", help="compute-node Epilog durations (s), comma-separated")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    reason = standalone_unavailable_reason()
    if reason:
        print(f"skip: {reason}")
        return 0
    report: dict[str, Any] = {}
    for s in (float(x) for x in a.node_epilog.split(",") if x.strip()):
        samples = run_setting(s, a.rounds)
        lat = [x["hook_to_delete_s"] for x in samples if x["hook_to_delete_s"] is not None]
        report[f"node_epilog_{s:g}s"] = {
            "samples": samples,
            "median_s": round(statistics.median(lat), 2) if lat else None,
            "mean_s": round(statistics.fmean(lat), 2) if lat else None,
            "max_s": max(lat) if lat else None,
            "missed": sum(1 for x in samples if x["hook_to_delete_s"] is None),
        }
    if a.json:
        print(json.dumps(report, indent=2))
    else:
        for k, v in report.items():
            print(
                f"{k}: hook -> delete median {v['median_s']} s, mean {v['mean_s']} s, max {v['max_s']} s over "
                f"{len(v['samples'])} job ends ({v['missed']} not deleted after the hook); "
                f"ticks per job end {[x['ticks'] for x in v['samples']]}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
