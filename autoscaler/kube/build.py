"""Wire a `KubeDaemon` from the inventory and the `kubernetes:` section of the daemon config.

GKE node pools (`pool_kind: gce-mig`) get the GCE actuator over the MIGs GKE reports for them; Cluster API
pools (`capi-machinedeployment`) the `CapiProvider`.  The google-cloud-compute import happens only when a
GKE pool is managed."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from autoscaler.cloud import Provider
from autoscaler.core.settings import SettingsTracker
from autoscaler.kube.api import KubeApi
from autoscaler.kube.capi import CapiProvider
from autoscaler.kube.lease import LeaseElector
from autoscaler.kube.loop import KubeDaemon, KubePools
from autoscaler.kube.pod_fit import estimated_room
from autoscaler.model import Policy, Pool
from fleet.inventory import InventoryPool, KubernetesSection, migs_from_urls
from fleet.spec.kube import GPU_TAINT


def planner_pool(p: InventoryPool) -> Pool:
    """The planner's view of a Kubernetes pool (Cluster API pools: the `capi` provider, one failure domain)."""
    if p.pool_kind == "capi-machinedeployment":  # one failure domain stands for the zone
        p = p.model_copy(update={"zones": [p.failure_domain or "default"]})
        return replace(Pool.from_inventory(p), provider="capi")
    return Pool.from_inventory(p)


#: what GKE's GPU machines are (the catalog has no Arm GPU machine)
GKE_ARCH = "amd64"


def known_labels(pool: InventoryPool) -> dict[str, str]:
    """The labels every node of `pool` carries, as far as the daemon can know before one is Ready: what pods' and
    DaemonSets' node selectors are matched against.  The pool's own `node_labels`, `kubernetes.io/os` (every GPU
    node is Linux; the kubelet sets it) and, on GKE, the labels GKE puts on every node of a GPU node pool:
    `cloud.google.com/gke-accelerator`, `cloud.google.com/gke-spot` on spot pools, `node.kubernetes.io/instance-type`
    and `kubernetes.io/arch` (amd64: the catalog has no Arm GPU machine).  A selector on any other label (a zone, a
    topology block, a team's own) matches no pool until the stack sets it as one of the pool's labels.  Before
    the thirty-fifth round only the pool's own labels were: a pod selecting `kubernetes.io/os: linux` or the GPU
    model GKE's docs have GPU pods select was answered Failed, no pool matching its node selector."""
    labels = {"kubernetes.io/os": "linux", **pool.node_labels}
    if pool.platform == "gke":
        labels.setdefault("kubernetes.io/arch", GKE_ARCH)
        labels.setdefault("node.kubernetes.io/instance-type", pool.machine_type)
        labels.setdefault("cloud.google.com/gke-accelerator", pool.gpu_type)
        if pool.capacity_type == "spot":
            labels.setdefault("cloud.google.com/gke-spot", "true")
    return labels


def gke_inventory(p: InventoryPool) -> InventoryPool:
    """A GKE node pool's zonal MIGs from the instance group links GKE reports for it."""
    if p.instance_groups or not p.instance_group_urls:
        return p
    return p.model_copy(update={"instance_groups": migs_from_urls(p.instance_group_urls)})


def kube_pools(
    api: KubeApi, inventory: Sequence[InventoryPool], gce: Callable[[list[InventoryPool]], Provider] | None = None
) -> KubePools:
    capi = [p for p in inventory if p.pool_kind == "capi-machinedeployment"]
    mig = [gke_inventory(p) for p in inventory if p.pool_kind == "gce-mig"]
    providers: dict[str, Provider] = {}
    capi_provider = CapiProvider(api, capi) if capi else None
    namespaces = {p.capi_namespace for p in capi}
    if len(namespaces) == 1:  # the stack's: one per cluster, where its Role lets the daemon read Machines
        api.capi_namespace = namespaces.pop()
    for p in capi:
        providers[p.name] = capi_provider  # type: ignore[assignment]
    if mig:
        if gce is None:
            from autoscaler.gce import GceProvider

            gce_provider: Provider = GceProvider(mig)
        else:
            gce_provider = gce(mig)
        for p in mig:
            providers[p.name] = gce_provider
    # what keeps work that does not tolerate preemption off the spot pools: their taints but the GPU one, which every
    # GPU pool carries and every GPU pod tolerates (Kueue's flavors and GKE's ExtendedResourceToleration add it)
    spot = [dict(t) for p in inventory if p.capacity_type == "spot" for t in p.node_taints if t != GPU_TAINT]
    return KubePools(
        pools=[planner_pool(p) for p in inventory],
        labels={p.name: dict(p.node_labels) for p in inventory},
        spot_taints=spot,
        providers=providers,
        machine_nodes=capi_provider.node_names if capi_provider else None,
        unseen_replicas=capi_provider.unseen_replicas if capi_provider else None,
        capi_pools=frozenset(p.name for p in capi),
        taints={p.name: [dict(t) for t in p.node_taints] for p in inventory},
        rooms={p.name: estimated_room(p.vcpus, p.memory_gib, gke=p.platform == "gke") for p in inventory},
        known_labels={p.name: known_labels(p) for p in inventory},
    )


def build_kube_daemon(
    section: KubernetesSection,
    inventory: Sequence[InventoryPool],
    policy: Policy,
    *,
    api: KubeApi | None = None,
    gce: Callable[[list[InventoryPool]], Provider] | None = None,
    identity: str | None = None,
    clock: Callable[[], float] = time.time,
    metrics: Any = None,
    settings: SettingsTracker | None = None,
) -> KubeDaemon:
    if api is None:
        api = KubeApi.in_cluster() if section.in_cluster else KubeApi.from_kubeconfig(section.kubeconfig or "")
    who = identity or os.environ.get(section.identity_env) or f"{os.uname().nodename}-{os.getpid()}"
    elector = LeaseElector(
        api, section.namespace, section.lease.name, who, section.lease.duration_s, clock,
        renew_deadline_s=section.lease.renew_deadline_s,
    )  # fmt: skip
    return KubeDaemon(
        api=api,
        pools=kube_pools(api, inventory, gce),
        policy=policy,
        elector=elector,
        clock=clock,
        metrics=metrics,
        provisioning_class=section.provisioning_class,
        settings=settings,
    )
