"""The advisor's one adapter to the trace replay: one grid point (window, reservation size, seed) -> figures.

One replay per (window, size, seed) serves every term: the planner treats a reservation as paid for
whatever its rate, so the replay's decisions, its overflow spend and its waits do not depend on the term;
the term only prices the reservation.  `tests/advise` checks that claim against replays run at two rates.
The reservation is billed from the window's first submission until its last job ends (`span_hours`, as the
replay bills it): a job submitted late in a window runs on after it, on reserved capacity that is paid for
those hours too; billing only the window's calendar days would hand the reservation free hours and bias the
advice toward reserving too much.

Everything here is a top-level function over plain, picklable values, so a process pool and a Ray cluster
run exactly the same code and give identical figures for the same seeds."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from autoscaler.replay.lower_bound import lower_bound
from autoscaler.replay.run import run_scenario
from autoscaler.replay.scenario import Scenario
from autoscaler.replay.trace import TraceJob

POLICY = "gpu-fleet"


@dataclass(frozen=True)
class Task:
    """One replay of the grid."""

    window: str
    window_hours: float
    jobs: tuple[TraceJob, ...]
    reserved_nodes: int
    seed: int
    machine_family: str
    region: str
    spot_fraction: float
    stockout_rate: float


@dataclass(frozen=True)
class Outcome:
    """What one replay measured; costs exclude the reservation, which `recommend` prices per term."""

    window: str
    reserved_nodes: int
    seed: int
    overflow_usd: float  # every node not covered by the reservation, per-second billing
    overflow_bound_usd: float  # the clairvoyant bound on that part (demand beyond the reserved GPUs)
    reserved_gpus: int
    reserved_gpu_hours_demanded: float  # demand the reservation could carry at best (min(demand, reserved))
    wait_p50_s: float
    wait_p95_s: float
    partial_gang_gpu_hours: float
    jobs: int
    replay_wall_s: float
    span_hours: float = 0.0  # the reservation is billed for this: the window's start until its last job ends

    def to_json(self) -> dict[str, object]:
        return asdict(self)


def scenario_for(task: Task) -> Scenario:
    return Scenario(
        trace=f"advise:{task.window}",
        machine_family=task.machine_family,
        region=task.region,
        reserved_nodes=task.reserved_nodes,
        spot_fraction=task.spot_fraction,
        stockout_rate=task.stockout_rate,
        seed=task.seed,
    )


def evaluate(task: Task) -> Outcome:
    """Replay `task.jobs` through the gpu-fleet policy with `task.reserved_nodes` reserved nodes."""
    sc = scenario_for(task)
    gpus = task.reserved_nodes * (sc.reservation_machine.gpu_count if sc.reservation_machine else 0)
    if not task.jobs:  # a window with no demand: nothing runs, the commitment is paid all the same
        return Outcome(
            task.window, task.reserved_nodes, task.seed, 0.0, 0.0, gpus, 0.0, 0.0, 0.0, 0.0, 0, 0.0, task.window_hours
        )
    result = run_scenario(list(task.jobs), sc, [POLICY])
    engine = result.engines[POLICY]
    m = result.metrics[POLICY]
    end = engine.t_end if engine.t_end is not None else engine.now
    overflow = engine.cloud.ledger.cost(end)
    bound = lower_bound(result.jobs, sc)
    return Outcome(
        window=task.window,
        reserved_nodes=task.reserved_nodes,
        seed=task.seed,
        overflow_usd=round(overflow, 4),
        overflow_bound_usd=round(bound.usd - bound.reservation_usd, 4),
        reserved_gpus=gpus,
        reserved_gpu_hours_demanded=round(_covered_gpu_hours(task.jobs, gpus), 4),
        wait_p50_s=float(m["wait_p50_s"]),
        wait_p95_s=float(m["wait_p95_s"]),
        partial_gang_gpu_hours=float(m["partial_gang_gpu_hours"]),
        jobs=int(m["jobs"]),
        replay_wall_s=float(m["replay_wall_s"]),
        span_hours=round(max(task.window_hours, (end - engine.t_start) / 3600.0), 4),
    )


def _covered_gpu_hours(jobs: tuple[TraceJob, ...], reserved_gpus: int) -> float:
    """Integral of min(demand(t), reserved GPUs): the most of the paid-for GPU-hours demand could fill."""
    if reserved_gpus <= 0 or not jobs:
        return 0.0
    t = np.array([x for j in jobs for x in (j.submit, j.submit + j.duration)])
    d = np.array([x for j in jobs for x in (j.gpus, -j.gpus)])
    order = np.argsort(t, kind="stable")
    t, d = t[order], d[order]
    level = np.cumsum(d)[:-1]
    dt = np.diff(t)
    return float((np.minimum(level, reserved_gpus) * dt).sum() / 3600.0)
