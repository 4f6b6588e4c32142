"""How much of gpu-fleet's gap to exact-fit is the hooks' latency: exact-fit replayed as the floor (launch at the
submission, delete at the job's end) and as a daemon on Slurm would run it (the launch when the simulated Slurm
calls ResumeProgram, `SlurmSettings.resume_batch_s` after the allocation; the delete when the EpilogSlurmctld
wake-up reaches the daemon, `gpu_fleet.JOB_END_LATENCY_S` after the end, measured by bench/job_end_latency.py).

    nice -n 10 .venv/bin/python bench/exact_fit_latency.py                 # every ITP cluster, defaults
    nice -n 10 .venv/bin/python bench/exact_fit_latency.py --traces 01,07 --regimes short

A what-if, not a verdict: bench/autoscaler_claims.py keeps scoring gpu-fleet against the floor (the issue's
"never more than exact-fit").  Same jobs, same cloud, same bound for all three replays of a trace."""

from __future__ import annotations

import argparse
import json
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

ITP_DIR = ROOT.parent / "shared" / "data" / "traces" / "itp"
KEYS = ("cost_usd", "cost_ratio", "wait_p50_s", "wait_p95_s")


def _one(trace: str) -> dict[str, Any]:
    from autoscaler.replay.baselines.exact_fit import ExactFitPolicy
    from autoscaler.replay.gpu_fleet import JOB_END_LATENCY_S
    from autoscaler.replay.lower_bound import lower_bound
    from autoscaler.replay.metrics import policy_metrics
    from autoscaler.replay.run import gpu_fleet_policy, replay_engine
    from autoscaler.replay.scenario import Scenario
    from autoscaler.replay.synth import load_source
    from autoscaler.replay.trace import mark_spot_tolerant

    _, jobs = load_source(trace)  # synth:REGIME[:SEED] with its seed (the seed was dropped before)
    scenario = Scenario(trace=trace)
    marked = mark_spot_tolerant(list(jobs), scenario.spot_fraction, scenario.seed)
    bound = lower_bound(marked, scenario)
    fleet = gpu_fleet_policy(scenario, None, marked)
    resume_s = fleet.slurm_settings(scenario).resume_batch_s  # the simulated Slurm gpu-fleet runs on
    policies = {
        "gpu-fleet": fleet,
        "exact-fit": ExactFitPolicy(),
        "exact-fit+hooks": ExactFitPolicy(launch_delay_s=resume_s, delete_delay_s=JOB_END_LATENCY_S),
    }
    out: dict[str, Any] = {"trace": trace, "launch_delay_s": resume_s, "delete_delay_s": JOB_END_LATENCY_S}
    for name, policy in policies.items():
        m = policy_metrics(replay_engine(marked, scenario, policy).run(), bound)
        out[name] = {k: m[k] for k in KEYS}
    return out


def _traces(args: argparse.Namespace) -> list[str]:
    out = [str(ITP_DIR / f"cluster{c.strip().zfill(2)}.csv") for c in args.traces.split(",") if c.strip()]
    out += [f"synth:{r.strip()}" for r in args.regimes.split(",") if r.strip()]
    missing = [t for t in out if not t.startswith("synth:") and not Path(t).exists()]
    if missing:
        raise SystemExit(f"--traces: {missing[0]} does not exist (the ITP traces live in ../shared/data)")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--traces", default=",".join(f"{i:02d}" for i in range(1, 11)), help="ITP clusters, e.g. 01,07")
    ap.add_argument("--regimes", default="", help="generated regimes, e.g. short,diurnal")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--json", action="store_true", help="print JSON instead of the table")
    args = ap.parse_args()
    with ProcessPoolExecutor(max_workers=max(1, args.workers)) as pool:
        rows = list(pool.map(_one, _traces(args)))
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    head = "| trace | gpu-fleet $ - exact-fit $ | gpu-fleet $ - exact-fit+hooks $ | p50 / p95 s: gpu-fleet |"
    print(head + " exact-fit | exact-fit+hooks |")
    print("| --- | ---: | ---: | --- | --- | --- |")
    for r in rows:
        g, e, h = r["gpu-fleet"], r["exact-fit"], r["exact-fit+hooks"]
        name = Path(r["trace"]).stem if not r["trace"].startswith("synth:") else r["trace"]
        waits = " | ".join(f"{m['wait_p50_s']:g} / {m['wait_p95_s']:g}" for m in (g, e, h))
        print(f"| {name} | {g['cost_usd'] - e['cost_usd']:+,.0f} | {g['cost_usd'] - h['cost_usd']:+,.0f} | {waits} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
