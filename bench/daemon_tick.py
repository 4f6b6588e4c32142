"""Daemon tick time and RSS with N pending Slurm jobs (default 1,000).

    .venv/bin/python bench/daemon_tick.py [--jobs 1000] [--nodes 256] [--ticks 10] [--json]

One in-process daemon over: canned `squeue --json` / `sinfo --json` in Slurm 22.05's shape (parsed every
tick through the real CLI client, so JSON decoding counts), an in-memory cloud (tests/daemon/fakes.py) holding
the live nodes, a file-backed SQLite state store with 64 queued resume requests, and the real planner.
Pending jobs: 1-8 GPUs on one node or 2-8-node gangs of 8 GPUs, across a spot and an on-demand partition.
`--blocked N` adds N gangs the job_submit.lua gated that wait on a dependency, their gate lapsing: every tick
leases them all (one `scontrol update` for the list; the canned squeue never shows the lease, so each tick does).
`--array-tasks N` adds one pending job array of N 1-GPU tasks in one record (`autoscaler.slurm.job_array`): as many
work units as the pools could run at once (8,192 one-GPU tasks on 1,024 8-GPU nodes).
Prints the median / max tick seconds and the process RSS (current and peak).  `--with-gce-imports` also loads
what the real daemon process holds: the GCE actuator's Compute clients (`ComputeApi`, only the five services it
calls: autoscaler/gce/compute_lite.py), apscheduler and the CLI; `--compute-full` imports all of
`google.cloud.compute_v1` first, for comparison.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from autoscaler.cloud import CloudNode, CloudNodeStatus, Offering
from autoscaler.daemon.config import LoopConfig
from autoscaler.daemon.logs import setup_logging
from autoscaler.daemon.state import StateStore
from autoscaler.daemon.tick import Daemon
from autoscaler.model import Policy, Pool
from autoscaler.slurm.client import CliSlurm
from autoscaler.slurm.gang_gate import GANG_GATE_MARK
from fleet.catalog import CapacityType
from tests.daemon.fakes import FakeCloud, offering

ZONES = ("us-central1-a", "us-central1-b", "us-central1-c")


def pools(n: int) -> list[Pool]:
    common = {"machine_type": "a3-highgpu-8g", "gpu_type": "nvidia-h100-80gb", "gpus_per_node": 8, "zones": ZONES}
    return [
        Pool(name="od", capacity_type=CapacityType.ON_DEMAND, max_nodes=n, node_name_prefix="b-od",
             queues=frozenset({"gpu"}), **common),
        Pool(name="spot", capacity_type=CapacityType.SPOT, max_nodes=n, node_name_prefix="b-spot",
             queues=frozenset({"spot"}), spot_tolerant=True, **common),
    ]  # fmt: skip


def squeue(jobs: int, rng: random.Random, t0: float, blocked: int = 0, array_tasks: int = 0) -> dict:
    out = [
        {
            "job_id": 100_000 + i, "name": f"dep{i}", "job_state": "PENDING", "state_reason": "Dependency",
            "dependency": f"afterok:{1000 + i}(unfulfilled)", "admin_comment": GANG_GATE_MARK,
            "partition": "gpu", "node_count": 2, "tres_per_node": "gres:gpu:8", "priority": 1,
            "submit_time": int(t0) - 25, "eligible_time": int(t0) + 5, "features": "", "nodes": "", "flags": [],
        }
        for i in range(blocked)
    ]  # fmt: skip
    for i in range(jobs):
        gang = rng.random() < 0.15
        nodes, gpus = (rng.randint(2, 8), 8) if gang else (1, rng.choice([1, 2, 4, 8]))
        out.append(
            {
                "job_id": 1000 + i,
                "name": f"j{i}",
                "job_state": "PENDING",
                "state_reason": rng.choice(["Resources", "Priority", "PartitionNodeLimit"]),
                "partition": rng.choice(["gpu", "spot"]),
                "node_count": nodes,
                "tres_per_node": f"gres:gpu:{gpus}",
                "priority": rng.randint(1, 10_000),
                "time_limit": rng.choice([None, 60, 240, 1440]),
                "submit_time": int(t0 - rng.uniform(0, 3600)),
                "features": "",
                "nodes": "",
                "flags": [],
            }
        )
    if array_tasks:  # one pending array's record, as slurmctld lists it: every task in `array_task_string`
        out.append(
            {
                "job_id": 900_000, "array_job_id": 900_000, "array_task_id": None, "name": "sweep",
                "array_task_string": f"0-{array_tasks - 1}", "array_max_tasks": 0, "job_state": "PENDING",
                "state_reason": "Resources", "partition": "gpu", "node_count": 1, "tres_per_node": "gres:gpu:1",
                "priority": 1, "submit_time": int(t0) - 60, "features": "", "nodes": "", "flags": [],
            }
        )  # fmt: skip
    return {"meta": {"Slurm": {"release": "22.05.8"}}, "errors": [], "jobs": out}


def sinfo(n: int, busy: int) -> dict:
    nodes = []
    for prefix, part in (("b-od", "gpu"), ("b-spot", "spot")):
        for i in range(n):
            up = i < busy
            nodes.append(
                {
                    "name": f"{prefix}-{i}",
                    "state": "allocated" if up else "idle",
                    "state_flags": ["CLOUD"] if up else ["CLOUD", "POWERED_DOWN"],
                    "gres": "gpu:8",
                    "gres_used": "gpu:8" if up else "gpu:0",
                    "partitions": [part],
                    "features": "a3,h100",
                    "alloc_cpus": 8 if up else 0,
                    "reason": "",
                }
            )
    return {"meta": {}, "errors": [], "nodes": nodes}


def rss_mib() -> tuple[float, float]:
    cur = 0.0
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            cur = int(line.split()[1]) / 1024
    return cur, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--nodes", type=int, default=1024, help="CLOUD nodes per pool (two pools)")
    ap.add_argument("--busy", type=int, default=128, help="nodes per pool up and running a job")
    ap.add_argument("--ticks", type=int, default=10)
    ap.add_argument("--blocked", type=int, default=0, help="gated gangs waiting on a dependency (leased each tick)")
    ap.add_argument("--array-tasks", type=int, default=0, help="tasks of one pending job array of 1-GPU tasks")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", action="store_true")
    ap.add_argument(
        "--with-gce-imports",
        action="store_true",
        help="also load the GCE actuator's Compute clients (ComputeApi, as the real daemon does), for its RSS",
    )
    ap.add_argument(
        "--compute-full",
        action="store_true",
        help="with --with-gce-imports: import all of google.cloud.compute_v1 first (the old way), for comparison",
    )
    a = ap.parse_args()
    compute_api = None
    if a.with_gce_imports:
        if a.compute_full:
            import google.cloud.compute_v1  # noqa: F401
        import autoscaler.daemon.loop  # noqa: F401  (apscheduler: what `fleet autoscaler run` imports too)
        import fleet.cli.daemon  # noqa: F401  (typer)
        from autoscaler.gce.client import ComputeApi

        compute_api = ComputeApi(endpoint="http://127.0.0.1:1", credentials="anonymous")  # clients built, no call
    setup_logging(level="ERROR")
    rng = random.Random(a.seed)
    t0 = time.time()
    canned = {
        "squeue": json.dumps(squeue(a.jobs, rng, t0, a.blocked, a.array_tasks)),
        "sinfo": json.dumps(sinfo(a.nodes, a.busy)),
        "scontrol": "",
    }

    def runner(argv: list[str], **_: object) -> subprocess.CompletedProcess:
        return subprocess.CompletedProcess(argv, 0, canned[Path(argv[0]).name], "")

    cloud = FakeCloud(
        offers=[Offering(offering(z, ct), p, "nvidia-h100-80gb", 8) for z in ZONES
                for ct, p in ((CapacityType.ON_DEMAND, 88.49), (CapacityType.SPOT, 50.61))]
    )  # fmt: skip
    for prefix, pool, ct in (("b-od", "od", CapacityType.ON_DEMAND), ("b-spot", "spot", CapacityType.SPOT)):
        for i in range(a.busy):
            name = f"{prefix}-{i}"
            cloud.nodes_[name] = CloudNode(name, pool, offering(ZONES[i % 3], ct), CloudNodeStatus.RUNNING, t0)
    with tempfile.TemporaryDirectory() as tmp:
        store = StateStore(Path(tmp) / "state.db")
        for i in range(a.busy):  # the daemon's own records of the running nodes
            for prefix, pool in (("b-od", "od"), ("b-spot", "spot")):
                n = cloud.nodes_[f"{prefix}-{i}"]
                store.record_intent(f"r-{n.name}", pool, {"provider": "gcp", "zone": n.offering.zone,
                                    "machine_type": "a3-highgpu-8g", "capacity_type": str(n.offering.capacity_type),
                                    "reservation": None}, [n.name], t0)  # fmt: skip
                store.set_request_state(f"r-{n.name}", "launched", t0)
        d = Daemon(
            pools=pools(a.nodes),
            provider=cloud,
            slurm=CliSlurm(runner=runner),
            store=store,
            policy=Policy(idle_timeout_s=600),
            loop=LoopConfig(),
        )
        times, leased = [], []
        for k in range(a.ticks):
            # 64 resume requests arrive before every tick (Slurm allocated powered-down nodes)
            first = a.busy + (k * 64) % max(64, a.nodes - a.busy - 64)
            names = [f"b-spot-{first + j}" for j in range(64)]
            store.enqueue_power("resume", names, time.time(), {})
            res = d.tick()
            assert res.ok, res.error
            times.append(res.duration_s)
            leased.append(sum(len(c["job_ids"]) for c in res.commands if c["command"] == "scontrol-gang-lease"))
        cur, peak = rss_mib()
        out = {
            "jobs": a.jobs,
            "gce_imports": a.with_gce_imports,
            "compute_full": a.compute_full,
            "compute_clients": sorted(
                k for k, v in vars(compute_api).items() if k.islower() and "Client" in type(v).__name__
            )
            if compute_api
            else [],
            "pending_units_seen": res.pending_units,
            "blocked_gangs": a.blocked,
            "array_tasks": a.array_tasks,
            "leased_per_tick_median": statistics.median(leased),
            "cloud_nodes": len(cloud.nodes_),
            "ticks": a.ticks,
            "tick_seconds_median": round(statistics.median(times), 4),
            "tick_seconds_max": round(max(times), 4),
            "rss_mib": round(cur, 1),
            "rss_peak_mib": round(peak, 1),
        }
        d.lock.release()
        store.close()
    print(json.dumps(out) if a.json else "\n".join(f"{k:>22}: {v}" for k, v in out.items()))


if __name__ == "__main__":
    main()
