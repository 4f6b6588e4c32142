"""Probe slurmctld 22.05 on topology.conf and multi-pool allocation (figures only, no policy).

    .venv/bin/python bench/probe_gang_topology.py [--layout root,pools,pools-reversed]

The e2e harness (tests/e2e/env.py: real slurmctld, CLOUD nodes, no daemon) with every name powered down; each case
submits 8-GPU batch jobs to one partition over several pools and prints the names slurmctld allocated.  Layouts:
- `root`: one leaf per pool under one root switch (slurm-gcp's shape; the stack's before the twenty-fourth round);
- `pools`: one tree per pool and no root, the pool of the lowest Weight last (what `fleet.slurm.topology` renders);
- `pools-reversed`: the same trees in the opposite order (to see what decides among them).

Measured on this machine (Slurm 22.05.8, 2026-12-05):
- `root`: a 3-node job with pools of 2 (Weight 1000) and 2 (Weight 30000) names got `e2e-o-[0-1],e2e-r-0`: both
  pools.  Single jobs went to the pool leaf with the fewest names whatever the Weights (3 names at Weight 1000
  against 2 at 30000: the 2-name pool).
- `pools`: no job spanned two pools; a job no pool could hold whole was refused at submission ("Requested node
  configuration is not available").  Every job, single or gang, went to the *last* tree in the file that could
  hold it, whatever the Weights, the pools' sizes or the node-table order (three pools at Weights 30000 / 10000 /
  1000 written in that order: singles to the 1000 pool, a 2-node job to the 10000 pool once the last had one name
  left).
- `pools-reversed`: the same rule, the other pool.
So the render writes the trees from the highest Weight to the lowest and slurmctld powers up by Weight.

Needs root and Slurm (scripts/setup.sh); exits 0 with a note otherwise.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Mapping
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import tests.e2e.env as e2e_env_module
from fleet.slurm.topology import render_topology
from tests.e2e.env import pool, standalone_e2e, standalone_unavailable_reason
from tests.harness.cloud_nodes import Nodeset

LAYOUTS = ("root", "pools", "pools-reversed")


def _root(pools: Mapping[str, str], placed: Mapping[str, str], weights: Mapping[str, int] | None = None) -> str:
    leaves = [f"SwitchName=pool-{p} Nodes={h}" for p, h in sorted(pools.items())]
    return "\n".join([*leaves, f"SwitchName=root Switches={','.join(f'pool-{p}' for p in sorted(pools))}", ""])


def _reversed(pools: Mapping[str, str], placed: Mapping[str, str], weights: Mapping[str, int] | None = None) -> str:
    w = weights or {}
    return render_topology(pools, placed, {p: -w.get(p, 0) for p in pools})


CASES: list[tuple[str, list[Nodeset], list[int]]] = [
    ("pools of 2 (Weight 1000) and 3 (30000): a 3-node job", [Nodeset("e2e-r", 2, weight=1000),
                                                               Nodeset("e2e-o", 3, weight=30000)], [3]),
    ("pools of 2 (1000) and 2 (30000): a 3-node job", [Nodeset("e2e-r", 2, weight=1000),
                                                       Nodeset("e2e-o", 2, weight=30000)], [3]),
    ("pools of 3 (1000) and 2 (30000): a single job", [Nodeset("e2e-r", 3, weight=1000),
                                                       Nodeset("e2e-o", 2, weight=30000)], [1]),
    ("pools of 3 (30000) and 2 (1000): a single job, a 2-node job", [Nodeset("e2e-r", 3, weight=30000),
                                                                     Nodeset("e2e-o", 2, weight=1000)], [1, 2]),
    ("pools of 3 at 30000, 10000, 1000: two singles, a 2-node job", [Nodeset("e2e-a", 3, weight=30000),
                                                                     Nodeset("e2e-b", 3, weight=10000),
                                                                     Nodeset("e2e-c", 3, weight=1000)], [1, 1, 2]),
]  # fmt: skip


def run(layout: str) -> None:
    e2e_env_module.render_topology = {"root": _root, "pools": render_topology, "pools-reversed": _reversed}[layout]
    for label, sets, jobs in CASES:
        with standalone_e2e(
            suspend_time=600,
            resume_timeout=600,
            pools=[pool("od", "on-demand", "gpu", False, max_nodes=8)],
            nodesets=sets,
            partitions={"gpu": [s.prefix for s in sets]},
            topology=True,
        ) as env:
            got = []
            for n in jobs:
                p = env.slurm.run("sbatch", "--parsable", "-p", "gpu", "-N", str(n), "--gres=gpu:8", "-o", "/dev/null",
                                  "--wrap", "sleep 600")  # fmt: skip
                if p.returncode != 0:
                    got.append(f"{n} nodes: refused ({p.stderr.strip()})")
                    continue
                job = int(p.stdout.strip().split(";")[0])
                time.sleep(3)
                nodes = next(j.get("nodes") for j in env.slurm.squeue_json()["jobs"] if j["job_id"] == job)
                got.append(f"{n} nodes: {nodes or 'pending'}")
            print(f"{layout:15s} {label}: {'; '.join(got)}", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layout", default=",".join(LAYOUTS), help=f"comma-separated: {', '.join(LAYOUTS)}")
    args = ap.parse_args()
    layouts = [x for x in args.layout.split(",") if x]
    bad = [x for x in layouts if x not in LAYOUTS]
    if bad:
        ap.error(f"--layout: unknown {', '.join(bad)} (known: {', '.join(LAYOUTS)})")
    reason = standalone_unavailable_reason()
    if reason:
        print(f"probe_gang_topology: skipped: {reason}")
        return 0
    for layout in layouts:
        run(layout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
