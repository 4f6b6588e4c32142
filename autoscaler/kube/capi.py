"""`CapiProvider`: the autoscaler's `Provider` for Cluster API MachineDeployments (any Kubernetes, any cloud).

A MachineDeployment is the provider-neutral node group (CAPG, CAPA, CAPZ, Metal3 and many neoclouds implement
it).  Scale up raises `spec.replicas`; scale down first marks the chosen Machine with
`cluster.x-k8s.io/delete-machine` and only then lowers `spec.replicas`, so Cluster API deletes exactly that
Machine and never one of its own choosing (what the Cluster Autoscaler's clusterapi provider does).

Both writes are exactly-once across crashes and replicas: the MachineDeployment itself records the launch
request ids and the Machines already accounted for (annotations written in the same conditional patch as
`spec.replicas`, on the object's resourceVersion), so a retry of the same request - by this replica after a
crash or by the next leader - changes nothing.  Cluster API names Machines itself: a launch's names are slots;
the nodes are the Machines that appear (`list_nodes`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
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
    ProvisioningFailure,
    QuotaExceeded,
    TransientError,
)
from autoscaler.kube.api import KubeApi, KubeError
from autoscaler.kube.source import machine_failed, ts
from fleet.catalog import CapacityType

DELETE_MACHINE = "cluster.x-k8s.io/delete-machine"
DEPLOYMENT_LABEL = "cluster.x-k8s.io/deployment-name"
APPLIED = "autoscaling.gpu-fleet.dev/applied-requests"  # launch request ids already added to spec.replicas
ACCOUNTED = "autoscaling.gpu-fleet.dev/deleted-machines"  # machines already taken off spec.replicas
KEEP = 64  # how many ids / names each annotation remembers
#: the annotations that opt a MachineDeployment into the Cluster Autoscaler's clusterapi provider; the stack does
#: not set them (stacks/cluster_api.py), and a MachineDeployment that has them is resized by two autoscalers
CA_NODE_GROUP_SIZE = (
    "cluster.x-k8s.io/cluster-api-autoscaler-node-group-min-size",
    "cluster.x-k8s.io/cluster-api-autoscaler-node-group-max-size",
)
PROVIDER = "capi"

PHASES = {
    "Pending": CloudNodeStatus.PROVISIONING,
    "Provisioning": CloudNodeStatus.PROVISIONING,
    "Provisioned": CloudNodeStatus.RUNNING,
    "Running": CloudNodeStatus.RUNNING,
    "Deleting": CloudNodeStatus.STOPPING,
    "Deleted": CloudNodeStatus.GONE,
    "Failed": CloudNodeStatus.GONE,
}


def _list(md: dict[str, Any], key: str) -> list[str]:
    raw = ((md.get("metadata") or {}).get("annotations") or {}).get(key)
    try:
        out = json.loads(raw) if raw else []
    except ValueError:
        return []
    return [str(x) for x in out] if isinstance(out, list) else []


class CapiProvider:
    """One `Provider` over every `capi-machinedeployment` pool of the inventory."""

    name = PROVIDER

    def __init__(self, api: KubeApi, pools: Sequence[Any], *, retries: int = 3) -> None:
        self.api = api
        self.pools = {p.name: p for p in pools}
        self.retries = retries
        self._reported: set[str] = set()
        self._warned: set[str] = set()  # MachineDeployments found opted into the Cluster Autoscaler
        self._shared: dict[str, dict[str, Any]] | None = None  # pool -> its MachineDeployment, inside shared_reads

    def _pool(self, name: str) -> Any:
        try:
            return self.pools[name]
        except KeyError:
            raise NotFound(f"pool {name!r} is not a Cluster API pool of this inventory") from None

    def key(self, p: Any) -> OfferingKey:
        zone = getattr(p, "failure_domain", None) or (p.zones[0] if p.zones else "default")
        return OfferingKey(PROVIDER, zone, p.machine_type, CapacityType(p.capacity_type), p.reservation)

    def _md(self, p: Any) -> dict[str, Any]:
        try:
            md = self.api.machine_deployment(p.capi_namespace, p.capi_machine_deployment)
        except KubeError as exc:
            if exc.status == 404:
                raise NotFound(f"MachineDeployment {p.capi_namespace}/{p.capi_machine_deployment} not found") from None
            raise TransientError(str(exc)) from None
        self._warn_if_shared(md)
        return md

    @contextmanager
    def shared_reads(self) -> Iterator[None]:
        """Inside (one daemon tick: `autoscaler.cloud.shared_reads`), the read-only uses of a pool's MachineDeployment
        (`offerings`, `unseen_replicas`) share one GET, dropped by this provider's own writes to it; the writes
        (`launch`, `delete`) always read it afresh, for their conditional patch.  Outside, every read is a GET."""
        self._shared = {}
        try:
            yield
        finally:
            self._shared = None

    def _md_read(self, p: Any) -> dict[str, Any]:
        """The pool's MachineDeployment for reading only: shared within a tick (`shared_reads`)."""
        if self._shared is None:
            return self._md(p)
        if p.name not in self._shared:
            self._shared[p.name] = self._md(p)
        return self._shared[p.name]

    def _wrote(self, p: Any) -> None:
        if self._shared is not None:
            self._shared.pop(p.name, None)

    def _warn_if_shared(self, md: dict[str, Any]) -> None:
        """Once per MachineDeployment: it carries the Cluster Autoscaler's node-group annotations, so a Cluster
        Autoscaler with the clusterapi provider resizes it as well (it would scale up on pending pods and delete
        nodes the daemon booked)."""
        meta = md.get("metadata") or {}
        found = sorted(k for k in meta.get("annotations") or {} if k in CA_NODE_GROUP_SIZE)
        key = f"{meta.get('namespace')}/{meta.get('name')}"
        if found and key not in self._warned:
            self._warned.add(key)
            logger.warning(
                "MachineDeployment {} carries {}: a Cluster Autoscaler with the clusterapi provider resizes it too, "
                "against this daemon; remove the annotations (the stack does not set them)",
                key,
                ", ".join(found),
            )

    def _machines(self, p: Any) -> list[dict[str, Any]]:
        try:
            return self.api.machines(p.capi_namespace, f"{DEPLOYMENT_LABEL}={p.capi_machine_deployment}")
        except KubeError as exc:
            raise TransientError(str(exc)) from None

    # ---- Provider ---------------------------------------------------------------------------------------
    def list_nodes(self, pools: Sequence[str] | None = None) -> list[CloudNode]:
        out: list[CloudNode] = []
        for name in pools or list(self.pools):
            p = self.pools.get(name)
            if p is None:
                continue
            for m in self._machines(p):
                md = m["metadata"]
                phase = (m.get("status") or {}).get("phase", "Pending")
                status = CloudNodeStatus.STOPPING if md.get("deletionTimestamp") else PHASES.get(phase)
                out.append(
                    CloudNode(
                        name=md["name"],
                        pool=name,
                        offering=self.key(p),
                        status=status or CloudNodeStatus.PROVISIONING,
                        created_at=ts(md.get("creationTimestamp")),
                    )
                )
        return out

    def node_names(self, pool: str) -> dict[str, str]:
        """Machine name -> the Node it registered as (status.nodeRef), for the Machines that have one."""
        p = self._pool(pool)
        return {
            m["metadata"]["name"]: ((m.get("status") or {}).get("nodeRef") or {}).get("name")
            for m in self._machines(p)
            if ((m.get("status") or {}).get("nodeRef") or {}).get("name")
        }

    def unseen_replicas(self, pool: str) -> tuple[int, OfferingKey]:
        """How many replicas of the pool's MachineDeployment no Machine stands for yet, and the pool's offering.
        Those are a raised `spec.replicas` that the MachineSet controller has not turned into Machines (a launch of
        the last seconds, or a Machine someone deleted being replaced).  A Machine counts until it is deleting or
        this daemon has taken it off the replicas (`ACCOUNTED`); during a rollout's surge there are more Machines
        than replicas, and nothing is unseen."""
        p = self._pool(pool)
        md = self._md_read(p)
        replicas = int((md.get("spec") or {}).get("replicas") or 0)
        accounted = set(_list(md, ACCOUNTED))
        counted = sum(
            1
            for m in self._machines(p)
            if not m["metadata"].get("deletionTimestamp") and m["metadata"]["name"] not in accounted
        )
        return max(0, replicas - counted), self.key(p)

    def launch(self, request: LaunchRequest) -> LaunchResult:
        p = self._pool(request.pool)
        if request.offering != self.key(p):
            raise InvalidRequest(f"offering {request.offering} is not pool {p.name}'s", offering=request.offering)
        n = len(request.names)
        for _ in range(self.retries):
            md = self._md(p)
            applied = _list(md, APPLIED)
            if request.request_id in applied:
                return LaunchResult(request.request_id, request.names, already_existed=request.names)
            replicas = int((md.get("spec") or {}).get("replicas") or 0)
            if replicas + n > p.max_nodes:
                raise QuotaExceeded(
                    f"{p.capi_machine_deployment}: {replicas} + {n} replicas exceed the pool's max {p.max_nodes}",
                    offering=request.offering,
                )
            body = {
                "metadata": {
                    "resourceVersion": md["metadata"]["resourceVersion"],
                    "annotations": {APPLIED: json.dumps([*applied, request.request_id][-KEEP:])},
                },
                "spec": {"replicas": replicas + n},
            }
            try:
                self.api.patch_machine_deployment(p.capi_namespace, p.capi_machine_deployment, body)
                self._wrote(p)
                return LaunchResult(request.request_id, request.names)
            except KubeError as exc:
                if exc.status != 409:
                    raise TransientError(str(exc), offering=request.offering) from None
        raise TransientError(f"{p.capi_machine_deployment}: conflicting writers, retried {self.retries} times")

    def delete(self, pool: str, names: Sequence[str]) -> None:
        """Mark each Machine for deletion, then take exactly those off `spec.replicas` (once)."""
        p = self._pool(pool)
        by_name = {m["metadata"]["name"]: m for m in self._machines(p)}
        marked = []
        for name in names:
            m = by_name.get(name)
            if m is None:
                continue  # unknown names are ignored (the protocol)
            if ((m["metadata"].get("annotations") or {}).get(DELETE_MACHINE)) is None:
                try:
                    self.api.patch_machine(
                        p.capi_namespace, name, {"metadata": {"annotations": {DELETE_MACHINE: "yes"}}}
                    )
                except KubeError as exc:
                    raise TransientError(str(exc)) from None
            marked.append(name)
        if not marked:
            return
        for _ in range(self.retries):
            md = self._md(p)
            done = _list(md, ACCOUNTED)
            new = [n for n in marked if n not in done]
            if not new:
                return
            replicas = int((md.get("spec") or {}).get("replicas") or 0)
            body = {
                "metadata": {
                    "resourceVersion": md["metadata"]["resourceVersion"],
                    "annotations": {ACCOUNTED: json.dumps([*done, *new][-KEEP:])},
                },
                "spec": {"replicas": max(0, replicas - len(new))},
            }
            try:
                self.api.patch_machine_deployment(p.capi_namespace, p.capi_machine_deployment, body)
                self._wrote(p)
                return
            except KubeError as exc:
                if exc.status != 409:
                    raise TransientError(str(exc)) from None
        raise TransientError(f"{p.capi_machine_deployment}: conflicting writers, retried {self.retries} times")

    def poll_errors(self) -> list[ProvisioningFailure]:
        """Machines that failed to provision (status.failureReason / phase Failed), each reported once."""
        out = []
        for p in self.pools.values():
            for m in self._machines(p):
                st = m.get("status") or {}
                old = (st.get("deprecated") or {}).get("v1beta1") or {}  # v1beta2 keeps failureReason here
                mname = m["metadata"]["name"]
                if machine_failed(m) and mname not in self._reported:
                    self._reported.add(mname)
                    msg = f"{old.get('failureReason', 'Failed')}: {old.get('failureMessage', '')}".strip()
                    kind = FailureKind.STOCKOUT if "capacity" in msg.lower() else FailureKind.TRANSIENT
                    out.append(ProvisioningFailure(None, self.key(p), kind, (mname,), msg))
        return out

    def offerings(self) -> list[Offering]:
        out = []
        for p in self.pools.values():
            md = self._md_read(p)
            replicas = int((md.get("spec") or {}).get("replicas") or 0)
            if p.price_per_hour is None:
                continue  # unpriced: the spec rules refuse this; never offered rather than offered free
            out.append(
                Offering(
                    self.key(p),
                    float(p.price_per_hour),
                    p.gpu_type,
                    p.gpus_per_node,
                    available_nodes=max(0, p.max_nodes - replicas),
                )
            )
        return out
