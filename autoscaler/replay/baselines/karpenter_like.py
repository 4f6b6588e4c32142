"""`karpenter-like`: Karpenter's provisioner and consolidation, at their documented defaults.

Sources: karpenter.sh/docs/reference/settings/ (`BATCH_IDLE_DURATION` 1s, `BATCH_MAX_DURATION` 10s),
karpenter.sh/docs/concepts/scheduling/ and /nodepools/ (requirements, capacity types, `consolidationPolicy`
default `WhenEmptyOrUnderutilized`, `consolidateAfter` 0s, disruption budget default `nodes: 10%`),
karpenter.sh/docs/concepts/disruption/ (consolidation, pods with `karpenter.sh/do-not-disrupt`, the
unavailable-offerings cache), and the sources where the docs are silent: kubernetes-sigs/karpenter
pkg/controllers/provisioning/controller.go (a pending pod is reconciled again `RequeueAfter: 10 *
time.Second` "until the pod is no longer provisionable"), pkg/apis/v1/nodepool.go and
pkg/controllers/disruption/helpers.go (the budget), pkg/controllers/nodeclaim/lifecycle/liveness.go
(`registrationTimeout = 15 * time.Minute`, a constant), aws/karpenter-provider-aws pkg/cache/cache.go
(`UnavailableOfferingsTTL` 3 min).

Provisioning: pending pods are batched (a batch closes after 1 s without a new pending pod, or 10 s
after it opened).  Karpenter's scheduler then simulates the batch, largest pods first: each pod goes
to an existing node with room (nodes up or coming up: the scheduler's own view), else to a NodeClaim
already opened in this solve that still has an instance type fitting all its pods, and only then opens
a new NodeClaim.  A claim keeps every instance type (and capacity type, zone) still compatible with
all its pods; when the solve ends each claim launches the cheapest compatible offering, capacity type
reserved > spot (when every pod tolerates it) > on-demand, then price, then zone.  So 8 one-GPU pods
on a3-highgpu become one claim, launched as one 8g node (the cheapest type fitting 8 GPUs); 3 of them
one 4g.  Pods of a gang are separate 8-GPU pods, each filling its own claim: their nodes are launched
independently and may land in different zones or at different times.  An offering that returns
InsufficientCapacity goes into the unavailable-offerings cache for 3 minutes; its pods are pending
again and the next batch tries the next offering.  A pod the solve could give no claim (every compatible
offering in the cache, or quota used up) is reconciled again 10 s after the trigger that opened the
batch, which opens the next batch: Karpenter retries every 10 s while a pod stays pending, not when the
cache entry expires.

Registration: Karpenter deletes a NodeClaim whose node has not registered 15 minutes after launch
(`registrationTimeout`, not configurable).  The replay's boot is the same for every launch, so with
`--boot-seconds` above 900 every node would be deleted before it came up and no pod would ever run: the
policy refuses such a scenario (`pools`) instead of replaying a Karpenter that could not exist.

Consolidation (`WhenEmptyOrUnderutilized`, `consolidateAfter: 0s`): the disruption loop (every 10 s)
picks candidate nodes within the disruption budget and deletes those still as chosen after the 15 s
validation wait (`consolidationTTL`).  The budget `nodes: 10%` is of the initialized (here: registered)
nodes, rounded up, less the nodes already being deleted (`GetAllowedDisruptions` rounds a percentage up;
booting nodes do not count).  A node is a candidate when it is empty, or when it is underutilised and
its pods could move; GPU training pods carry `karpenter.sh/do-not-disrupt: "true"` (the documented way
to keep a batch job from being evicted mid-run), which blocks the disruption of their node, so in
practice only empty nodes are consolidated."""

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
#: pkg/controllers/nodeclaim/lifecycle/liveness.go `registrationTimeout` (a constant, not a setting)
REGISTRATION_TIMEOUT_S = 900.0


