"""Where gpu-fleet's cost above the lower bound goes, on one run (issue 8, the reservation runs).

    nice -n 10 .venv/bin/python bench/reserve_decompose.py --trace ../shared/data/traces/itp/cluster04.csv \
        --reserved-nodes 40 --spot-fraction 0.3 --stockout-rate 0.2 [--policy gpu-fleet] [--json]

Replays one policy on the simulated Slurm (or the generic engine) and splits its bill against the run's bound
(`autoscaler/replay/lower_bound.py`):

- reservation: sunk, identical in policy and bound;
- overflow billed, by capacity type and shape, split into GPU-hours that ran jobs (`work`), that booted
  (launch request to ready) and that were up with no job on them (`idle`: empty nodes and spare GPUs);
- the excess as volume + mix + boots and idle (the reservation is billed over the bound's span for every policy,
  `autoscaler/replay/metrics.py`, so it adds nothing to the excess);
- overflow *work* against the bound's overflow: the bound prices, at every instant, only the demand beyond the
  reserved GPUs, spot-tolerant work at the spot rate.  Work that ran on overflow while reserved GPUs sat idle is
  *fragmentation* (the time integral of min(idle reserved GPUs, GPUs working on overflow)); spot-tolerant work
  run on on-demand (stockouts, backoff) is priced at the on-demand/spot difference; work lost to preemptions
  and re-run is counted apart.

Figures only; nothing here is part of the policy.  Time-weighted sweeps over job intervals."""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _instrument(engine: Any) -> list[tuple[float, float, int, str, str, bool]]:
    """Record each run attempt of each job: (start, end, GPUs, capacity type, machine type, spot_ok).  Wraps the
    simulated Slurm's launch and release (bench-only instrumentation)."""
    runs: list[tuple[float, float, int, str, str, bool]] = []
    overflow_starts = engine.overflow_starts = []
    open_: dict[int, tuple[float, list[tuple[str, str, int]]]] = {}
    start0, release0 = engine._launch, engine._release_job

    def start(job: Any, now: float) -> bool:
        if job.state.value == "configuring" and all(n.registered for n in job.placed_on):
            over = [n for n in job.placed_on if str(n.capacity_type) != "reservation"]
            if over:
                res = [nm.node for nm in engine.names.values() if str(nm.pool.capacity_type) == "reservation"]
                pool = (
                    next(p for p in engine.pool_list if str(p.capacity_type) == "reservation")
                    if res or any(str(p.capacity_type) == "reservation" for p in engine.pool_list)
                    else None
                )
                down = (pool.max_nodes - len(res)) if pool else 0
                free_total = sum(n.free for n in res if n.registered) + 8 * down
                free_max = max([n.free for n in res if n.registered] + ([8] if down else [0]))
                overflow_starts.append(
                    (job.gpus_per_node, job.nodes, free_total, free_max, now - job.submit, job.trace.duration)
                )
        started = start0(job, now)
        if job.state.value == "running" and job.idx not in open_:
            open_[job.idx] = (
                now,
                [(str(n.capacity_type), n.offering.machine_type, job.gpus_per_node) for n in job.placed_on],
            )
        return started

    def release(job: Any, now: float) -> None:
        got = open_.pop(job.idx, None)
        if got is not None:
            t0, parts = got
            for ct, m, g in parts:
                runs.append((t0, now, g, ct, m, job.spot_ok))
        release0(job, now)

    engine._launch = start
    engine._release_job = release
    return runs


def _bound_overflow_gpu_h(jobs: list[Any], reserved: int, use_spot: bool) -> tuple[float, float]:
    """The bound's overflow GPU-hours at the on-demand and the spot rate (as `lower_bound` sweeps them)."""
    ev: list[tuple[float, int, int]] = []
    for j in jobs:
        if use_spot and j.spot_ok:
            ev += [(j.submit, 0, j.gpus), (j.submit + j.duration, 0, -j.gpus)]
        else:
            ev += [(j.submit, j.gpus, 0), (j.submit + j.duration, -j.gpus, 0)]
    ev.sort()
    od = sp = 0.0
    a = b = 0
    prev = ev[0][0]
    for t, x, y in ev:
        dt = t - prev
        if dt > 0:
            od += max(0, a - reserved) * dt
            sp += max(0, b - max(0, reserved - a)) * dt
            prev = t
        a += x
        b += y
    return od / 3600.0, sp / 3600.0


