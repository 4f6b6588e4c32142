"""`ca-like`: the Kubernetes Cluster Autoscaler with fixed 8-GPU node groups, at its defaults.

Node groups: one per zone of the family's 8-GPU machine, on-demand (plus spot groups for pods
that tolerate spot, and the reservation's group, when the scenario has them).  Every scan
(`--scan-interval` 10 s) CA looks at unschedulable pods that will not fit on nodes already coming
up, estimates with its bin-packing estimator how many nodes each node group would need for the
pods it can take, lets the `least-waste` expander pick one group (ties broken at random, seeded)
and scales that group up; other groups wait for the next scan.  A group whose scale-up failed is
backed off (5 min, doubling to 30 min).  Scale-down: a node is unneeded while under 50% GPU
utilisation (`--scale-down-utilization-threshold`) and its pods can move; batch training pods are
annotated `safe-to-evict: false`, so in practice only empty nodes go, after 10 min unneeded
(`--scale-down-unneeded-time`), and not within 10 min of a scale-up (`--scale-down-delay-after-add`),
at most 10 empty nodes per scan (`--max-empty-bulk-delete`).  Pods of a gang each get a node and
wait for their peers (no gang scheduling)."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

from autoscaler.cloud import OfferingKey, ProviderError
from autoscaler.model import Command, Pool, ScaleUp
from autoscaler.replay.baselines.common import delete_per_pool, empty_nodes, first_fit, uncovered
from autoscaler.replay.policy import Decision, ReplayView
from autoscaler.replay.scenario import Scenario
from autoscaler.replay.state import Job
from fleet.catalog import CapacityType


@dataclass
class CaLikePolicy:
    seed: int = 0
    scan_interval_s: float = 10.0
    unneeded_time_s: float = 600.0
    delay_after_add_s: float = 600.0
    utilization_threshold: float = 0.5
    max_empty_bulk_delete: int = 10
    backoff_s: float = 300.0
    backoff_max_s: float = 1800.0
    name: str = "ca-like"
    description: str = (
        "Cluster Autoscaler defaults: fixed 8-GPU node groups, least-waste expander, scale down after "
        "10 min under 50% utilisation"
    )
    binds_nominations: bool = False
    placement_weights: None = None  # the scheduler's plain best fit (kube-scheduler has no capacity-type weights)
    _pools: list[Pool] = field(default_factory=list)
    _backoff: dict[OfferingKey, tuple[float, int]] = field(default_factory=dict)
    _last_add: float = -math.inf
    _next_scan: float = -math.inf
    _rng: random.Random = field(default_factory=random.Random)

    def pools(self, scenario: Scenario) -> list[Pool]:
        m = scenario.reservation_machine
        if m is None:
            raise ValueError(f"ca-like needs an 8-GPU machine type in {scenario.machine_family}")
        self._rng = random.Random(f"{self.seed}:ca-like")
        self._pools = scenario.pools([m.name])
        return self._pools

    def decide(self, view: ReplayView, now: float, reasons: frozenset[str]) -> Decision:
        grid = math.ceil(now / self.scan_interval_s) * self.scan_interval_s  # CA's loop runs on a fixed period
        if now < max(self._next_scan, grid):
            return Decision(wake_at=max(self._next_scan, grid))
        cmds: list[Command] = []
        nominations: dict[str, tuple[str, ...]] = {}
        singles, gangs = uncovered(view.state)
        if singles or gangs:
            picked = self._scale_up(view, now, singles, gangs, nominations)
            if picked is not None:
                cmds.append(picked)
                self._last_add = now
        cmds += self._scale_down(view, now)
        more = bool(view.state.pending_count) or bool(view.state.idle)
        self._next_scan = now + self.scan_interval_s
        return Decision(tuple(cmds), nominations, wake_at=self._next_scan if more else None)

    # ---- scale-up: one node group per scan, least waste -------------------------------------------

    def _scale_up(
        self,
        view: ReplayView,
        now: float,
        singles: list[Job],
        gangs: list[Job],
        nominations: dict[str, tuple[str, ...]],
    ) -> ScaleUp | None:
        options = []
        for o in view.offerings():
            pool = next((p for p in self._pools if p.can_launch(o.key)), None)
            if pool is None or self._backoff.get(o.key, (0.0, 0))[0] > now:
                continue
            spot = o.key.capacity_type is CapacityType.SPOT
            pods = [j for j in singles if j.spot_ok or not spot]
            gang = next((j for j in gangs if j.spot_ok or not spot), None)
            bins = first_fit(pods, o.gpus_per_node)
            nodes = len(bins) if bins else 0
            if not bins and gang is None:
                continue
            if not bins and gang is not None:
                nodes = gang.nodes - len(gang.nominated)
            if o.available_nodes is not None:
                nodes = min(nodes, o.available_nodes)
            if nodes <= 0:
                continue
            requested = sum(j.gpus_per_node for j in pods) if bins else nodes * o.gpus_per_node
            waste = 1.0 - min(1.0, requested / (nodes * o.gpus_per_node))
            options.append((waste, self._rng.random(), o, pool, nodes, bins, gang if not bins else None))
        if not options:
            return None
        options.sort(key=lambda t: (t[0], t[1]))
        _, _, o, pool, nodes, bins, gang = options[0]
        if gang is not None:
            cmd = view.scale_up(pool, o, nodes, (gang.id,), "pods of a gang unschedulable", gang=False)
            nominations[gang.id] = cmd.names
            return cmd
        units = tuple(j.id for members in bins[:nodes] for j in members)
        return view.scale_up(pool, o, nodes, units, f"{len(units)} unschedulable pods (least-waste)")

    # ---- scale-down: empty nodes unneeded for 10 min ---------------------------------------------

    def _scale_down(self, view: ReplayView, now: float) -> list[Command]:
        if now - self._last_add < self.delay_after_add_s:
            return []
        empty = empty_nodes(view.state, now, idle_for_s=self.unneeded_time_s, limit=self.max_empty_bulk_delete)
        return delete_per_pool(empty, "empty and unneeded for 10 min")

    def on_launch_failure(self, command: ScaleUp, error: ProviderError, now: float) -> None:
        _, n = self._backoff.get(command.offering, (0.0, 0))
        self._backoff[command.offering] = (now + min(self.backoff_s * 2**n, self.backoff_max_s), n + 1)
        self._next_scan = now  # CA tries the next option at once
