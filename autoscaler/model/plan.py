"""Commands and the Plan: the planner's decisions, as data.

Actuators execute commands; the planner never calls anything.  `ScaleUp` names the nodes it
creates (free indices of the pool's name space) and carries a deterministic `request_id` (a hash
of its inputs), so executing the same plan twice creates each node once.  Scale-down is two steps
across plans: `Drain` a ready-idle node, then `DeleteNodes` it by name once it is drained and empty.
"""

from __future__ import annotations

import enum
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field

from autoscaler.cloud import LaunchRequest, OfferingKey
from autoscaler.model.policy import UnavailableOffering


def request_id_for(pool: str, offering: OfferingKey, names: tuple[str, ...], now: float) -> str:
    """Deterministic launch request id: same pool, offering, names and plan time -> same id."""
    h = hashlib.sha1(f"{pool}|{offering}|{','.join(names)}|{now:.3f}".encode()).hexdigest()
    return f"su-{h[:16]}"


@dataclass(frozen=True)
class ScaleUp:
    """Create `names` (count = len(names)) in `pool` from `offering`, all or nothing.

    `units` are the work units the new nodes are for; a gang gets its own ScaleUp, with
    `placement_group` set where the machine wants compact placement."""

    pool: str
    offering: OfferingKey
    names: tuple[str, ...]
    request_id: str
    units: tuple[str, ...]
    reason: str
    placement_group: str | None = None
    gang: bool = False
    hourly_usd: float = 0.0  # $/h the new nodes add (0 for reservation capacity)
    minimum: bool = False  # launched to keep the pool at its floor (`autoscaler.planner.minimum.pool_floor`)

    @property
    def count(self) -> int:
        return len(self.names)

    @property
    def zone(self) -> str:
        return self.offering.zone

    def launch_request(self) -> LaunchRequest:
        return LaunchRequest(self.request_id, self.pool, self.offering, self.names, self.placement_group)


@dataclass(frozen=True)
class Drain:
    """Stop scheduling new work on these nodes (scale-down step 1).  `cordon`: the nodes are busy and keep their
    running work, which finishes undisturbed; they take no more (`autoscaler.planner.defrag.cordon_oversized`)."""

    pool: str
    nodes: tuple[str, ...]
    reason: str
    cordon: bool = False


@dataclass(frozen=True)
class DeleteNodes:
    """Delete exactly these nodes by name (scale-down step 2; never "shrink by N")."""

    pool: str
    names: tuple[str, ...]
    reason: str


Command = ScaleUp | Drain | DeleteNodes


class Placement(enum.StrEnum):
    READY = "ready"  # on a registered node (idle or partly used)
    BOOTING = "booting"  # on a node that is requested or booting
    NEW = "new"  # on nodes a ScaleUp of this plan creates


@dataclass(frozen=True)
class Assignment:
    """Where a unit will run: `nodes` (one per gang member), and the ScaleUp request that creates
    them when `placement` is NEW."""

    unit: str
    nodes: tuple[str, ...]
    gpus_per_node: int
    placement: Placement
    request_id: str | None = None


class UnservedReason(enum.StrEnum):
    BATCHING = "batching"  # launches held: demand still arriving (batch window)
    NO_OFFERING = "no-offering"  # no offering matches the unit's GPU / machine type and spot rules
    NO_POOL = "no-pool"  # matching offerings exist but no pool that serves the queue can launch them
    BACKED_OFF = "backed-off"  # every matching offering failed recently (stockout / quota)
    EXHAUSTED = "exhausted"  # offerings out of free slots / quota headroom for this unit
    POOL_LIMIT = "pool-limit"  # the pools' max nodes / GPUs reached
    NODE_LIMIT = "node-limit"  # the fleet-wide max nodes reached
    GPU_LIMIT = "gpu-limit"  # the fleet-wide max GPUs reached
    BUDGET = "budget"  # launching would exceed the $/h budget cap
    GANG_TOO_LARGE = "gang-too-large"  # no single zone / placement group can hold the gang
    NAMES_EXHAUSTED = "names-exhausted"  # the pool's name space has no free index


@dataclass(frozen=True)
class Unserved:
    unit: str
    reason: UnservedReason
    detail: str


@dataclass(frozen=True)
class Plan:
    """What to do now.  `commands` in execution order (scale-ups, then drains, then deletes);
    `assignments` unit id -> Assignment; `unserved` with reasons; `unavailable` is the backoff
    memory still in force (pass it to the next call); `stats` are counters for metrics."""

    commands: tuple[Command, ...] = ()
    assignments: Mapping[str, Assignment] = field(default_factory=dict)
    unserved: tuple[Unserved, ...] = ()
    unavailable: tuple[UnavailableOffering, ...] = ()
    stats: Mapping[str, float] = field(default_factory=dict)

    @property
    def scale_ups(self) -> tuple[ScaleUp, ...]:
        return tuple(c for c in self.commands if isinstance(c, ScaleUp))

    @property
    def drains(self) -> tuple[Drain, ...]:
        return tuple(c for c in self.commands if isinstance(c, Drain))

    @property
    def deletes(self) -> tuple[DeleteNodes, ...]:
        return tuple(c for c in self.commands if isinstance(c, DeleteNodes))
