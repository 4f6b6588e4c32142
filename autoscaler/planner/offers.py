"""Offering choice: which (offering, pool) pairs can serve a class of identical units, cheapest first.

A `UnitClass` groups units that are interchangeable for placement (same shape, type constraints,
queue, effective spot / flex-start rights).  `OfferBook.streams` yields, for one class, every
launchable (offering, pool) pair, lazily, ordered by the effective $/h *per unit served*: reservation
capacity costs 0 (it is paid for, so it is filled first); a node of G GPUs serves
min(G // gpus, units in class) single units, which bin-packs small units when only big shapes are
cheap and right-sizes when shapes cost the same per GPU (ties, to `fleet.catalog.price_ties`' tolerance, go
to the smaller machine).  Then capacity preference (reservation, on-demand, spot, flex-start), then zone and
name for determinism.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from autoscaler.cloud import Offering, OfferingKey
from autoscaler.model import Policy, Pool, UnavailableOffering, UnservedReason, WorkUnit
from autoscaler.planner.backoff import split_backed_off
from autoscaler.planner.memo import recent_calls
from fleet.catalog import CapacityType
from fleet.catalog.price_ties import SAME_PRICE_USD_PER_GPU_HOUR

CAPACITY_RANK = {
    CapacityType.RESERVATION: 0,
    CapacityType.ON_DEMAND: 1,
    CapacityType.SPOT: 2,
    CapacityType.FLEX_START: 3,
}


@dataclass(frozen=True)
class UnitClass:
    gpus_per_node: int
    nodes: int
    gpu_types: frozenset[str] | None
    machine_types: frozenset[str] | None
    spot: bool  # may use spot (unit tolerant and queue allowed)
    flex: bool  # may wait for flex-start
    queue: str
    pools: frozenset[str] | None = None  # the pools its nodes may come from (None: any serving its queue)
    avoid: frozenset[str] = frozenset()  # node names it may not run on (`WorkUnit.avoid`)

    @classmethod
    def of(cls, unit: WorkUnit, policy: Policy, now: float) -> UnitClass:
        return cls(
            unit.gpus_per_node,
            unit.nodes,
            unit.gpu_types,
            unit.machine_types,
            policy.spot_ok(unit),
            policy.flex_start_allowed(unit.queue, now - unit.submit_time),
            unit.queue,
            unit.pools,
            unit.avoid,
        )

    def accepts(self, gpu_type: str, machine_type: str, gpus: int) -> bool:
        return gpus >= self.gpus_per_node and self.accepts_type(gpu_type, machine_type)

    def accepts_type(self, gpu_type: str, machine_type: str) -> bool:
        """The GPU / machine type constraints alone (what the per-constraint caches key on)."""
        return (self.gpu_types is None or gpu_type in self.gpu_types) and (
            self.machine_types is None or machine_type in self.machine_types
        )

    def may_use_pool(self, pool: Pool) -> bool:
        """The pool serves the class's queue and its nodes satisfy the class's own constraint."""
        return pool.serves(self.queue) and (self.pools is None or pool.name in self.pools)

    def may_use(self, capacity: CapacityType) -> bool:
        if capacity is CapacityType.SPOT:
            return self.spot
        if capacity is CapacityType.FLEX_START:
            return self.flex
        return True


@dataclass(frozen=True)
class Candidate:
    offering: Offering
    pool: Pool
    hourly_usd: float  # $/h one new node adds (0 for reservation capacity)

    @property
    def key(self) -> OfferingKey:
        return self.offering.key

    @property
    def reserved(self) -> bool:
        return self.offering.key.capacity_type is CapacityType.RESERVATION


@dataclass(frozen=True)
class NoCandidate:
    reason: UnservedReason
    detail: str


def existing_tier(p: Pool) -> int:
    """Order in which running capacity is used: reservation, spot, then on-demand / flex-start."""
    if p.capacity_type is CapacityType.RESERVATION:
        return 0
    return 1 if p.capacity_type is CapacityType.SPOT else 2


def marginal_hourly(o: Offering) -> float:
    return 0.0 if o.key.capacity_type is CapacityType.RESERVATION else o.hourly_usd


def _order(c: Candidate) -> tuple:
    k = c.offering.key
    return (c.hourly_usd, CAPACITY_RANK[k.capacity_type], k.zone, k.machine_type, k.reservation or "", c.pool.name)


class CandidateStream:
    """Candidates of one class, best first, produced lazily: each shape (GPUs per node) is a list
    pre-sorted by $/h, and the per-unit cost factor is constant within a shape, so a k-way merge
    of the shapes yields the class order without building and sorting every candidate.

    Costs per unit within `tolerance` of a run's cheapest are the same cost (`fleet.catalog.price_ties`: the
    price list's rounding makes a2-highgpu-2g $0.00005/GPU-h cheaper than -1g in some regions): such a run
    comes in capacity preference, then the smaller shape, then cost order."""

    def __init__(self, groups: list[tuple[float, int, list[Candidate]]], keep=None, tolerance: float = 0.0) -> None:
        # groups: (cost factor, shape rank: GPUs per node, or minus them for larger first, candidates sorted by _order)
        def keyed(factor: float, gpus: int, cands: list[Candidate]) -> Iterator[tuple]:
            for i, c in enumerate(cands):
                if keep is None or keep(c):
                    yield (c.hourly_usd * factor, CAPACITY_RANK[c.key.capacity_type], gpus, i, c)

        self._it = _same_cost_runs(heapq.merge(*(keyed(f, g, cs) for f, g, cs in groups)), tolerance)
        self._head: Candidate | None = next(self._it, None)

    def peek(self) -> Candidate | None:
        return self._head

    def advance(self) -> None:
        self._head = next(self._it, None)

    def remaining(self) -> list[Candidate]:
        """Materialise the rest (tests, explanations); the stream is left unchanged."""
        out = [] if self._head is None else [self._head, *self._it]
        self._it = iter(out[1:])
        return out


def _same_cost_runs(merged: Iterable[tuple], tolerance: float) -> Iterator[Candidate]:
    """The candidates of `merged` ((cost, capacity rank, GPUs, position, candidate), by cost), each run of costs
    within `tolerance` of the run's first in (capacity rank, GPUs, cost, position) order."""
    run: list[tuple] = []
    for t in merged:
        if run and t[0] > run[0][0] + tolerance:
            run.sort(key=_run_order)
            yield from (x[-1] for x in run)
            run = []
        run.append(t)
    run.sort(key=_run_order)
    yield from (x[-1] for x in run)


