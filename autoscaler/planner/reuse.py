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
    events: Iterable[tuple[str, float, float | None, int] | tuple[str, float, float | None, int, int]],
    at: float,
    horizons: Mapping[str, float],
    node_gpus: Mapping[str, int] | None = None,
) -> dict[str, tuple[float, ...]]:
    """Per shape with a horizon T: for every node freed at least T before `at`, the time until an arrival of that
    shape took it, capped at T (the cap means "not taken within T").  `events`: (shape, submit, observed end or
    None, nodes[, GPUs per node]) of the jobs seen, each right-sized to `shape`.

    A job smaller than its shape's node (`node_gpus[shape]`: a 1-GPU job where the family's smallest machine has 8
    GPUs) shares a node, as Slurm packs it: it goes to the fullest busy node with room (no idle node needed), else
    takes an idle one; a node is freed when its last job ends.  Counted as a node of its own, every small job's end
    would look like a freed node and every arrival like a reuse, and keeping idle nodes would look worth it where
    an arrival almost never needs an idle node.  Jobs that fill their nodes are counted node for node."""
    rows_by_shape: dict[str, list[tuple[float, int, int, int, int]]] = {}  # (time, 0 end / 1 arrival, job, n, g)
    for i, ev in enumerate(events):
        shape, submit, end, nodes = ev[0], ev[1], ev[2], ev[3]
        if shape not in horizons:
            continue
        size = (node_gpus or {}).get(shape, 0)
        g = ev[4] if len(ev) > 4 and size else size  # type: ignore[misc]
        rows = rows_by_shape.setdefault(shape, [])
        rows.append((submit, 1, i, nodes, g))
        if end is not None and end <= at:
            rows.append((end, 0, i, nodes, g))
    sizes = node_gpus or {}
    return {
        shape: _shape_gaps(sorted(rows), at, horizons[shape], sizes.get(shape, 0))
        for shape, rows in rows_by_shape.items()
    }


def _shape_gaps(
    rows: Sequence[tuple[float, int, int, int, int]], at: float, horizon: float, size: int
) -> tuple[float, ...]:
    """`free_gaps` for one shape: `rows` (time, 0 end / 1 arrival, job, nodes, GPUs per node) in time order, ends
    first at a tie; `size` the shape's GPUs per node (0: every job fills its nodes)."""
    idle: list[float] = []  # free times of the idle nodes, most recent last
    room: dict[int, int] = {}  # busy shared node -> its free GPUs
    used: list[int] = []  # GPUs in use per shared node
    placed: dict[int, list[int]] = {}  # job -> its shared nodes
    gaps: list[float] = []
    for t, kind, job, nodes, g in rows:
        whole = not size or g >= size
        if kind == 0:
            if whole:  # its nodes are free now
                idle.extend([t] * nodes)
                continue
            for node in placed.pop(job, []):
                used[node] -= g
                room[node] = size - used[node]
                if used[node] == 0:  # its last job ended
                    del room[node]
                    idle.append(t)
            continue
        mine: list[int] = []
        for _ in range(nodes):
            fits = [] if whole else [n for n, free in room.items() if free >= g and n not in mine]
            if fits:
                mine.append(min(fits, key=lambda n: (room[n], n)))  # the fullest busy node with room
            else:
                if idle:
                    freed = idle.pop()
                    if freed <= at - horizon:
                        gaps.append(min(t - freed, horizon))
                if whole:
                    continue
                mine.append(len(used))
                used.append(0)
            node = mine[-1]
            used[node] += g
            room[node] = size - used[node]
            if room[node] == 0:
                del room[node]
        if mine:
            placed[job] = mine
    gaps.extend(horizon for freed in idle if freed <= at - horizon)  # never taken
    return tuple(gaps)


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
