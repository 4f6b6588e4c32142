"""`ca-like`: the Kubernetes Cluster Autoscaler with fixed 8-GPU node groups, at its documented defaults.

Defaults and behaviour are those of the CA FAQ (github.com/kubernetes/autoscaler,
cluster-autoscaler/FAQ.md: "What are Expanders?", "What are the parameters to CA?", "What types of
pods can prevent CA from removing a node?", "How does scale-down work?") and the flag help of
cluster-autoscaler/main.go; the node-group backoff is cluster-autoscaler/utils/backoff/exponential_backoff.go
and clusterstate/clusterstate.go (`updateScaleRequests`).

Node groups: one per zone of the family's 8-GPU machine, on-demand (plus spot groups for pods that
tolerate spot, and the reservation's group, when the scenario has them).  Every scan
(`--scan-interval` 10 s) CA looks at unschedulable pods that will not fit on nodes already coming
up, estimates with its bin-packing estimator how many nodes each node group would need for the pods
it can take, lets the expander (`--expander`, default `random`) pick one group and scales that group
up; other groups wait for the next scan.  Expanders (`--ca-expander` on `fleet simulate`):

- `random` (CA's default): any group that can take some of the pods, uniformly (seeded).
- `least-waste`: the group leaving the fewest idle GPUs after the scale-up (CA counts CPU, then
  memory; on GPU nodes GPUs are the scarce resource), ties at random.
- `price`: the group whose new nodes cost least per GPU requested by the pods they take (CA's
  price expander, list prices: GKE's pricing model knows on-demand and spot prices, not
  reservations, so a reserved node is priced as on-demand), ties at random.
- `priority`: the priority expander with the ConfigMap a cost-aware operator writes: reservation
  group 30, spot groups 20, on-demand groups 10 (highest first), ties at random.

A group whose scale-up failed is backed off (`--initial-node-group-backoff-duration` 5 min; a failure
after the backoff ended doubles the previous duration, up to `--max-node-group-backoff-duration` 30 min).
The backoff is forgotten `--node-group-backoff-reset-timeout` (3 h) after the group's last failure, and
when a scale-up of the group finishes (every node it asked for registered: `RemoveBackoff`).

`--max-node-provision-time` (15 min by default) is how long CA waits for a new node to register before it
gives the scale-up up and backs the group off.  The replay's boot is the same for every launch, so above
15 min every scale-up would time out and no pod would run; the flag is per deployment (and per node
group), so the replay then uses the next multiple of 5 min above the boot, what an operator has to set,
and says so in `settings` (as slurm-power-save does with ResumeTimeout).  Below it the timeout never
fires: every node registers once booted.

Scale-down: a node is unneeded when its utilisation is below the threshold and all its pods can
move.  On a GPU node utilisation is GPU requests / allocatable GPUs (`--scale-down-gpu-utilization-
threshold`, default 0.5; CPU and memory are ignored on accelerator nodes).  GPU batch pods are not
movable: a training pod runs to completion, has no replica elsewhere to take over, is marked
`cluster-autoscaler.kubernetes.io/safe-to-evict: "false"` (the FAQ's annotation that blocks removal;
the usual /dev/shm emptyDir has `medium: Memory`, which the FAQ does not count as local storage), and
evicting it kills the run.  So a node with a running job is never removed, whatever its utilisation;
an empty node (utilisation 0) is unneeded once the threshold is above 0, is removed after 10 min
unneeded (`--scale-down-unneeded-time`), not within 10 min of a scale-up (`--scale-down-delay-after-add`),
at most 10 per scan (`--max-empty-bulk-delete`).  Pods of a gang each get a node and wait for their peers (no gang
scheduling)."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

from autoscaler.cloud import Offering, OfferingKey, ProviderError
from autoscaler.model import Command, Pool, ScaleUp
from autoscaler.replay.baselines.common import delete_per_pool, empty_nodes, first_fit, uncovered
from autoscaler.replay.policy import Decision, ReplayView
from autoscaler.replay.scenario import Scenario
from autoscaler.replay.state import Job, SimNode
from fleet.catalog import CapacityType

EXPANDERS = ("random", "least-waste", "price", "priority")
#: the priority expander's ConfigMap in this replay (higher first)
PRIORITIES = {CapacityType.RESERVATION: 30, CapacityType.SPOT: 20, CapacityType.ON_DEMAND: 10}
#: `--max-node-provision-time` default, and the step an operator raises it by for a slower boot
MAX_NODE_PROVISION_TIME_S = 900.0
PROVISION_TIME_STEP_S = 300.0


@dataclass(frozen=True)
class _Backoff:
    """One node group's backoff (exponential_backoff.go `exponentialBackoffInfo`)."""

    until: float
    duration: float
    last_failure: float


