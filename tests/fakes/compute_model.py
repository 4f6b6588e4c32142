"""The in-memory Compute Engine model behind the fake REST server.

Holds projects' regions (with quotas), zones, zonal managed instance groups, instances,
reservations and operations, and implements the API semantics the autoscaler relies on:
`requestId` de-duplication, 409 alreadyExists, MIG `createInstances` whose per-instance
failures (stockout, quota) surface asynchronously in `lastAttempt.errors` and `listErrors`,
`deleteInstances` of named instances, boot and delete delays with hooks, and an event log
that counts every real instance creation per name.  No HTTP here: `compute_api` maps
requests onto these methods and their JSON results.

Preemption (`preempt`) follows the VM's termination action and its MIG's repair policy; the
termination action DELETE is refused there, since what listManagedInstances shows once such a
member's VM is gone is not documented.
"""

from __future__ import annotations

import heapq
import itertools
import re
import shlex
import subprocess
import threading
import time
import uuid
import zlib
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

BASE_URL = "https://www.googleapis.com/compute/v1"
NAME_RE = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")

Hook = Callable[[str, str], object] | Sequence[str] | str | None
Json = dict[str, Any]

# Accelerator type -> the regional GPU quota metric GCE charges it to (PREEMPTIBLE_ prefix for spot and flex-start).
GPU_QUOTA_METRICS = {
    "nvidia-h100-80gb": "NVIDIA_H100_GPUS",
    "nvidia-h100-mega-80gb": "NVIDIA_H100_MEGA_GPUS",
    "nvidia-h200-141gb": "NVIDIA_H200_GPUS",
    "nvidia-b200": "NVIDIA_B200_GPUS",
    "nvidia-tesla-a100": "NVIDIA_A100_GPUS",
    "nvidia-a100-80gb": "NVIDIA_A100_80GB_GPUS",
    "nvidia-l4": "NVIDIA_L4_GPUS",
}

STOCKOUT_MESSAGE = (
    "The zone 'projects/{project}/zones/{zone}' does not have enough resources available to fulfill the request. "
    " Try a different zone, or try again later."
)
QUOTA_MESSAGE = "Quota '{metric}' exceeded.  Limit: {limit:.1f} in region {region}."
# A specific reservation without a free slot.  The message is the one kubernetes/autoscaler's GCE client matches
# (isReservationCapacityExceeded); the code it arrives with is not documented: CONDITION_NOT_MET is a guess.
RESERVATION_FULL_CODE = "CONDITION_NOT_MET"
RESERVATION_FULL_MESSAGE = (
    "Specified reservation 'projects/{project}/zones/{zone}/reservations/{reservation}' does not have available "
    "resources for the request."
)
PREEMPTIBLE_MODELS = frozenset({"SPOT", "FLEX_START"})  # flex-start VMs consume preemptible quota (Google, GA post)


def quota_metric(accelerator: str, provisioning_model: str) -> str:
    base = GPU_QUOTA_METRICS.get(accelerator, accelerator.upper().replace("-", "_") + "_GPUS")
    return f"PREEMPTIBLE_{base}" if provisioning_model in PREEMPTIBLE_MODELS else base


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def stable_id(name: str) -> int:
    """A resource id that is the same in every run (GCE ids are opaque uint64s)."""
    return zlib.crc32(name.encode()) + 10**9


def last_segment(url_or_name: str) -> str:
    return url_or_name.rstrip("/").rsplit("/", 1)[-1]


