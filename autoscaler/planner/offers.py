"""Offering choice: which (offering, pool) pairs can serve a class of identical units, cheapest first.

A `UnitClass` groups units that are interchangeable for placement (same shape, type constraints,
queue, effective spot / flex-start rights).  `OfferBook.candidates` lists, for one class, every
launchable (offering, pool) pair ordered by the effective $/h *per unit served*: reservation
capacity costs 0 (it is paid for, so it is filled first); a node of G GPUs serves
min(G // gpus, units in class) single units, which bin-packs small units when only big shapes are
cheap and right-sizes when shapes cost the same per GPU (ties go to the smaller machine).  Then
capacity preference (reservation, on-demand, spot, flex-start), then zone and name for determinism.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from autoscaler.cloud import Offering, OfferingKey
from autoscaler.model import Policy, Pool, UnavailableOffering, UnservedReason, WorkUnit
from autoscaler.planner.backoff import split_backed_off
from fleet.catalog import CapacityType

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

    @classmethod
    def of(cls, unit: WorkUnit, policy: Policy, now: float) -> UnitClass:
        return cls(
            unit.gpus_per_node,
            unit.nodes,
            unit.gpu_types,
            unit.machine_types,
            unit.spot_ok and policy.spot_allowed(unit.queue),
            policy.flex_start_allowed(unit.queue, now - unit.submit_time),
            unit.queue,
        )

    def accepts(self, gpu_type: str, machine_type: str, gpus: int) -> bool:
        return (
            gpus >= self.gpus_per_node
            and (self.gpu_types is None or gpu_type in self.gpu_types)
            and (self.machine_types is None or machine_type in self.machine_types)
        )

    def may_use(self, capacity: CapacityType) -> bool:
        if capacity is CapacityType.SPOT:
            return self.spot
        if capacity is CapacityType.FLEX_START:
            return self.flex
        return True

    def existing_pools(self, pools: Iterable[Pool]) -> list[str]:
        """Pools whose nodes this class may run on (flex-start nodes, once up, serve anyone)."""
        return [
            p.name
            for p in pools
            if p.serves(self.queue)
            and self.accepts(p.gpu_type, p.machine_type, p.gpus_per_node)
            and (p.capacity_type is not CapacityType.SPOT or self.spot)
        ]


@dataclass(frozen=True)
class Candidate:
    offering: Offering
    pool: Pool
    hourly_usd: float  # $/h one new node adds (0 for reservation capacity)
    unit_cost: float  # the ordering cost per unit served

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


def marginal_hourly(o: Offering) -> float:
    return 0.0 if o.key.capacity_type is CapacityType.RESERVATION else o.hourly_usd


class OfferBook:
    """Usable offerings (those in `active` backoff memory removed) and the pools that can launch each."""

    def __init__(self, offerings: Iterable[Offering], active: Iterable[UnavailableOffering], pools: Iterable[Pool]):
        offerings = list(offerings)
        self.usable, self.backed_off = split_backed_off(offerings, active)
        self._backed_off_offerings = [o for o in offerings if o.key in self.backed_off]
        pools = list(pools)
        by_type: dict[tuple[str, str, str], list[Pool]] = {}
        for p in pools:
            by_type.setdefault((p.provider, p.machine_type, p.capacity_type), []).append(p)
        self.launchers: dict[OfferingKey, list[Pool]] = {}
        for o in self.usable:
            k = o.key
            ps = [p for p in by_type.get((k.provider, k.machine_type, k.capacity_type), ()) if p.can_launch(k)]
            if ps:
                self.launchers[k] = ps

    def candidates(self, cls: UnitClass, class_size: int) -> tuple[list[Candidate], NoCandidate | None]:
        """Every (offering, pool) that may serve `cls`, best first; or why there is none."""
        out: list[tuple[tuple, Candidate]] = []
        matched = no_pool = too_big = 0
        for o in self.usable:
            k = o.key
            if not (cls.accepts(o.gpu_type, k.machine_type, o.gpus_per_node) and cls.may_use(k.capacity_type)):
                continue
            matched += 1
            pools = [p for p in self.launchers.get(k, ()) if p.serves(cls.queue)]
            if not pools:
                no_pool += 1
                continue
            hourly = marginal_hourly(o)
            if cls.nodes > 1:
                cost = hourly * cls.nodes
            else:
                cost = hourly / max(1, min(o.gpus_per_node // cls.gpus_per_node, class_size))
            for p in pools:
                if cls.nodes > 1 and p.compact_placement and p.placement_max_vms and cls.nodes > p.placement_max_vms:
                    too_big += 1
                    continue
                order = (round(cost, 6), CAPACITY_RANK[k.capacity_type], o.gpus_per_node, k.zone, str(k), p.name)
                out.append((order, Candidate(o, p, hourly, cost)))
        out.sort(key=lambda t: t[0])
        cands = [c for _, c in out]
        if cands:
            return cands, None
        backed = sum(
            1
            for o in self._backed_off_offerings
            if cls.accepts(o.gpu_type, o.key.machine_type, o.gpus_per_node) and cls.may_use(o.key.capacity_type)
        )
        if too_big:
            return cands, NoCandidate(
                UnservedReason.GANG_TOO_LARGE,
                f"{cls.nodes} nodes exceed the compact placement limit of every pool that could launch them",
            )
        if no_pool:
            return cands, NoCandidate(
                UnservedReason.NO_POOL, f"{no_pool} matching offerings, but no pool serving queue {cls.queue!r}"
            )
        if backed:
            return cands, NoCandidate(
                UnservedReason.BACKED_OFF, f"all {backed} matching offerings recently failed (stockout/quota)"
            )
        return cands, NoCandidate(UnservedReason.NO_OFFERING, describe_no_offering(cls))


def describe_no_offering(cls: UnitClass) -> str:
    parts = [f"{cls.gpus_per_node} GPUs per node"]
    if cls.gpu_types:
        parts.append(f"GPU types {sorted(cls.gpu_types)}")
    if cls.machine_types:
        parts.append(f"machine types {sorted(cls.machine_types)}")
    allowed = ["reservation", "on-demand"] + (["spot"] if cls.spot else []) + (["flex-start"] if cls.flex else [])
    parts.append(f"capacity {'/'.join(allowed)}")
    return "no offering has " + ", ".join(parts)
