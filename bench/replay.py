"""Full-trace replay benchmark: ITP cluster04 (60 days, 15.8k jobs) through every policy (exact-fit
included), in the two scenarios of the issue, with wall time and the targets checked.

    .venv/bin/python bench/replay.py [--trace PATH] [--seeds 0] [--json]

Needs the trace (default /work/shared/data/traces/itp/cluster04.csv); exits 0 with a message when it is
absent.  Prints one line per policy and scenario, then PASS/FAIL per target:
  defaults: gpu-fleet cost_ratio <= 1.02, lowest cost, wait_p95 <= best autoscaling baseline, no partial gangs;
  --reserved-nodes 100 --spot-fraction 0.3 --stockout-rate 0.2: lowest cost, cost_ratio <= 1.10, same wait rule;
  each whole `--policy all` replay < 120 s.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from autoscaler.replay.run import run_scenario
from autoscaler.replay.scenario import Scenario
from autoscaler.replay.trace import load_trace

DEFAULT_TRACE = Path("/work/shared/data/traces/itp/cluster04.csv")
AUTOSCALERS = ("slurm-power-save", "ca-like", "karpenter-like")
SCENARIOS = {
    "defaults": {},
    "reserved100-spot0.3-stockout0.2": {"reserved_nodes": 100, "spot_fraction": 0.3, "stockout_rate": 0.2},
}


def check(name: str, metrics: dict, wall_s: float) -> list[tuple[str, bool]]:
    g = metrics["gpu-fleet"]
    best_wait = min(metrics[n]["wait_p95_s"] for n in AUTOSCALERS)
    lowest = all(g["cost_usd"] <= m["cost_usd"] for n, m in metrics.items() if n != "gpu-fleet")
    out = [
        ("gpu-fleet lowest cost", lowest),
        ("gpu-fleet wait_p95 <= best autoscaling baseline", g["wait_p95_s"] <= best_wait),
        ("whole replay < 120 s", wall_s < 120),
    ]
    if name == "defaults":
        out += [
            ("cost_ratio <= 1.02", g["cost_ratio"] <= 1.02),
            ("partial gangs = 0", g["partial_gang_gpu_hours"] == 0),
        ]
    else:
        out += [("cost_ratio <= 1.10", g["cost_ratio"] <= 1.10)]
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    ap.add_argument("--seeds", default="0", help="comma-separated seeds (default 0)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if not args.trace.is_file():
        print(f"skip: trace {args.trace} not found (the ITP traces live in ../shared/data/traces/itp/)")
        return 0
    jobs = load_trace(args.trace)
    results = []
    failed = False
    for seed in (int(s) for s in args.seeds.split(",")):
        for name, kw in SCENARIOS.items():
            t0 = time.perf_counter()
            res = run_scenario(jobs, Scenario(trace=str(args.trace), seed=seed, **kw))
            wall = time.perf_counter() - t0
            checks = check(name, res.metrics, wall)
            failed |= not all(ok for _, ok in checks)
            results.append(
                {"scenario": name, "seed": seed, "wall_s": round(wall, 1), **res.as_json(), "checks": checks}
            )
            if not args.json:
                print(f"== {name} seed={seed}: {len(jobs):,} jobs, lower bound ${res.bound.usd:,.0f}, {wall:.1f} s")
                for n, m in res.metrics.items():
                    print(
                        f"  {n:17s} ${m['cost_usd']:>14,.0f}  x{m['cost_ratio']:.4f}  p50 {m['wait_p50_s']:>5.0f}s"
                        f"  p95 {m['wait_p95_s']:>5.0f}s  max {m['wait_max_s']:>6.0f}s"
                        f"  partial-gang {m['partial_gang_gpu_hours']:>6.1f} GPU-h  ({m['replay_wall_s']:.1f} s)"
                    )
                for label, ok in checks:
                    print(f"  {'PASS' if ok else 'FAIL'}  {label}")
    if args.json:
        print(json.dumps(results, indent=2))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
