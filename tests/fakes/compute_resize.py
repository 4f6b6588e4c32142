"""MIG resize requests in the fake Compute model: how flex-start (DWS) capacity is obtained.

A resize request names its instances and is all or nothing: it is CREATING while its insert
operation runs (`operation_delay`; "being created and may still fail creation"), then waits in
ACCEPTED while the zone has no capacity (`status.lastAttempt.error` says why), then creates every
instance at once and becomes SUCCEEDED; it FAILS on quota (flex-start draws on the preemptible GPU
quota), or when `flex_start_max_wait` passes; only an ACCEPTED request can be cancelled.  Used by
`compute_api.FakeCompute` beside `compute_model.ComputeState`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from tests.fakes.compute_model import (
    BASE_URL,
    NAME_RE,
    ApiError,
    ComputeState,
    Instance,
    Json,
    ManagedInstance,
    Mig,
    now_iso,
)


@dataclass
class ResizeRequest:
    name: str
    zone: str
    mig: str
    id: int
    created: str
    description: str
    instances: list[tuple[str, dict[str, str]]]  # (name, preserved metadata)
    run_duration_s: int | None = None
    state: str = "ACCEPTED"  # ACCEPTED CREATING SUCCEEDED FAILED CANCELLED
    last_errors: list[Json] = field(default_factory=list)
    errors: list[Json] = field(default_factory=list)


class ResizeRequestBook:
    """insert/get/list/cancel/delete of instanceGroupManagers/*/resizeRequests over a ComputeState."""

    def __init__(
        self, state: ComputeState, *, flex_start_delay: float = 0.0, flex_start_max_wait: float | None = None
    ) -> None:
        self.s = state
        self.flex_start_delay = flex_start_delay
        self.flex_start_max_wait = flex_start_max_wait
        self.requests: dict[tuple[str, str, str], dict[str, ResizeRequest]] = {}  # (project, zone, mig) -> name -> rr
        state.on_capacity_change.append(self.retry_all)
        state.name_claims.append(self.pending_names)

    def pending_names(self, project: str, zone: str) -> set[str]:
        """Instance names queued in CREATING or ACCEPTED requests of a zone (not free for anyone else)."""
        return {
            n
            for (p, z, _), store in self.requests.items()
            if (p, z) == (project, zone)
            for rr in store.values()
            if rr.state in ("CREATING", "ACCEPTED")
            for n, _ in rr.instances
        }

    def _store(self, project: str, mig: Mig) -> dict[str, ResizeRequest]:
        return self.requests.setdefault((project, mig.zone, mig.name), {})

    def _rr_json(self, project: str, rr: ResizeRequest) -> Json:
        zurl = f"{BASE_URL}/projects/{project}/zones/{rr.zone}"
        out: Json = {
            "kind": "compute#instanceGroupManagerResizeRequest",
            "id": str(rr.id),
            "name": rr.name,
            "zone": zurl,
            "description": rr.description,
            "creationTimestamp": rr.created,
            "state": rr.state,
            "resizeBy": len(rr.instances),
            "instances": [{"name": n, "preservedState": {"metadata": m}} for n, m in rr.instances],
            "status": {},
            "selfLink": f"{zurl}/instanceGroupManagers/{rr.mig}/resizeRequests/{rr.name}",
        }
        if rr.run_duration_s is not None:
            out["requestedRunDuration"] = {"seconds": str(rr.run_duration_s)}
        if rr.errors:
            out["status"]["error"] = {"errors": list(rr.errors)}
        if rr.last_errors:
            out["status"]["lastAttempt"] = {"error": {"errors": list(rr.last_errors)}}
        return out

    def _rr(self, project: str, zone: str, mig_name: str, name: str) -> tuple[Mig, ResizeRequest]:
        mig = self.s._mig(project, zone, mig_name)
        rr = self._store(project, mig).get(name)
        if rr is None:
            raise ApiError(
                404,
                "notFound",
                f"The resource 'projects/{project}/zones/{zone}/instanceGroupManagers/{mig_name}/resizeRequests/{name}'"
                " was not found",
            )
        return mig, rr

    def get_resize_request(self, project: str, zone: str, mig_name: str, name: str) -> Json:
        with self.s.lock:
            return self._rr_json(project, self._rr(project, zone, mig_name, name)[1])

    def list_resize_requests(self, project: str, zone: str, mig_name: str) -> list[Json]:
        with self.s.lock:
            mig = self.s._mig(project, zone, mig_name)
            return [self._rr_json(project, rr) for rr in self._store(project, mig).values()]

    def insert_resize_request(self, project: str, zone: str, mig_name: str, body: Json, request_id: str | None) -> Json:
        with self.s.lock:
            mig = self.s._mig(project, zone, mig_name)
            target = f"{BASE_URL}/projects/{project}/zones/{zone}/instanceGroupManagers/{mig_name}"
            if (op := self.s._dedup(project, request_id, "insertResizeRequest")) is not None:
                return self.s._operation_json(project, op)
            name = body.get("name") or ""
            if not NAME_RE.match(name):
                raise ApiError(400, "invalid", f"Invalid value for field 'resource.name': '{name}'")
            if name in self._store(project, mig):
                raise ApiError(409, "alreadyExists", f"The resource '{target}/resizeRequests/{name}' already exists")
            configs = body.get("instances") or []
            if not configs:
                raise ApiError(400, "invalid", "Invalid value for field 'resource.instances': must name instances")
            names = [c.get("name") for c in configs]
            self.s._check_name_free(project, zone, names)
            duration = (body.get("requestedRunDuration") or {}).get("seconds")
            rr = ResizeRequest(
                name=name,
                zone=zone,
                mig=mig_name,
                id=next(self.s._ids),
                created=now_iso(),
                description=body.get("description") or "",
                instances=[
                    (
                        c["name"],
                        {str(k): str(v) for k, v in ((c.get("preservedState") or {}).get("metadata") or {}).items()},
                    )
                    for c in configs
                ],
                run_duration_s=int(duration) if duration is not None else None,
                state="CREATING",
            )
            self._store(project, mig)[name] = rr
            self.s.record("resize-request", name, zone, request_id, ",".join(names))
            op = self.s._new_operation(project, zone, "insert", target, request_id)
            accept = self._rr_accept_cb(project, mig, rr)
            if self.s.operation_delay > 0:  # CREATING until its insert operation is done
                self.s.scheduler.call_later(self.s.operation_delay, accept)
            else:
                accept()
            return self.s._operation_json(project, op)

    def _rr_accept_cb(self, project: str, mig: Mig, rr: ResizeRequest) -> Callable[[], None]:
        """The insert is done: the request is queued (ACCEPTED) and tried after `flex_start_delay`."""

        def accept() -> None:
            with self.s.lock:
                if rr.state != "CREATING":
                    return
                rr.state = "ACCEPTED"
                self.s.scheduler.call_later(self.flex_start_delay, self._rr_attempt_cb(project, mig, rr))
                if self.flex_start_max_wait is not None:
                    self.s.scheduler.call_later(self.flex_start_max_wait, self._rr_expire_cb(project, mig, rr))

        return accept

    def _rr_attempt_cb(self, project: str, mig: Mig, rr: ResizeRequest) -> Callable[[], None]:
        def attempt() -> None:
            with self.s.lock:
                if rr.state != "ACCEPTED":
                    return
                n = len(rr.instances)
                error = self.s._capacity_error(
                    project, mig.zone, mig.machine_type, "FLEX_START", mig.accelerator, mig.gpu_count * n
                )
                if error is not None and error["code"] == "QUOTA_EXCEEDED":
                    rr.state, rr.errors = "FAILED", [error]
                    self.s.record("resize-request-failed", rr.name, mig.zone, detail=error["code"])
                    return
                if error is not None:  # no capacity yet: stay queued
                    rr.last_errors = [error]
                    self.s.record("resize-request-waiting", rr.name, mig.zone, detail=error["code"])
                    if self.s.mig_retry_interval is not None:
                        self.s.scheduler.call_later(self.s.mig_retry_interval, attempt)
                    return
                rr.state, rr.last_errors = "SUCCEEDED", []
                for name, metadata in rr.instances:
                    mig.members[name] = ManagedInstance(name=name, metadata=dict(metadata))
                    mig.target_size += 1
                    inst = Instance(
                        name=name,
                        zone=mig.zone,
                        machine_type=mig.machine_type,
                        provisioning_model="FLEX_START",
                        accelerator=mig.accelerator,
                        gpu_count=mig.gpu_count,
                        id=next(self.s._ids),
                        created=now_iso(),
                        mig=mig.name,
                        metadata=dict(metadata),
                        termination_action=mig.instance_termination_action,
                    )
                    self.s._create_instance(project, inst, None)

        return attempt

    def _rr_expire_cb(self, project: str, mig: Mig, rr: ResizeRequest) -> Callable[[], None]:
        def expire() -> None:
            with self.s.lock:
                if rr.state == "ACCEPTED":
                    rr.state = "FAILED"
                    rr.errors = rr.last_errors or [
                        {"code": "ZONE_RESOURCE_POOL_EXHAUSTED", "message": "capacity not obtained in time"}
                    ]
                    self.s.record("resize-request-failed", rr.name, mig.zone, detail=rr.errors[0]["code"])

        return expire

    def retry_all(self) -> None:
        """Attempt every queued request again (called when stockouts end)."""
        with self.s.lock:
            for (project, zone, mig_name), store in self.requests.items():
                mig = self.s.migs[(project, zone, mig_name)]
                for rr in store.values():
                    if rr.state == "ACCEPTED":
                        self.s.scheduler.call_later(0, self._rr_attempt_cb(project, mig, rr))

    def cancel_resize_request(self, project: str, zone: str, mig_name: str, name: str, request_id: str | None) -> Json:
        with self.s.lock:
            _, rr = self._rr(project, zone, mig_name, name)
            target = (
                f"{BASE_URL}/projects/{project}/zones/{zone}/instanceGroupManagers/{mig_name}/resizeRequests/{name}"
            )
            if (op := self.s._dedup(project, request_id, "cancelResizeRequest")) is not None:
                return self.s._operation_json(project, op)
            if rr.state != "ACCEPTED":
                raise ApiError(400, "invalid", f"Resize request '{name}' is {rr.state}: only ACCEPTED can be cancelled")
            rr.state = "CANCELLED"
            self.s.record("resize-request-cancelled", name, zone, request_id)
            return self.s._operation_json(project, self.s._new_operation(project, zone, "cancel", target, request_id))

    def delete_resize_request(self, project: str, zone: str, mig_name: str, name: str, request_id: str | None) -> Json:
        with self.s.lock:
            mig, rr = self._rr(project, zone, mig_name, name)
            target = (
                f"{BASE_URL}/projects/{project}/zones/{zone}/instanceGroupManagers/{mig_name}/resizeRequests/{name}"
            )
            if (op := self.s._dedup(project, request_id, "deleteResizeRequest")) is not None:
                return self.s._operation_json(project, op)
            if rr.state in ("ACCEPTED", "CREATING"):
                raise ApiError(400, "invalid", f"Resize request '{name}' is {rr.state}: cancel it first")
            del self._store(project, mig)[name]
            return self.s._operation_json(project, self.s._new_operation(project, zone, "delete", target, request_id))
