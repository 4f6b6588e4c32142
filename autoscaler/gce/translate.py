"""Pure translations between the provider protocol and Compute Engine's vocabulary.

Managed-instance state -> `CloudNodeStatus`, GCE `requestId`s derived from the autoscaler's
request ids, resource URLs, the per-instance metadata the actuator stamps on each VM, and the
regional GPU quota metric of an accelerator.  No I/O.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field

from autoscaler.cloud import CloudNodeStatus
from autoscaler.node_names import split_node_name
from fleet.catalog import CapacityType, load_catalog

GCE_NAME = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")

# Per-instance (stateful) metadata the actuator writes with createInstances and reads back.
META_REQUEST_ID = "fleet-request-id"
META_POOL = "fleet-pool"
META_CREATED_AT = "fleet-created-at"

_REQUEST_NS = uuid.UUID("5b0c7a0e-3f5e-4d0e-9a53-6c1f2d1e9a10")

# MIG currentAction values (InstanceGroupManagersListManagedInstances) grouped by what they mean.
_STOPPING_ACTIONS = frozenset({"DELETING", "ABANDONING", "STOPPING", "SUSPENDING"})
_PROVISIONING_ACTIONS = frozenset({"CREATING", "CREATING_WITHOUT_RETRIES", "RECREATING", "STARTING", "RESUMING"})
_UP_STATUSES = frozenset({"RUNNING"})
_BOOTING_STATUSES = frozenset({"PROVISIONING", "STAGING", "REPAIRING"})
_DOWN_STATUSES = frozenset({"STOPPING", "SUSPENDING"})
_GONE_STATUSES = frozenset({"TERMINATED", "STOPPED", "SUSPENDED", "DEPROVISIONING"})


@dataclass(frozen=True)
class ManagedVm:
    """One member of a zonal MIG as listManagedInstances reports it (plain values)."""

    name: str
    zone: str
    current_action: str
    instance_status: str | None  # None while the VM does not exist (creation pending or failed)
    errors: tuple[tuple[str, str], ...] = ()  # lastAttempt.errors: (code, message)
    metadata: dict[str, str] = field(default_factory=dict)  # preservedStateFromConfig.metadata


# Resize requests (how flex-start capacity is requested): states that may still create instances.
RESIZE_PENDING = frozenset({"ACCEPTED", "CREATING"})


@dataclass(frozen=True)
class ResizeReq:
    """One MIG resize request as resizeRequests.list reports it (plain values)."""

    name: str
    zone: str
    state: str  # ACCEPTED CREATING SUCCEEDED FAILED CANCELLED
    names: tuple[str, ...]
    request_id: str | None = None  # from the instances' preserved metadata
    created_at: float = 0.0
    errors: tuple[tuple[str, str], ...] = ()  # status.error: why it FAILED
    waiting_on: tuple[tuple[str, str], ...] = ()  # status.lastAttempt.error: why it is still queued


def resize_request_name(request_id: str, zone: str, names: Iterable[str]) -> str:
    """A valid, deterministic resize-request name for one launch into one zone."""
    return "fleet-" + uuid.uuid5(_REQUEST_NS, "|".join((request_id, zone, *names))).hex[:24]


def node_status(vm: ManagedVm) -> tuple[CloudNodeStatus, bool]:
    """(status, preempted) of a managed VM.  A TERMINATED VM was preempted (or lost its host): the stack's spot
    template stops a preempted VM (`instance_termination_action: STOP`) and its MIG repairs nothing
    (`default_action_on_failure: DO_NOTHING`), so the member stays TERMINATED with no current action, as slurm-gcp
    reads a preemption.  A MIG that repairs shows it RECREATING instead; that counts too."""
    action, status = vm.current_action.upper(), (vm.instance_status or "").upper()
    if action in _STOPPING_ACTIONS or status in _DOWN_STATUSES:
        return CloudNodeStatus.STOPPING, False
    if status in _GONE_STATUSES:
        return CloudNodeStatus.GONE, action == "RECREATING" or status == "TERMINATED"
    if status in _UP_STATUSES and action not in _PROVISIONING_ACTIONS:
        return CloudNodeStatus.RUNNING, False
    return CloudNodeStatus.PROVISIONING, False


def gce_request_id(request_id: str, *parts: str) -> str:
    """A GCE requestId (a UUID) derived deterministically from our request id and the call's
    target, so a retried or repeated call is de-duplicated by Compute Engine itself."""
    return str(uuid.uuid5(_REQUEST_NS, "|".join((request_id, *parts))))


def instance_url(project: str, zone: str, name: str) -> str:
    return f"projects/{project}/zones/{zone}/instances/{name}"


def last_segment(url: str) -> str:
    return url.rstrip("/").rsplit("/", 1)[-1]


def gpu_quota_metric(accelerator: str, capacity: CapacityType) -> str | None:
    """The regional quota metric GPUs of this pool count against; None when there is none to read (a reservation's
    capacity was charged when it was made) or the accelerator is unknown.  Spot and flex-start VMs consume
    preemptible quota (Google's flex-start GA announcement: "Flex-start VMs ... consume preemptible quota")."""
    gpu = load_catalog().gpu(accelerator)
    if gpu is None:
        return None
    base = gpu.quota_metric
    if capacity in (CapacityType.SPOT, CapacityType.FLEX_START):
        return f"PREEMPTIBLE_{base}"
    if capacity is CapacityType.ON_DEMAND:
        return base
    return None


def invalid_names(names: Iterable[str], prefix: str) -> list[str]:
    """Names that are not valid GCE instance names of the form f"{prefix}-{index}" (`autoscaler.node_names`)."""
    return [n for n in names if not (GCE_NAME.match(n) and _prefix_of(n) == prefix)]


def _prefix_of(name: str) -> str | None:
    """The name space of a `prefix-index` name; None when its index is not canonical."""
    parsed = split_node_name(name)
    return parsed[0] if parsed else None