def decompose(jobs: list[Any], scenario: Any, policy_name: str) -> dict[str, Any]:
    from autoscaler.replay.lower_bound import lower_bound
    from autoscaler.replay.metrics import policy_metrics
    from autoscaler.replay.run import policy_factories, replay_engine
    from autoscaler.replay.trace import mark_spot_tolerant

    marked = mark_spot_tolerant(list(jobs), scenario.spot_fraction, scenario.seed)
    bound = lower_bound(marked, scenario)
    policy = policy_factories()[policy_name](scenario, marked)
    engine = replay_engine(marked, scenario, policy)
    runs = _instrument(engine) if hasattr(engine, "_launch") else []
    engine.run()
    m = policy_metrics(engine, bound)
    end = engine.t_end if engine.t_end is not None else engine.now
    od_rate, spot_rate = bound.on_demand_gpu_rate, bound.spot_gpu_rate
    reserved = scenario.reserved_nodes * (scenario.reservation_machine.gpu_count if scenario.reservation_machine else 0)

    # billed overflow GPU-hours by (capacity, machine): total, booting
    billed: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    ready_at = {}
    for n in getattr(engine, "_all_nodes_seen", []):
        ready_at[n.name] = n.ready_at
    for rec in (*engine.cloud.ledger.closed, *engine.cloud.ledger._open.values()):
        if rec.covered_by_reservation:
            continue
        key = f"{rec.offering.capacity_type}/{rec.offering.machine_type}"
        e = rec.end if rec.end is not None else end
        billed[key]["gpu_h"] += rec.gpus * (e - rec.start) / 3600.0
        billed[key]["usd"] += rec.hourly_usd * (e - rec.start) / 3600.0
        billed[key]["nodes"] += 1
    boot_s = scenario.boot_seconds
    for key, b in billed.items():
        g = int(key.rsplit("-", 1)[1].rstrip("g")) if key.rsplit("-", 1)[1].endswith("g") else 8
        b["boot_gpu_h"] = b["nodes"] * g * boot_s / 3600.0  # every launch boots once (launch to ready)
    work: dict[str, float] = defaultdict(float)
    for t0, t1, g, ct, mt, _ in runs:
        work[f"{ct}/{mt}"] += g * (t1 - t0) / 3600.0
    # fragmentation: reserved GPUs idle while overflow GPUs work; spot-ok work on on-demand
    ev: list[tuple[float, int, int, int]] = []  # t, d reserved used, d overflow used, d spot-ok on on-demand
    for t0, t1, g, ct, _, sok in runs:
        r = g if ct == "reservation" else 0
        o = 0 if ct == "reservation" else g
        s = g if (sok and ct == "on-demand") else 0
        ev += [(t0, r, o, s), (t1, -r, -o, -s)]
    ev.sort()
    frag_gpu_s = spot_on_od_gpu_s = res_idle_gpu_s = 0.0
    ru = ou = so = 0
    prev = ev[0][0] if ev else 0.0
    for t, a, b, c in ev:
        dt = t - prev
        if dt > 0:
            idle_res = max(0, reserved - ru)
            res_idle_gpu_s += idle_res * dt
            frag_gpu_s += min(idle_res, ou) * dt
            spot_on_od_gpu_s += so * dt
            prev = t
        ru += a
        ou += b
        so += c
    over_usd = m["overflow_cost_usd"]
    # the bound's overflow by rate (reserved GPUs cover on-demand-only demand first), and the policy's
    b_od, b_spot = _bound_overflow_gpu_h(marked, reserved, spot_rate is not None)
    p_od = sum(v for k, v in work.items() if k.startswith("on-demand/"))
    p_spot = sum(v for k, v in work.items() if k.startswith("spot/"))
    mix_b = b_od / max(b_od + b_spot, 1e-9)
    at_bound_mix = (p_od + p_spot) * (mix_b * od_rate + (1 - mix_b) * (spot_rate or od_rate))
    at_policy_rates = p_od * od_rate + p_spot * (spot_rate or od_rate)
    out = {
        "policy": policy_name,
        "cost_usd": m["cost_usd"],
        "bound_usd": round(bound.usd, 2),
        "ratio": m["cost_ratio"],
        "excess_usd": round(m["cost_usd"] - bound.usd, 2),
        "reservation_usd": round(bound.reservation_usd, 2),
        "overflow_usd": over_usd,
        "overflow_bound_usd": round(bound.overflow_usd, 2),
        "wait_p50_s": m["wait_p50_s"],
        "wait_p95_s": m["wait_p95_s"],
        "rates_usd_per_gpu_h": {"on_demand": round(od_rate, 4), "spot": spot_rate and round(spot_rate, 4)},
        "overflow_by_capacity_shape": {
            k: {
                "usd": round(v["usd"], 0),
                "nodes": int(v["nodes"]),
                "billed_gpu_h": round(v["gpu_h"], 0),
                "work_gpu_h": round(work.get(k, 0.0), 0),
                "boot_gpu_h": round(v["boot_gpu_h"], 0),
                "idle_gpu_h": round(v["gpu_h"] - work.get(k, 0.0) - v["boot_gpu_h"], 0),
            }
            for k, v in sorted(billed.items())
        },
        "bound_overflow_gpu_h": {"on_demand": round(b_od, 0), "spot": round(b_spot, 0)},
        "overflow_work_gpu_h": {"on_demand": round(p_od, 0), "spot": round(p_spot, 0)},
        "excess_volume_usd": round(at_bound_mix - bound.overflow_usd, 0),  # more overflow work, at the bound's mix
        "excess_mix_usd": round(at_policy_rates - at_bound_mix, 0),  # the same work, at the policy's od/spot mix
        "excess_boot_idle_usd": round(over_usd - at_policy_rates, 0),  # overflow billed beyond its work
        "reserved_work_gpu_h": round(work.get(f"reservation/{scenario.reservation_machine.name}", 0.0), 0)
        if scenario.reservation_machine
        else 0.0,
        "reserved_idle_gpu_h": round(res_idle_gpu_s / 3600.0, 0),
        "fragmentation_gpu_h": round(frag_gpu_s / 3600.0, 0),
        "fragmentation_usd_at_od": round(frag_gpu_s / 3600.0 * od_rate, 0),
        "spot_ok_work_on_on_demand_gpu_h": round(spot_on_od_gpu_s / 3600.0, 0),
        "spot_ok_on_od_extra_usd": round(spot_on_od_gpu_s / 3600.0 * (od_rate - (spot_rate or od_rate)), 0),
        "overflow_starts_gpu_h": _classify(getattr(engine, "overflow_starts", [])),
        "gpu_hours_lost_to_preemption": m["gpu_hours_lost_to_preemption"],
        "preemptions": m["preemptions"],
        "launch_failures": m["launch_failures"],
    }
    return out


