"""Whether keeping an idle node pays, judged from the fleet's own history instead of a Poisson assumption.

The settings rule keeps an idle node of a shape for the break-even time T (ski rental, `rule.py`).  Keeping costs
the node's price for min(d, T), where d is the time until the next job of that shape takes it; it saves a boot's
billing and wait, worth the price for T, when d < T.  So keeping pays iff

    E[min(d, T)] < T * P(d < T)

For Poisson arrivals at rate lambda this is lambda * T > 1, the rule's test.  Real queues are not Poisson: jobs
come in bursts (a sweep of 200 submissions, then nothing for an hour), and then the arrival rate averaged over a
day says "keep" while the node freed after a burst waits for nothing.  Here d is measured: the nodes jobs freed
(at each observed end) and the nodes later arrivals took (at each submission), replayed as one warm pool per shape
kept for ever, gives each freed node its d, or "not taken within T".  Which idle node an arrival takes is a
modelling choice: the most recently freed one (with a keep of T, an arrival finds the older idle nodes already
gone); Slurm takes the lowest index, which can differ.  Ends less than T
before the point of judgement are left out (their outcome is not known yet).

`free_gaps` computes the d's per shape; `keep_pays` applies the test (None when fewer than `MIN_SPELLS` freed
nodes were seen: the caller falls back to the Poisson test).  Pure."""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Iterable, Mapping, Sequence

#: fewer freed nodes than this and the history says nothing (the Poisson test decides)
MIN_SPELLS = 20


def free_gaps(
    events: Iterable[tuple[str, float, float | None, int]], at: float, horizons: Mapping[str, float]
) -> dict[str, tuple[float, ...]]:
    """Per shape with a horizon T: for every node freed at least T before `at`, the time until an arrival of that
    shape took it, capped at T (the cap means "not taken within T").  `events`: (shape, submit, observed end or
    None, nodes) of the jobs seen, each right-sized to `shape`."""
    by_shape: dict[str, list[tuple[float, int, int]]] = {}  # (time, 0 = end / 1 = arrival, nodes)
    for shape, submit, end, nodes in events:
        if shape not in horizons:
            continue
        rows = by_shape.setdefault(shape, [])
        rows.append((submit, 1, nodes))
        if end is not None and end <= at:
            rows.append((end, 0, nodes))
    out: dict[str, tuple[float, ...]] = {}
    for shape, rows in by_shape.items():
        horizon = horizons[shape]
        rows.sort()
        idle: list[float] = []  # free times of the idle nodes, most recent last
        gaps: list[float] = []
        for t, kind, nodes in rows:
            if kind == 0:
                idle.extend([t] * nodes)
                continue
            for _ in range(min(nodes, len(idle))):
                freed = idle.pop()
                if freed <= at - horizon:
                    gaps.append(min(t - freed, horizon))
        gaps.extend(horizon for freed in idle if freed <= at - horizon)  # never taken
        out[shape] = tuple(gaps)
    return out


def keep_pays(gaps: Sequence[float], keep_s: float) -> bool | None:
    """E[min(d, T)] < T * P(d < T) over the measured `gaps` (None: too few to judge)."""
    if len(gaps) < MIN_SPELLS or keep_s <= 0:
        return None
    cost = sum(min(d, keep_s) for d in gaps)
    taken = sum(1 for d in gaps if d < keep_s)
    return cost < keep_s * taken


def standby_use(
    arrivals: Iterable[tuple[float, int]],
    boot_s: float,
    span_s: float,
    ends: Iterable[tuple[float, int]] = (),
    keep_s: float = 0.0,
) -> tuple[float, ...]:
    """The measured use of each standby node of a shape (`rule.standby_nodes`): `arrivals` ((time, nodes) of the
    shape's jobs seen over `span_s` seconds) replayed against standby nodes 0, 1, 2, ... each busy for `boot_s`
    after a job takes it (its replacement boots), an arrival taking the lowest-numbered free ones.  u_j is the
    fraction of the span node j was busy.  An arrival first takes a node a job freed (`ends`: (time, nodes)) in
    the last `keep_s` if one is idle (the idle keep serves it, the most recently freed first), so standby is sized
    for the arrivals the idle keep leaves waiting.  An arrival needing more nodes than are free takes what is free
    (each node of a gang spared its boot is a node that does not wait for one; conservative for gangs, which wait
    for their slowest node)."""
    if boot_s <= 0 or span_s <= 0:
        return ()
    events = sorted([(t, 0, n) for t, n in ends] + [(t, 1, n) for t, n in arrivals])  # ends first at a tie
    freed: deque[float] = deque()  # free times of the idle nodes jobs freed, most recent last
    free: list[int] = []  # free standby indices (min-heap)
    busy: list[tuple[float, int]] = []  # (free again at, index)
    takes: list[int] = []
    for t, kind, nodes in events:
        if kind == 0:
            if keep_s > 0:
                freed.extend([t] * nodes)
            continue
        while freed and t - freed[0] > keep_s:
            freed.popleft()
        while busy and busy[0][0] <= t:
            heapq.heappush(free, heapq.heappop(busy)[1])
        for _ in range(nodes):
            if freed:
                freed.pop()
                continue
            if free:
                j = heapq.heappop(free)
            else:
                j = len(takes)
                takes.append(0)
            takes[j] += 1
            heapq.heappush(busy, (t + boot_s, j))
    return tuple(min(1.0, n * boot_s / span_s) for n in takes)
