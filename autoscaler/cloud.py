"""The provider protocol: what the autoscaler asks of a cloud and what a cloud tells it.

Five calls (list nodes, launch, delete, poll errors, offerings) over plain frozen dataclasses,
and typed errors the planner's backoff understands.  The GCE actuator, the Slurm power-control
glue and the simulated cloud all implement `Provider`; metrics, rate limits and retries wrap it
(see DESIGN.md, "a small provider protocol").  This module does no I/O and imports no SDK.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from fleet.catalog import CapacityType


@dataclass(frozen=True, order=True)
class OfferingKey:
    """Where and how capacity can be bought: provider x zone x machine type x capacity type.

    `reservation` names the reservation for capacity_type=reservation (None otherwise)."""

    provider: str
    zone: str
    machine_type: str
    capacity_type: CapacityType
    reservation: str | None = None

    def __str__(self) -> str:
        res = f"/{self.reservation}" if self.reservation else ""
        return f"{self.provider}:{self.zone}:{self.machine_type}:{self.capacity_type}{res}"


@dataclass(frozen=True)
class Offering:
    """One offering with its price and known limits.

    `available_nodes` is what the cloud says can still be had (free reservation slots, remaining
    quota expressed in nodes); None means unknown/unbounded.  `gpus_per_node` and `gpu_type` come
    from the catalog so the planner needs nothing else to right-size."""

    key: OfferingKey
    hourly_usd: float
    gpu_type: str
    gpus_per_node: int
    available_nodes: int | None = None
    reservation_size: int | None = None  # total slots of a reservation (reserved offerings)

    @property
    def per_gpu_hourly_usd(self) -> float:
        return self.hourly_usd / self.gpus_per_node


@dataclass(frozen=True)
class LaunchRequest:
    """Create exactly these named nodes in one pool, zone and offering, all or nothing.

    `request_id` makes the call idempotent: launching the same request twice creates each name
    once.  A gang (multi-node job) is one request, so its nodes share zone and placement."""

    request_id: str
    pool: str  # inventory pool name ("cluster/pool" where pools repeat across clusters)
    offering: OfferingKey
    names: tuple[str, ...]
    placement_group: str | None = None  # compact placement policy name, where the machine wants one
    labels: tuple[tuple[str, str], ...] = ()


class CloudNodeStatus(enum.StrEnum):
    """A VM's life as the cloud reports it (not the scheduler's view)."""

    PROVISIONING = "provisioning"  # requested, not yet running
    RUNNING = "running"
    STOPPING = "stopping"  # being deleted / preempted
    GONE = "gone"  # deleted, preempted or failed to create


@dataclass(frozen=True)
class CloudNode:
    name: str
    pool: str
    offering: OfferingKey
    status: CloudNodeStatus
    created_at: float  # epoch seconds the launch was requested
    request_id: str | None = None
    preempted: bool = False


class FailureKind(enum.StrEnum):
    STOCKOUT = "stockout"  # ZONE_RESOURCE_POOL_EXHAUSTED and friends
    QUOTA = "quota"  # QUOTA_EXCEEDED
    NOT_FOUND = "not-found"
    INVALID = "invalid"  # the request itself is wrong: do not retry as is
    TRANSIENT = "transient"  # 429 / 5xx / timeout: retry with backoff


@dataclass(frozen=True)
class ProvisioningFailure:
    """An asynchronous launch failure reported after `launch` returned (e.g. a MIG's per-instance
    creation error).  The planner marks `offering` unavailable for a while."""

    request_id: str | None
    offering: OfferingKey
    kind: FailureKind
    names: tuple[str, ...] = ()
    message: str = ""
    at: float = 0.0


class ProviderError(Exception):
    """Base of every error a provider raises.  `kind` drives retry and backoff decisions."""

    kind: FailureKind = FailureKind.TRANSIENT

    def __init__(self, message: str, *, offering: OfferingKey | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.offering = offering
        self.code = code  # the cloud's own error code, e.g. ZONE_RESOURCE_POOL_EXHAUSTED


class InsufficientCapacity(ProviderError):
    kind = FailureKind.STOCKOUT


class QuotaExceeded(ProviderError):
    kind = FailureKind.QUOTA


class NotFound(ProviderError):
    kind = FailureKind.NOT_FOUND


class InvalidRequest(ProviderError):
    kind = FailureKind.INVALID


class TransientError(ProviderError):
    kind = FailureKind.TRANSIENT


@dataclass(frozen=True)
class LaunchResult:
    request_id: str
    accepted: tuple[str, ...]  # names the cloud accepted (now PROVISIONING or already existing)
    already_existed: tuple[str, ...] = field(default=())


@runtime_checkable
class Provider(Protocol):
    """What every cloud backend implements.  Calls are synchronous; each may raise ProviderError."""

    name: str

    def list_nodes(self, pools: Sequence[str] | None = None) -> list[CloudNode]:
        """Every node this provider holds for the given pools (all pools when None)."""
        ...

    def launch(self, request: LaunchRequest) -> LaunchResult:
        """Create the named nodes; idempotent by request_id and by name.  Raises
        InsufficientCapacity / QuotaExceeded when the cloud refuses synchronously."""
        ...

    def delete(self, pool: str, names: Sequence[str]) -> None:
        """Delete exactly these nodes by name (never "shrink by N").  Unknown names are ignored."""
        ...

    def poll_errors(self) -> list[ProvisioningFailure]:
        """Launch failures that surfaced since the last call."""
        ...

    def offerings(self) -> list[Offering]:
        """Offerings with current prices and limits (free reservation slots, quota headroom)."""
        ...


@contextmanager
def shared_reads(providers: Iterable[Any]) -> Iterator[None]:
    """One tick's reads of the cloud: inside, a provider that offers `shared_reads()` (an optional method; the GCE
    actuator does) may answer repeated reads of the same resource from one listing, dropped by its own writes to
    it.  A tick lists its nodes, polls their errors and launches, each of which read the same groups."""
    with ExitStack() as stack:
        for p in providers:
            enter = getattr(p, "shared_reads", None)
            if enter is not None:
                stack.enter_context(enter())
        yield