def _classify(starts: list[tuple[int, int, int, int, float, float]]) -> dict[str, float]:
    """GPU-hours of jobs that ran on overflow, by the reservation's state when they started: `whole_node_free`
    (a reserved node had room for the job's GPUs per node: it freed while the job was held or booted),
    `room_but_fragmented` (the reserved GPUs free in total could hold the job, no single node could), `full`."""
    out: dict[str, float] = defaultdict(float)
    for g, n, free_total, free_max, _, dur in starts:
        k = "whole_node_free" if free_max >= g else ("room_but_fragmented" if free_total >= g * n else "full")
        shape = "gang" if n > 1 else f"{g}g"
        out[f"{shape}/{k}"] += g * n * dur / 3600.0
    return {k: round(v, 0) for k, v in sorted(out.items())}


def main() -> int:
    from autoscaler.replay.scenario import Scenario
    from autoscaler.replay.synth import load_source

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trace", required=True)
    ap.add_argument("--policy", default="gpu-fleet")
    ap.add_argument("--reserved-nodes", type=int, default=0)
    ap.add_argument("--spot-fraction", type=float, default=0.0)
    ap.add_argument("--stockout-rate", type=float, default=0.0)
    ap.add_argument("--preemption-rate", type=float, default=None)
    ap.add_argument("--machine-family", default=None)
    ap.add_argument("--region", default=None)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    _, jobs = load_source(a.trace)
    kw: dict[str, Any] = {"reserved_nodes": a.reserved_nodes, "spot_fraction": a.spot_fraction}
    for field in ("machine_family", "region"):
        if getattr(a, field) is not None:
            kw[field] = getattr(a, field)
    kw["stockout_rate"] = a.stockout_rate
    if a.preemption_rate is not None:
        kw["preemption_rate_per_hour"] = a.preemption_rate
    out = decompose(jobs, Scenario(trace=a.trace, **kw), a.policy)
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
