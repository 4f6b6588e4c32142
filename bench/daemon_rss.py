"""RSS of the real daemon process (`fleet autoscaler run --once`) with N pending Slurm jobs (default 1,000).

    .venv/bin/python bench/daemon_rss.py [--jobs 1000] [--nodes 64] [--json]

Runs the `fleet` CLI as a child process, exactly as systemd would, against: canned `squeue --json` /
`sinfo --json` in Slurm 22.05's shape behind stand-in squeue/sinfo/scontrol programs (`slurm.bin_dir`), the
local fake Compute REST server (tests/fakes) serving the pools' MIGs, and a fresh state store.  The real
GceProvider builds its Compute clients and calls listManagedInstances / regions.get / reservations over HTTP.
Reports the child's peak RSS (its own VmHWM, written at exit: ru_maxrss of a child would also count the RSS of
the process that forked it) and the tick result.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import yaml  # noqa: E402

from tests.e2e.env import PROJECT, inventory  # noqa: E402
from tests.fakes.compute_api import FakeCompute  # noqa: E402

# `fleet ...` in this child, which writes its own peak RSS (VmHWM) to stderr at exit
CHILD = (
    "import atexit, sys\n"
    "def hwm():\n"
    "    line = next(x for x in open('/proc/self/status') if x.startswith('VmHWM:'))\n"
    "    sys.stderr.write(line)\n"
    "atexit.register(hwm)\n"
    "from fleet.cli.main import app\n"
    "sys.argv[0] = 'fleet'\n"
    "app()\n"
)


def squeue(jobs: int, rng: random.Random, t0: float) -> dict:
    out = []
    for i in range(jobs):
        gang = rng.random() < 0.15
        nodes, gpus = (rng.randint(2, 4), 8) if gang else (1, rng.choice([1, 2, 4, 8]))
        out.append({
            "job_id": 1000 + i, "name": f"j{i}", "job_state": "PENDING",
            "state_reason": rng.choice(["Resources", "Priority"]), "partition": rng.choice(["gpu", "spot"]),
            "node_count": nodes, "tres_per_node": f"gres:gpu:{gpus}", "priority": rng.randint(1, 10_000),
            "time_limit": 60, "submit_time": int(t0 - rng.uniform(0, 3600)), "features": "", "nodes": "",
            "flags": [],
        })  # fmt: skip
    return {"meta": {"Slurm": {"release": "22.05.8"}}, "errors": [], "jobs": out}


def sinfo(pools: list) -> dict:
    nodes = []
    for p in pools:
        for i in range(p.max_nodes):
            nodes.append({
                "name": f"{p.node_name_prefix}-{i}", "state": "idle", "state_flags": ["CLOUD", "POWERED_DOWN"],
                "gres": "gpu:8", "gres_used": "gpu:0", "partitions": p.slurm_partitions, "features": "",
                "alloc_cpus": 0, "reason": "",
            })  # fmt: skip
    return {"meta": {}, "errors": [], "nodes": nodes}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    pools = inventory()
    rng = random.Random(1)
    with tempfile.TemporaryDirectory() as tmp, FakeCompute(PROJECT) as fake:
        d = Path(tmp)
        fake.add_inventory(pools)
        (d / "squeue.json").write_text(json.dumps(squeue(a.jobs, rng, time.time())))
        (d / "sinfo.json").write_text(json.dumps(sinfo(pools)))
        bin_dir = d / "bin"
        bin_dir.mkdir()
        for prog, body in (("squeue", f"cat {d}/squeue.json"), ("sinfo", f"cat {d}/sinfo.json"), ("scontrol", "true")):
            (bin_dir / prog).write_text(f"#!/bin/sh\n{body}\n")
            (bin_dir / prog).chmod(0o755)
        (d / "inv.json").write_text(json.dumps([p.model_dump(mode="json") for p in pools]))
        cfg = {
            "inventory": "inv.json",
            "state_path": "state.db",
            "slurm": {"bin_dir": str(bin_dir), "timeout_s": 10},
            "provider": {"endpoint": fake.url, "anonymous": True},
            "metrics": {"enabled": False},
        }
        (d / "a.yaml").write_text(yaml.safe_dump(cfg))
        t0 = time.perf_counter()
        cp = subprocess.run(
            [sys.executable, "-c", CHILD, "autoscaler", "run", "--config", str(d / "a.yaml"),
             "--once", "--log-json", "--log-level", "ERROR"],
            capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        wall = time.perf_counter() - t0
    hwm = [x for x in cp.stderr.splitlines() if x.startswith("VmHWM:")]
    if cp.returncode != 0 or not hwm:
        sys.exit(f"daemon failed (exit {cp.returncode}): {cp.stderr[-2000:]}")
    peak = int(hwm[-1].split()[1]) / 1024
    res = json.loads(cp.stdout)
    out = {
        "jobs": a.jobs,
        "pending_units_seen": res["pending_units"],
        "tick_ok": res["ok"],
        "process_wall_s": round(wall, 2),
        "rss_peak_mib": round(peak, 1),
        "rss_peak_mb": round(peak * 1.048576, 1),
    }
    print(json.dumps(out) if a.json else "\n".join(f"{k:>20}: {v}" for k, v in out.items()))


if __name__ == "__main__":
    main()
