"""Declare the `scheduler: kueue` clusters of a fleet: GKE (cluster, node pools, GPUDirect networks) or an existing
cluster (Cluster API MachineDeployments, NVIDIA's GPU Operator), then on both Kueue (pinned install + queues) and the
autoscaler Deployment.

Called by `stacks.fleet.build_fleet` with the network fabric (None when no cluster is on GCP).  Every manifest is
validated against the shipped CRDs before it is declared; mapping decisions are in `stacks.kube_plan` (pure).
Returns the autoscaler inventory entries of these clusters and their stack outputs.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pulumi

from components.gcp.network import NetworkFabric
from components.gcp.node_pool import service_account_id
from components.gcp.storage import SharedStorage
from components.gke.autoscaler_identity import AutoscalerIdentity, AutoscalerIdentityArgs
from components.gke.bucket_access import BucketAccess, BucketAccessArgs
from components.gke.cluster import GkeCluster, GkeClusterArgs
from components.gke.node_pool import GkeGpuNodePool, GkeGpuNodePoolArgs, NodeNetwork
from components.kubernetes.autoscaler import AutoscalerDeployment, manifests
from components.kubernetes.gpu_operator import GpuOperator, GpuOperatorArgs
from components.kubernetes.objects import Connection, Manifests
from components.kueue.install import KueueInstall, KueueInstallArgs
from components.kueue.queues import KueueQueues, KueueQueuesArgs
from fleet.bootstrap.iam import AUTOSCALER_PERMISSIONS
from fleet.catalog import Catalog
from fleet.inventory import migs_from_urls
from fleet.schemas import check_objects, crd_document
from fleet.spec.derive import cluster_zone, pool_zones
from fleet.spec.kube import gke_local_ssds, gke_set_labels, node_taints, pool_tolerations, team_namespace
from fleet.spec.model import ClusterSpec, FleetSpec, GkeSpec, GpuOperatorSpec
from stacks import gke_fabric, kube_plan, plan
from stacks.cluster_api import REPLICAS_FIELD, machine_deployment
from stacks.kube_storage import CHECKPOINT_CLAIM, checkpoint_members, checkpoint_objects
from stacks.kueue_objects import manager_config, namespaces, queue_objects

SYSTEM_POOL_SELECTOR = {"gpu-fleet/role": "system"}
#: what Kueue's ProvisioningRequest admission check needs served (fleet/schemas/crds/, from kubernetes/autoscaler)
PROVISIONING_REQUEST_CRD = "provisioningrequests.autoscaling.x-k8s.io"


def build_kueue_clusters(
    spec: FleetSpec,
    cat: Catalog,
    fabric: NetworkFabric | None,
    fabrics: Mapping[tuple[str, str], plan.FabricPlan],
    kubeconfigs: Mapping[str, Any],
) -> tuple[list[dict[str, Any]], dict[str, Any], dict[str, Any]]:
    """(inventory entries, cluster outputs, secret kubeconfigs of the GKE clusters created)."""
    inventory: list[dict[str, Any]] = []
    outputs: dict[str, Any] = {}
    created: dict[str, Any] = {}
    for cluster in spec.clusters:
        if cluster.scheduler != "kueue":
            continue
        if cluster.platform == "gke":
            assert fabric is not None
            entries, out, created[cluster.name] = _gke(spec, cluster, cat, fabric, fabrics)
        else:
            entries, out = _existing(spec, cluster, cat, kubeconfigs[cluster.name])
        inventory += entries
        outputs[cluster.name] = out
    return inventory, outputs, created


# ---------------------------------------------------------------- GKE


def _gke(
    spec: FleetSpec,
    cluster: ClusterSpec,
    cat: Catalog,
    fabric: NetworkFabric,
    fabrics: Mapping[tuple[str, str], plan.FabricPlan],
) -> tuple[list[dict[str, Any]], dict[str, Any], Any]:
    from stacks.fleet import _storage, unpinned_zone_warning  # the same Filestore / GCS / Lustre as a Slurm cluster

    gke = cluster.gke or GkeSpec()
    zones = kube_plan.cluster_zones(spec, cluster, cat)
    networks = kube_plan.gke_networks(cluster, fabrics)
    gc = GkeCluster(
        f"{cluster.name}-gke",
        GkeClusterArgs(
            project=spec.project,
            region=spec.region,
            name=cluster.name,
            network=fabric.network.self_link,
            subnetwork=fabric.subnet.self_link,
            node_zones=zones,
            release_channel=gke.release_channel,
            upgrade_exclusion_start=str(gke.upgrade_exclusion_start),
            maintenance_window_start=gke.maintenance_window_start,
            master_cidr=str(gke.master_cidr),
            pods_cidr=str(gke.pods_cidr),
            services_cidr=str(gke.services_cidr),
            master_authorized_networks=[str(c) for c in gke.master_authorized_networks],
            private_endpoint=gke.private_endpoint,
            multi_networking=bool(networks),
            system_machine_type=gke.system_pool.machine_type,
            system_nodes_per_zone=gke.system_pool.nodes_per_zone,
            labels=plan.resource_labels(spec, cluster),
        ),
    )
    zone = cluster_zone(spec, cluster, cat)  # zones[0] unless pinned
    if cluster.storage.home or cluster.storage.scratch:
        unpinned_zone_warning(spec, cluster, zone)
    storage = _storage(spec, cluster, zone, fabric)
    provider = Connection(f"{cluster.name}-k8s", gc.kubeconfig, opts=pulumi.ResourceOptions(parent=gc)).provider
    kopts = pulumi.ResourceOptions(provider=provider, depends_on=[gc.system_pool])

    # GPUDirect: the Network / GKENetworkParamSet objects pods name, one per additional node network.
    net_objects = kube_plan.network_objects(networks, fabric)
    net_declared = Manifests(f"{cluster.name}-gpudirect-networks", net_objects, opts=kopts, object_opts=kopts).objects
    # The NCCL plugins of gIB, TCPX and TCPXO nodes and TCPX(O)'s device injector, which GKE does not install
    # (stacks/gke_fabric.py).
    fabric_software = gke_fabric.fabric_software(cluster, cat)
    if fabric_software:
        Manifests(f"{cluster.name}-gpudirect-software", fabric_software, opts=kopts, object_opts=kopts)

    pools: dict[str, GkeGpuNodePool] = {}
    for pool in cluster.pools:
        machine = cat.machine(pool.machine_type)
        node_nets = [
            NodeNetwork(fabric.planes[n.plane].network.name, fabric.planes[n.plane].subnets[n.subnet].name)
            for n in networks.get(pool.machine_type, [])
        ]
        pools[pool.name] = GkeGpuNodePool(
            f"{cluster.name}-{pool.name}",
            GkeGpuNodePoolArgs(
                project=spec.project,
                region=spec.region,
                cluster=gc.cluster.id,
                name=pool.name,
                zones=list(pool_zones(spec, pool, cat)),
                machine_type=pool.machine_type,
                accelerator_type=machine.gpu.accelerator_type,
                accelerator_count=machine.gpu_count,
                capacity=pool.capacity,
                service_account=gc.node_sa.email,
                gpu_driver_version=gke.gpu_driver_version,
                reservation=pool.reservation,
                compact_placement=pool.compact_placement,
                boot_disk_gb=pool.boot_disk_gb,
                boot_disk_type=plan.boot_disk_type(machine),
                networks=node_nets,
                gpudirect_strategy="RDMA" if machine.nics.fabric == "rdma" else None,
                local_ssd_count=gke_local_ssds(pool, cat),
                # GKE sets its node-pool label itself; the shared-flavor label is ours to set
                labels=gke_set_labels(cluster, pool),
                resource_labels=plan.resource_labels(spec, cluster, pool.labels),
                taints=[t for t in node_taints(cluster, pool) if t["key"] != "nvidia.com/gpu"],  # GKE adds that one
            ),
        )
    entries = [
        {
            **kube_plan.inventory_entry(spec, cluster, pool, cat),
            "instance_group_urls": pools[pool.name].instance_group_urls,
            "instance_groups": pools[pool.name].instance_group_urls.apply(lambda u: migs_from_urls(u or [])),
        }
        for pool in cluster.pools
    ]
    # The daemon's Google identity (Workload Identity): exactly the MIG calls of the GCE actuator.
    identity = AutoscalerIdentity(
        f"{cluster.name}-autoscaler",
        AutoscalerIdentityArgs(
            project=spec.project,
            cluster=cluster.name,
            account_id=service_account_id(cluster.name, "autoscaler"),
            permissions=[p.name for p in AUTOSCALER_PERMISSIONS],
            kubernetes_member=kube_plan.workload_identity_member(spec, cluster),
        ),
    )
    gsa = identity.account
    queues = _kueue(cluster, cat, kopts, SYSTEM_POOL_SELECTOR)
    _autoscaler(cluster, entries, kopts, queues, gsa.email, SYSTEM_POOL_SELECTOR)
    checkpoint_claims = _checkpoint_volumes(spec, cluster, storage, kopts, queues)
    return (
        entries,
        {
            "platform": "gke",
            "kubeconfig_output": "kubeconfigs",  # the secret kubeconfig is exported apart, so this stays readable
            "gke_cluster": gc.cluster.name,
            "endpoint": gc.cluster.endpoint,
            "node_pools": {name: p.node_pool.name for name, p in pools.items()},
            "node_service_account": gc.node_sa.email,
            "autoscaler_service_account": gsa.email,
            "networks": sorted(k[2] for k in net_declared if k[0] == "Network"),
            "checkpoint_bucket": storage.bucket.name if storage.bucket else None,
            # per team: `<namespace>/<claim>` of the bucket's volume (a pod runs as CHECKPOINT_KSA to mount it)
            "checkpoint_claims": checkpoint_claims,
            "filestore_ip": storage.home_ip,
            "local_queues": kube_plan.local_queues(cluster),
            "kueue_queues": _queues_output(cluster, cat),
        },
        gc.kubeconfig,
    )


# ---------------------------------------------------------------- an existing cluster (Cluster API)


def _existing(
    spec: FleetSpec, cluster: ClusterSpec, cat: Catalog, kubeconfig: Any
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    assert cluster.kubernetes is not None
    provider = Connection(f"{cluster.name}-k8s", kubeconfig).provider
    kopts = pulumi.ResourceOptions(provider=provider)
    mds = [machine_deployment(cluster, pool) for pool in cluster.pools]
    check_objects(mds)
    # The replica count belongs to the autoscaler: `pulumi up` creates at min_nodes and never resets it.
    keep = pulumi.ResourceOptions.merge(kopts, pulumi.ResourceOptions(ignore_changes=[REPLICAS_FIELD]))
    declared = Manifests(f"{cluster.name}-capi", mds, opts=kopts, object_opts=keep).objects
    entries = [kube_plan.inventory_entry(spec, cluster, pool, cat) for pool in cluster.pools]
    # The driver, container toolkit and device plugin of the GPU nodes (GKE installs its own); nothing waits for it
    operator = cluster.kubernetes.gpu_operator
    if operator is not None:
        _gpu_operator(cluster, operator, kopts)
    # GKE serves the ProvisioningRequest API itself (its own Cluster Autoscaler's); another cluster may not
    crds = [crd_document(PROVISIONING_REQUEST_CRD)] if cluster.kubernetes.provisioning_request_crd == "install" else []
    queues = _kueue(cluster, cat, kopts, {}, crds)
    _autoscaler(cluster, entries, kopts, queues, None, {})
    return entries, {
        "platform": "kubernetes",
        "capi_cluster": cluster.kubernetes.cluster_name,
        "machine_deployments": sorted(f"{ns}/{name}" for _, ns, name in declared),
        "gpu_operator": operator.version if operator else None,
        "local_queues": kube_plan.local_queues(cluster),
        "kueue_queues": _queues_output(cluster, cat),
    }


def _gpu_operator(cluster: ClusterSpec, spec: GpuOperatorSpec, kopts: pulumi.ResourceOptions) -> GpuOperator:
    """NVIDIA's GPU Operator on the cluster's GPU nodes, tolerating every taint the stack gives them."""
    args = GpuOperatorArgs(
        version=spec.version,
        tolerations=pool_tolerations(cluster),
        driver=spec.driver,
        toolkit=spec.toolkit,
        nfd=spec.nfd,
    )
    return GpuOperator(f"{cluster.name}-gpu-operator", args, opts=kopts)


# ---------------------------------------------------------------- both platforms


def _checkpoint_volumes(
    spec: FleetSpec, cluster: ClusterSpec, storage: SharedStorage, kopts: pulumi.ResourceOptions, queues: KueueQueues
) -> dict[str, str]:
    """The checkpoint bucket for the teams' pods (stacks/kube_storage.py): its Google identity, reachable only from
    each team namespace's `gpu-fleet-checkpoints` service account, and a volume and claim per team namespace
    ({} when the cluster has no bucket or `storage.checkpoints.mount_point` is null)."""
    from stacks.fleet import checkpoint_mount  # the Slurm clusters' decision: a bucket, and a mount point not null

    bucket = checkpoint_mount(spec, cluster).get("checkpoints")
    if storage.bucket is None or not bucket or cluster.kueue is None:
        return {}
    account_id = service_account_id(cluster.name, "checkpoints")
    access = BucketAccess(
        f"{cluster.name}-checkpoints",
        BucketAccessArgs(
            spec.project, cluster.name, account_id, storage.bucket.name, checkpoint_members(spec, cluster)
        ),
    )
    email = f"{account_id}@{spec.project}.iam.gserviceaccount.com"
    Manifests(
        f"{cluster.name}-checkpoints",
        checkpoint_objects(cluster, bucket, email),
        opts=kopts,
        after=[*queues.objects.values(), access],
        object_opts=kopts,
    )
    return {t.name: f"{team_namespace(t)}/{CHECKPOINT_CLAIM}" for t in cluster.kueue.teams}


def _kueue(
    cluster: ClusterSpec,
    cat: Catalog,
    kopts: pulumi.ResourceOptions,
    node_selector: dict[str, str],
    crds: list[dict[str, Any]] | None = None,
) -> KueueQueues:
    assert cluster.kueue is not None
    install = KueueInstall(
        f"{cluster.name}-kueue",
        KueueInstallArgs(
            cluster.kueue.version,
            manager_config(cluster),
            node_selector=node_selector,
            crds=crds or [],
            jobset_version=cluster.kueue.jobset_version,
        ),
        opts=kopts,
    )
    args = KueueQueuesArgs(namespaces=namespaces(cluster), objects=queue_objects(cluster, cat))
    return KueueQueues(f"{cluster.name}-queues", args, install=install.release, opts=kopts)


def _queues_output(cluster: ClusterSpec, cat: Catalog) -> list[dict[str, Any]]:
    return kube_plan.queue_summary(cluster, queue_objects(cluster, cat))


def _autoscaler(
    cluster: ClusterSpec,
    entries: list[dict[str, Any]],
    kopts: pulumi.ResourceOptions,
    queues: KueueQueues,
    gsa_email: Any,
    node_selector: dict[str, str],
) -> None:
    assert cluster.kueue is not None
    auto = cluster.kueue.autoscaler
    inventory_json = pulumi.Output.from_input(entries).apply(lambda e: json.dumps(e, indent=2, sort_keys=True))
    deployment = AutoscalerDeployment(
        cluster=cluster.name,
        namespace=auto.namespace,
        image=auto.image,
        replicas=auto.replicas,
        metrics_port=auto.metrics_port,
        config=kube_plan.autoscaler_config(cluster),
        inventory=inventory_json,
        cluster_api_namespace=cluster.kubernetes.namespace if cluster.kubernetes else None,
        gcp_service_account=gsa_email,
        node_selector=node_selector,
        metrics_from_namespaces=tuple(auto.metrics_from_namespaces),
    )
    Manifests(f"{cluster.name}-autoscaler", manifests(deployment), opts=kopts, after=[queues], object_opts=kopts)
