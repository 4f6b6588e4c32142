"""`karpenter-like`: Karpenter's provisioner and emptiness consolidation, at their defaults.

Pending pods are batched (`BATCH_IDLE_DURATION` 1 s, `BATCH_MAX_DURATION` 10 s); then every pod
that fits neither on a node nor on a node claim already in flight gets its own node claim of the
cheapest fitting offering, by capacity type priority reserved > spot (spot-tolerant pods) >
on-demand, then price, then zone.  Pods of a gang are separate pods: their nodes are launched
independently and may land in different zones or at different times.  An offering that returns
InsufficientCapacity goes into the unavailable-offerings cache for 3 minutes; the pod is pending again
and the next batch tries the next offering.  Consolidation (`consolidationPolicy: WhenEmptyOrUnderutilized`,
`consolidateAfter: 0s`): the disruption loop (every 10 s) picks empty nodes within the default
disruption budget of 10% of nodes and deletes those still empty after the 15 s validation wait
(`consolidationTTL`); training pods carry `karpenter.sh/do-not-disrupt`, so busy nodes
are not consolidated."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from autoscaler.cloud import Offering, OfferingKey, ProviderError
from autoscaler.model import Command, Pool, ScaleUp
from autoscaler.replay.baselines.common import delete_per_pool, empty_nodes, uncovered
from autoscaler.replay.policy import Decision, ReplayView
from autoscaler.replay.scenario import Scenario
from autoscaler.replay.state import Job
from fleet.catalog import CapacityType

PRIORITY = {CapacityType.RESERVATION: 0, CapacityType.SPOT: 1, CapacityType.ON_DEMAND: 2, CapacityType.FLEX_START: 3}


@dataclass
class KarpenterLikePolicy:
    batch_idle_s: float = 1.0
    batch_max_s: float = 10.0
    ice_cache_s: float = 180.0
    disruption_poll_s: float = 10.0
    consolidate_after_s: float = 0.0
    budget_fraction: float = 0.10
    validation_s: float = 15.0  # consolidationTTL: candidates are re-checked this long after being chosen
    name: str = "karpenter-like"
    description: str = (
        "Karpenter defaults: cheapest fitting offering per pod (reserved > spot > on-demand), 1 s/10 s batch "
        "window, 3 min unavailable-offering cache, gang nodes launched independently, empty-node consolidation"
    )
    binds_nominations: bool = False
    placement_weights: None = None  # the scheduler's plain best fit (kube-scheduler has no capacity-type weights)
    _pools: list[Pool] = field(default_factory=list)
    _ice: dict[OfferingKey, float] = field(default_factory=dict)
    _batch_start: float | None = None
    _last_pending: int = 0
    _last_seen: float = -math.inf
    _next_disruption: float = -math.inf
    _planned: dict[OfferingKey, int] = field(default_factory=dict)
    _candidates: dict[str, int] = field(default_factory=dict)  # empty nodes chosen, name -> node version
    _validate_at: float | None = None

    def pools(self, scenario: Scenario) -> list[Pool]:
        self._pools = scenario.pools()
        return self._pools

    def decide(self, view: ReplayView, now: float, reasons: frozenset[str]) -> Decision:
        cmds: list[Command] = []
        nominations: dict[str, tuple[str, ...]] = {}
        wake: list[float] = []
        singles, gangs = uncovered(view.state)
        if singles or gangs:
            if self._batch_start is None:
                self._batch_start = now
            if reasons & {"submit", "gone", "failure"}:
                self._last_seen = now  # a pod became pending (again: its node claim failed to launch)
            idle_done = now - self._last_seen >= self.batch_idle_s
            max_done = now - self._batch_start >= self.batch_max_s
            if idle_done or max_done:
                self._batch_start = None
                cmds += self._provision(view, now, singles, gangs, nominations)
            else:
                wake.append(min(self._last_seen + self.batch_idle_s, self._batch_start + self.batch_max_s))
        else:
            self._batch_start = None
        if self._validate_at is not None:
            if now >= self._validate_at:
                cmds += self._validated(view)
                self._validate_at = None
                self._next_disruption = now + self.disruption_poll_s
                wake.append(self._next_disruption)
            else:
                wake.append(self._validate_at)
        elif view.state.idle:
            if now >= self._next_disruption:
                self._choose(view, now)
                if self._candidates:
                    self._validate_at = now + self.validation_s
                    wake.append(self._validate_at)
                else:
                    self._next_disruption = now + self.disruption_poll_s
            if self._validate_at is None:
                wake.append(self._next_disruption)
        return Decision(tuple(cmds), nominations, wake_at=min(wake) if wake else None)

    def _cheapest(self, view: ReplayView, now: float, job: Job) -> tuple[Offering, Pool] | None:
        best = None
        for o in view.offerings():
            k = o.key
            if o.gpus_per_node < job.gpus_per_node or self._ice.get(k, -math.inf) > now:
                continue
            if k.capacity_type is CapacityType.SPOT and not job.spot_ok:
                continue
            if o.available_nodes is not None and o.available_nodes - self._planned.get(k, 0) < 1:
                continue
            pool = next((p for p in self._pools if p.can_launch(k)), None)
            if pool is None:
                continue
            rank = (PRIORITY[k.capacity_type], o.hourly_usd, o.gpus_per_node, k.zone)
            if best is None or rank < best[0]:
                best = (rank, o, pool)
        return (best[1], best[2]) if best else None

    def _provision(
        self,
        view: ReplayView,
        now: float,
        singles: list[Job],
        gangs: list[Job],
        nominations: dict[str, tuple[str, ...]],
    ) -> list[Command]:
        self._planned = {}
        cmds: list[Command] = []
        for job in singles:
            choice = self._cheapest(view, now, job)
            if choice is not None:
                o, pool = choice
                self._planned[o.key] = self._planned.get(o.key, 0) + 1
                cmds.append(view.scale_up(pool, o, 1, (job.id,), "pod unschedulable: cheapest fitting offering"))
        for job in gangs:
            names: list[str] = [n.name for n in job.nominated]
            for _ in range(job.nodes - len(job.nominated)):
                choice = self._cheapest(view, now, job)
                if choice is None:
                    break
                o, pool = choice
                self._planned[o.key] = self._planned.get(o.key, 0) + 1
                cmd = view.scale_up(pool, o, 1, (job.id,), "gang pod unschedulable: its own node claim")
                cmds.append(cmd)
                names += cmd.names
            nominations[job.id] = tuple(names)
        return cmds

    def _choose(self, view: ReplayView, now: float) -> None:
        """Empty nodes past consolidateAfter, within the disruption budget."""
        budget = max(1, math.floor(self.budget_fraction * len(view.state.nodes)))
        empty = empty_nodes(view.state, now, idle_for_s=self.consolidate_after_s, limit=budget)
        self._candidates = {n.name: n.version for n in empty}

    def _validated(self, view: ReplayView) -> list[Command]:
        """Delete the candidates still empty and untouched since they were chosen."""
        still = []
        for name, version in self._candidates.items():
            n = view.state.nodes.get(name)
            if n is not None and n.version == version and not n.jobs:
                still.append(n)
        self._candidates = {}
        return delete_per_pool(still, "empty: consolidation")

    def on_launch_failure(self, command: ScaleUp, error: ProviderError, now: float) -> None:
        self._ice[command.offering] = now + self.ice_cache_s
