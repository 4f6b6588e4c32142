"""Price the grid's replays per term, pick the recommended mix, and judge it on the test window.  Pure.

Cost of a grid point (term, size) over a window = overflow spend x (1 - negotiated overflow discount)
+ size x the term's $/h per node x the window's hours (the commitment is paid whether used or not).
The choice window (the train window with `--train/--test`, else the whole trace) is cut into folds; a point's
regret in a fold is its cost over the fold's cheapest candidate (all on demand, or a term the history allows),
infinite where that cheapest candidate costs $0 (a fold without demand) and the point costs more.  The default
rule (`robust`) recommends the candidate whose worst fold regret is smallest, never one that costs more than all
on demand over the choice window; `--rule mean` (`best`) the cheapest over the window.  A term of T is a
candidate only with at least `MIN_HISTORY_DAYS[T]` days of history (a 3-year commitment from less than a year
of history cannot have seen a seasonal cycle, let alone a trend); the other terms are still priced and shown,
with the reason they are not recommended and no regret (N/A).
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Collection, Sequence
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
    wait_p50_s: float  # of the jobs submitted in the window, mean over seeds
    wait_p95_s: float
    seeds: int
    #: choice windows: the worst fold's cost over that fold's cheapest candidate - 1, in %; None where the term
    #: may not be recommended (N/A) or where the regret is unbounded (`regret_unbounded`)
    max_fold_regret_pct: float | None = None
    #: choice windows: in some fold the cheapest candidate costs $0 (no demand) and this point costs more
    regret_unbounded: bool = False

    def to_json(self) -> dict[str, object]:
        return asdict(self)


#: (window, term, size) -> seed -> cost, $
SeedCosts = dict[tuple[str, str, int], dict[int, float]]


def seed_costs(outcomes: Sequence[Outcome], prices: TermPrices, terms: Sequence[str]) -> SeedCosts:
    """Every (window, term, size)'s cost in each seed; size 0 appears once, as term `none` (all on demand)."""
    keep = 1.0 - prices.overflow_discount
    out: SeedCosts = defaultdict(dict)
    for o in outcomes:
        for term in terms if o.reserved_nodes else ("none",):
            rate = prices.rate(term) if o.reserved_nodes else 0.0
            reservation = o.reserved_nodes * rate * o.span_hours
            out[(o.window, term, o.reserved_nodes)][o.seed] = o.overflow_usd * keep + reservation
    return out


def price_points(
    outcomes: Sequence[Outcome], prices: TermPrices, terms: Sequence[str], windows: Collection[str] | None = None
) -> list[Point]:
    """Every (window, term, size) point of `windows` (default: all); size 0 appears once, as term `none`."""
    by: dict[tuple[str, int], list[Outcome]] = defaultdict(list)
    for o in outcomes:
        if windows is None or o.window in windows:
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


def aggregate(
    points: Sequence[Point],
    outcomes: Sequence[Outcome],
    prices: TermPrices,
    folds: Sequence[str],
    name: str,
    terms: Sequence[str],
) -> list[Point]:
    """One point per (term, size) over the choice window `name`, cut into `folds`.

    Its cost is the mean over seeds of each seed's own total over the folds (= the sum of the folds' means), and
    its range and spread are those of these totals (one continuous replay per seed, so the folds of a seed are not
    independent draws); its waits and fill are the figures of the whole window (the outcomes named `name`: the
    jobs submitted in it).  Its worst fold regret is how much more than that fold's cheapest candidate (among
    `terms`, size 0 included) it cost in the fold it suits least: None (N/A) for a term not among `terms`,
    unbounded where that candidate costs $0."""
    by = {(p.window, p.term, p.reserved_nodes): p for p in points}
    best = {f: min(p.cost_usd_mean for p in points if p.window == f and _candidate(p, terms)) for f in folds}
    priced = sorted({p.term for p in points if p.reserved_nodes})  # the grid's terms (size 0 is priced as `none`)
    per_seed = seed_costs([o for o in outcomes if o.window in folds], prices, priced)
    whole: dict[int, list[Outcome]] = defaultdict(list)
    for o in outcomes:
        if o.window == name:
            whole[o.reserved_nodes].append(o)
    out = []
    for term, size in _keys(points, folds):
        parts = [by[(f, term, size)] for f in folds]
        seeds = sorted(per_seed[(folds[0], term, size)])
        totals = [sum(per_seed[(f, term, size)][s] for f in folds) for s in seeds]
        regret, unbounded = _worst_regret(parts, best) if size == 0 or term in terms else (None, False)
        w = whole[size]
        capacity = w[0].reserved_gpus * w[0].span_hours
        out.append(
            Point(
                window=name,
                term=term,
                reserved_nodes=size,
                cost_usd_mean=round(statistics.fmean(totals), 2),  # = the sum of the folds' means
                cost_usd_min=round(min(totals), 2),
                cost_usd_max=round(max(totals), 2),
                cost_usd_std=round(statistics.pstdev(totals), 2) if len(totals) > 1 else 0.0,
                reservation_usd=round(sum(q.reservation_usd for q in parts), 2),
                overflow_usd_mean=round(sum(q.overflow_usd_mean for q in parts), 2),
                lower_bound_usd=round(sum(q.lower_bound_usd for q in parts), 2),
                reservation_fill=round(w[0].reserved_gpu_hours_demanded / capacity, 4) if capacity else None,
                wait_p50_s=round(statistics.fmean(o.wait_p50_s for o in w), 1),
                wait_p95_s=round(statistics.fmean(o.wait_p95_s for o in w), 1),
                seeds=len(totals),
                max_fold_regret_pct=None if regret is None else round(100 * regret, 3),
                regret_unbounded=unbounded,
            )
        )
    return out


