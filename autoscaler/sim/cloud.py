"""`SimCloud`: the provider protocol over simulated time.

A launch is accepted or refused synchronously (stockout, quota, reservation full), all or nothing.
Accepted nodes are PROVISIONING, turn RUNNING after the machine type's boot time and *register*
(usable by the scheduler) after its registration time; spot nodes may be preempted at a rate.
The replay loop asks `next_event_time()` and calls `advance(t)` to collect what happened; a
daemon-style caller can ignore both and just poll `list_nodes()` as time moves.

Randomness is seeded: each offering draws its stockouts from its own stream and preemptions from
one stream, so a run is reproducible from `SimConfig.seed`."""

from __future__ import annotations

import enum
import heapq
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from autoscaler.cloud import (
    CloudNode,
    CloudNodeStatus,
    InsufficientCapacity,
    InvalidRequest,
    LaunchRequest,
    LaunchResult,
    Offering,
    OfferingKey,
    ProvisioningFailure,
    QuotaExceeded,
)
from autoscaler.sim.billing import BillingLedger, BillingRecord, reservation_cost
from autoscaler.sim.config import SimConfig, SimReservation, StockoutWindow
from fleet.catalog import CapacityType, load_catalog


class NodeEventKind(enum.StrEnum):
    RUNNING = "running"  # the VM is up (cloud view)
    REGISTERED = "registered"  # the node joined the scheduler: usable capacity
    PREEMPTED = "preempted"  # a spot node was reclaimed; billing stopped


@dataclass(frozen=True)
class NodeEvent:
    at: float
    kind: NodeEventKind
    name: str
    pool: str
    offering: OfferingKey


@dataclass
class _Node:
    node: CloudNode
    gpus: int
    gen: int = 0  # creation number: events of an earlier node with the same name are stale
    registered: bool = False
    gone_at: float | None = None


