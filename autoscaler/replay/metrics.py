"""The numbers of one replayed policy: cost, GPU-hours used and billed, gang waste, waits.

`cost_usd` is the sim cloud's per-second bill (launch request to deletion, at the offering's $/h)
plus the reservation over the run's demand span, the bound's (one figure for every policy of a run: a
commitment is billed whether used or not, so a policy whose last job ends later pays for that in wait,
not in reservation dollars); `gpu_hours_used` is job GPUs x run time (runs lost to preemption included,
also reported apart); `gpu_hours_billed` is GPUs of billed nodes x billed time (the reservation's GPUs
over the same demand span); `partial_gang_gpu_hours` is GPU-hours of nodes that
were up and allocated to a gang while the gang's other nodes were not; `wait` is submission to
first start.

Every policy of a run is scored against the same `LowerBound` (the clairvoyant bound over the demand
span): `cost_ratio = cost_usd / lower_bound_usd`.  With a reservation most of both figures is the sunk
reservation, so `overflow_cost_usd` (what the policy spent beyond the reservation: every node not in
it) is also set against `overflow_bound_usd` (the bound beyond the reservation) as `overflow_ratio`."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import numpy as np

from fleet.catalog import CapacityType

if TYPE_CHECKING:
    from autoscaler.replay.engine import ReplayEngine
    from autoscaler.replay.lower_bound import LowerBound


def percentile(values: np.ndarray, q: float) -> float:
    return float(np.percentile(values, q)) if len(values) else 0.0


def ratio(value: float, bound: float) -> float | None:
    return round(value / bound, 4) if bound > 0 else None


def wait_by_job_gpus(jobs: Iterable[Any]) -> dict[str, dict[str, float]]:
    """Waits by the GPUs a job asks for (all its nodes'): which jobs a policy makes wait.  A p95 over all jobs can
    be set by a tenth of them (the 2-, 4- and 8-GPU jobs of a mostly 1-GPU trace)."""
    by: dict[int, list[float]] = {}
    for j in jobs:
        if j.first_start is not None:
            by.setdefault(j.gpus, []).append(j.first_start - j.submit)
    out: dict[str, dict[str, float]] = {}
    for gpus, values in sorted(by.items()):
        w = np.array(values)
        out[str(gpus)] = {
            "jobs": len(values),
            "wait_p50_s": round(percentile(w, 50), 1),
            "wait_p95_s": round(percentile(w, 95), 1),
            "started_at_once": int((w <= 0).sum()),
        }
    return out


def policy_metrics(engine: ReplayEngine, bound: LowerBound) -> dict[str, Any]:
    """The `policies.<name>` object of `fleet simulate --json` for one finished replay, against the run's
    one `bound`."""
    st = engine.state
    end = engine.t_end if engine.t_end is not None else engine.now
    span = end - engine.t_start
    cloud = engine.cloud
    by_cap = {str(ct): v for ct, v in cloud.ledger.cost_by_capacity(end).items() if v > 0}
    gpu_h_by_cap = {str(ct): v for ct, v in cloud.ledger.gpu_hours_by_capacity(end).items() if v > 0}
    res_cost = cloud.reservation_cost(bound.span_s)
    res_gpus = cloud.reserved_gpus()
    if res_cost > 0 or res_gpus:
        by_cap[str(CapacityType.RESERVATION)] = res_cost
        gpu_h_by_cap[str(CapacityType.RESERVATION)] = res_gpus * bound.span_s / 3600.0
    cost = sum(by_cap.values())
    overflow = cost - res_cost
    waits = np.array([j.first_start - j.submit for j in st.jobs if j.first_start is not None])
    used_h = sum(j.gpu_seconds for j in st.jobs) / 3600.0
    useful_h = sum(j.gpus * j.trace.duration for j in st.jobs if j.end is not None) / 3600.0
    c = engine.counters
    out: dict[str, Any] = {
        "cost_usd": round(cost, 2),
        "lower_bound_usd": round(bound.usd, 2),
        "cost_ratio": ratio(cost, bound.usd),
        "overflow_cost_usd": round(overflow, 2),
        "overflow_bound_usd": round(bound.overflow_usd, 2),
        "overflow_ratio": ratio(overflow, bound.overflow_usd),
        "gpu_hours_used": round(used_h, 2),
        "gpu_hours_billed": round(sum(gpu_h_by_cap.values()), 2),
        "partial_gang_gpu_hours": round(st.partial_gang_gpu_s / 3600.0, 3),
        "wait_p50_s": round(percentile(waits, 50), 1),
        "wait_p95_s": round(percentile(waits, 95), 1),
        "wait_max_s": round(float(waits.max()) if len(waits) else 0.0, 1),
        "jobs": st.done,
        "wait_mean_s": round(float(waits.mean()) if len(waits) else 0.0, 1),
        "jobs_started_at_once": int((waits <= 0).sum()),
        "gpu_hours_lost_to_preemption": round(used_h - useful_h, 2),
        "unused_nodes": st.unused_nodes,
        "unused_node_gpu_hours": round(st.unused_node_gpu_s / 3600.0, 2),
        "preempted_jobs": sum(1 for j in st.jobs if j.preemptions),
        "preemptions": c.preemptions,
        # jobs requeued by the scheduler's partition-priority preemption (spot-tolerant work off reserved nodes)
        "scheduler_preemptions": getattr(engine, "slurm_counters", {}).get("preempt_requeues", 0),
        "cost_by_capacity_usd": {k: round(v, 2) for k, v in sorted(by_cap.items())},
        "gpu_hours_billed_by_capacity": {k: round(v, 2) for k, v in sorted(gpu_h_by_cap.items())},
        "nodes_launched": c.nodes_launched,
        "launch_requests": c.launches,
        "launch_failures": c.launch_failures,
        "decisions": c.decide_calls,
        "span_h": round(span / 3600.0, 3),
        "replay_wall_s": round(engine.wall_s, 2),
    }
    out["wait_by_job_gpus"] = wait_by_job_gpus(st.jobs)
    calls = getattr(engine.policy, "planner_calls", None)
    if calls is not None:
        out["planner_calls"] = calls
    settings = getattr(engine.policy, "settings", None)
    if callable(settings):
        out["settings"] = settings()
    return out