def _run_order(t: tuple) -> tuple:
    return t[1], t[2], t[0], t[3]


class OfferBook:
    """Usable offerings (those in `active` backoff memory removed) and the pools that can launch each."""

    def __init__(self, offerings: Iterable[Offering], active: Iterable[UnavailableOffering], pools: Iterable[Pool]):
        offerings = list(offerings)
        keys = [o.key for o in offerings]
        if len(set(keys)) != len(keys):
            dup = sorted({str(k) for k in keys if keys.count(k) > 1})
            raise ValueError(f"offerings: duplicate offering keys {dup}")
        self.usable, self.backed_off = split_backed_off(offerings, active)
        self._backed_off_offerings = [o for o in offerings if o.key in self.backed_off]
        self.pools = sorted(
            pools, key=lambda p: (existing_tier(p), len(p.queues) if p.queues is not None else 1 << 20)
        )  # stable: inventory order within ties
        by_type: dict[tuple[str, str, str], list[Pool]] = {}
        for p in self.pools:
            by_type.setdefault((p.provider, p.machine_type, p.capacity_type), []).append(p)
        self.launchers: dict[OfferingKey, list[Pool]] = {}
        for o in self.usable:
            k = o.key
            ps = [p for p in by_type.get((k.provider, k.machine_type, k.capacity_type), ()) if p.can_launch(k)]
            if ps:
                self.launchers[k] = ps
        self._base: dict[tuple, dict[int, tuple[list[Candidate], list[Candidate]]]] = {}
        self._pool_base: dict[tuple, list[tuple[str, int, int]]] = {}

    def _shapes(self, cls: UnitClass) -> dict[int, tuple[list[Candidate], list[Candidate]]]:
        """Candidates for the class's constraints regardless of size: GPUs per node ->
        (reservation candidates, market candidates), each sorted by $/h (cached per constraint set)."""
        bkey = (cls.gpu_types, cls.machine_types, cls.spot, cls.flex, cls.queue, cls.pools)
        shapes = self._base.get(bkey)
        if shapes is None:
            shapes = {}
            for o in self.usable:
                k = o.key
                if not (cls.accepts_type(o.gpu_type, k.machine_type) and cls.may_use(k.capacity_type)):
                    continue
                hourly = marginal_hourly(o)
                res, market = shapes.setdefault(o.gpus_per_node, ([], []))
                for p in self.launchers.get(k, ()):
                    if cls.may_use_pool(p):
                        (res if k.capacity_type is CapacityType.RESERVATION else market).append(Candidate(o, p, hourly))
            for res, market in shapes.values():
                res.sort(key=_order)
                market.sort(key=_order)
            self._base[bkey] = shapes
        return shapes

    def existing_pools(self, cls: UnitClass) -> dict[str, tuple[int, int]]:
        """Pools whose nodes `cls` may run on -> (tier, position), cached per constraint set.

        Tier 0 is reservation capacity (paid for either way), 1 spot, 2 the rest: work goes to the
        cheapest running capacity first, so costlier nodes go idle and are scaled down.  Within a
        tier, the most restricted pools (fewer queues) come first, so flexible units leave general
        capacity to units that can use nothing else; then inventory order."""
        bkey = (cls.gpu_types, cls.machine_types, cls.spot, cls.queue, cls.pools)
        base = self._pool_base.get(bkey)
        if base is None:
            base = self._pool_base[bkey] = [
                (p.name, p.gpus_per_node, existing_tier(p))
                for p in self.pools
                if cls.accepts_type(p.gpu_type, p.machine_type)
                and cls.may_use_pool(p)
                and (p.capacity_type is not CapacityType.SPOT or cls.spot)
            ]
        return {name: (tier, i) for i, (name, g, tier) in enumerate(base) if g >= cls.gpus_per_node}

    def streams(
        self, cls: UnitClass, class_size: int, *, shared: bool = False
    ) -> tuple[CandidateStream, CandidateStream, NoCandidate | None]:
        """(reservation candidates, market candidates, why there are none) for one class.

        Order: cost per unit served ($/h x nodes for a gang; $/h / min(G // gpus, class size) for
        single units), then capacity preference, then the smaller shape, then zone and names.  `shared`
        (`Policy.share_nodes`): a single unit's node is counted full (G // gpus units, whatever the class size: the
        next small units take its free GPUs) and the larger shape comes first among equal costs."""
        n, g = cls.nodes, cls.gpus_per_node
        res_groups, market_groups = [], []
        for gpus, (res, market) in self._shapes(cls).items():
            if gpus < g:
                continue
            served = gpus // g if shared else min(gpus // g, class_size)
            factor = float(n) if n > 1 else 1.0 / max(1, served)
            rank = -gpus if shared and n == 1 else gpus
            res_groups.append((factor, rank, res))
            market_groups.append((factor, rank, market))
        keep = None
        if n > 1:

            def keep(c: Candidate) -> bool:
                p = c.pool
                return not (p.compact_placement and p.placement_max_vms and n > p.placement_max_vms)

        tolerance = SAME_PRICE_USD_PER_GPU_HOUR * g * n  # per unit served: g GPUs, on n nodes for a gang
        r, m = CandidateStream(res_groups, keep, tolerance), CandidateStream(market_groups, keep, tolerance)
        none = None if (r.peek() or m.peek()) else self.why_none(cls)
        return r, m, none

    def candidates(self, cls: UnitClass, class_size: int) -> tuple[list[Candidate], NoCandidate | None]:
        """Every candidate for `cls`, best first (reservations first), or why there is none."""
        r, m, none = self.streams(cls, class_size)
        return [*r.remaining(), *m.remaining()], none

    def why_none(self, cls: UnitClass) -> NoCandidate:
        """The reason a class has no candidate at all (slow path, once per class)."""
        matched = no_pool = too_big = 0
        for o in self.usable:
            k = o.key
            if not (cls.accepts(o.gpu_type, k.machine_type, o.gpus_per_node) and cls.may_use(k.capacity_type)):
                continue
            matched += 1
            pools = [p for p in self.launchers.get(k, ()) if cls.may_use_pool(p)]
            if not pools:
                no_pool += 1
            too_big += sum(
                1 for p in pools if p.compact_placement and p.placement_max_vms and cls.nodes > p.placement_max_vms
            )
        backed = sum(
            1
            for o in self._backed_off_offerings
            if cls.accepts(o.gpu_type, o.key.machine_type, o.gpus_per_node) and cls.may_use(o.key.capacity_type)
        )
        if too_big:
            return NoCandidate(
                UnservedReason.GANG_TOO_LARGE,
                f"{cls.nodes} nodes exceed the compact placement limit of every pool that could launch them",
            )
        if no_pool:
            return NoCandidate(
                UnservedReason.NO_POOL,
                f"{no_pool} matching offerings, but no pool serving queue {cls.queue!r}"
                + (" whose nodes satisfy its constraint" if cls.pools is not None else ""),
            )
        if backed:
            return NoCandidate(
                UnservedReason.BACKED_OFF, f"all {backed} matching offerings recently failed (stockout/quota)"
            )
        return NoCandidate(UnservedReason.NO_OFFERING, describe_no_offering(cls))


def describe_no_offering(cls: UnitClass) -> str:
    parts = [f"{cls.gpus_per_node} GPUs per node"]
    if cls.gpu_types:
        parts.append(f"GPU types {sorted(cls.gpu_types)}")
    if cls.machine_types:
        parts.append(f"machine types {sorted(cls.machine_types)}")
    if cls.pools is not None:
        parts.append(f"pools {sorted(cls.pools)} (its constraint)")
    allowed = ["reservation", "on-demand"] + (["spot"] if cls.spot else []) + (["flex-start"] if cls.flex else [])
    parts.append(f"capacity {'/'.join(allowed)}")
    return "no offering has " + ", ".join(parts)


#: the planner's book: an earlier one again while the offerings, the backoff memory and the pools are equal to
#: that call's (`memo.recent_calls`), so its per-class candidate lists are built once between catalog changes
offer_book = recent_calls(4)(OfferBook)