class ApiError(Exception):
    """An HTTP error in the shape GCE returns (`error.code`, `error.message`, `error.errors[].reason`)."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason
        self.message = message

    def body(self) -> Json:
        return {
            "error": {
                "code": self.status,
                "message": self.message,
                "errors": [{"message": self.message, "domain": "global", "reason": self.reason}],
            }
        }


@dataclass(frozen=True)
class Event:
    """One thing that happened in the fake, for asserting: create, create-failed, boot, delete, ..."""

    at: float
    kind: str
    name: str = ""
    zone: str = ""
    request_id: str | None = None
    detail: str = ""


@dataclass
class Quota:
    metric: str
    limit: float
    usage: float = 0.0


@dataclass
class Region:
    name: str
    zones: list[str]
    quotas: dict[str, Quota] = field(default_factory=dict)


@dataclass
class Reservation:
    zone: str
    name: str
    machine_type: str
    count: int
    in_use: int = 0


@dataclass
class Instance:
    name: str
    zone: str
    machine_type: str
    provisioning_model: str  # STANDARD | SPOT | FLEX_START
    accelerator: str | None
    gpu_count: int
    id: int
    created: str
    status: str = "PROVISIONING"  # PROVISIONING STAGING RUNNING STOPPING TERMINATED
    mig: str | None = None
    reservation: str | None = None
    labels: dict[str, str] = field(default_factory=dict)
    metadata: dict[str, str] = field(default_factory=dict)
    termination_action: str | None = None  # scheduling.instanceTerminationAction: STOP (GCE's default) | DELETE


@dataclass
class ManagedInstance:
    name: str
    current_action: str = "CREATING"  # CREATING NONE DELETING RECREATING ...
    errors: list[Json] = field(default_factory=list)  # lastAttempt.errors.errors of the last failed attempt
    metadata: dict[str, str] = field(default_factory=dict)  # preservedState.metadata from the per-instance config


@dataclass
class Mig:
    zone: str
    name: str
    machine_type: str
    provisioning_model: str = "STANDARD"
    accelerator: str | None = None
    gpu_count: int = 0
    reservation: str | None = None
    instance_template: str = ""
    base_instance_name: str = ""
    instance_termination_action: str | None = None  # the template's (spot / flex-start); None: GCE's default, STOP
    default_action_on_failure: str = "REPAIR"  # instanceLifecyclePolicy: REPAIR (GCE's default) | DO_NOTHING
    target_size: int = 0
    id: int = 0
    members: dict[str, ManagedInstance] = field(default_factory=dict)
    error_log: list[Json] = field(default_factory=list)  # listErrors items


@dataclass
class Operation:
    name: str
    id: int
    zone: str | None
    region: str | None
    operation_type: str
    target_link: str
    insert_time: str
    done_at: float  # monotonic time the operation reports DONE
    error: list[Json] | None = None
    http_status: int | None = None
    http_message: str | None = None


@dataclass
class HttpFault:
    """Answer the next `remaining` matching requests with `status` (and/or after `delay` seconds)."""

    remaining: int
    status: int | None = None
    reason: str = "backendError"
    delay: float = 0.0
    delay_after: bool = True  # process the request, then stall the reply (the client sees a timeout)
    method: str | None = None
    path_contains: str | None = None

    def matches(self, method: str, path: str) -> bool:
        if self.remaining <= 0:
            return False
        if self.method and self.method.upper() != method.upper():
            return False
        return not (self.path_contains and self.path_contains not in path)


@dataclass
class OperationFault:
    """Complete the next `remaining` operations of `operation_type` (any when None) with this error."""

    remaining: int
    code: str
    message: str
    http_status: int = 400
    operation_type: str | None = None


class Scheduler:
    """A single background thread running callables at monotonic deadlines (boots, deletes, retries)."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Callable[[], None]]] = []
        self._seq = itertools.count()
        self._cv = threading.Condition()
        self._stopped = False
        self._running = 0
        self._thread = threading.Thread(target=self._run, name="fake-compute-scheduler", daemon=True)
        self._thread.start()

    def call_later(self, delay: float, fn: Callable[[], None]) -> None:
        with self._cv:
            heapq.heappush(self._heap, (time.monotonic() + max(0.0, delay), next(self._seq), fn))
            self._cv.notify()

    def idle(self) -> bool:
        with self._cv:
            return not self._heap and self._running == 0

    def stop(self) -> None:
        with self._cv:
            self._stopped = True
            self._cv.notify()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        while True:
            with self._cv:
                while not self._stopped and (not self._heap or self._heap[0][0] > time.monotonic()):
                    self._cv.wait(None if not self._heap else self._heap[0][0] - time.monotonic())
                if self._stopped:
                    return
                _, _, fn = heapq.heappop(self._heap)
                self._running += 1
            try:
                fn()
            finally:
                with self._cv:
                    self._running -= 1


