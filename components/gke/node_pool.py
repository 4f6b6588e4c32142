"""A GKE GPU node pool whose size belongs to the gpu-fleet autoscaler.

No GKE autoscaling block, zero nodes at creation and `ignore_changes` on the counts: the daemon creates and
deletes the pool's VMs by name in the node pool's managed instance groups (`instance_group_urls`, exported in
the autoscaler inventory), and `pulumi up` never resizes it back.  The GPU driver is installed by GKE
(`gpu_driver_installation_config`).  Capacity: a specific reservation, spot (tainted so only pods that
tolerate preemption land there), flex-start (DWS: no reservation, at most 7 days), or on-demand.
Compact placement is GKE's own COMPACT policy, except on a reservation pool, whose reservation carries the placement.
GPUDirect NICs are additional node networks on the fabric VPCs (the cluster needs multi-networking).
A machine type that comes with local SSDs (A3 Ultra, A4: 32 x 375 GiB) has them as the node's ephemeral storage
(`ephemeral_storage_local_ssd_config`: images, emptyDirs and container writable layers on the NVMe RAID, labelled
`cloud.google.com/gke-ephemeral-storage-local-ssd=true`), as Cluster Toolkit's gke-node-pool does for
a3-ultragpu-8g (disk_definitions.tf); without it they sat on the boot disk, where large training images and
scratch data bring DiskPressure evictions.

Flex-start and GKE's queued provisioning: GKE ties queued provisioning to its own cluster autoscaler
(the pool must autoscale), which would fight the daemon; so flex-start pools set `flex_start` on the
nodes and the daemon obtains them through the MIGs' resize requests, answering Kueue's
ProvisioningRequests itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pulumi
import pulumi_gcp as gcp

from components.gcp.node_pool import placement_kind
from components.gke.cluster import NODE_METADATA
from fleet.catalog import CapacityType

COUNT_FIELDS = ["initialNodeCount", "nodeCount"]  # the autoscaler's; never reset by `pulumi up`
FLEX_START_MAX_RUN = "604800s"  # 7 days, the flex-start limit


@dataclass(frozen=True)
class NodeNetwork:
    """One additional node network: the VPC and subnet names (GKE takes names, not links)."""

    network: pulumi.Input[str]
    subnetwork: pulumi.Input[str]


@dataclass(frozen=True)
class GkeGpuNodePoolArgs:
    """Inputs of a GkeGpuNodePool (names as in the fleet spec; `labels` are Kubernetes node labels,
    `resource_labels` GCE labels, `taints` extra taints besides the GPU taint GKE adds itself)."""

    project: str
    region: str
    cluster: pulumi.Input[str]
    name: str
    zones: list[str]
    machine_type: str
    accelerator_type: str
    accelerator_count: int
    capacity: CapacityType
    service_account: pulumi.Input[str]
    gpu_driver_version: str = "LATEST"
    reservation: str | None = None
    compact_placement: bool = False
    boot_disk_gb: int = 200
    boot_disk_type: str = "pd-balanced"
    networks: list[NodeNetwork] = field(default_factory=list)
    labels: dict[str, str] = field(default_factory=dict)
    resource_labels: dict[str, str] = field(default_factory=dict)
    taints: list[dict[str, str]] = field(default_factory=list)
    gpudirect_strategy: str | None = None  # "RDMA" on A3 Ultra / A4 (GPUDirect-RDMA over the RoCE node networks)
    local_ssd_count: int = 0  # the machine type's local SSDs, as ephemeral storage (module docstring)


def reservation_affinity(capacity: CapacityType, reservation: str | None) -> dict[str, object]:
    if capacity is CapacityType.RESERVATION:
        return {
            "consume_reservation_type": "SPECIFIC_RESERVATION",
            "key": "compute.googleapis.com/reservation-name",
            "values": [reservation],
        }
    return {"consume_reservation_type": "NO_RESERVATION"}  # spot / flex-start / on-demand never eat a reservation


class GkeGpuNodePool(pulumi.ComponentResource):
    node_pool: gcp.container.NodePool

    def __init__(self, name: str, args: GkeGpuNodePoolArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpufleet:gke:GpuNodePool", name, None, opts)
        node_config: dict[str, object] = {
            "machine_type": args.machine_type,
            "guest_accelerators": [
                {
                    "type": args.accelerator_type,
                    "count": args.accelerator_count,
                    "gpu_driver_installation_config": {"gpu_driver_version": args.gpu_driver_version},
                }
            ],
            "disk_size_gb": args.boot_disk_gb,
            "disk_type": args.boot_disk_type,
            "image_type": "COS_CONTAINERD",
            "gvnic": {"enabled": True},
            "metadata": dict(NODE_METADATA),
            "service_account": args.service_account,
            "oauth_scopes": ["https://www.googleapis.com/auth/cloud-platform"],
            "workload_metadata_config": {"mode": "GKE_METADATA"},
            "shielded_instance_config": {"enable_secure_boot": True, "enable_integrity_monitoring": True},
            "reservation_affinity": reservation_affinity(args.capacity, args.reservation),
            "labels": dict(args.labels),
            "resource_labels": dict(args.resource_labels),
            "taints": [{**t, "effect": _gke_effect(t["effect"])} for t in args.taints],
        }
        if args.gpudirect_strategy:
            node_config["gpudirect_strategy"] = args.gpudirect_strategy
        if args.local_ssd_count:
            node_config["ephemeral_storage_local_ssd_config"] = {"local_ssd_count": args.local_ssd_count}
        if args.capacity is CapacityType.SPOT:
            node_config["spot"] = True
        if args.capacity is CapacityType.FLEX_START:
            node_config["flex_start"] = True
            node_config["max_run_duration"] = FLEX_START_MAX_RUN
        extra: dict[str, object] = {}
        # the GCE pools' one rule: a specific reservation refuses a policy of GKE's making and brings its own
        # (Cluster Toolkit's GKE A3 Mega / Ultra reservation pools set none either)
        if placement_kind(args.capacity, args.compact_placement) != "none":
            extra["placement_policy"] = {"type": "COMPACT"}
        if args.networks:
            extra["network_config"] = {
                "enable_private_nodes": True,
                "additional_node_network_configs": [
                    {"network": n.network, "subnetwork": n.subnetwork} for n in args.networks
                ],
            }
        self.node_pool = gcp.container.NodePool(
            name,
            name=args.name,
            project=args.project,
            cluster=args.cluster,
            location=args.region,
            node_locations=list(args.zones),
            initial_node_count=0,
            node_config=node_config,
            # Auto-upgrade stays on (release channels require it); the cluster's maintenance exclusion
            # holds node upgrades.  Upgrades replace one node at a time, never asking for surge GPUs.  Flex-start
            # nodes are not auto-repaired: flex-start depends on it being off (Cluster Toolkit's GKE flex-start
            # examples, gke-consumption-options/dws-flex-start: "auto_repair: false").
            management={"auto_repair": args.capacity is not CapacityType.FLEX_START, "auto_upgrade": True},
            upgrade_settings={"strategy": "SURGE", "max_surge": 0, "max_unavailable": 1},
            **extra,
            opts=pulumi.ResourceOptions(parent=self, ignore_changes=list(COUNT_FIELDS)),
        )
        self.instance_group_urls = self.node_pool.managed_instance_group_urls
        self.register_outputs({"node_pool": self.node_pool.id, "instance_group_urls": self.instance_group_urls})


def _gke_effect(effect: str) -> str:
    """Kubernetes taint effect -> the GKE API's enum (NoSchedule -> NO_SCHEDULE)."""
    return {"NoSchedule": "NO_SCHEDULE", "PreferNoSchedule": "PREFER_NO_SCHEDULE", "NoExecute": "NO_EXECUTE"}[effect]
