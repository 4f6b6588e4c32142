"""Per-second billing of simulated nodes, from the launch request to deletion (or preemption).

Kept incremental: closing a record folds it into running totals, so a 60-day replay with tens of
thousands of nodes reads its bill in O(open nodes).  Reservations are billed separately for the
whole span (`reservation_cost`); a VM consuming a reservation adds nothing."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from autoscaler.cloud import OfferingKey
from fleet.catalog import CapacityType


@dataclass
class BillingRecord:
    """One node's bill: `hourly_usd` from `start` until `end` (None while it runs)."""

    name: str
    offering: OfferingKey
    gpus: int
    hourly_usd: float
    start: float
    end: float | None = None
    covered_by_reservation: bool = False

    def seconds(self, now: float) -> float:
        return max(0.0, (self.end if self.end is not None else now) - self.start)

    def cost(self, now: float) -> float:
        return 0.0 if self.covered_by_reservation else self.hourly_usd * self.seconds(now) / 3600.0


class BillingLedger:
    """Every node's billing record, with running totals by capacity type."""

    def __init__(self) -> None:
        self._open: dict[str, BillingRecord] = {}
        self._closed_cost: dict[CapacityType, float] = defaultdict(float)
        self._closed_gpu_s: dict[CapacityType, float] = defaultdict(float)
        self.closed_count = 0
        self.closed: list[BillingRecord] = []  # every closed record, for bills over a time window

    def open(self, record: BillingRecord) -> None:
        if record.name in self._open:
            raise ValueError(f"node {record.name} is already being billed")
        self._open[record.name] = record

    def close(self, name: str, at: float) -> BillingRecord | None:
        rec = self._open.pop(name, None)
        if rec is None:
            return None
        rec.end = max(at, rec.start)
        if not rec.covered_by_reservation:
            ct = rec.offering.capacity_type
            self._closed_cost[ct] += rec.cost(rec.end)
            self._closed_gpu_s[ct] += rec.gpus * rec.seconds(rec.end)
        self.closed_count += 1
        self.closed.append(rec)
        return rec

    def is_open(self, name: str) -> bool:
        return name in self._open

    def cost_by_capacity(self, now: float) -> dict[CapacityType, float]:
        """Node billing so far (reservations excluded: see `reservation_cost`)."""
        out = dict(self._closed_cost)
        for rec in self._open.values():
            if not rec.covered_by_reservation:
                ct = rec.offering.capacity_type
                out[ct] = out.get(ct, 0.0) + rec.cost(now)
        return out

    def gpu_hours_by_capacity(self, now: float) -> dict[CapacityType, float]:
        out = {ct: s / 3600.0 for ct, s in self._closed_gpu_s.items()}
        for rec in self._open.values():
            if not rec.covered_by_reservation:
                ct = rec.offering.capacity_type
                out[ct] = out.get(ct, 0.0) + rec.gpus * rec.seconds(now) / 3600.0
        return out

    def cost(self, now: float) -> float:
        return sum(self.cost_by_capacity(now).values())

    def cost_between(self, start: float, end: float, now: float) -> float:
        """What nodes billed between `start` and `end` (reservation-covered nodes excluded), records open at
        `now` counted up to it: the bill of one window of a continuous replay."""
        total = 0.0
        for rec in (*self.closed, *self._open.values()):
            if rec.covered_by_reservation:
                continue
            a = max(start, rec.start)
            b = min(end, rec.end if rec.end is not None else now)
            if b > a:
                total += rec.hourly_usd * (b - a) / 3600.0
        return total


def reservation_cost(nodes: int, hourly_usd: float, span_s: float) -> float:
    """A reservation bills every slot for the whole span, used or not."""
    return nodes * hourly_usd * max(0.0, span_s) / 3600.0
