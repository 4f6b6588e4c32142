"""Price the grid's replays per term, pick the recommended mix, and judge it on the test window.  Pure.

Cost of a grid point (term, size) over a window = overflow spend x (1 - negotiated overflow discount)
+ size x the term's $/h per node x the window's hours (the commitment is paid whether used or not).
The recommendation is the point with the lowest mean cost over seeds on the choice window (the train
window with `--train/--test`, else the whole trace), among the terms the history can justify:
a term of T is recommended only with at least `MIN_HISTORY_DAYS[T]` days of history (a 3-year commitment
from less than a year of history cannot have seen a seasonal cycle, let alone a trend); the other terms
are still priced and shown, with the reason they are not recommended.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from fleet.advise.grid import TermPrices
from fleet.advise.replay import Outcome

#: days of history needed before a term is recommended (see the module docstring)
MIN_HISTORY_DAYS = {"none": 0.0, "1y": 30.0, "3y": 365.0}


@dataclass(frozen=True)
class Point:
    """One (window, term, size) of the grid, over every seed."""

    window: str
    term: str
    reserved_nodes: int
    cost_usd_mean: float
    cost_usd_min: float
    cost_usd_max: float
    cost_usd_std: float
    reservation_usd: float
    overflow_usd_mean: float
    lower_bound_usd: float
    reservation_fill: float | None  # share of the paid-for GPU-hours demand could fill at best
    wait_p50_s: float
    wait_p95_s: float
    seeds: int
    max_fold_regret_pct: float | None = None  # choice windows: the worst fold's cost over that fold's best

    def to_json(self) -> dict[str, object]:
        return asdict(self)


def price_points(outcomes: Sequence[Outcome], prices: TermPrices, terms: Sequence[str]) -> list[Point]:
    """Every (window, term, size) point; size 0 appears once, as term `none` (all on demand)."""
    by: dict[tuple[str, int], list[Outcome]] = defaultdict(list)
    for o in outcomes:
        by[(o.window, o.reserved_nodes)].append(o)
    keep = 1.0 - prices.overflow_discount
    out: list[Point] = []
    for (window, size), group in sorted(by.items()):
        hours = group[0].span_hours  # the window's calendar hours, the same in every seed
        for term in terms if size else ("none",):
            rate = prices.rate(term) if size else 0.0
            res = size * rate * hours
            costs = [o.overflow_usd * keep + res for o in group]
            capacity = group[0].reserved_gpus * hours
            out.append(
                Point(
                    window=window,
                    term=term,
                    reserved_nodes=size,
                    cost_usd_mean=round(statistics.fmean(costs), 2),
                    cost_usd_min=round(min(costs), 2),
                    cost_usd_max=round(max(costs), 2),
                    cost_usd_std=round(statistics.pstdev(costs), 2) if len(costs) > 1 else 0.0,
                    reservation_usd=round(res, 2),
                    overflow_usd_mean=round(statistics.fmean(o.overflow_usd * keep for o in group), 2),
                    lower_bound_usd=round(group[0].overflow_bound_usd * keep + res, 2),
                    reservation_fill=round(group[0].reserved_gpu_hours_demanded / capacity, 4) if capacity else None,
                    wait_p50_s=round(statistics.fmean(o.wait_p50_s for o in group), 1),
                    wait_p95_s=round(statistics.fmean(o.wait_p95_s for o in group), 1),
                    seeds=len(group),
                )
            )
    return out


def aggregate(points: Sequence[Point], folds: Sequence[str], name: str, terms: Sequence[str]) -> list[Point]:
    """One point per (term, size) over the folds together (costs summed), with its worst fold regret: how much
    more than that fold's best candidate (among `terms`, size 0 included) it cost in the fold it suits least."""
    by = {(p.window, p.term, p.reserved_nodes): p for p in points}
    best = {
        f: min(p.cost_usd_mean for p in points if p.window == f and (p.reserved_nodes == 0 or p.term in terms))
        for f in folds
    }
    keys = sorted({(p.term, p.reserved_nodes) for p in points if p.window == folds[0]}, key=lambda k: (k[1], k[0]))
    out = []
    for term, size in keys:
        parts = [by[(f, term, size)] for f in folds]
        regret = max((q.cost_usd_mean / best[q.window] - 1) if best[q.window] > 0 else 0.0 for q in parts)
        fills = [q.reservation_fill for q in parts if q.reservation_fill is not None]
        out.append(
            Point(
                window=name,
                term=term,
                reserved_nodes=size,
                cost_usd_mean=round(sum(q.cost_usd_mean for q in parts), 2),
                cost_usd_min=round(sum(q.cost_usd_min for q in parts), 2),
                cost_usd_max=round(sum(q.cost_usd_max for q in parts), 2),
                cost_usd_std=round(sum(q.cost_usd_std**2 for q in parts) ** 0.5, 2),
                reservation_usd=round(sum(q.reservation_usd for q in parts), 2),
                overflow_usd_mean=round(sum(q.overflow_usd_mean for q in parts), 2),
                lower_bound_usd=round(sum(q.lower_bound_usd for q in parts), 2),
                reservation_fill=round(statistics.fmean(fills), 4) if fills else None,
                wait_p50_s=round(statistics.fmean(q.wait_p50_s for q in parts), 1),
                wait_p95_s=round(max(q.wait_p95_s for q in parts), 1),
                seeds=parts[0].seeds,
                max_fold_regret_pct=round(100 * regret, 3),
            )
        )
    return out