@dataclass
class CaLikePolicy:
    seed: int = 0
    expander: str = "random"
    scan_interval_s: float = 10.0
    unneeded_time_s: float = 600.0
    delay_after_add_s: float = 600.0
    utilization_threshold: float = 0.5
    max_empty_bulk_delete: int = 10
    backoff_s: float = 300.0
    backoff_max_s: float = 1800.0
    backoff_reset_s: float = 10800.0  # --node-group-backoff-reset-timeout
    name: str = "ca-like"
    description: str = (
        "Cluster Autoscaler defaults: fixed 8-GPU node groups, random expander (--ca-expander), GPU nodes "
        "unneeded under 50% GPU utilisation with movable pods only (batch pods are not), removed after 10 min"
    )
    binds_nominations: bool = False
    placement_weights: None = None  # the scheduler's plain best fit (kube-scheduler has no capacity-type weights)
    _pools: list[Pool] = field(default_factory=list)
    _backoff: dict[OfferingKey, _Backoff] = field(default_factory=dict)
    _scaling: dict[OfferingKey, set[str]] = field(default_factory=dict)  # scale-ups in flight: nodes asked for
    #: --max-node-provision-time: CA's 15 min, raised past the scenario's boot when needed (`pools`)
    _provision_time_s: float = MAX_NODE_PROVISION_TIME_S
    _last_add: float = -math.inf
    _next_scan: float = -math.inf
    _rng: random.Random = field(default_factory=random.Random)
    _list_price: float = 0.0  # on-demand $/h of the 8-GPU machine: what the price expander charges a reserved node

    def __post_init__(self) -> None:
        if self.expander not in EXPANDERS:
            raise ValueError(f"--ca-expander: unknown expander {self.expander!r} (known: {', '.join(EXPANDERS)})")
        if self.expander != "random":
            self.description = self.description.replace("random expander", f"{self.expander} expander")

    def pools(self, scenario: Scenario) -> list[Pool]:
        m = scenario.reservation_machine
        if m is None:
            raise ValueError(f"ca-like needs an 8-GPU machine type in {scenario.machine_family}")
        price = m.price(scenario.region)
        self._list_price = price.on_demand if price else 0.0
        t = MAX_NODE_PROVISION_TIME_S
        if scenario.ready_s > t:
            t = math.floor(scenario.ready_s / PROVISION_TIME_STEP_S + 1) * PROVISION_TIME_STEP_S
        self._provision_time_s = t
        self._rng = random.Random(f"{self.seed}:ca-like")
        self._pools = scenario.pools([m.name])
        return self._pools

    def settings(self) -> dict[str, float | str]:
        """The flags this run used that the scenario decides (`--expander`, `--max-node-provision-time`)."""
        return {"expander": self.expander, "max_node_provision_time_s": self._provision_time_s}

    def decide(self, view: ReplayView, now: float, reasons: frozenset[str]) -> Decision:
        grid = math.ceil(now / self.scan_interval_s) * self.scan_interval_s  # CA's loop runs on a fixed period
        if now < max(self._next_scan, grid):
            return Decision(wake_at=max(self._next_scan, grid))
        cmds: list[Command] = []
        nominations: dict[str, tuple[str, ...]] = {}
        self._finish_scale_ups(view)
        singles, gangs = uncovered(view.state)
        if singles or gangs:
            picked = self._scale_up(view, now, singles, gangs, nominations)
            if picked is not None:
                cmds.append(picked)
                self._scaling.setdefault(picked.offering, set()).update(picked.names)
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
            if pool is None or self.backed_off(o.key, now):
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
            if bins:
                requested = sum(j.gpus_per_node for members in bins[:nodes] for j in members)
            else:
                requested = nodes * o.gpus_per_node
            options.append(
                (self._score(o, nodes, requested), self._rng.random(), o, pool, nodes, bins, gang if not bins else None)
            )
        if not options:
            return None
        options.sort(key=lambda t: (t[0], t[1]))
        _, _, o, pool, nodes, bins, gang = options[0]
        if gang is not None:
            cmd = view.scale_up(pool, o, nodes, (gang.id,), "pods of a gang unschedulable", gang=False)
            nominations[gang.id] = cmd.names
            return cmd
        units = tuple(j.id for members in bins[:nodes] for j in members)
        return view.scale_up(pool, o, nodes, units, f"{len(units)} unschedulable pods ({self.expander} expander)")

    def _score(self, o: Offering, nodes: int, requested: int) -> float:
        """The expander's preference for an option (lower first; ties broken at random)."""
        if self.expander == "least-waste":
            return 1.0 - min(1.0, requested / (nodes * o.gpus_per_node))
        if self.expander == "price":
            hourly = self._list_price if o.key.capacity_type is CapacityType.RESERVATION else o.hourly_usd
            return hourly * nodes / max(1, requested)
        if self.expander == "priority":
            return -PRIORITIES.get(o.key.capacity_type, 0)
        return 0.0  # random

    def utilization(self, node: SimNode) -> float:
        """GPU requests / allocatable GPUs (CA's utilisation of an accelerator node)."""
        return node.used / node.gpus if node.gpus else 0.0

    def unneeded(self, node: SimNode) -> bool:
        """Below the utilisation threshold and every pod movable: GPU batch pods are not, so only an empty
        node can be unneeded."""
        return self.utilization(node) < self.utilization_threshold and not node.jobs

    # ---- scale-down: empty nodes unneeded for 10 min ---------------------------------------------

    def _scale_down(self, view: ReplayView, now: float) -> list[Command]:
        if now - self._last_add < self.delay_after_add_s:
            return []
        empty = empty_nodes(view.state, now, idle_for_s=self.unneeded_time_s, limit=len(view.state.idle))
        victims = [n for n in empty if self.unneeded(n)][: self.max_empty_bulk_delete]
        return delete_per_pool(victims, f"unneeded (under {self.utilization_threshold:g} GPU utilisation) for 10 min")

    # ---- node-group backoff --------------------------------------------------------------------

    def backed_off(self, key: OfferingKey, now: float) -> bool:
        """Whether the node group `key` is backed off at `now` (`IsBackedOff`)."""
        b = self._backoff.get(key)
        return b is not None and b.until > now

    def backoff_duration(self, key: OfferingKey) -> float | None:
        """The duration of the group's current backoff entry (None: none kept)."""
        b = self._backoff.get(key)
        return b.duration if b is not None else None

    def _finish_scale_ups(self, view: ReplayView) -> None:
        """clusterstate.go `updateScaleRequests`, every loop: a scale-up with no node of it still coming up has
        finished, and its group's backoff is removed."""
        booting = view.state.booting
        for key, names in list(self._scaling.items()):
            if not any(n in booting and booting[n].offering == key for n in names):
                del self._scaling[key]
                self._backoff.pop(key, None)

    def on_launch_failure(self, command: ScaleUp, error: ProviderError, now: float) -> None:
        """`Backoff`: the initial duration, or double the previous one (capped) when the previous backoff had
        ended, or the same one when it had not (a failure of a scale-up started before it); an entry whose last
        failure is more than the reset timeout ago is forgotten first (`RemoveStaleBackoffData`)."""
        key = command.offering
        names = self._scaling.get(key)
        if names is not None:  # the refused nodes are not coming up (a scale-up of the group before them may be)
            names.difference_update(command.names)
            if not names:
                del self._scaling[key]
        prev = self._backoff.get(key)
        if prev is not None and prev.last_failure + self.backoff_reset_s < now:
            prev = None
        duration = self.backoff_s
        if prev is not None:  # concurrent failures during a backoff keep its duration; a later one doubles it
            duration = prev.duration if prev.until > now else min(2 * prev.duration, self.backoff_max_s)
        self._backoff[key] = _Backoff(now + duration, duration, now)
        self._next_scan = now  # CA tries the next option at once
