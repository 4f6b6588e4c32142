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
from fleet.advise.grid import TERM_DAYS, TermPrices
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

    @property
    def random(self) -> bool:
        """Whether seeds can differ: only spot (which jobs tolerate it, its preemptions) and stockouts are drawn."""
        return self.spot_fraction > 0 or self.stockout_rate > 0

    @property
    def replayed_seeds(self) -> int:
        """The seeds worth replaying: `seeds`, or 1 when nothing is random (every seed would replay identically)."""
        return self.seeds if self.random else 1


#: fewer seeds than this, in a random scenario, show no uncertainty worth the name
MIN_RANDOM_SEEDS = 3


def windows(req: Request) -> tuple[Window, list[Window], Window | None]:
    """(the choice window, its folds, the test window or None)."""
    if req.train_days is None and req.test_days is None:
        choice, test = whole(req.jobs), None
    elif req.train_days is None or req.test_days is None:
        raise ValueError("--train/--test: give both or neither")
    else:
        choice, test = split(req.jobs, req.train_days, req.test_days)
    return choice, folds(choice, req.folds), test


def all_windows(req: Request) -> tuple[Window, list[Window], Window | None, list[Window]]:
    """`windows(req)` and every window a replay is scored on: the folds, the choice window whole (its waits and
    fill are over its own jobs, not an average of its folds'), the test window."""
    choice, parts, test = windows(req)
    return choice, parts, test, [*parts, choice, *([test] if test else [])]


def _slices(wins: Sequence[Window]) -> tuple[Slice, ...]:
    return tuple(Slice(w.name, w.start_s, w.start_s + w.hours * 3600.0) for w in wins)


def replay_jobs(req: Request, wins: Sequence[Window]) -> tuple[TraceJob, ...]:
    """The jobs every replay runs: all submitted before the end of the last window."""
    last = max(s.end_s for s in _slices(wins))
    return tuple(j for j in req.jobs if j.submit < last)


def tasks_for(req: Request, wins: Sequence[Window]) -> list[Task]:
    """One continuous replay per (size, seed) of every job up to the end of the last window, scored per window;
    one seed only when nothing is random (`Request.replayed_seeds`)."""
    sizes = req.sizes if 0 in req.sizes else (0, *req.sizes)  # all on demand is always the yardstick
    slices = _slices(wins)
    jobs = replay_jobs(req, wins)
    return [
        Task(jobs, slices, size, seed, req.machine_family, req.region, req.spot_fraction, req.stockout_rate)
        for size in sizes
        for seed in range(req.replayed_seeds)
    ]


def check_replayable(req: Request) -> None:
    """Refuse before the grid runs (GridError naming `--spot-fraction`) a scenario whose replay would not end:
    a spot-tolerant job preempted so often that the replay would re-run it for ever.  The replay's own test
    (`autoscaler.replay.run.preemption_overload`, on the same seeded choice of spot-tolerant jobs), said with
    advise's flag: it has none of `fleet simulate`'s preemption flags and replays spot at their defaults."""
    from autoscaler.replay.run import preemption_overload
    from autoscaler.replay.trace import mark_spot_tolerant
    from fleet.advise.grid import GridError

    if req.spot_fraction <= 0:
        return
    jobs = list(replay_jobs(req, all_windows(req)[3]))
    for seed in range(req.replayed_seeds):
        sc = scenario_for(Task((), (), 0, seed, req.machine_family, req.region, req.spot_fraction, req.stockout_rate))
        if overload := preemption_overload(mark_spot_tolerant(jobs, req.spot_fraction, seed), sc):
            raise GridError(
                f"--spot-fraction: with seed {seed}, {overload}: the replay would not end; advise replays spot at "
                f"fleet simulate's default preemption rate and checkpoint interval, so lower --spot-fraction"
            )


def reserved_machine(req: Request) -> str:
    sc = scenario_for(Task(req.jobs[:1], (), 1, 0, req.machine_family, req.region, 0.0, 0.0))
    assert sc.reservation_machine is not None
    return sc.reservation_machine.name


def advise(req: Request, progress: Progress | None = None) -> dict[str, Any]:
    """Replay the grid (locally or on Ray), price it and recommend: the result the CLI prints as JSON."""
    assert req.prices is not None
    choice, parts, test, wins = all_windows(req)
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
    """The result from the replays' outcomes (every window of `all_windows`): points, recommendation, caveats."""
    assert req.prices is not None
    prices = req.prices
    wins = [*parts, *([test_window] if test_window else [])]
    names = [w.name for w in parts]
    choice = choice_window.name
    fold_points = rec.price_points(outcomes, prices, req.terms, windows={w.name for w in wins})
    # the history a choice rests on: the train window's days, or the whole trace's
    hist = choice_window.days if choice == "train" else history_days(req.jobs)
    eligible = rec.eligible_terms(req.terms, hist, req.allow_short_history)
    ok_terms = [t for t, why in eligible.items() if why is None]
    caveats = [why for why in eligible.values() if why]
    caveats += [*prices.caveats, *_seed_caveats(req), _overflow_caveat(prices)]
    points = [*rec.aggregate(fold_points, outcomes, prices, names, choice, ok_terms), *fold_points]
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
            "random": req.random,
            "seeds": req.replayed_seeds,
            "seeds_requested": req.seeds,
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
            # in how many seeds it beats all on demand: no evidence when every seed replays identically
            "seeds_cheaper_than_on_demand": rec.seeds_beating(outcomes, prices, chosen, names) if req.random else None,
            "max_fold_regret_pct": chosen.max_fold_regret_pct,
            "regret_unbounded": chosen.regret_unbounded,
            "commitment_term_days": TERM_DAYS[chosen.term] if chosen.reserved_nodes else 0,
            "commitment_total_usd": round(prices.commitment_total(chosen.term, chosen.reserved_nodes), 2),
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


def _seed_caveats(req: Request) -> list[str]:
    """What the seeds do and do not show: nothing when nothing is random, little from fewer than 3."""
    if not req.random:
        asked = f" (--seeds {req.seeds} asked)" if req.seeds > 1 else ""
        return [
            "nothing in this scenario is random (--spot-fraction 0, --stockout-rate 0): every seed replays "
            f"identically, so one seed was replayed{asked}; the figures carry no spread across seeds"
        ]
    if req.seeds < MIN_RANDOM_SEEDS:
        return [
            f"only {req.seeds} seed(s) of a random scenario (spot, stockouts): the range and the count of seeds "
            f"beating all on demand say little about the uncertainty; use --seeds {MIN_RANDOM_SEEDS} or more"
        ]
    return []


def _overflow_caveat(prices: TermPrices) -> str:
    """What the saving of a commitment is measured against: overflow at on-demand (less `overflow_discount`)."""
    if prices.overflow_discount:
        pct = 100 * prices.overflow_discount
        against = (
            f"on-demand rates (spot for spot-tolerant jobs) less the --price-file's overflow_discount of {pct:g} %"
        )
    else:
        against = "on-demand rates (spot for spot-tolerant jobs), undiscounted"
    return (
        f"savings are measured against overflow billed at {against}: flex-start (DWS) VMs, which Google prices at a "
        f"discount for A4, A3 and A2, are not modelled; where the team would run overflow on them, or under a deeper "
        f"spend-based or negotiated discount, overflow costs less and a commitment saves less than shown (a "
        f"--price-file overflow_discount, a flat discount on on-demand and spot usage, prices such a discount)"
    )


def _same(points: Sequence[rec.Point], window: str, p: rec.Point) -> rec.Point:
    return next(q for q in points if q.window == window and q.term == p.term and q.reserved_nodes == p.reserved_nodes)
