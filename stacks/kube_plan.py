"""Pure mapping of a `scheduler: kueue` cluster onto names, GKE node networks, inventory entries and the
in-cluster daemon's config (no Pulumi resources here; values may hold Outputs passed in by the caller)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from components.kubernetes.autoscaler import APP, INVENTORY_FILE, STATE_DIR
from fleet.catalog import Catalog
from fleet.inventory import KubernetesSection, LeaseConfig
from fleet.provisioning_class import GPU_FLEET_CLASS
from fleet.spec.derive import pool_zones
from fleet.spec.kube import (
    GKE_LOCAL_SSD_LABEL,
    GPU_RESOURCE,
    carried_labels,
    cluster_queue_name,
    flavor_name,
    gke_local_ssds,
    local_queue_name,
    node_shape,
    node_taints,
    pool_price,
    spot,
    team_namespace,
)
from fleet.spec.model import ClusterSpec, FleetSpec, NodePoolSpec
from stacks import plan
from stacks.cluster_api import machine_deployment_name

GKE_NETWORKING = "networking.gke.io/v1"


def cluster_zones(spec: FleetSpec, cluster: ClusterSpec, cat: Catalog) -> list[str]:
    """Every zone a pool of the cluster uses, in fleet order (the GKE cluster's node locations)."""
    used = {z for p in cluster.pools for z in pool_zones(spec, p, cat)}
    return [z for z in spec.zones if z in used] or [spec.zones[0]]


@dataclass(frozen=True)
class NodeNet:
    """One additional GKE node network: a fabric plane's subnet, the name pods use, how the NIC is exposed."""

    plane: str
    subnet: int
    name: str
    device_mode: str  # NetDevice (gVNIC / GPUDirect-TCPX(O)) or RDMA


def gke_networks(cluster: ClusterSpec, fabrics: Mapping[tuple[str, str], plan.FabricPlan]) -> dict[str, list[NodeNet]]:
    """machine type -> its additional node networks (every NIC after the system one), in NIC order."""
    out: dict[str, list[NodeNet]] = {}
    for machine_type in dict.fromkeys(p.machine_type for p in cluster.pools):
        fplan = fabrics.get((cluster.name, machine_type))
        nets = []
        for nic in fplan.nics if fplan else []:
            if nic.plane == plan.SYSTEM:
                continue
            rdma = nic.nic_type == "MRDMA"
            name = f"{nic.plane}-{nic.subnet}" if rdma else nic.plane
            nets.append(NodeNet(nic.plane, nic.subnet, name, "RDMA" if rdma else "NetDevice"))
        if nets:
            out[machine_type] = nets
    return out


def network_objects(networks: Mapping[str, list[NodeNet]], fabric: Any) -> list[dict[str, Any]]:
    """GKENetworkParamSet + Network per distinct node network (the `networking.gke.io/interfaces` names)."""
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    for nets in networks.values():
        for n in nets:
            if n.name in seen:
                continue
            seen.add(n.name)
            plane = fabric.planes[n.plane]
            meta = {"name": n.name, "labels": {"app.kubernetes.io/managed-by": "gpu-fleet"}}
            out.append({"apiVersion": GKE_NETWORKING, "kind": "GKENetworkParamSet", "metadata": meta,
                        "spec": {"vpc": plane.network.name, "vpcSubnet": plane.subnets[n.subnet].name,
                                 "deviceMode": n.device_mode}})  # fmt: skip
            out.append({"apiVersion": GKE_NETWORKING, "kind": "Network", "metadata": dict(meta),
                        "spec": {"type": "Device", "parametersRef": {"group": "networking.gke.io",
                                 "kind": "GKENetworkParamSet", "name": n.name}}})  # fmt: skip
    return out


def inventory_entry(spec: FleetSpec, cluster: ClusterSpec, pool: NodePoolSpec, cat: Catalog) -> dict[str, Any]:
    """One `fleet.inventory.InventoryPool` of a Kueue pool (GKE: the MIG fields are added by the caller)."""
    shape = node_shape(pool, cat)
    assert shape is not None
    price, source = pool_price(spec, pool, cat)
    gke = cluster.platform == "gke"
    # GCE zones only; a Cluster API pool's failure domain is the provider's name for its location.
    zones = list(pool_zones(spec, pool, cat)) if gke else []
    entry: dict[str, Any] = {
        "name": pool.name,
        "cluster": cluster.name,
        "provider": "gcp" if gke else "kubernetes",
        "project": spec.project,
        "region": spec.region,
        "zones": zones,
        "machine_type": pool.machine_type,
        "gpu_type": shape.gpu_type,
        "gpus_per_node": shape.gpus,
        "vcpus": shape.vcpus,
        "memory_gib": shape.memory_gib,
        "capacity_type": str(pool.capacity),
        "reservation": pool.reservation,
        "min_nodes": pool.min_nodes,
        "max_nodes": pool.max_nodes,
        "spot_tolerant": spot(pool),  # Kueue gives a spot flavor only to workloads tolerating its taint
        "compact_placement": pool.compact_placement,
        "scheduler": "kueue",
        "platform": cluster.platform,
        "kueue_flavor": flavor_name(cluster, pool),
        "node_labels": carried_labels(cluster, pool)
        | ({GKE_LOCAL_SSD_LABEL: "true"} if gke and gke_local_ssds(pool, cat) else {}),
        "node_taints": node_taints(cluster, pool),
        "price_per_hour": price,
        "price_source": source,
    }
    if gke:
        entry.update(
            pool_kind="gce-mig",
            gke_cluster=cluster.name,
            gke_node_pool=pool.name,
            instance_group=pool.name,
            node_name_prefix=f"gke-{cluster.name}-{pool.name}",
        )
    else:
        assert cluster.kubernetes is not None
        md = machine_deployment_name(cluster, pool)
        entry.update(
            pool_kind="capi-machinedeployment",
            capi_cluster=cluster.kubernetes.cluster_name,
            capi_namespace=cluster.kubernetes.namespace,
            capi_machine_deployment=md,
            failure_domain=pool.cluster_api.failure_domain if pool.cluster_api else None,
            instance_group=md,
            node_name_prefix=md,
        )
    return entry


def local_queues(cluster: ClusterSpec) -> dict[str, str]:
    """team -> `<namespace>/<LocalQueue>` (what users put in `kueue.x-k8s.io/queue-name`, in that namespace)."""
    assert cluster.kueue is not None
    return {t.name: f"{team_namespace(t)}/{local_queue_name(t)}" for t in cluster.kueue.teams}


def queue_summary(cluster: ClusterSpec, objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per team its ClusterQueue in numbers (GPUs per flavor: nominal, borrowing and lending limits; cohort;
    fair-share weight), read back from the manifests: what `fleet simulate --scheduler kueue` replays."""
    assert cluster.kueue is not None
    by_name = {o["metadata"]["name"]: o["spec"] for o in objects if o["kind"] == "ClusterQueue"}
    out = []
    for team in cluster.kueue.teams:
        spec = by_name[cluster_queue_name(cluster, team)]
        flavors = {}
        for fl in spec["resourceGroups"][0]["flavors"]:
            gpu = next(r for r in fl["resources"] if r["name"] == GPU_RESOURCE)
            flavors[fl["name"]] = {
                "nominal_gpus": int(gpu["nominalQuota"]),
                "borrowing_limit_gpus": int(gpu["borrowingLimit"]) if "borrowingLimit" in gpu else None,
                "lending_limit_gpus": int(gpu["lendingLimit"]) if "lendingLimit" in gpu else None,
            }
        out.append(
            {
                "team": team.name,
                "namespace": team_namespace(team),
                "local_queue": local_queue_name(team),
                "cluster_queue": cluster_queue_name(cluster, team),
                "cohort": spec.get("cohort"),
                "fair_share_weight": team.fair_share_weight,
                "flavors": flavors,  # in preference order
            }
        )
    return out


def workload_identity_member(spec: FleetSpec, cluster: ClusterSpec) -> str:
    assert cluster.kueue is not None
    return f"serviceAccount:{spec.project}.svc.id.goog[{cluster.kueue.autoscaler.namespace}/{APP}]"


def autoscaler_config(cluster: ClusterSpec) -> str:
    """/etc/gpu-fleet/autoscaler.yaml of the in-cluster daemon (docs/kubernetes.md; `kubernetes:` is
    `fleet.inventory.KubernetesSection`)."""
    assert cluster.kueue is not None
    auto = cluster.kueue.autoscaler
    section = KubernetesSection(
        namespace=auto.namespace,
        lease=LeaseConfig(name=APP),
        provisioning_class=GPU_FLEET_CLASS,  # the class of the stack's ProvisioningRequestConfig
        cluster_api_namespace=cluster.kubernetes.namespace if cluster.kubernetes else None,
    )
    config = {
        "inventory": INVENTORY_FILE,
        "state_path": f"{STATE_DIR}/autoscaler.db",
        "policy": dict(auto.policy),
        "provider": {"kind": "gce" if cluster.platform == "gke" else "cluster-api"},
        "metrics": {"host": "0.0.0.0", "port": auto.metrics_port},  # probes and scraping reach the pod IP
        "kubernetes": section.model_dump(),
    }
    return (
        f"# Generated by gpu-fleet (stacks/kube_plan.py) from clusters[{cluster.name}].kueue.autoscaler\n"
        + yaml.safe_dump(config, sort_keys=False)
    )