def _candidate(p: Point, terms: Sequence[str]) -> bool:
    """May the rule recommend `p`: all on demand always, a reservation only on a term the history allows."""
    return p.reserved_nodes == 0 or p.term in terms


def _keys(points: Sequence[Point], folds: Sequence[str]) -> list[tuple[str, int]]:
    return sorted({(p.term, p.reserved_nodes) for p in points if p.window == folds[0]}, key=lambda k: (k[1], k[0]))


def _worst_regret(parts: Sequence[Point], best: dict[str, float]) -> tuple[float | None, bool]:
    """(the worst fold's cost / that fold's best - 1, False), or (None, True) when some fold's best costs $0 and
    the point costs more there: every dollar spent where nothing was needed is infinitely more than the best."""
    if any(best[q.window] <= 0 < q.cost_usd_mean for q in parts):
        return None, True
    return max((q.cost_usd_mean / best[q.window] - 1) if best[q.window] > 0 else 0.0 for q in parts), False


def robust(points: Sequence[Point], window: str, terms: Sequence[str]) -> Point:
    """The candidate whose worst fold regret is smallest, bounded before unbounded (ties: the cheaper over the
    window, then fewer nodes), among those that cost no more than all on demand over the window: a commitment
    that loses money on the very history it is chosen from is never recommended."""
    base = on_demand(points, window)
    limit = base.cost_usd_mean if base is not None else float("inf")
    cands = [p for p in points if p.window == window and _candidate(p, terms) and p.cost_usd_mean <= limit]
    return min(
        cands,
        key=lambda p: (p.regret_unbounded, p.max_fold_regret_pct or 0.0, p.cost_usd_mean, p.reserved_nodes),
    )


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
    cands = [p for p in points if p.window == window and _candidate(p, terms)]
    return min(cands, key=lambda p: (p.cost_usd_mean, p.reserved_nodes, p.term))


def on_demand(points: Sequence[Point], window: str) -> Point | None:
    """The all-on-demand point (size 0) of `window`, the yardstick of every saving."""
    return next((p for p in points if p.window == window and p.reserved_nodes == 0), None)


def seeds_beating(outcomes: Sequence[Outcome], prices: TermPrices, p: Point, windows: Sequence[str]) -> int:
    """In how many seeds the point costs less than all on demand with the same seed, over `windows` together."""
    costs = seed_costs([o for o in outcomes if o.window in windows], prices, (p.term,) if p.reserved_nodes else ())

    def totals(term: str, size: int) -> dict[int, float]:
        out: dict[int, float] = defaultdict(float)
        for w in windows:
            for seed, cost in costs.get((w, term, size), {}).items():
                out[seed] += cost
        return out

    base, mine = totals("none", 0), totals(p.term, p.reserved_nodes)
    return sum(1 for s, c in mine.items() if s in base and c < base[s])


def summary(p: Point, baseline: Point | None) -> dict[str, object]:
    """A point as the output shows a choice: its cost, range over seeds, spread, and saving against `baseline`."""
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