def robust(points: Sequence[Point], window: str, terms: Sequence[str]) -> Point:
    """The point whose worst fold regret is smallest (ties: the cheaper over the window, then fewer nodes)."""
    cands = [p for p in points if p.window == window and (p.reserved_nodes == 0 or p.term in terms)]
    return min(cands, key=lambda p: (p.max_fold_regret_pct or 0.0, p.cost_usd_mean, p.reserved_nodes))


def eligible_terms(terms: Sequence[str], history_days: float, allow_short_history: bool) -> dict[str, str | None]:
    """term -> None when it may be recommended, else the reason it may not."""
    out: dict[str, str | None] = {}
    for t in terms:
        need = MIN_HISTORY_DAYS[t]
        if history_days < need and not allow_short_history:
            out[t] = (
                f"{history_days:.0f} days of history are too short to recommend a {t} commitment "
                f"(at least {need:.0f} days needed; --allow-short-history to recommend it anyway)"
            )
        else:
            out[t] = None
    return out


def best(points: Sequence[Point], window: str, terms: Sequence[str]) -> Point:
    """The cheapest mean-cost point of `window` among `terms` (size 0 always qualifies); ties: fewer nodes."""
    cands = [p for p in points if p.window == window and (p.reserved_nodes == 0 or p.term in terms)]
    return min(cands, key=lambda p: (p.cost_usd_mean, p.reserved_nodes, p.term))


def on_demand(points: Sequence[Point], window: str) -> Point | None:
    return next((p for p in points if p.window == window and p.reserved_nodes == 0), None)


def seeds_beating(outcomes: Sequence[Outcome], prices: TermPrices, p: Point, windows: Sequence[str]) -> int:
    """In how many seeds the point costs less than all on demand with the same seed, over `windows` together."""
    keep = 1.0 - prices.overflow_discount
    base: dict[int, float] = defaultdict(float)
    mine: dict[int, float] = defaultdict(float)
    rate = prices.rate(p.term) if p.reserved_nodes else 0.0
    for o in outcomes:
        if o.window not in windows:
            continue
        if o.reserved_nodes == 0:
            base[o.seed] += o.overflow_usd * keep
        if o.reserved_nodes == p.reserved_nodes:
            mine[o.seed] += o.overflow_usd * keep + p.reserved_nodes * rate * o.span_hours
    return sum(1 for s, c in mine.items() if s in base and c < base[s])


def summary(p: Point, baseline: Point | None) -> dict[str, object]:
    out: dict[str, object] = {
        "term": p.term,
        "reserved_nodes": p.reserved_nodes,
        "cost_usd": p.cost_usd_mean,
        "cost_usd_range": [p.cost_usd_min, p.cost_usd_max],
        "cost_usd_std": p.cost_usd_std,
        "wait_p95_s": p.wait_p95_s,
    }
    if baseline is not None and baseline.cost_usd_mean > 0:
        out["saving_vs_on_demand_usd"] = round(baseline.cost_usd_mean - p.cost_usd_mean, 2)
        out["saving_vs_on_demand_pct"] = round(100 * (1 - p.cost_usd_mean / baseline.cost_usd_mean), 2)
    return out
