"""`GceProvider`: the autoscaler's `Provider` for Compute Engine zonal managed instance groups.

Built from the stack output `autoscaler_inventory` (one zonal MIG per pool and zone).  Launches
are `createInstances` with one named per-instance config per node (idempotent: names already in
the group are reported, never created twice; a GCE `requestId` derived from the launch's
request id de-duplicates retries server-side).  Deletes are `deleteInstances` of named instance
URLs; the group's target size is never lowered blindly.  Asynchronous creation failures
(stockout, quota, a full reservation) come from each member's `lastAttempt.errors`; by default
the members of that launch request that have no VM yet are then cancelled, so the MIG does not
keep retrying behind the planner's back.  Members that have a VM are left alone (createInstances'
per-instance outcomes are independent, and one may run someone's job): the caller, which knows
what runs where, deletes them if at all.  Flex-start pools launch through one all-or-nothing MIG
resize request per launch instead.  Offerings are priced from the catalog, with free
reservation slots and GPU quota headroom.
"""

from __future__ import annotations

import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from loguru import logger

from autoscaler.cloud import (
    CloudNode,
    CloudNodeStatus,
    FailureKind,
    InvalidRequest,
    LaunchRequest,
    LaunchResult,
    NotFound,
    Offering,
    OfferingKey,
    ProviderError,
    ProvisioningFailure,
    TransientError,
)
from autoscaler.gce.client import ComputeApi, RetryPolicy
from autoscaler.gce.errors import AlreadyExists, classify
from autoscaler.gce.offerings import build_offerings, offering_key
from autoscaler.gce.translate import (
    META_CREATED_AT,
    META_POOL,
    META_REQUEST_ID,
    RESIZE_PENDING,
    ManagedVm,
    ResizeReq,
    gce_request_id,
    gpu_quota_metric,
    instance_url,
    invalid_names,
    node_status,
    resize_request_name,
)
from fleet.catalog import CapacityType


def mig_name(pool: Any, zone: str) -> str:
    """The zonal MIG of a pool in a zone: `instance_groups[zone]`, else f"{instance_group}-{zone}"."""
    return pool.instance_groups.get(zone) or f"{pool.instance_group}-{zone}"