class SimCloud:
    """A simulated cloud that implements `autoscaler.cloud.Provider`."""

    def __init__(self, config: SimConfig, clock: Callable[[], float]) -> None:
        self.config = config
        self.name = config.provider
        self._clock = clock
        self.ledger = BillingLedger()
        self._nodes: dict[str, _Node] = {}
        self._gone: dict[str, _Node] = {}
        self._requests: dict[str, LaunchResult] = {}
        self._events: list[tuple[float, int, NodeEventKind, str, int]] = []
        self._seq = 0
        self._errors: list[ProvisioningFailure] = []
        self._out_until: dict[OfferingKey, float] = {}
        self._timeline: dict[OfferingKey, list] = {}  # key -> [rng, out?, next switch time]
        self._origin = clock()
        self._stockout_rng: dict[OfferingKey, random.Random] = {}
        self._preempt_rng = random.Random(f"{config.seed}:preemption")
        self._gpus_in_use: dict[CapacityType, int] = {}
        self._reservation_used: dict[str, int] = {r.name: 0 for r in config.reservations}
        self._reservations: dict[str, SimReservation] = {r.name: r for r in config.reservations}
        self._offerings = self._build_offerings()
        self.launch_attempts = 0
        self.stockouts = 0
        self.preemptions = 0

    # ---- catalog-derived offerings -------------------------------------------------------------

    def _build_offerings(self) -> dict[OfferingKey, Offering]:
        cat = load_catalog()
        out: dict[OfferingKey, Offering] = {}
        for mt in self.config.machine_types:
            m = cat.machine(mt)
            price = m.price(self.config.region)
            assert price is not None  # SimConfig checked it
            for zone in self.config.offered_zones(mt):
                for ct in self.config.capacity_types:
                    hourly = price.hourly(ct)
                    if hourly is None:
                        continue  # e.g. no spot price: not offered as spot
                    key = OfferingKey(self.config.provider, zone, mt, ct)
                    out[key] = Offering(key, hourly, m.gpu.accelerator_type, m.gpu_count)
        for r in self.config.reservations:
            m = cat.machine(r.machine_type)
            key = OfferingKey(self.config.provider, r.zone, r.machine_type, CapacityType.RESERVATION, r.name)
            out[key] = Offering(key, r.hourly_usd, m.gpu.accelerator_type, m.gpu_count, r.nodes, r.nodes)
        return out

    # ---- Provider protocol -----------------------------------------------------------------------

    def offerings(self) -> list[Offering]:
        out = []
        for key, off in self._offerings.items():
            if key.capacity_type is CapacityType.RESERVATION:
                free = off.reservation_size - self._reservation_used[key.reservation]  # type: ignore[operator]
                out.append(replace(off, available_nodes=free))
            elif key.capacity_type in self.config.gpu_quota:
                head = self.config.gpu_quota[key.capacity_type] - self._gpus_in_use.get(key.capacity_type, 0)
                out.append(replace(off, available_nodes=max(0, head) // off.gpus_per_node))
            else:
                out.append(off)
        return out

    def list_nodes(self, pools: Sequence[str] | None = None) -> list[CloudNode]:
        now = self._clock()
        horizon = now - self.config.gone_retention_s
        for name in [n for n, g in self._gone.items() if g.gone_at is not None and g.gone_at < horizon]:
            del self._gone[name]
        wanted = set(pools) if pools is not None else None
        return [
            n.node for n in (*self._nodes.values(), *self._gone.values()) if wanted is None or n.node.pool in wanted
        ]

    def launch(self, request: LaunchRequest) -> LaunchResult:
        if request.request_id in self._requests:
            return self._requests[request.request_id]
        off = self._offerings.get(request.offering)
        if off is None:
            raise InvalidRequest(
                f"offering {request.offering} is not offered by {self.name}", offering=request.offering
            )
        if not request.names:
            raise InvalidRequest("launch request names no nodes", offering=request.offering)
        if len(set(request.names)) != len(request.names):
            raise InvalidRequest("launch request repeats a node name", offering=request.offering)
        existing = tuple(n for n in request.names if n in self._nodes)
        for n in existing:
            if self._nodes[n].node.pool != request.pool:
                raise InvalidRequest(f"node {n} already exists in pool {self._nodes[n].node.pool}")
        new = [n for n in request.names if n not in self._nodes]
        now = self._clock()
        self.launch_attempts += 1
        if new:
            self._admit(off, len(new), now)
        for name in new:
            self._create(name, request, off, now)
        result = LaunchResult(request.request_id, tuple(request.names), existing)
        self._requests[request.request_id] = result
        return result

    def delete(self, pool: str, names: Sequence[str]) -> None:
        now = self._clock()
        for name in names:
            n = self._nodes.get(name)
            if n is None or n.node.pool != pool:
                continue
            self._retire(n, now, preempted=False)

    def poll_errors(self) -> list[ProvisioningFailure]:
        out, self._errors = self._errors, []
        return out

    # ---- simulation hooks -----------------------------------------------------------------------

    def next_event_time(self) -> float | None:
        """When the next boot, registration or preemption happens (None: nothing scheduled)."""
        while self._events:
            t, _, kind, name, gen = self._events[0]
            if self._event_valid(kind, name, gen):
                return t
            heapq.heappop(self._events)
        return None

    def advance(self, now: float) -> list[NodeEvent]:
        """Apply every scheduled event at or before `now`, in time order; return them."""
        out: list[NodeEvent] = []
        while self._events and self._events[0][0] <= now:
            t, _, kind, name, gen = heapq.heappop(self._events)
            if not self._event_valid(kind, name, gen):
                continue
            n = self._nodes[name]
            if kind is NodeEventKind.RUNNING:
                n.node = replace(n.node, status=CloudNodeStatus.RUNNING)
            elif kind is NodeEventKind.REGISTERED:
                n.registered = True
            else:
                self.preemptions += 1
                self._retire(n, t, preempted=True)
            out.append(NodeEvent(t, kind, name, n.node.pool, n.node.offering))
        return out

    def is_registered(self, name: str) -> bool:
        n = self._nodes.get(name)
        return n is not None and n.registered

    def reservation_cost(self, span_s: float) -> float:
        """What the configured reservations cost over a span, used or not."""
        return sum(reservation_cost(r.nodes, r.hourly_usd, span_s) for r in self.config.reservations)

    def reserved_gpus(self) -> int:
        """GPUs of every configured reservation's nodes."""
        return sum(
            (o.reservation_size or 0) * o.gpus_per_node
            for o in self._offerings.values()
            if o.key.capacity_type is CapacityType.RESERVATION
        )

    def stocked_out(self, key: OfferingKey, now: float | None = None) -> bool:
        """Whether launches in `key` fail now (scheduled windows, the timeline, or a recent failure)."""
        now = self._clock() if now is None else now
        if key.capacity_type is CapacityType.RESERVATION:
            return False
        if any(self._window_matches(w, key, now) for w in self.config.stockout_windows):
            return True
        if self.config.stockout_mode == "timeline":
            return self._timeline_out(key, now)
        return self._out_until.get(key, -math.inf) > now

    def _timeline_out(self, key: OfferingKey, now: float) -> bool:
        """An alternating in-stock / out-of-stock process per offering, from the cloud's start:
        out windows last Exp(mean W), in-stock spells Exp(mean W (1 - R) / R), so the offering is
        out a share R of the time and a launch at a random moment fails with probability R."""
        rate = self.config.stockout_rate
        if rate <= 0.0:
            return False
        if rate >= 1.0:
            return True
        w = self.config.stockout_window_s
        tl = self._timeline.get(key)
        if tl is None:
            rng = random.Random(f"{self.config.seed}:stockout-timeline:{key}")
            out = rng.random() < rate
            tl = self._timeline[key] = [
                rng,
                out,
                self._origin + rng.expovariate(1.0 / (w if out else w * (1 - rate) / rate)),
            ]
        rng, out, switch = tl
        while switch <= now:
            out = not out
            switch += rng.expovariate(1.0 / (w if out else w * (1 - rate) / rate))
        tl[1], tl[2] = out, switch
        return out

    # ---- internals ------------------------------------------------------------------------------

    def _event_valid(self, kind: NodeEventKind, name: str, gen: int) -> bool:
        n = self._nodes.get(name)
        if n is None or n.gen != gen:
            return False
        if kind is NodeEventKind.RUNNING:
            return n.node.status is CloudNodeStatus.PROVISIONING
        if kind is NodeEventKind.REGISTERED:
            return not n.registered
        return True

    @staticmethod
    def _window_matches(w: StockoutWindow, key: OfferingKey, now: float) -> bool:
        return (
            w.zone == key.zone
            and w.start <= now < w.end
            and (w.machine_type is None or w.machine_type == key.machine_type)
            and (w.capacity_type is None or w.capacity_type == key.capacity_type)
        )

    def _admit(self, off: Offering, count: int, now: float) -> None:
        """Refuse the whole request (raise) if the cloud cannot give `count` nodes now."""
        key = off.key
        if key.capacity_type is CapacityType.RESERVATION:
            free = off.reservation_size - self._reservation_used[key.reservation]  # type: ignore[operator]
            if count > free:
                self.stockouts += 1
                raise InsufficientCapacity(
                    f"reservation {key.reservation} has {free} free slots, {count} requested",
                    offering=key,
                    code="RESERVATION_CAPACITY_EXCEEDED",
                )
            return
        quota = self.config.gpu_quota.get(key.capacity_type)
        if quota is not None:
            used = self._gpus_in_use.get(key.capacity_type, 0)
            if used + count * off.gpus_per_node > quota:
                raise QuotaExceeded(
                    f"{key.capacity_type} GPU quota {quota} in {self.config.region}: {used} in use, "
                    f"{count * off.gpus_per_node} more requested",
                    offering=key,
                    code="QUOTA_EXCEEDED",
                )
        if self.stocked_out(key, now) or (self.config.stockout_mode == "per-attempt" and self._draw_stockout(key, now)):
            self.stockouts += 1
            raise InsufficientCapacity(
                f"{key.machine_type} ({key.capacity_type}) exhausted in {key.zone}",
                offering=key,
                code="ZONE_RESOURCE_POOL_EXHAUSTED",
            )

    def _draw_stockout(self, key: OfferingKey, now: float) -> bool:
        if self.config.stockout_rate <= 0.0:
            return False
        rng = self._stockout_rng.get(key)
        if rng is None:
            rng = self._stockout_rng[key] = random.Random(f"{self.config.seed}:stockout:{key}")
        if rng.random() < self.config.stockout_rate:
            self._out_until[key] = now + self.config.stockout_window_s
            return True
        return False

    def _create(self, name: str, request: LaunchRequest, off: Offering, now: float) -> None:
        key = off.key
        node = CloudNode(name, request.pool, key, CloudNodeStatus.PROVISIONING, now, request.request_id)
        self._seq += 1
        gen = self._seq
        self._nodes[name] = _Node(node, off.gpus_per_node, gen)
        self._gone.pop(name, None)
        covered = key.capacity_type is CapacityType.RESERVATION
        if covered:
            self._reservation_used[key.reservation] += 1  # type: ignore[index]
        self._gpus_in_use[key.capacity_type] = self._gpus_in_use.get(key.capacity_type, 0) + off.gpus_per_node
        self.ledger.open(BillingRecord(name, key, off.gpus_per_node, off.hourly_usd, now, None, covered))
        prof = self.config.boot_profile(key.machine_type)
        self._push(now + prof.boot_s, NodeEventKind.RUNNING, name, gen)
        self._push(now + prof.ready_s, NodeEventKind.REGISTERED, name, gen)
        if key.capacity_type is CapacityType.SPOT and self.config.preemption_rate_per_hour > 0:
            life_h = self._preempt_rng.expovariate(self.config.preemption_rate_per_hour)
            self._push(now + prof.boot_s + life_h * 3600.0, NodeEventKind.PREEMPTED, name, gen)

    def _retire(self, n: _Node, at: float, *, preempted: bool) -> None:
        name = n.node.name
        key = n.node.offering
        del self._nodes[name]
        self.ledger.close(name, at)
        if key.capacity_type is CapacityType.RESERVATION:
            self._reservation_used[key.reservation] -= 1  # type: ignore[index]
        self._gpus_in_use[key.capacity_type] -= n.gpus
        n.node = replace(n.node, status=CloudNodeStatus.GONE, preempted=preempted)
        n.gone_at = at
        n.registered = False
        self._gone[name] = n

    def _push(self, t: float, kind: NodeEventKind, name: str, gen: int) -> None:
        self._seq += 1
        heapq.heappush(self._events, (t, self._seq, kind, name, gen))