@dataclass
class _Claim:
    """A NodeClaim opened in one solve: its pods and the offerings still compatible with all of them."""

    options: list[tuple[Offering, Pool]]
    pods: list[Job] = field(default_factory=list)
    gpus: int = 0
    spot_ok: bool = True

    def fits(self, gpus: int, spot_ok: bool) -> list[tuple[Offering, Pool]]:
        return [
            (o, p)
            for o, p in self.options
            if o.gpus_per_node >= gpus
            and (spot_ok or o.key.capacity_type is not CapacityType.SPOT)
            and (o.available_nodes is None or o.available_nodes > 0)
        ]

    def add(self, job: Job) -> bool:
        """Take `job` if some instance type still fits every pod of the claim."""
        if self.pods and self.gpus + job.gpus_per_node > max(o.gpus_per_node for o, _ in self.options):
            return False
        options = self.fits(self.gpus + job.gpus_per_node, self.spot_ok and job.spot_ok)
        if not options:
            return False
        self.options = options
        self.pods.append(job)
        self.gpus += job.gpus_per_node
        self.spot_ok = self.spot_ok and job.spot_ok
        return True


@dataclass
class KarpenterLikePolicy:
    batch_idle_s: float = 1.0
    batch_max_s: float = 10.0
    ice_cache_s: float = 180.0
    requeue_s: float = 10.0  # a still-pending pod's reconcile requeue, which triggers the provisioner again
    disruption_poll_s: float = 10.0
    consolidate_after_s: float = 0.0
    budget_fraction: float = 0.10
    validation_s: float = 15.0  # consolidationTTL: candidates are re-checked this long after being chosen
    name: str = "karpenter-like"
    description: str = (
        "Karpenter defaults: 1 s/10 s batch, pods packed into existing nodes, then claims of the same solve, then "
        "a new claim of the cheapest type fitting all its pods (reserved > spot > on-demand), 3 min "
        "unavailable-offering cache (pods left without a claim retried every 10 s), gang pods' nodes launched "
        "independently, consolidation of empty nodes (busy GPU pods are do-not-disrupt)"
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
    _requeue_at: float | None = None  # when pods the last solve left without a claim trigger the next batch
    _unplaced: bool = False  # the last solve left some pod without a claim

    def pools(self, scenario: Scenario) -> list[Pool]:
        """Every pool of the scenario; a ValueError when its boot exceeds Karpenter's registration timeout."""
        if scenario.ready_s > REGISTRATION_TIMEOUT_S:
            raise ValueError(
                f"--boot-seconds: karpenter-like imitates Karpenter, which deletes a NodeClaim whose node has not "
                f"registered {REGISTRATION_TIMEOUT_S:g} s after launch (registrationTimeout, 15 min, not "
                f"configurable): with a {scenario.ready_s:g} s boot every node would be deleted before it came up; "
                f"use at most {REGISTRATION_TIMEOUT_S:g} s or leave karpenter-like out of --policy"
            )
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
            requeued = self._requeue_at is not None and now >= self._requeue_at
            if requeued:
                self._requeue_at = None
            if requeued or reasons & {"submit", "gone", "failure"}:
                # a pod became pending (again: its node claim failed to launch), or a pending pod's reconcile
                # came round again: either triggers the provisioner
                self._last_seen = now
            # compare with the wake-up times themselves (now - t0 >= d can miss by a rounding error)
            idle_done = now >= self._last_seen + self.batch_idle_s
            max_done = now >= self._batch_start + self.batch_max_s
            if idle_done or max_done:
                opened, self._batch_start = self._batch_start, None
                cmds += self._provision(view, now, singles, gangs, nominations)
                wake += self._requeue(now, opened)
            else:
                wake.append(min(self._last_seen + self.batch_idle_s, self._batch_start + self.batch_max_s))
            if self._requeue_at is not None:
                wake.append(self._requeue_at)
        else:
            self._batch_start = None
            self._requeue_at = None
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

    def _requeue(self, now: float, opened: float) -> list[float]:
        """After a solve: if it left a pod without a claim, that pod's reconcile, due `requeue_s` after the trigger
        that opened the batch, triggers the next batch (controller.go: `RequeueAfter: 10 * time.Second` until the
        pod is no longer provisionable).  When that is already due, the next batch opens now.  Returns the
        wake-up the batch needs, if one opened."""
        if not self._unplaced:
            self._requeue_at = None
            return []
        due = opened + self.requeue_s
        if due > now:
            self._requeue_at = due
            return []
        self._requeue_at = None
        self._batch_start = self._last_seen = now
        return [now + self.batch_idle_s]

    def _provision(
        self,
        view: ReplayView,
        now: float,
        singles: list[Job],
        gangs: list[Job],
        nominations: dict[str, tuple[str, ...]],
    ) -> list[Command]:
        """One scheduling solve over the batch: existing nodes (counted by `uncovered`), then claims opened
        in this solve, then a new claim; each claim launched as its cheapest compatible offering.  Sets
        `_unplaced` when some pod got no claim (no compatible offering outside the unavailable-offerings cache)."""
        self._planned = {}
        self._unplaced = False
        offers = self._launchable(view, now)
        claims: list[_Claim] = []
        for job in sorted(singles, key=lambda j: -j.gpus_per_node):  # largest pods first, FIFO within a size
            for claim in claims:
                if claim.add(job):
                    break
            else:
                claim = _Claim(offers)
                if claim.add(job):
                    claims.append(claim)
                else:
                    self._unplaced = True
        cmds: list[Command] = []
        for claim in claims:
            choice = self._cheapest(claim.options)
            if choice is None:
                self._unplaced = True
                continue
            o, pool = choice
            self._planned[o.key] = self._planned.get(o.key, 0) + 1
            # a NodeClaim is not bound to its pods: kube-scheduler binds whichever pending pod fits once the node
            # is ready, and until then the next solve counts its free room (no nomination, `units` empty)
            reason = f"{len(claim.pods)} pod(s) unschedulable: one NodeClaim, cheapest type fitting all"
            cmds.append(view.scale_up(pool, o, 1, (), reason))
        for job in gangs:
            names: list[str] = [n.name for n in job.nominated]
            claim_options = _Claim(offers).fits(job.gpus_per_node, job.spot_ok)
            for _ in range(job.nodes - len(job.nominated)):
                choice = self._cheapest(claim_options)
                if choice is None:
                    self._unplaced = True
                    break
                o, pool = choice
                self._planned[o.key] = self._planned.get(o.key, 0) + 1
                cmd = view.scale_up(pool, o, 1, (job.id,), "gang pod unschedulable: its own node claim")
                cmds.append(cmd)
                names += cmd.names
            nominations[job.id] = tuple(names)
        return cmds

    def _launchable(self, view: ReplayView, now: float) -> list[tuple[Offering, Pool]]:
        """Offerings not in the unavailable-offerings cache, with their pool."""
        out = []
        for o in view.offerings():
            if self._ice.get(o.key, -math.inf) > now:
                continue
            pool = next((p for p in self._pools if p.can_launch(o.key)), None)
            if pool is not None:
                out.append((o, pool))
        return out

    def _cheapest(self, options: list[tuple[Offering, Pool]]) -> tuple[Offering, Pool] | None:
        best = None
        for o, pool in options:
            k = o.key
            if o.available_nodes is not None and o.available_nodes - self._planned.get(k, 0) < 1:
                continue
            rank = (PRIORITY[k.capacity_type], o.hourly_usd, o.gpus_per_node, k.zone)
            if best is None or rank < best[0]:
                best = (rank, o, pool)
        return (best[1], best[2]) if best else None

    def budget(self, view: ReplayView) -> int:
        """Nodes the disruption budget lets go now: `nodes: 10%` of the registered nodes, rounded up (nodepool.go
        `GetAllowedDisruptions`: `GetScaledValueFromIntOrPercent(..., numNodes, true)`), less the nodes already
        being deleted, at least 0 (disruption/helpers.go `BuildDisruptionBudgetMapping`, which counts initialized
        nodes only: a booting node is neither counted nor disruptable)."""
        st = view.state
        registered = sum(1 for n in st.nodes.values() if n.registered)
        allowed = math.ceil(round(self.budget_fraction * registered, 9))  # 0.1 * 30 is 3.0000000000000004
        return max(0, allowed - len(st.draining))

    def _choose(self, view: ReplayView, now: float) -> None:
        """Empty nodes past consolidateAfter, within the disruption budget."""
        empty = empty_nodes(view.state, now, idle_for_s=self.consolidate_after_s, limit=self.budget(view))
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
