"""Benchmark and acceptance check of `fleet advise commitments` on ITP cluster04 (issue 12's "must show").

    .venv/bin/python bench/advise.py [--trace PATH] [--sizes 0:200:10] [--seeds 3] [--ray]

Chooses on the first 40 days, scores on the last 20, for 21 sizes x 3 terms x 3 seeds, and prints PASS/FAIL:
the recommendation costs less than all on demand on the test days, at most 1 % more than the best point of the
grid chosen with hindsight on those days, and the grid finishes in under 10 minutes.  `--ray` also runs the
grid through a local Ray and checks the figures are identical.  Exits 0 with a message when the trace is absent.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_TRACE = ROOT.parent / "shared" / "data" / "traces" / "itp" / "cluster04.csv"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    ap.add_argument("--sizes", default="0:200:10")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--spot-fraction", type=float, default=0.0)
    ap.add_argument("--stockout-rate", type=float, default=0.0)
    ap.add_argument("--ray", action="store_true", help="also run through a local Ray and compare")
    ap.add_argument("--rule", default="minimax-regret", choices=["minimax-regret", "mean"])
    ap.add_argument("--json-out", type=Path, help="write the advisor's JSON here")
    ap.add_argument(
        "--allow-short-history", action="store_true", help="let 40 days of history recommend a 3-year term too"
    )
    args = ap.parse_args()
    if not args.trace.exists():
        print(f"skip: trace {args.trace} not found (the ITP traces live in ../shared/data/traces/itp/)")
        return 0
    from autoscaler.replay.trace import load_trace
    from fleet.advise.commitments import Request, advise, reserved_machine
    from fleet.advise.grid import catalog_prices, parse_sizes

    base = Request(
        trace=str(args.trace),
        jobs=tuple(load_trace(args.trace)),
        sizes=parse_sizes(args.sizes),
        seeds=args.seeds,
        train_days=40,
        test_days=20,
        spot_fraction=args.spot_fraction,
        stockout_rate=args.stockout_rate,
        rule=args.rule,
        allow_short_history=args.allow_short_history,
    )
    req = Request(**{**base.__dict__, "prices": catalog_prices(reserved_machine(base), base.region, base.terms)})
    t0 = time.perf_counter()
    res = advise(req, progress=lambda d, n: print(f"\r{d}/{n} replays", end="", file=sys.stderr))
    wall = time.perf_counter() - t0
    print(file=sys.stderr)
    if args.json_out:
        import json

        args.json_out.write_text(json.dumps(res, indent=1))
    t = res["test"]
    rec, hs, od = t["recommended"], t["hindsight_best"], t["on_demand_cost_usd"]
    checks = [
        ("recommended < all on demand (test days)", rec["cost_usd"] < od, f"${rec['cost_usd']:,.0f} vs ${od:,.0f}"),
        ("regret vs hindsight best <= 1 %", t["regret_pct"] <= 1.0,
         f"{t['regret_pct']:.3f} % (hindsight, among the terms it may recommend: {hs['reserved_nodes']} nodes "
         f"{hs['term']} ${hs['cost_usd']:,.0f})"),
        ("grid under 10 minutes", wall < 600, f"{wall:.0f} s for {res['runner']['tasks']} replays"),
    ]  # fmt: skip
    print(
        f"recommended on days 0-40: {res['recommended']['reserved_nodes']} nodes, term {res['recommended']['term']}; "
        f"regret against the hindsight best of any term (incl. ones the history cannot justify): "
        f"{t['regret_any_term_pct']:.3f} % ({t['hindsight_best_any_term']['reserved_nodes']} nodes "
        f"{t['hindsight_best_any_term']['term']})"
    )
    for c in res["caveats"]:
        print(f"note: {c}")
    if args.ray:
        import ray

        ray.init(include_dashboard=False, log_to_driver=False)
        try:
            via = advise(Request(**{**req.__dict__, "ray_address": "auto"}))
        finally:
            ray.shutdown()
        same = {k: v for k, v in via.items() if k != "runner"} == {k: v for k, v in res.items() if k != "runner"}
        checks.append(("local Ray gives identical figures", same, f"{via['runner']['wall_s']} s"))
    ok = True
    for name, passed, detail in checks:
        ok &= passed
        print(f"{'PASS' if passed else 'FAIL'}  {name}: {detail}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