class ComputeState:
    """The whole fake cloud of one or more projects.  Every public method is thread safe."""

    def __init__(
        self,
        *,
        boot_delay: float = 0.0,
        delete_delay: float = 0.0,
        operation_delay: float = 0.0,
        mig_retry_interval: float | None = None,
        on_boot: Hook = None,
        on_delete: Hook = None,
        hook_timeout: float = 60.0,
    ) -> None:
        self.boot_delay = boot_delay
        self.delete_delay = delete_delay
        self.operation_delay = operation_delay
        self.mig_retry_interval = mig_retry_interval
        self.on_boot = on_boot
        self.on_delete = on_delete
        self.hook_timeout = hook_timeout
        self.lock = threading.RLock()
        self.regions: dict[tuple[str, str], Region] = {}
        self.zone_region: dict[tuple[str, str], str] = {}
        self.migs: dict[tuple[str, str, str], Mig] = {}
        self.instances: dict[tuple[str, str, str], Instance] = {}
        self.reservations: dict[tuple[str, str, str], Reservation] = {}
        self.operations: dict[tuple[str, str], Operation] = {}
        self.request_ids: dict[tuple[str, str], Operation] = {}
        self.stockouts: set[tuple[str, str, str | None]] = set()
        self.http_faults: list[HttpFault] = []
        self.operation_faults: list[OperationFault] = []
        self.events: list[Event] = []
        self.faults_injected: Counter[str] = Counter()
        self._ids = itertools.count(1000)
        self.on_capacity_change: list[Callable[[], None]] = []  # called when stockouts end
        self.name_claims: list[Callable[[str, str], set[str]]] = []  # (project, zone) -> names spoken for
        self.scheduler = Scheduler()

    # ----------------------------------------------------------------- setup

    def add_region(
        self, project: str, region: str, zones: Iterable[str], quotas: dict[str, float] | None = None
    ) -> None:
        with self.lock:
            reg = self.regions.setdefault((project, region), Region(region, []))
            for zone in zones:
                if zone not in reg.zones:
                    reg.zones.append(zone)
                self.zone_region[(project, zone)] = region
            for metric, limit in (quotas or {}).items():
                self.set_quota(project, region, metric, limit)

    def set_quota(self, project: str, region: str, metric: str, limit: float, usage: float | None = None) -> None:
        with self.lock:
            reg = self._region(project, region)
            q = reg.quotas.setdefault(metric, Quota(metric, float(limit)))
            q.limit = float(limit)
            if usage is not None:
                q.usage = float(usage)

    def add_mig(self, project: str, zone: str, name: str, **kw: Any) -> Mig:
        with self.lock:
            self._zone(project, zone)
            mig = Mig(zone=zone, name=name, id=next(self._ids), **kw)
            mig.instance_template = (
                mig.instance_template or f"{BASE_URL}/projects/{project}/global/instanceTemplates/{name}"
            )
            mig.base_instance_name = mig.base_instance_name or name
            self.migs[(project, zone, name)] = mig
            return mig

    def add_reservation(
        self, project: str, zone: str, name: str, machine_type: str, count: int, in_use: int = 0
    ) -> None:
        with self.lock:
            self._zone(project, zone)
            self.reservations[(project, zone, name)] = Reservation(zone, name, machine_type, count, in_use)

    def stockout(self, zone: str, machine_type: str, provisioning_model: str | None = None) -> None:
        with self.lock:
            self.stockouts.add((zone, machine_type, provisioning_model))

    def clear_stockouts(self, *, retry: bool = True) -> None:
        """End every stockout; with `retry`, failed MIG creations are attempted again (as the MIG would)."""
        with self.lock:
            self.stockouts.clear()
            if retry:
                for (project, _, _), mig in self.migs.items():
                    for member in mig.members.values():
                        if member.errors and (project, mig.zone, member.name) not in self.instances:
                            self.scheduler.call_later(0, self._retry_cb(project, mig, member.name))
                for callback in self.on_capacity_change:
                    callback()

    # ----------------------------------------------------------------- assertions

    def record(
        self, kind: str, name: str = "", zone: str = "", request_id: str | None = None, detail: str = ""
    ) -> None:
        with self.lock:
            self.events.append(Event(time.time(), kind, name, zone, request_id, detail))

    def events_of(self, kind: str) -> list[Event]:
        with self.lock:
            return [e for e in self.events if e.kind == kind]

    def create_counts(self) -> Counter[str]:
        """How many times each instance name was really created (a retry deduplicated by requestId is not)."""
        return Counter(e.name for e in self.events_of("create"))

    def duplicates(self) -> dict[str, int]:
        """Names created more than once (a name legitimately reused after its deletion counts too)."""
        return {name: n for name, n in self.create_counts().items() if n > 1}

    # ----------------------------------------------------------------- lookups

    def _region(self, project: str, region: str) -> Region:
        try:
            return self.regions[(project, region)]
        except KeyError:
            raise ApiError(
                404, "notFound", f"The resource 'projects/{project}/regions/{region}' was not found"
            ) from None

    def _zone(self, project: str, zone: str) -> str:
        try:
            return self.zone_region[(project, zone)]
        except KeyError:
            raise ApiError(404, "notFound", f"The resource 'projects/{project}/zones/{zone}' was not found") from None

    def _mig(self, project: str, zone: str, name: str) -> Mig:
        self._zone(project, zone)
        try:
            return self.migs[(project, zone, name)]
        except KeyError:
            raise ApiError(
                404,
                "notFound",
                f"The resource 'projects/{project}/zones/{zone}/instanceGroupManagers/{name}' was not found",
            ) from None

    # ----------------------------------------------------------------- JSON views

    def zone_json(self, project: str, zone: str) -> Json:
        region = self._zone(project, zone)
        return {
            "kind": "compute#zone",
            "id": str(stable_id(zone)),
            "name": zone,
            "status": "UP",
            "region": f"{BASE_URL}/projects/{project}/regions/{region}",
            "selfLink": f"{BASE_URL}/projects/{project}/zones/{zone}",
        }

    def get_region(self, project: str, region: str) -> Json:
        with self.lock:
            reg = self._region(project, region)
            return {
                "kind": "compute#region",
                "id": str(stable_id(region)),
                "name": region,
                "status": "UP",
                "zones": [f"{BASE_URL}/projects/{project}/zones/{z}" for z in reg.zones],
                "quotas": [{"metric": q.metric, "limit": q.limit, "usage": q.usage} for q in reg.quotas.values()],
                "selfLink": f"{BASE_URL}/projects/{project}/regions/{region}",
            }

    def list_zones(self, project: str) -> Json:
        with self.lock:
            zones = sorted(z for (p, z) in self.zone_region if p == project)
            return {"kind": "compute#zoneList", "items": [self.zone_json(project, z) for z in zones]}

    def get_zone(self, project: str, zone: str) -> Json:
        with self.lock:
            return self.zone_json(project, zone)

    def _mig_json(self, project: str, mig: Mig) -> Json:
        actions = Counter(m.current_action.lower() for m in mig.members.values())
        url = f"{BASE_URL}/projects/{project}/zones/{mig.zone}"
        return {
            "kind": "compute#instanceGroupManager",
            "id": str(mig.id),
            "name": mig.name,
            "zone": url,
            "baseInstanceName": mig.base_instance_name,
            "instanceTemplate": mig.instance_template,
            "instanceGroup": f"{url}/instanceGroups/{mig.name}",
            "targetSize": mig.target_size,
            "currentActions": {
                k: actions.get(k, 0)
                for k in ("abandoning", "creating", "creatingWithoutRetries", "deleting", "none", "recreating")
            },
            "status": {"isStable": set(actions) <= {"none"}},
            "selfLink": f"{url}/instanceGroupManagers/{mig.name}",
        }

    def get_mig(self, project: str, zone: str, name: str) -> Json:
        with self.lock:
            return self._mig_json(project, self._mig(project, zone, name))

    def list_migs(self, project: str, zone: str) -> Json:
        with self.lock:
            self._zone(project, zone)
            items = [
                self._mig_json(project, m) for (p, z, _), m in sorted(self.migs.items()) if (p, z) == (project, zone)
            ]
            return {"kind": "compute#instanceGroupManagerList", "items": items}

    def list_managed_instances(self, project: str, zone: str, name: str) -> list[Json]:
        with self.lock:
            mig = self._mig(project, zone, name)
            out = []
            for member in mig.members.values():
                item: Json = {
                    "instance": f"{BASE_URL}/projects/{project}/zones/{zone}/instances/{member.name}",
                    "name": member.name,
                    "currentAction": member.current_action,
                    "version": {"instanceTemplate": mig.instance_template},
                }
                inst = self.instances.get((project, zone, member.name))
                if inst is not None:
                    item["id"] = str(inst.id)
                    item["instanceStatus"] = inst.status
                if member.errors:
                    item["lastAttempt"] = {"errors": {"errors": list(member.errors)}}
                if member.metadata:
                    item["preservedStateFromConfig"] = {"metadata": dict(member.metadata)}
                out.append(item)
            return out

    def list_mig_errors(self, project: str, zone: str, name: str) -> list[Json]:
        with self.lock:
            return list(self._mig(project, zone, name).error_log)

    def _instance_json(self, project: str, inst: Instance) -> Json:
        zurl = f"{BASE_URL}/projects/{project}/zones/{inst.zone}"
        out: Json = {
            "kind": "compute#instance",
            "id": str(inst.id),
            "name": inst.name,
            "zone": zurl,
            "machineType": f"{zurl}/machineTypes/{inst.machine_type}",
            "status": inst.status,
            "creationTimestamp": inst.created,
            "scheduling": {
                "provisioningModel": inst.provisioning_model,
                "preemptible": inst.provisioning_model == "SPOT",
                "automaticRestart": inst.provisioning_model == "STANDARD",
                "onHostMaintenance": "TERMINATE",
            },
            "labels": dict(inst.labels),
            "metadata": {"items": [{"key": k, "value": v} for k, v in inst.metadata.items()]},
            "networkInterfaces": [{"name": "nic0", "networkIP": f"10.0.{inst.id // 250 % 250}.{inst.id % 250 + 2}"}],
            "selfLink": f"{zurl}/instances/{inst.name}",
        }
        if inst.accelerator:
            out["guestAccelerators"] = [
                {"acceleratorType": f"{zurl}/acceleratorTypes/{inst.accelerator}", "acceleratorCount": inst.gpu_count}
            ]
        if inst.reservation:
            out["reservationAffinity"] = {
                "consumeReservationType": "SPECIFIC_RESERVATION",
                "key": "compute.googleapis.com/reservation-name",
                "values": [inst.reservation],
            }
        return out

    def get_instance(self, project: str, zone: str, name: str) -> Json:
        with self.lock:
            self._zone(project, zone)
            inst = self.instances.get((project, zone, name))
            if inst is None:
                raise ApiError(
                    404, "notFound", f"The resource 'projects/{project}/zones/{zone}/instances/{name}' was not found"
                )
            return self._instance_json(project, inst)

    def list_instances(self, project: str, zone: str) -> list[Json]:
        with self.lock:
            self._zone(project, zone)
            return [
                self._instance_json(project, i)
                for (p, z, _), i in sorted(self.instances.items())
                if (p, z) == (project, zone)
            ]

    def _reservation_json(self, project: str, res: Reservation) -> Json:
        zurl = f"{BASE_URL}/projects/{project}/zones/{res.zone}"
        return {
            "kind": "compute#reservation",
            "id": str(stable_id(res.name)),
            "name": res.name,
            "zone": zurl,
            "status": "READY",
            "specificReservationRequired": True,
            "specificReservation": {
                "count": str(res.count),
                "inUseCount": str(res.in_use),
                "instanceProperties": {"machineType": res.machine_type},
            },
            "selfLink": f"{zurl}/reservations/{res.name}",
        }

    def get_reservation(self, project: str, zone: str, name: str) -> Json:
        with self.lock:
            self._zone(project, zone)
            res = self.reservations.get((project, zone, name))
            if res is None:
                raise ApiError(
                    404, "notFound", f"The resource 'projects/{project}/zones/{zone}/reservations/{name}' was not found"
                )
            return self._reservation_json(project, res)

    def list_reservations(self, project: str, zone: str) -> list[Json]:
        with self.lock:
            self._zone(project, zone)
            return [
                self._reservation_json(project, r)
                for (p, z, _), r in sorted(self.reservations.items())
                if (p, z) == (project, zone)
            ]

    # ----------------------------------------------------------------- operations

    def _operation_json(self, project: str, op: Operation) -> Json:
        done = time.monotonic() >= op.done_at
        scope = f"zones/{op.zone}" if op.zone else (f"regions/{op.region}" if op.region else "global")
        out: Json = {
            "kind": "compute#operation",
            "id": str(op.id),
            "name": op.name,
            "operationType": op.operation_type,
            "targetLink": op.target_link,
            "status": "DONE" if done else "RUNNING",
            "progress": 100 if done else 50,
            "insertTime": op.insert_time,
            "startTime": op.insert_time,
            "user": "fake-compute@example.com",
            "selfLink": f"{BASE_URL}/projects/{project}/{scope}/operations/{op.name}",
        }
        if op.zone:
            out["zone"] = f"{BASE_URL}/projects/{project}/zones/{op.zone}"
        if done:
            out["endTime"] = op.insert_time
            if op.error:
                out["error"] = {"errors": op.error}
                out["httpErrorStatusCode"] = op.http_status
                out["httpErrorMessage"] = op.http_message
        return out

    def _new_operation(
        self,
        project: str,
        zone: str,
        operation_type: str,
        target_link: str,
        request_id: str | None,
        error: list[Json] | None = None,
        http_status: int | None = None,
    ) -> Operation:
        op_id = next(self._ids)
        op = Operation(
            name=f"operation-{op_id}-{uuid.uuid4().hex[:12]}",
            id=op_id,
            zone=zone,
            region=None,
            operation_type=operation_type,
            target_link=target_link,
            insert_time=now_iso(),
            done_at=time.monotonic() + self.operation_delay,
            error=error,
            http_status=http_status,
            http_message={400: "BAD REQUEST", 403: "FORBIDDEN", 503: "SERVICE UNAVAILABLE"}.get(http_status or 0),
        )
        self.operations[(project, op.name)] = op
        if request_id:
            self.request_ids[(project, request_id)] = op
        return op

    def _dedup(self, project: str, request_id: str | None, operation_type: str) -> Operation | None:
        if request_id is None:
            return None
        try:
            uuid.UUID(request_id)
        except ValueError:
            raise ApiError(
                400, "invalid", f"Invalid value for field 'requestId': '{request_id}'. Must be a UUID."
            ) from None
        op = self.request_ids.get((project, request_id))
        if op is not None:
            self.record("dedup", request_id=request_id, detail=operation_type)
        return op

    def _take_operation_fault(self, operation_type: str) -> OperationFault | None:
        for fault in self.operation_faults:
            if fault.remaining > 0 and fault.operation_type in (None, operation_type):
                fault.remaining -= 1
                self.faults_injected[f"operation:{fault.code}"] += 1
                return fault
        return None

    def take_http_fault(self, method: str, path: str) -> HttpFault | None:
        with self.lock:
            for fault in self.http_faults:
                if fault.matches(method, path):
                    fault.remaining -= 1
                    self.faults_injected[f"http:{fault.status}" if fault.status else "timeout"] += 1
                    return fault
            return None

    def get_operation(self, project: str, zone: str, name: str) -> Json:
        with self.lock:
            op = self.operations.get((project, name))
            if op is None or op.zone != zone:
                raise ApiError(
                    404, "notFound", f"The resource 'projects/{project}/zones/{zone}/operations/{name}' was not found"
                )
            return self._operation_json(project, op)

    def wait_operation(self, project: str, zone: str, name: str, max_wait: float = 120.0) -> Json:
        """Like GCE's `wait`: returns when DONE or after at most ~2 minutes, whichever is first."""
        with self.lock:
            self.get_operation(project, zone, name)
            op = self.operations[(project, name)]
        remaining = op.done_at - time.monotonic()
        if remaining > 0:
            time.sleep(min(remaining, max_wait))
        return self.get_operation(project, zone, name)

    # ----------------------------------------------------------------- capacity checks

    def _capacity_error(
        self,
        project: str,
        zone: str,
        machine_type: str,
        model: str,
        accel: str | None,
        gpus: int,
        reservation: str | None = None,
    ) -> Json | None:
        """Why a creation of one instance fails now, as GCE reports it, or None.  Reserved capacity was
        charged to quota when the reservation was made, so consuming it needs no quota, only a free slot
        (count - inUseCount) of the specific reservation."""
        if (zone, machine_type, None) in self.stockouts or (zone, machine_type, model) in self.stockouts:
            self.faults_injected["stockout"] += 1
            return {
                "code": "ZONE_RESOURCE_POOL_EXHAUSTED",
                "message": STOCKOUT_MESSAGE.format(project=project, zone=zone),
            }
        if reservation is not None:
            res = self.reservations.get((project, zone, reservation))
            if res is not None and res.in_use >= res.count:
                self.faults_injected["reservation-full"] += 1
                return {
                    "code": RESERVATION_FULL_CODE,
                    "message": RESERVATION_FULL_MESSAGE.format(project=project, zone=zone, reservation=reservation),
                }
        if accel and gpus and reservation is None:
            region = self.zone_region[(project, zone)]
            q = self.regions[(project, region)].quotas.get(quota_metric(accel, model))
            if q is not None and q.usage + gpus > q.limit:
                self.faults_injected["quota"] += 1
                return {
                    "code": "QUOTA_EXCEEDED",
                    "message": QUOTA_MESSAGE.format(metric=q.metric, limit=q.limit, region=region),
                }
        return None

    def _charge(self, project: str, inst: Instance, sign: int) -> None:
        if inst.accelerator and inst.gpu_count and inst.reservation is None:
            region = self.zone_region[(project, inst.zone)]
            q = self.regions[(project, region)].quotas.get(quota_metric(inst.accelerator, inst.provisioning_model))
            if q is not None:
                q.usage = max(0.0, q.usage + sign * inst.gpu_count)
        if inst.reservation:
            res = self.reservations.get((project, inst.zone, inst.reservation))
            if res is not None:
                res.in_use = max(0, res.in_use + sign)

    def _check_name_free(self, project: str, zone: str, names: Sequence[str]) -> None:
        for name in names:
            if not isinstance(name, str) or not NAME_RE.match(name):
                raise ApiError(
                    400,
                    "invalid",
                    f"Invalid value for field 'resource.name': '{name}'. Must be a match of regex '{NAME_RE.pattern}'",
                )
        if len(set(names)) != len(names):
            raise ApiError(400, "invalid", "Invalid value for field 'resource.instances': duplicate instance names")
        for name in names:
            taken = (
                (project, zone, name) in self.instances
                or any(name in m.members for (p, z, _), m in self.migs.items() if (p, z) == (project, zone))
                or any(name in claim(project, zone) for claim in self.name_claims)
            )
            if taken:
                raise ApiError(
                    409,
                    "alreadyExists",
                    f"The resource 'projects/{project}/zones/{zone}/instances/{name}' already exists",
                )

    def _create_instance(self, project: str, inst: Instance, request_id: str | None) -> None:
        self.instances[(project, inst.zone, inst.name)] = inst
        self._charge(project, inst, +1)
        self.record("create", inst.name, inst.zone, request_id)
        self.scheduler.call_later(self.boot_delay, self._boot_cb(project, inst.zone, inst.name))

    def _attempt_member(self, project: str, mig: Mig, member: ManagedInstance, request_id: str | None) -> None:
        error = self._capacity_error(
            project, mig.zone, mig.machine_type, mig.provisioning_model, mig.accelerator, mig.gpu_count, mig.reservation
        )
        if error is not None:
            member.current_action = "CREATING"
            member.errors = [error]
            mig.error_log.append(
                {
                    "error": dict(error),
                    "instanceActionDetails": {
                        "action": "CREATING",
                        "instance": f"{BASE_URL}/projects/{project}/zones/{mig.zone}/instances/{member.name}",
                    },
                    "timestamp": now_iso(),
                }
            )
            self.record("create-failed", member.name, mig.zone, request_id, error["code"])
            if self.mig_retry_interval is not None:
                self.scheduler.call_later(self.mig_retry_interval, self._retry_cb(project, mig, member.name))
            return
        member.errors = []
        inst = Instance(
            name=member.name,
            zone=mig.zone,
            machine_type=mig.machine_type,
            provisioning_model=mig.provisioning_model,
            accelerator=mig.accelerator,
            gpu_count=mig.gpu_count,
            id=next(self._ids),
            created=now_iso(),
            mig=mig.name,
            reservation=mig.reservation,
            metadata=dict(member.metadata),
            termination_action=mig.instance_termination_action,
        )
        self._create_instance(project, inst, request_id)

    def _retry_cb(self, project: str, mig: Mig, name: str) -> Callable[[], None]:
        def retry() -> None:
            with self.lock:
                member = mig.members.get(name)
                if member is None or (project, mig.zone, name) in self.instances or not member.errors:
                    return
                self._attempt_member(project, mig, member, None)

        return retry

    def _boot_cb(self, project: str, zone: str, name: str) -> Callable[[], None]:
        def boot() -> None:
            with self.lock:
                inst = self.instances.get((project, zone, name))
                if inst is None or inst.status != "PROVISIONING":
                    return
                inst.status = "RUNNING"
                if inst.mig:
                    member = self.migs[(project, zone, inst.mig)].members.get(name)
                    if member is not None and member.current_action == "CREATING":
                        member.current_action = "NONE"
                self.record("boot", name, zone)
            self._run_hook("boot", self.on_boot, name, zone)

        return boot

    def _finish_delete_cb(self, project: str, zone: str, name: str) -> Callable[[], None]:
        def finish() -> None:
            with self.lock:
                inst = self.instances.pop((project, zone, name), None)
                if inst is None:
                    return
                self._charge(project, inst, -1)
                if inst.mig:
                    self.migs[(project, zone, inst.mig)].members.pop(name, None)
                self.record("delete", name, zone)
            self._run_hook("delete", self.on_delete, name, zone)

        return finish

    def _run_hook(self, what: str, hook: Hook, name: str, zone: str) -> None:
        if hook is None:
            return
        try:
            if callable(hook):
                hook(name, zone)
            else:
                argv = shlex.split(hook) if isinstance(hook, str) else list(hook)
                proc = subprocess.run(
                    [*argv, name, zone], check=False, timeout=self.hook_timeout, capture_output=True, text=True
                )
                if proc.returncode != 0:
                    self.record(
                        "hook-error", name, zone, detail=f"{what}: exit {proc.returncode}: {proc.stderr[-500:]}"
                    )
        except Exception as exc:  # a broken hook must not kill the scheduler thread
            self.record("hook-error", name, zone, detail=f"{what}: {exc!r}")

    # ----------------------------------------------------------------- mutations

    def _start_delete(self, project: str, zone: str, name: str) -> None:
        inst = self.instances.get((project, zone, name))
        if inst is not None and inst.status != "STOPPING":
            inst.status = "STOPPING"
            self.scheduler.call_later(self.delete_delay, self._finish_delete_cb(project, zone, name))

    def create_instances(self, project: str, zone: str, mig_name: str, body: Json, request_id: str | None) -> Json:
        with self.lock:
            mig = self._mig(project, zone, mig_name)
            target = f"{BASE_URL}/projects/{project}/zones/{zone}/instanceGroupManagers/{mig_name}"
            if (op := self._dedup(project, request_id, "createInstances")) is not None:
                return self._operation_json(project, op)
            configs = body.get("instances") or []
            if not configs:
                raise ApiError(400, "invalid", "Invalid value for field 'resource.instances': must not be empty")
            names = [c.get("name") for c in configs]
            self._check_name_free(project, zone, names)
            if (fault := self._take_operation_fault("createInstances")) is not None:
                err = [{"code": fault.code, "message": fault.message}]
                op = self._new_operation(project, zone, "createInstances", target, request_id, err, fault.http_status)
                self.record("operation-failed", zone=zone, request_id=request_id, detail=fault.code)
                return self._operation_json(project, op)
            for config in configs:
                metadata = (config.get("preservedState") or {}).get("metadata") or {}
                member = ManagedInstance(name=config["name"], metadata={str(k): str(v) for k, v in metadata.items()})
                mig.members[member.name] = member
                mig.target_size += 1
                self._attempt_member(project, mig, member, request_id)
            op = self._new_operation(project, zone, "createInstances", target, request_id)
            return self._operation_json(project, op)

    def delete_instances(self, project: str, zone: str, mig_name: str, body: Json, request_id: str | None) -> Json:
        with self.lock:
            mig = self._mig(project, zone, mig_name)
            target = f"{BASE_URL}/projects/{project}/zones/{zone}/instanceGroupManagers/{mig_name}"
            if (op := self._dedup(project, request_id, "deleteInstances")) is not None:
                return self._operation_json(project, op)
            urls = body.get("instances") or []
            names = [last_segment(u) for u in urls]
            unknown = [n for n in names if n not in mig.members]
            if unknown and not body.get("skipInstancesOnValidationError"):
                raise ApiError(
                    400, "invalid", f"Instances {unknown} are not members of instance group manager '{mig_name}'"
                )
            for name in names:
                member = mig.members.get(name)
                if member is None or member.current_action == "DELETING":  # unknown, or already going
                    continue
                mig.target_size = max(0, mig.target_size - 1)
                self.record("delete-requested", name, zone, request_id)
                if (project, zone, name) in self.instances:
                    member.current_action = "DELETING"
                    self._start_delete(project, zone, name)
                else:  # a creation that never succeeded: the per-instance config simply goes away
                    del mig.members[name]
                    self.record("cancel", name, zone, request_id)
            op = self._new_operation(project, zone, "deleteInstances", target, request_id)
            return self._operation_json(project, op)

    def resize(self, project: str, zone: str, mig_name: str, size: int, request_id: str | None) -> Json:
        """Implemented so a test can assert it is never used: GCE picks the victims of a shrink."""
        with self.lock:
            mig = self._mig(project, zone, mig_name)
            target = f"{BASE_URL}/projects/{project}/zones/{zone}/instanceGroupManagers/{mig_name}"
            if (op := self._dedup(project, request_id, "resize")) is not None:
                return self._operation_json(project, op)
            self.record("resize", mig_name, zone, request_id, str(size))
            victims = list(mig.members)[size:]
            for name in victims:
                mig.members[name].current_action = "DELETING"
                self._start_delete(project, zone, name)
            mig.target_size = size
            return self._operation_json(
                project, self._new_operation(project, zone, "compute.instanceGroupManagers.resize", target, request_id)
            )

    def insert_instance(self, project: str, zone: str, body: Json, request_id: str | None) -> Json:
        with self.lock:
            self._zone(project, zone)
            name = body.get("name")
            target = f"{BASE_URL}/projects/{project}/zones/{zone}/instances/{name}"
            if (op := self._dedup(project, request_id, "insert")) is not None:
                return self._operation_json(project, op)
            if not body.get("machineType"):
                raise ApiError(400, "invalid", "Invalid value for field 'resource.machineType': ''. Must be set")
            self._check_name_free(project, zone, [name])
            machine_type = last_segment(body["machineType"])
            scheduling = body.get("scheduling") or {}
            model = scheduling.get("provisioningModel") or "STANDARD"
            accels = body.get("guestAccelerators") or []
            accel = last_segment(accels[0]["acceleratorType"]) if accels else None
            gpus = int(accels[0].get("acceleratorCount", 0)) if accels else 0
            values = (body.get("reservationAffinity") or {}).get("values") or []
            fault = self._take_operation_fault("insert")
            error = [{"code": fault.code, "message": fault.message}] if fault else None
            status = fault.http_status if fault else None
            reservation = values[0] if values else None
            cap = None if error else self._capacity_error(project, zone, machine_type, model, accel, gpus, reservation)
            if cap:
                error, code = [cap], cap["code"]
                status = 503 if code.startswith("ZONE_RESOURCE") else 403 if code == "QUOTA_EXCEEDED" else 400
            if error is not None:
                self.record("create-failed", name, zone, request_id, error[0]["code"])
                return self._operation_json(
                    project, self._new_operation(project, zone, "insert", target, request_id, error, status)
                )
            labels = {str(k): str(v) for k, v in (body.get("labels") or {}).items()}
            metadata = {i["key"]: i.get("value", "") for i in (body.get("metadata") or {}).get("items") or []}
            inst = Instance(
                name=name,
                zone=zone,
                machine_type=machine_type,
                provisioning_model=model,
                accelerator=accel,
                gpu_count=gpus,
                id=next(self._ids),
                created=now_iso(),
                reservation=reservation,
                labels=labels,
                metadata=metadata,
                termination_action=scheduling.get("instanceTerminationAction"),
            )
            self._create_instance(project, inst, request_id)
            return self._operation_json(project, self._new_operation(project, zone, "insert", target, request_id))

    def delete_instance(self, project: str, zone: str, name: str, request_id: str | None) -> Json:
        with self.lock:
            target = f"{BASE_URL}/projects/{project}/zones/{zone}/instances/{name}"
            if (op := self._dedup(project, request_id, "delete")) is not None:
                return self._operation_json(project, op)
            self.get_instance(project, zone, name)  # 404 when missing
            self.record("delete-requested", name, zone, request_id)
            self._start_delete(project, zone, name)
            return self._operation_json(project, self._new_operation(project, zone, "delete", target, request_id))

    def preempt(self, project: str, zone: str, name: str) -> None:
        """The cloud takes the VM back (a spot preemption, or a host error for a VM that cannot live-migrate).

        Its termination action STOP (GCE's default; the stack's spot template) leaves it TERMINATED (the stop
        hook runs); its MIG member then shows `RECREATING` where the MIG repairs (GCE's default, GKE's node
        pools) and keeps `currentAction: NONE` where it does not (`default_action_on_failure: DO_NOTHING`, the
        stack's MIGs).  DELETE is refused: GCE deletes the VM, and what listManagedInstances shows for its
        member afterwards (gone, or a per-instance config with no VM) is not documented, so the fake does not
        make it up."""
        with self.lock:
            inst = self.instances.get((project, zone, name))
            if inst is None:
                raise KeyError(name)
            if (inst.termination_action or "STOP").upper() == "DELETE":
                raise ValueError(
                    f"preempt {name}: its termination action is DELETE; the fake does not model what "
                    "listManagedInstances shows once GCE deleted a MIG member's VM (use STOP, as the stack's spot "
                    "template does)"
                )
            inst.status = "TERMINATED"
            if inst.mig:
                mig = self.migs[(project, zone, inst.mig)]
                member = mig.members.get(name)
                if member is not None and mig.default_action_on_failure == "REPAIR":
                    member.current_action = "RECREATING"
            self.record("preempt", name, zone)
        self._run_hook("delete", self.on_delete, name, zone)

    def close(self) -> None:
        self.scheduler.stop()
