"""Run one scenario through several policies: the engine of `fleet simulate` and the benchmark.

Every policy replays the same trace (same spot-tolerant jobs) on a fresh sim cloud built from
the same scenario and seed, and is scored against the same lower bound: the clairvoyant bound over
the demand span (`lower_bound`), one figure for the whole run, so ranking by ratio and ranking by
dollars agree."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from autoscaler.replay.engine import ReplayEngine
from autoscaler.replay.lower_bound import LowerBound, lower_bound
from autoscaler.replay.metrics import policy_metrics
from autoscaler.replay.policy import ReplayPolicy
from autoscaler.replay.scenario import Scenario
from autoscaler.replay.trace import TraceJob, mark_spot_tolerant, peak_concurrent_gpus


def policy_factories() -> dict[str, Callable[[Scenario, Sequence[TraceJob]], ReplayPolicy]]:
    """Every policy `fleet simulate --policy` knows, in report order."""
    from autoscaler.replay.baselines import (
        CaLikePolicy,
        ExactFitPolicy,
        KarpenterLikePolicy,
        SlurmPowerSavePolicy,
        StaticPeakPolicy,
    )
    from autoscaler.replay.gpu_fleet import GpuFleetPolicy

    return {
        "gpu-fleet": lambda s, jobs: GpuFleetPolicy.for_scenario(s, jobs=jobs),
        "static-peak": lambda s, jobs: StaticPeakPolicy(peak_gpus=peak_concurrent_gpus(jobs)),
        "slurm-power-save": lambda s, jobs: SlurmPowerSavePolicy(),
        "ca-like": lambda s, jobs: CaLikePolicy(seed=s.seed),
        "karpenter-like": lambda s, jobs: KarpenterLikePolicy(),
        "exact-fit": lambda s, jobs: ExactFitPolicy(),
    }


POLICY_NAMES = ("gpu-fleet", "static-peak", "slurm-power-save", "ca-like", "karpenter-like", "exact-fit")


@dataclass
class RunResult:
    scenario: Scenario
    bound: LowerBound
    jobs: list[TraceJob]
    engines: dict[str, ReplayEngine] = field(default_factory=dict)
    metrics: dict[str, dict[str, Any]] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        sc = self.scenario.model_dump(mode="json")
        sc.update(
            {
                "jobs": len(self.jobs),
                "spot_tolerant_jobs": sum(j.spot_ok for j in self.jobs),
                "peak_demand_gpus": peak_concurrent_gpus(self.jobs),
                "demand_gpu_hours": round(self.bound.demand_gpu_hours, 2),
                "on_demand_usd_per_gpu_hour": round(self.bound.on_demand_gpu_rate, 4),
                "spot_usd_per_gpu_hour": round(self.bound.spot_gpu_rate, 4) if self.bound.spot_gpu_rate else None,
                "reservation_usd": round(self.bound.reservation_usd, 2),
                "lower_bound_usd": round(self.bound.usd, 2),
                "overflow_bound_usd": round(self.bound.overflow_usd, 2),
                "demand_span_h": round(self.bound.span_s / 3600.0, 3),
                "prices": "catalog list prices (fleet/catalog/data/gcp_prices.csv), per-second billing",
                "policies": list(self.metrics),
            }
        )
        return {"scenario": sc, "policies": self.metrics}


def resolve_policies(names: str | Sequence[str]) -> list[str]:
    """`all`, one name, or a comma-separated list -> known policy names (error names the bad one)."""
    raw = [names] if isinstance(names, str) else list(names)
    out: list[str] = []
    for item in raw:
        for name in (p.strip() for p in item.split(",")):
            if not name:
                continue
            if name == "all":
                out.extend(p for p in POLICY_NAMES if p not in out)
            elif name in POLICY_NAMES:
                if name not in out:
                    out.append(name)
            else:
                raise ValueError(f"--policy: unknown policy {name!r} (known: all, {', '.join(POLICY_NAMES)})")
    if not out:
        raise ValueError("--policy: no policy given")
    return out


def run_scenario(
    jobs: Sequence[TraceJob],
    scenario: Scenario,
    policies: Sequence[str] = POLICY_NAMES,
    progress: Callable[[str, dict[str, Any]], None] | None = None,
) -> RunResult:
    biggest = max(m.gpu_count for m in scenario.machines)
    for j in jobs:
        if j.shape()[1] > biggest:
            raise ValueError(
                f"--trace: job {j.id} needs {j.shape()[1]} GPUs on one node; the largest {scenario.machine_family} "
                f"machine has {biggest}"
            )
    marked = mark_spot_tolerant(list(jobs), scenario.spot_fraction, scenario.seed)
    bound = lower_bound(marked, scenario)
    result = RunResult(scenario, bound, marked)
    factories = policy_factories()
    for name in policies:
        engine = ReplayEngine(marked, scenario, factories[name](scenario, marked)).run()
        result.engines[name] = engine
        result.metrics[name] = policy_metrics(engine, bound)
        if progress:
            progress(name, result.metrics[name])
    return result
