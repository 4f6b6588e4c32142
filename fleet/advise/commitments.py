"""`fleet advise commitments` as a function: build the grid's replays, run them, price, recommend, judge.

The CLI (fleet/cli/advise.py) parses options into `Request` and prints what `advise` returns; the report
(fleet/advise/report.py) draws it.  Runs are deterministic for the same seeds: the process pool and Ray
give the same JSON, bar the wall-clock fields."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from autoscaler.replay.trace import TraceJob
from fleet.advise import recommend as rec
from fleet.advise.grid import TermPrices
from fleet.advise.replay import Outcome, Slice, Task, scenario_for
from fleet.advise.runner import Progress, run_local, run_ray
from fleet.advise.window import Window, folds, history_days, split, whole


@dataclass(frozen=True)
class Request:
    trace: str
    jobs: tuple[TraceJob, ...]
    machine_family: str = "a3-highgpu"
    region: str = "us-central1"
    spot_fraction: float = 0.0
    stockout_rate: float = 0.0
    terms: tuple[str, ...] = ("none", "1y", "3y")
    sizes: tuple[int, ...] = tuple(range(0, 201, 10))
    seeds: int = 3
    train_days: float | None = None
    test_days: float | None = None
    allow_short_history: bool = False
    workers: int | None = None
    ray_address: str | None = None
    prices: TermPrices | None = field(default=None)
    folds: int = 4  # the choice window is cut in this many consecutive folds (see fleet/advise/recommend.py)
    rule: str = "minimax-regret"  # or "mean": the cheapest over the choice window


def windows(req: Request) -> tuple[Window, list[Window], Window | None]:
    """(the choice window, its folds, the test window or None)."""
    if req.train_days is None and req.test_days is None:
        choice, test = whole(req.jobs), None
    elif req.train_days is None or req.test_days is None:
        raise ValueError("--train/--test: give both or neither")
    else:
        choice, test = split(req.jobs, req.train_days, req.test_days)
    return choice, folds(choice, req.folds), test


def tasks_for(req: Request, wins: Sequence[Window]) -> list[Task]:
    """One continuous replay per (size, seed) of every job up to the end of the last window, scored per window."""
    sizes = req.sizes if 0 in req.sizes else (0, *req.sizes)  # all on demand is always the yardstick
    slices = tuple(Slice(w.name, w.start_s, w.start_s + w.hours * 3600.0) for w in wins)
    last = max(s.end_s for s in slices)
    jobs = tuple(j for j in req.jobs if j.submit < last)
    return [
        Task(jobs, slices, size, seed, req.machine_family, req.region, req.spot_fraction, req.stockout_rate)
        for size in sizes
        for seed in range(req.seeds)
    ]


def reserved_machine(req: Request) -> str:
    sc = scenario_for(Task(req.jobs[:1], (), 1, 0, req.machine_family, req.region, 0.0, 0.0))
    assert sc.reservation_machine is not None
    return sc.reservation_machine.name


def advise(req: Request, progress: Progress | None = None) -> dict[str, Any]:
    assert req.prices is not None
    choice, parts, test = windows(req)
    wins = [*parts, *([test] if test else [])]
    tasks = tasks_for(req, wins)
    t0 = time.perf_counter()
    if req.ray_address:
        outcomes = run_ray(tasks, req.ray_address, progress)
        runner = {"kind": "ray", "address": req.ray_address}
    else:
        outcomes = run_local(tasks, req.workers, progress)
        runner = {"kind": "process-pool", "workers": req.workers or "all cores"}
    wall = time.perf_counter() - t0
    info = runner | {"tasks": len(tasks), "wall_s": round(wall, 1)}
    return assemble(req, choice, parts, test, outcomes, info)


def assemble(
    req: Request,
    choice_window: Window,
    parts: Sequence[Window],
    test_window: Window | None,
    outcomes: Sequence[Outcome],
    runner: dict,
) -> dict[str, Any]:
    assert req.prices is not None
    prices = req.prices
    wins = [*parts, *([test_window] if test_window else [])]
    fold_points = rec.price_points(outcomes, prices, req.terms)
    choice = choice_window.name
    # the history a choice rests on: the train window's days, or the whole trace's
    hist = choice_window.days if choice == "train" else history_days(req.jobs)
    eligible = rec.eligible_terms(req.terms, hist, req.allow_short_history)
    ok_terms = [t for t, why in eligible.items() if why is None]
    caveats = [why for why in eligible.values() if why]
    names = [w.name for w in parts]
    points = [*rec.aggregate(fold_points, names, choice, ok_terms), *fold_points]
    chosen = (
        rec.robust(points, choice, ok_terms) if req.rule == "minimax-regret" else rec.best(points, choice, ok_terms)
    )
    base = rec.on_demand(points, choice)
    out: dict[str, Any] = {
        "scenario": {
            "trace": req.trace,
            "jobs": len(req.jobs),
            "machine_family": req.machine_family,
            "reserved_machine_type": prices.machine_type,
            "region": req.region,
            "spot_fraction": req.spot_fraction,
            "stockout_rate": req.stockout_rate,
            "terms": list(req.terms),
            "sizes": sorted({0, *req.sizes}),
            "seeds": req.seeds,
            "policy": "gpu-fleet",
            "history_days": round(hist, 2),
            "windows": {
                w.name: {"start_day": w.start_day, "days": w.days, "jobs": len(w.jobs)} for w in [choice_window, *wins]
            },
            "rule": req.rule,
            "folds": len(parts),
            "reservation_usd_per_node_hour": prices.hourly,
            "overflow_discount": prices.overflow_discount,
            "prices_source": prices.source,
        },
        "caveats": caveats,
        "eligible_terms": ok_terms,
        "choice_window": choice,
        "recommended": rec.summary(chosen, base)
        | {
            "seeds_cheaper_than_on_demand": rec.seeds_beating(outcomes, prices, chosen, names),
            "max_fold_regret_pct": chosen.max_fold_regret_pct,
        },
        "points": [p.to_json() for p in points],
        "runner": runner,
    }
    out["recommended"]["reservation_fill"] = chosen.reservation_fill
    if test_window is not None:
        test_rec = _same(points, "test", chosen)
        test_base = rec.on_demand(points, "test")
        hindsight = rec.best(points, "test", ok_terms)
        hindsight_any = rec.best(points, "test", list(req.terms))
        out["test"] = {
            "recommended": rec.summary(test_rec, test_base),
            "on_demand_cost_usd": test_base.cost_usd_mean if test_base else None,
            "hindsight_best": rec.summary(hindsight, test_base),
            "hindsight_best_any_term": rec.summary(hindsight_any, test_base),
            "regret_pct": round(100 * (test_rec.cost_usd_mean / hindsight.cost_usd_mean - 1), 3),
            "regret_any_term_pct": round(100 * (test_rec.cost_usd_mean / hindsight_any.cost_usd_mean - 1), 3),
        }
    return out


def _same(points: Sequence[rec.Point], window: str, p: rec.Point) -> rec.Point:
    return next(q for q in points if q.window == window and q.term == p.term and q.reserved_nodes == p.reserved_nodes)
