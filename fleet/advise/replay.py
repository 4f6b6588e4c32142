"""The advisor's one adapter to the trace replay: one (reservation size, seed) -> the figures of every window.

One continuous replay per (size, seed) of every job up to the end of the last window; each window (a fold of
the choice window, the test window) is then billed by the time slice it covers: what nodes billed inside it
(`BillingLedger.cost_between`), the reservation for its calendar hours, the waits of the jobs submitted in it.
A window is thus scored as the middle of continuous operation, as a commitment runs: no cold start at its
beginning, no drain at its end.  The planner decides causally (it never sees a job before its submission),
so a window's figures do not depend on the jobs after it: choosing on the train windows leaks nothing of
the test window.

One replay serves every term: the planner treats a reservation as paid for whatever its rate, so its
decisions, its overflow spend and the waits do not depend on the term; the term only prices the reservation
(`tests/advise` checks the claim by replaying at two rates).

Everything here is a top-level function over plain, picklable values, so a process pool and a Ray cluster
run exactly the same code and give identical figures for the same seeds."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from autoscaler.replay.lower_bound import per_gpu_rates
from autoscaler.replay.run import run_scenario
from autoscaler.replay.scenario import Scenario
from autoscaler.replay.trace import TraceJob

POLICY = "gpu-fleet"


@dataclass(frozen=True)
class Slice:
    name: str
    start_s: float
    end_s: float

    @property
    def hours(self) -> float:
        return (self.end_s - self.start_s) / 3600.0


@dataclass(frozen=True)
class Task:
    """One replay of the grid: every job up to the end of the last slice, scored per slice."""

    jobs: tuple[TraceJob, ...]
    slices: tuple[Slice, ...]
    reserved_nodes: int
    seed: int
    machine_family: str
    region: str
    spot_fraction: float
    stockout_rate: float


@dataclass(frozen=True)
class Outcome:
    """What one replay measured in one window; costs exclude the reservation, which `recommend` prices per term."""

    window: str
    reserved_nodes: int
    seed: int
    overflow_usd: float  # what nodes not covered by the reservation billed inside the window
    overflow_bound_usd: float  # the clairvoyant bound on that part (demand beyond the reserved GPUs, in the window)
    reserved_gpus: int
    reserved_gpu_hours_demanded: float  # demand the reservation could carry at best (min(demand, reserved))
    wait_p50_s: float  # jobs submitted in the window
    wait_p95_s: float
    partial_gang_gpu_hours: float  # of the whole replay
    jobs: int  # submitted in the window
    replay_wall_s: float
    span_hours: float  # the window's calendar hours: the reservation is billed for them

    def to_json(self) -> dict[str, object]:
        return asdict(self)


def scenario_for(task: Task) -> Scenario:
    return Scenario(
        trace="advise",
        machine_family=task.machine_family,
        region=task.region,
        reserved_nodes=task.reserved_nodes,
        spot_fraction=task.spot_fraction,
        stockout_rate=task.stockout_rate,
        seed=task.seed,
    )


def evaluate(task: Task) -> tuple[Outcome, ...]:
    """Replay `task.jobs` through the gpu-fleet policy with `task.reserved_nodes` reserved nodes, once."""
    sc = scenario_for(task)
    gpus = task.reserved_nodes * (sc.reservation_machine.gpu_count if sc.reservation_machine else 0)
    result = run_scenario(list(task.jobs), sc, [POLICY])
    engine = result.engines[POLICY]
    m = result.metrics[POLICY]
    end = engine.t_end if engine.t_end is not None else engine.now
    ledger = engine.cloud.ledger
    od_rate, spot_rate = per_gpu_rates(sc)
    spot = spot_rate if (spot_rate is not None and sc.spot_fraction > 0 and spot_rate < od_rate) else None
    marked = result.jobs  # spot tolerance as the replay marked it
    submit = np.array([j.submit for j in engine.state.jobs])
    first = np.array([np.nan if j.first_start is None else j.first_start for j in engine.state.jobs])
    out = []
    for s in task.slices:
        inside = (submit >= s.start_s) & (submit < s.end_s)
        waits = (first - submit)[inside & ~np.isnan(first)]
        out.append(
            Outcome(
                window=s.name,
                reserved_nodes=task.reserved_nodes,
                seed=task.seed,
                overflow_usd=round(ledger.cost_between(s.start_s, s.end_s, end), 4),
                overflow_bound_usd=round(_bound_between(marked, gpus, od_rate, spot, s), 4),
                reserved_gpus=gpus,
                reserved_gpu_hours_demanded=round(_covered_gpu_hours(marked, gpus, s), 4),
                wait_p50_s=float(np.percentile(waits, 50)) if len(waits) else 0.0,
                wait_p95_s=float(np.percentile(waits, 95)) if len(waits) else 0.0,
                partial_gang_gpu_hours=float(m["partial_gang_gpu_hours"]),
                jobs=int(inside.sum()),
                replay_wall_s=float(m["replay_wall_s"]),
                span_hours=round(s.hours, 4),
            )
        )
    return tuple(out)


def _demand(jobs: list[TraceJob], spot_ok: bool | None) -> tuple[np.ndarray, np.ndarray]:
    """The demand curve (every job running from its submission for its duration): change times and levels."""
    sel = [j for j in jobs if spot_ok is None or j.spot_ok == spot_ok]
    if not sel:
        return np.array([0.0]), np.array([0.0])
    t = np.array([x for j in sel for x in (j.submit, j.submit + j.duration)])
    d = np.array([x for j in sel for x in (j.gpus, -j.gpus)], dtype=float)
    order = np.argsort(t, kind="stable")
    return t[order], np.cumsum(d[order])


def _integrate(t: np.ndarray, level: np.ndarray, s: Slice) -> tuple[np.ndarray, np.ndarray]:
    """(durations, levels) of the step function clipped to the slice."""
    edges = np.clip(np.append(t, s.end_s), s.start_s, s.end_s)
    return np.diff(edges), level


def _covered_gpu_hours(jobs: list[TraceJob], reserved_gpus: int, s: Slice) -> float:
    """Integral over the slice of min(demand, reserved GPUs): the most of the paid-for GPU-hours demand could fill."""
    if reserved_gpus <= 0:
        return 0.0
    t, level = _demand(jobs, None)
    dt, lv = _integrate(t, level, s)
    return float((np.minimum(lv, reserved_gpus) * dt).sum() / 3600.0)


def _bound_between(jobs: list[TraceJob], reserved: int, od_rate: float, spot_rate: float | None, s: Slice) -> float:
    """The clairvoyant bound on the overflow inside the slice (autoscaler.replay.lower_bound, clipped): demand
    beyond the reserved GPUs at the cheapest rate it may use, the reservation covering on-demand-only work first."""
    if spot_rate is None:
        t, level = _demand(jobs, None)
        dt, lv = _integrate(t, level, s)
        return float((np.maximum(0.0, lv - reserved) * dt).sum() * od_rate / 3600.0)
    t_od, l_od = _demand(jobs, False)
    t_sp, l_sp = _demand(jobs, True)
    grid = np.unique(np.concatenate([t_od, t_sp, [s.start_s, s.end_s]]))
    grid = grid[(grid >= s.start_s) & (grid <= s.end_s)]
    at = grid[:-1]
    od = np.where(np.searchsorted(t_od, at, side="right") > 0, l_od[np.searchsorted(t_od, at, side="right") - 1], 0)
    sp = np.where(np.searchsorted(t_sp, at, side="right") > 0, l_sp[np.searchsorted(t_sp, at, side="right") - 1], 0)
    od_excess = np.maximum(0.0, od - reserved)
    left = np.maximum(0.0, reserved - od)
    sp_excess = np.maximum(0.0, sp - left)
    dt = np.diff(grid)
    return float(((od_excess * od_rate + sp_excess * spot_rate) * dt).sum() / 3600.0)