class GceProvider:
    """The `Provider` protocol over zonal MIGs.  `pools` are `fleet.inventory.InventoryPool`s; pool
    names are "cluster/pool" when a name repeats across clusters (either form is accepted)."""

    name = "gcp"

    def __init__(
        self,
        pools: Sequence[Any],
        *,
        endpoint: str | None = None,
        credentials: Any = None,
        retry: RetryPolicy | None = None,
        operation_timeout: float = 600.0,
        catalog: Any = None,
        clock: Callable[[], float] = time.time,
        cancel_failed_requests: bool = True,
        quota_headroom: bool = True,
        api: ComputeApi | None = None,
    ) -> None:
        pools = list(pools)
        if not pools:
            raise ValueError("pools: need at least one inventory pool")
        qualified = len({p.name for p in pools}) != len(pools)
        self._pools: dict[str, Any] = {}
        self._alias: dict[str, str] = {}
        for i, pool in enumerate(pools):
            if pool.provider != self.name:
                raise ValueError(f"pools[{i}].provider: {pool.name} is {pool.provider!r}, this provider is 'gcp'")
            if not pool.zones:
                raise ValueError(f"pools[{i}].zones: pool {pool.name} has no zones")
            if CapacityType(pool.capacity_type) is CapacityType.RESERVATION and not pool.reservation:
                raise ValueError(f"pools[{i}].reservation: reservation pool {pool.name} names no reservation")
            key = f"{pool.cluster}/{pool.name}" if qualified else pool.name
            if key in self._pools:
                raise ValueError(f"pools[{i}]: duplicate pool {key!r}")
            self._pools[key] = pool
            self._alias[f"{pool.cluster}/{pool.name}"] = key
        if catalog is None:
            from fleet.catalog import load_catalog

            catalog = load_catalog()
        self.catalog = catalog
        self.clock = clock
        self.cancel_failed_requests = cancel_failed_requests
        self.quota_headroom = quota_headroom
        self.api = api or ComputeApi(
            endpoint=endpoint, credentials=credentials, retry=retry, operation_timeout=operation_timeout
        )
        self._reported: set[tuple[str, str, str, tuple[tuple[str, str], ...]]] = set()
        self._reported_resize: set[tuple[str, str, str]] = set()
        self.warnings: list[str] = []
        #: within `shared_reads()`: (what, project, zone, group) -> its listing, read once
        self._shared: dict[tuple[str, str, str, str], list[Any]] | None = None

    # ----------------------------------------------------------------- helpers

    @property
    def pools(self) -> dict[str, Any]:
        return dict(self._pools)

    def _pool(self, name: str, field: str) -> tuple[str, Any]:
        key = name if name in self._pools else self._alias.get(name)
        if key is None:
            raise InvalidRequest(f"{field}: unknown pool {name!r} (known: {', '.join(sorted(self._pools))})")
        return key, self._pools[key]

    @contextmanager
    def shared_reads(self) -> Iterator[None]:
        """Inside (one daemon tick: `autoscaler.cloud.shared_reads`), each group's members and resize requests are
        listed once and shared by every read: listing the nodes, polling errors and each launch's check of the
        names taken read the same groups, twice to four times a tick before the twentieth round.  A launch or a
        delete in a pool drops that pool's listings, so a read after it lists again.  Outside, every read lists."""
        self._shared = {}
        try:
            yield
        finally:
            self._shared = None

    def _listing(self, what: str, pool: Any, zone: str, read: Callable[[str, str, str], list[Any]]) -> list[Any]:
        mig = mig_name(pool, zone)
        if self._shared is None:
            return read(pool.project, zone, mig)
        key = (what, pool.project, zone, mig)
        if key not in self._shared:
            self._shared[key] = read(pool.project, zone, mig)
        return self._shared[key]

    def _wrote(self, pool: Any) -> None:
        """A write in `pool`'s groups: its shared listings are stale."""
        if self._shared:
            migs = {mig_name(pool, z) for z in pool.zones}
            self._shared = {k: v for k, v in self._shared.items() if not (k[1] == pool.project and k[3] in migs)}

    def _members(self, pool: Any) -> dict[str, list[ManagedVm]]:
        return {z: self._listing("members", pool, z, self.api.list_managed_instances) for z in pool.zones}

    @staticmethod
    def _is_flex(pool: Any) -> bool:
        return CapacityType(pool.capacity_type) is CapacityType.FLEX_START

    def _resize_requests(self, pool: Any) -> dict[str, list[ResizeReq]]:
        """Resize requests per zone of a flex-start pool (no calls for other pools)."""
        if not self._is_flex(pool):
            return {}
        return {z: self._listing("resize", pool, z, self.api.list_resize_requests) for z in pool.zones}

    def _taken(self, pool: Any) -> tuple[dict[str, set[str]], set[str]]:
        """(names per zone that exist in the MIG or are queued in a pending resize request,
        names whose VM is being deleted)."""
        members, queued = self._members(pool), self._resize_requests(pool)
        taken = {
            zone: {vm.name for vm in members[zone]}
            | {n for rr in queued.get(zone, []) if rr.state in RESIZE_PENDING for n in rr.names}
            for zone in pool.zones
        }
        leaving = {vm.name for vms in members.values() for vm in vms if node_status(vm)[0] is CloudNodeStatus.STOPPING}
        return taken, leaving

    def _check(self, request: LaunchRequest, pool: Any) -> None:
        want = offering_key(pool, request.offering.zone)
        off = request.offering
        if off.zone not in pool.zones:
            raise InvalidRequest(
                f"LaunchRequest.offering.zone: {off.zone} is not a zone of pool {request.pool} "
                f"({', '.join(pool.zones)})",
                offering=off,
            )
        for field in ("provider", "machine_type", "capacity_type", "reservation"):
            if getattr(off, field) != getattr(want, field):
                raise InvalidRequest(
                    f"LaunchRequest.offering.{field}: pool {request.pool} launches {getattr(want, field)!r}, "
                    f"not {getattr(off, field)!r}",
                    offering=off,
                )
        if not request.request_id:
            raise InvalidRequest("LaunchRequest.request_id: must not be empty", offering=off)
        if not request.names:
            raise InvalidRequest("LaunchRequest.names: must name at least one node", offering=off)
        if len(set(request.names)) != len(request.names):
            raise InvalidRequest("LaunchRequest.names: names repeat", offering=off)
        if bad := invalid_names(request.names, pool.node_name_prefix):
            raise InvalidRequest(
                f"LaunchRequest.names: {bad} are not GCE names of the form '{pool.node_name_prefix}-<index>'",
                offering=off,
            )
        if request.placement_group and request.placement_group != pool.placement_policy:
            raise InvalidRequest(
                f"LaunchRequest.placement_group: pool {request.pool}'s MIG uses placement policy "
                f"{pool.placement_policy!r}, not {request.placement_group!r}",
                offering=off,
            )

    # ----------------------------------------------------------------- Provider

    def launch(self, request: LaunchRequest) -> LaunchResult:
        key, pool = self._pool(request.pool, "LaunchRequest.pool")
        self._check(request, pool)
        try:
            return self._launch(request, key, pool)
        finally:
            self._wrote(pool)

    def _launch(self, request: LaunchRequest, key: str, pool: Any) -> LaunchResult:
        zone, mig = request.offering.zone, mig_name(pool, request.offering.zone)
        metadata = {META_REQUEST_ID: request.request_id, META_POOL: key, META_CREATED_AT: f"{self.clock():.3f}"}
        for attempt in range(2):
            taken, leaving = self._taken(pool)
            if busy := sorted(set(request.names) & leaving):
                raise TransientError(
                    f"LaunchRequest.names: {busy} are still being deleted; launch them again once they are gone",
                    offering=request.offering,
                    code="NAME_BEING_DELETED",
                )
            elsewhere = {n: z for z, names in taken.items() if z != zone for n in names}
            if clash := [f"{n} (in {elsewhere[n]})" for n in request.names if n in elsewhere]:
                raise InvalidRequest(
                    f"LaunchRequest.names: {clash} already exist in another zone of pool {request.pool}",
                    offering=request.offering,
                )
            here = taken[zone]
            existing = tuple(n for n in request.names if n in here)
            new = [n for n in request.names if n not in here]
            if not new:
                break
            if self._is_flex(pool):
                self._queue_flex(request, pool, new, metadata)
                break
            rid = gce_request_id(request.request_id, "createInstances", pool.project, zone, mig, *new)
            try:
                self.api.create_instances(pool.project, zone, mig, new, metadata, rid, request.offering)
                break
            except AlreadyExists:  # created concurrently (or by an earlier call): re-read and create the rest
                if attempt:
                    raise
                self._wrote(pool)
                logger.info("gce launch {}: some of {} appeared meanwhile; re-reading {}", request.request_id, new, mig)
        logger.info("gce launch {}: {} new, {} already existed in {}", request.request_id, len(new), len(existing), mig)
        return LaunchResult(request_id=request.request_id, accepted=tuple(request.names), already_existed=existing)

    def _queue_flex(self, request: LaunchRequest, pool: Any, new: list[str], metadata: dict[str, str]) -> None:
        """Flex-start capacity comes through one all-or-nothing MIG resize request per launch."""
        zone = request.offering.zone
        mig = mig_name(pool, zone)
        name = resize_request_name(request.request_id, zone, new)
        rid = gce_request_id(request.request_id, "resizeRequests.insert", pool.project, zone, mig, *new)
        try:
            self.api.insert_resize_request(
                pool.project, zone, mig, name, new, metadata, rid, request.offering,
                description=f"gpu-fleet launch {request.request_id}",
            )  # fmt: skip
        except AlreadyExists:  # this very request was queued before: nothing more to do
            logger.info("gce launch {}: resize request {} already exists in {}", request.request_id, name, mig)

    def delete(self, pool: str, names: Sequence[str]) -> None:
        _, p = self._pool(pool, "pool")
        if not names:
            return
        try:
            self._delete(p, set(names))
        finally:
            self._wrote(p)

    def _delete(self, p: Any, wanted: set[str]) -> None:
        call_id = str(uuid.uuid4())  # one logical delete: its retries share the GCE requestIds below
        requests = self._resize_requests(p)
        # a request still being created cannot be cancelled (only an ACCEPTED one can) and may yet create its VMs:
        # nothing is done, so the caller keeps the names and asks again (success would leave those VMs unheld)
        creating = sorted({n for rrs in requests.values() for rr in rrs if rr.state == "CREATING" for n in rr.names})
        if blocked := [n for n in creating if n in wanted]:
            raise TransientError(
                f"delete: {blocked} are queued in a resize request still CREATING, which cannot be cancelled yet; "
                "delete them again",
                code="RESIZE_REQUEST_CREATING",
            )
        for zone, rrs in requests.items():
            for rr in rrs:
                hit = wanted & set(rr.names)
                if not hit or rr.state != "ACCEPTED":
                    continue
                mig = mig_name(p, zone)
                self.api.cancel_resize_request(p.project, zone, mig, rr.name, gce_request_id(call_id, rr.name))
                logger.info("gce delete {}: cancelled queued resize request {} ({})", sorted(hit), rr.name, rr.names)
        for zone, vms in self._members(p).items():
            hit = sorted(vm.name for vm in vms if vm.name in wanted)
            if not hit:
                continue
            mig = mig_name(p, zone)
            urls = [instance_url(p.project, zone, n) for n in hit]
            self.api.delete_instances(p.project, zone, mig, urls, gce_request_id(call_id, zone, mig, *hit))
            logger.info("gce delete in {}: {}", mig, hit)

    def _selected(self, pools: Sequence[str] | None) -> list[tuple[str, Any]]:
        if pools is None:
            return list(self._pools.items())
        out = []
        for name in pools:
            key = name if name in self._pools else self._alias.get(name)
            if key is not None:  # pools of other providers are not ours to list
                out.append((key, self._pools[key]))
        return out

    def list_nodes(self, pools: Sequence[str] | None = None) -> list[CloudNode]:
        nodes = []
        for key, pool in self._selected(pools):
            members = self._members(pool)
            for zone, requests in self._resize_requests(pool).items():
                present = {vm.name for vm in members[zone]}
                for rr in requests:
                    if rr.state not in RESIZE_PENDING:
                        continue
                    nodes.extend(
                        CloudNode(
                            name=n,
                            pool=key,
                            offering=offering_key(pool, zone),
                            status=CloudNodeStatus.PROVISIONING,
                            created_at=rr.created_at,
                            request_id=rr.request_id,
                        )
                        for n in rr.names
                        if n not in present
                    )
            for zone, vms in members.items():
                off = offering_key(pool, zone)
                for vm in vms:
                    status, preempted = node_status(vm)
                    try:
                        created = float(vm.metadata.get(META_CREATED_AT, 0.0))
                    except ValueError:
                        created = 0.0
                    nodes.append(
                        CloudNode(
                            name=vm.name,
                            pool=key,
                            offering=off,
                            status=status,
                            created_at=created,
                            request_id=vm.metadata.get(META_REQUEST_ID),
                            preempted=preempted,
                        )
                    )
        return nodes

    def poll_errors(self) -> list[ProvisioningFailure]:
        failures: list[ProvisioningFailure] = []
        seen: set[tuple[str, str, str, tuple[tuple[str, str], ...]]] = set()
        now = self.clock()
        for key, pool in self._pools.items():
            for zone, vms in self._members(pool).items():
                failed: dict[str | None, list[ManagedVm]] = defaultdict(list)
                for vm in vms:
                    if vm.errors and vm.instance_status is None:
                        mark = (key, zone, vm.name, vm.errors)
                        seen.add(mark)
                        if mark not in self._reported:
                            failed[vm.metadata.get(META_REQUEST_ID)].append(vm)
                for request_id, bad in failed.items():
                    failures.append(self._failure(key, pool, zone, vms, request_id, bad, now))
            failures.extend(self._resize_failures(key, pool, now))
        self._reported = {m for m in self._reported if m in seen}  # forget members that are gone
        return failures

    def _resize_failures(self, key: str, pool: Any, now: float) -> list[ProvisioningFailure]:
        """FAILED resize requests of a flex-start pool, each reported once; finished records are removed."""
        out = []
        for zone, requests in self._resize_requests(pool).items():
            mig = mig_name(pool, zone)
            for rr in requests:
                if rr.state == "FAILED" and (key, zone, rr.name) not in self._reported_resize:
                    kinds = [classify(c, m) for c, m in rr.errors]
                    kind = next((k for k in (FailureKind.STOCKOUT, FailureKind.QUOTA) if k in kinds), None)
                    out.append(
                        ProvisioningFailure(
                            request_id=rr.request_id,
                            offering=offering_key(pool, zone),
                            kind=kind or (kinds[0] if kinds else FailureKind.STOCKOUT),
                            names=rr.names,
                            message="; ".join(f"{c}: {m}" for c, m in rr.errors) or "resize request failed",
                            at=now,
                        )
                    )
                    self._reported_resize.add((key, zone, rr.name))
                    logger.warning("gce resize request {} in {} failed: {}", rr.name, mig, rr.errors)
                if rr.state in ("FAILED", "CANCELLED"):
                    try:
                        self.api.delete_resize_request(pool.project, zone, mig, rr.name)
                        self._wrote(pool)
                    except NotFound:
                        pass
                    except ProviderError as exc:  # keep the mark: it is not reported twice; removal is retried
                        logger.warning("gce: could not remove resize request {}: {}", rr.name, exc)
                        continue
                    self._reported_resize.discard((key, zone, rr.name))
        return out

    def _failure(
        self,
        key: str,
        pool: Any,
        zone: str,
        vms: list[ManagedVm],
        request_id: str | None,
        bad: list[ManagedVm],
        now: float,
    ) -> ProvisioningFailure:
        """One launch request's failure in one zone.  With `cancel_failed_requests`, the failed members and the
        request's other members that have no VM yet are cancelled and reported (`names`); members that have a VM
        (booting or running, maybe someone's job) are left alone and not reported: createInstances' per-instance
        outcomes are independent, and only the caller, which knows what runs where, may delete a VM."""
        errors = [e for vm in bad for e in vm.errors]
        kinds = [classify(c, m) for c, m in errors]
        kind = next((k for k in (FailureKind.STOCKOUT, FailureKind.QUOTA) if k in kinds), kinds[0])
        names = [vm.name for vm in bad]
        kept: list[str] = []
        if self.cancel_failed_requests and request_id is not None:
            siblings = [vm for vm in vms if vm.metadata.get(META_REQUEST_ID) == request_id and vm.name not in names]
            names = sorted({*names, *(vm.name for vm in siblings if vm.instance_status is None)})
            kept = sorted(vm.name for vm in siblings if vm.instance_status is not None)
        message = "; ".join(sorted({f"{c}: {m}" for c, m in errors}))
        settled = True
        if self.cancel_failed_requests:
            try:
                self.delete(key, names)
            except NotFound:
                pass
            except ProviderError as exc:  # not marked as reported: the next poll reports it again and retries
                settled = False
                logger.warning("gce: could not cancel failed request {} ({}): {}", request_id, names, exc)
        if settled:
            for vm in bad:
                self._reported.add((key, zone, vm.name, vm.errors))
        logger.warning("gce {} in {} for request {}: {} ({})", kind, mig_name(pool, zone), request_id, names, message)
        if kept:
            logger.info("gce request {}: {} have a VM and are left to the caller", request_id, kept)
        return ProvisioningFailure(
            request_id=request_id,
            offering=offering_key(pool, zone),
            kind=kind,
            names=tuple(names),
            message=message,
            at=now,
        )

    def offerings(self) -> list[Offering]:
        pools = list(self._pools.values())
        slots: dict[tuple[str, str, str], tuple[int, int] | None] = {}
        quotas: dict[tuple[str, str], dict[str, tuple[float, float]]] = {}
        for pool in pools:
            capacity = CapacityType(pool.capacity_type)
            if capacity is CapacityType.RESERVATION:
                for zone in pool.zones:
                    try:
                        slots[(pool.project, zone, pool.reservation)] = self.api.reservation_slots(
                            pool.project, zone, pool.reservation
                        )
                    except NotFound:
                        slots[(pool.project, zone, pool.reservation)] = None
            elif (
                self.quota_headroom
                and gpu_quota_metric(pool.gpu_type, capacity)
                and (pool.project, pool.region) not in quotas
            ):
                quotas[(pool.project, pool.region)] = self.api.region_quotas(pool.project, pool.region)
        offerings, warnings = build_offerings(pools, self.catalog, reservations=slots, quotas=quotas)
        for w in warnings:
            if w not in self.warnings:
                logger.warning("gce offerings: {}", w)
                self.warnings.append(w)
        return offerings

    def offering_for(self, pool: str, zone: str) -> OfferingKey:
        """The offering key a launch into (pool, zone) must carry."""
        _, p = self._pool(pool, "pool")
        return offering_key(p, zone)
