"""The clairvoyant lower bound on what a trace can cost.

Reserved capacity costs its price for the whole span, used or not.  On top of it, at every
instant, the GPUs the trace demands (every job running from its submission for its duration)
beyond the reserved GPUs are priced at the cheapest per-GPU rate the work may use: on-demand for
all work, spot for spot-tolerant work when there is a spot price.  Capacity appears instantly and
exactly, nothing boots, nothing idles.  Reserved GPUs cover the demand whose alternative is the
most expensive first (that is what minimises the total).  A sweep over the demand curve."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from autoscaler.replay.scenario import Scenario
from autoscaler.replay.trace import TraceJob


@dataclass(frozen=True)
class LowerBound:
    usd: float
    reservation_usd: float
    on_demand_gpu_rate: float  # cheapest $/GPU-h of any shape the work may use
    spot_gpu_rate: float | None
    span_s: float
    demand_gpu_hours: float

    @property
    def overflow_usd(self) -> float:
        """The bound beyond the reservation: demand the reserved GPUs cannot cover, at the cheapest rate."""
        return self.usd - self.reservation_usd


def per_gpu_rates(scenario: Scenario) -> tuple[float, float | None]:
    """Cheapest on-demand and spot $/GPU-hour among the scenario's machine types."""
    od: list[float] = []
    spot: list[float] = []
    for m in scenario.machines:
        price = m.price(scenario.region)
        assert price is not None
        od.append(price.on_demand / m.gpu_count)
        if price.spot is not None:
            spot.append(price.spot / m.gpu_count)
    return min(od), (min(spot) if spot else None)


def lower_bound(jobs: Sequence[TraceJob], scenario: Scenario, span_s: float | None = None) -> LowerBound:
    """`span_s` is how long the reservation is billed (default: first submission to the last
    demanded second)."""
    od_rate, spot_rate = per_gpu_rates(scenario)
    use_spot = spot_rate is not None and scenario.spot_fraction > 0 and spot_rate < od_rate
    events: list[tuple[float, int, int]] = []  # (t, delta on-demand-only GPUs, delta spot-ok GPUs)
    for j in jobs:
        if use_spot and j.spot_ok:
            events += [(j.submit, 0, j.gpus), (j.submit + j.duration, 0, -j.gpus)]
        else:
            events += [(j.submit, j.gpus, 0), (j.submit + j.duration, -j.gpus, 0)]
    events.sort()
    t0 = events[0][0]
    t_last = events[-1][0]
    reserved = scenario.reserved_nodes * (scenario.reservation_machine.gpu_count if scenario.reservation_machine else 0)
    cost = 0.0
    gpu_s = 0.0
    d_od = d_spot = 0
    prev = t0
    for t, a, b in events:
        dt = t - prev
        if dt > 0:
            gpu_s += (d_od + d_spot) * dt
            left = reserved
            od_excess = max(0, d_od - left)
            left = max(0, left - d_od)
            spot_excess = max(0, d_spot - left)
            cost += dt * (od_excess * od_rate + spot_excess * (spot_rate if use_spot else od_rate)) / 3600.0  # type: ignore[operator]
            prev = t
        d_od += a
        d_spot += b
    span = (t_last - t0) if span_s is None else span_s
    res_usd = scenario.reserved_nodes * (scenario.reservation_hourly_usd or 0.0) * span / 3600.0
    return LowerBound(cost + res_usd, res_usd, od_rate, spot_rate if use_spot else None, span, gpu_s / 3600.0)


def boot_floor_usd(jobs: Sequence[TraceJob], scenario: Scenario, bound: LowerBound | None = None) -> float:
    """The lower bound plus what boots alone add: how far they put the bound out of reach.

    Capacity beyond the reservation that the demand curve adds at some instant either boots
    (`boot_seconds` billed before it can work) or was kept idle since demand last fell.  Each GPU of
    an upward step is matched with the most recently released GPU (LIFO) and costs min(boot, idle
    gap) GPU-seconds; the first GPUs up always boot.  Priced per GPU at the cheapest rate any of the
    work may use (spot when the scenario has spot-tolerant work), so it stays a floor: a clairvoyant
    policy that starts every job at its submission, on capacity of any size, pays at least this.  A
    policy that makes jobs wait for busy capacity reshapes the demand curve and can pay less."""
    lb = bound or lower_bound(jobs, scenario)
    reserved = scenario.reserved_nodes * (scenario.reservation_machine.gpu_count if scenario.reservation_machine else 0)
    rate = min(r for r in (lb.on_demand_gpu_rate, lb.spot_gpu_rate) if r is not None) / 3600.0
    events: list[tuple[float, int]] = []
    for j in jobs:
        events += [(j.submit, j.gpus), (j.submit + j.duration, -j.gpus)]
    events.sort(key=lambda e: (e[0], e[1]))  # ends before starts at the same instant
    boot = scenario.boot_seconds
    released: list[list[float]] = []  # LIFO of [release time, GPUs]
    demand = 0
    extra_s = 0.0
    i = 0
    while i < len(events):
        t = events[i][0]
        delta = 0
        while i < len(events) and events[i][0] == t:
            delta += events[i][1]
            i += 1
        before = max(0, demand - reserved)
        demand += delta
        after = max(0, demand - reserved)
        if after < before:
            released.append([t, before - after])
        elif after > before:
            need = after - before
            while need and released:
                rt, n = released[-1]
                take = min(n, need)
                extra_s += take * min(boot, t - rt)
                need -= take
                if take == n:
                    released.pop()
                else:
                    released[-1][1] = n - take
            extra_s += need * boot
    return lb.usd + extra_s * rate
