"""`fleet simulate --scheduler kueue`: every policy replayed behind the same Kueue admission gate.

What differs from the Slurm path (`run.py`), and why:

- every policy runs on the generic engine with a fresh `KueueGate` (same queues, same team of each job): a job
  reaches the policy only once Kueue admits it, so the baselines face the same admitted demand as gpu-fleet;
- gpu-fleet is the Kubernetes daemon's loop (`gpu_fleet_kube.py`: a ProvisioningRequest per admitted workload,
  one gang unit, the same planner), not the Slurm power-save driver;
- slurm-power-save is Slurm's own power saving: it has no Kubernetes form and is not run (asking for it is an
  error);
- static-peak is sized to the peak of the admitted demand (`admitted_schedule`), which quota caps;
- the lower bound is the clairvoyant bound over the admitted demand, the trace's raw-demand bound is reported
  beside it (`raw_lower_bound_usd`), and each policy's wait is split into quota and provisioning parts.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from autoscaler.replay.engine import ReplayEngine
from autoscaler.replay.kueue_admission import ClusterQueue
from autoscaler.replay.kueue_gate import KueueGate, KueueSetup, admitted_schedule
from autoscaler.replay.lower_bound import LowerBound, lower_bound
from autoscaler.replay.metrics import percentile
from autoscaler.replay.policy import ReplayPolicy
from autoscaler.replay.scenario import Scenario
from autoscaler.replay.trace import TraceJob, peak_concurrent_gpus

#: policies with no Kubernetes form (they are Slurm's own machinery)
SLURM_ONLY = ("slurm-power-save",)


@dataclass(frozen=True)
class KueueContext:
    """The Kueue side of one run: queues, each job's team, the admitted demand and the raw demand's bound."""

    setup: KueueSetup
    queues: list[ClusterQueue]
    team_of: dict[str, str]
    quota_rule: str
    jobs: list[TraceJob]  # the trace as submitted
    admitted: list[TraceJob]  # the trace as Kueue admits it with instant capacity (`admitted_schedule`)
    raw_bound: LowerBound

    @classmethod
    def build(cls, setup: KueueSetup, jobs: Sequence[TraceJob], scenario: Scenario) -> KueueContext:
        queues, team_of, rule = setup.build(jobs)
        admitted = admitted_schedule(jobs, queues, team_of)
        return cls(setup, queues, team_of, rule, list(jobs), admitted, lower_bound(jobs, scenario))

    def bound(self, scenario: Scenario) -> LowerBound:
        """The run's one bound: the clairvoyant bound over the admitted demand (docs/simulate.md)."""
        return lower_bound(self.admitted, scenario)

    def engine(self, policy: ReplayPolicy, scenario: Scenario) -> ReplayEngine:
        """A fresh gate (same queues, same teams) in front of the generic engine, for any policy."""
        gate = KueueGate(self.queues, self.team_of, admission_check=bool(getattr(policy, "admission_check", False)))
        if hasattr(policy, "gate"):
            policy.gate = gate  # gpu-fleet serves the ProvisioningRequests of the admission check
        return ReplayEngine(self.jobs, scenario, policy, admission=gate)

    def flavor_model(self) -> str:
        """What the replay's one GPU quota per team stands for in a deployed stack (docs/kubernetes.md)."""
        several = sorted(q.name for q in self.queues if len(q.flavors) > 1)
        if not several:
            return (
                "one per team over every pool, the autoscaler picking the pool per workload: "
                "a stack deploys it as one kueue.flavors entry over the pools"
            )
        return (
            f"{', '.join(several)}: several flavors summed into one quota; Kueue's flavor assignment, which "
            "confines a workload to the first flavor with quota left, is not modelled"
        )

    def as_json(self) -> dict[str, Any]:
        raw = {j.id: j.submit for j in self.jobs}
        floor = np.array([j.submit - raw[j.id] for j in self.admitted])
        per_queue: dict[str, int] = {}
        for q in self.team_of.values():
            per_queue[q] = per_queue.get(q, 0) + 1
        return {
            "teams": len(self.queues),
            "quota_gpus": sum(q.nominal_gpus for q in self.queues),
            "quota_rule": self.quota_rule,
            "cluster_queues": [
                {
                    "name": q.name,
                    "nominal_gpus": q.nominal_gpus,
                    "cohort": q.cohort,
                    "borrowing_limit_gpus": q.borrowing_limit,
                    "lending_limit_gpus": q.lending_limit,
                    "jobs": per_queue.get(q.name, 0),
                }
                for q in self.queues
            ],
            "admission": "gang (whole workload), BestEffortFIFO, re-evaluated as workloads end; no preemption",
            "flavors": self.flavor_model(),
            "bound": "clairvoyant bound over the admitted demand (instant capacity behind the same quotas)",
            "raw_lower_bound_usd": round(self.raw_bound.usd, 2),
            "raw_peak_demand_gpus": peak_concurrent_gpus(self.jobs),
            "admitted_peak_demand_gpus": peak_concurrent_gpus(self.admitted),
            "quota_wait_floor_p50_s": round(percentile(floor, 50), 1),
            "quota_wait_floor_p95_s": round(percentile(floor, 95), 1),
        }


def policy_factories(
    ctx: KueueContext, wait_value_usd_per_gpu_hour: float | None, ca_expander: str, warm_cap: bool = True
) -> dict[str, Callable[[Scenario, Sequence[TraceJob]], ReplayPolicy]]:
    """The policies of the Kueue path, by name (`run.POLICY_NAMES` without `SLURM_ONLY`)."""
    from autoscaler.replay.baselines import CaLikePolicy, ExactFitPolicy, KarpenterLikePolicy, StaticPeakPolicy
    from autoscaler.replay.gpu_fleet_kube import GpuFleetKubePolicy

    peak = peak_concurrent_gpus(ctx.admitted)
    return {
        "gpu-fleet": lambda s, jobs: GpuFleetKubePolicy.for_scenario(s, wait_value_usd_per_gpu_hour, jobs, warm_cap),
        "static-peak": lambda s, jobs: StaticPeakPolicy(peak_gpus=peak),
        "ca-like": lambda s, jobs: CaLikePolicy(seed=s.seed, expander=ca_expander),
        "karpenter-like": lambda s, jobs: KarpenterLikePolicy(),
        "exact-fit": lambda s, jobs: ExactFitPolicy(),
    }


def wait_split(engine: ReplayEngine) -> dict[str, float]:
    """A policy's wait split at admission: quota (submission -> admission) and provisioning (admission -> first
    start), p50 / p95 / mean of each."""
    gate = engine.admission
    assert isinstance(gate, KueueGate)
    quota, prov = [], []
    for j in engine.state.jobs:
        at = gate.admitted_at.get(j.id)
        if at is None or j.first_start is None:
            continue
        quota.append(at - j.submit)
        prov.append(j.first_start - at)
    q, p = np.array(quota), np.array(prov)
    return {
        "wait_quota_p50_s": round(percentile(q, 50), 1),
        "wait_quota_p95_s": round(percentile(q, 95), 1),
        "wait_quota_mean_s": round(float(q.mean()) if len(q) else 0.0, 1),
        "wait_provisioning_p50_s": round(percentile(p, 50), 1),
        "wait_provisioning_p95_s": round(percentile(p, 95), 1),
        "wait_provisioning_mean_s": round(float(p.mean()) if len(p) else 0.0, 1),
    }
