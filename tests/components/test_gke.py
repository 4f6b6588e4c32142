"""GKE components under mocks: GPU node pools the autoscaler owns (no autoscaling, counts ignored) per capacity
type, and the private cluster with its webhook firewall and plugin-based kubeconfig."""

from __future__ import annotations

import pytest

from components.gke.cluster import GkeCluster, GkeClusterArgs
from components.gke.node_pool import GkeGpuNodePool, GkeGpuNodePoolArgs, NodeNetwork
from fleet.catalog import CapacityType


def pool_args(capacity: CapacityType, **kw) -> GkeGpuNodePoolArgs:
    base = dict(
        project="my-proj", region="us-central1", cluster="projects/my-proj/locations/us-central1/clusters/c",
        name="gpu", zones=["us-central1-b"], machine_type="a3-highgpu-8g", accelerator_type="nvidia-h100-80gb",
        accelerator_count=8, capacity=capacity, service_account="nodes@my-proj.iam.gserviceaccount.com",
    )  # fmt: skip
    base.update(kw)
    return GkeGpuNodePoolArgs(**base)


@pytest.mark.parametrize("capacity", list(CapacityType))
def test_every_capacity_type_leaves_the_size_to_the_autoscaler(declare, capacity):
    extra = {"reservation": "r1"} if capacity is CapacityType.RESERVATION else {}
    found = declare(lambda: GkeGpuNodePool("p", pool_args(capacity, **extra)))
    np = found.one("container/nodePool:NodePool")
    assert "autoscaling" not in np.inputs and np.inputs["initialNodeCount"] == 0
    assert np.ignore_changes == ["initialNodeCount", "nodeCount"]
    cfg = np.inputs["nodeConfig"]
    want = "SPECIFIC_RESERVATION" if capacity is CapacityType.RESERVATION else "NO_RESERVATION"
    assert cfg["reservationAffinity"]["consumeReservationType"] == want
    assert cfg.get("spot", False) is (capacity is CapacityType.SPOT)
    assert cfg.get("flexStart", False) is (capacity is CapacityType.FLEX_START)
    if capacity is CapacityType.FLEX_START:
        assert cfg["maxRunDuration"] == "604800s"
    # flex-start depends on auto-repair being off (Cluster Toolkit's GKE flex-start examples)
    assert np.inputs["management"] == {"autoRepair": capacity is not CapacityType.FLEX_START, "autoUpgrade": True}
    assert np.inputs["upgradeSettings"] == {"strategy": "SURGE", "maxSurge": 0, "maxUnavailable": 1}


def test_node_networks_and_compact_placement(declare):
    nets = [NodeNetwork("c-gpunet-0", "c-gpunet-0-sub-0"), NodeNetwork("c-gpunet-1", "c-gpunet-1-sub-0")]
    found = declare(
        lambda: GkeGpuNodePool("p", pool_args(CapacityType.ON_DEMAND, networks=nets, compact_placement=True))
    )
    np = found.one("container/nodePool:NodePool").inputs
    assert np["placementPolicy"] == {"type": "COMPACT"}
    assert np["networkConfig"]["additionalNodeNetworkConfigs"] == [
        {"network": "c-gpunet-0", "subnetwork": "c-gpunet-0-sub-0"},
        {"network": "c-gpunet-1", "subnetwork": "c-gpunet-1-sub-0"},
    ]
    plain = declare(lambda: GkeGpuNodePool("p", pool_args(CapacityType.ON_DEMAND)))
    assert "networkConfig" not in plain.one("container/nodePool:NodePool").inputs
    assert "placementPolicy" not in plain.one("container/nodePool:NodePool").inputs


def test_a_reservation_pool_asks_for_no_placement_policy_of_its_own(declare):
    """A specific reservation carries its placement and refuses an outside policy (the GCE pools' rule,
    components.gcp.node_pool.placement_kind): compact_placement there declares no GKE COMPACT policy."""
    found = declare(
        lambda: GkeGpuNodePool("p", pool_args(CapacityType.RESERVATION, reservation="r1", compact_placement=True))
    )
    assert "placementPolicy" not in found.one("container/nodePool:NodePool").inputs


def cluster_args(**kw) -> GkeClusterArgs:
    base = dict(
        project="my-proj", region="us-central1", name="c", network="net", subnetwork="sub",
        node_zones=["us-central1-b"], release_channel="REGULAR", upgrade_exclusion_start="2026-12-01T00:00:00Z",
        maintenance_window_start="03:00", master_cidr="172.16.0.0/28", pods_cidr="10.64.0.0/14",
        services_cidr="10.68.0.0/20",
    )  # fmt: skip
    base.update(kw)
    return GkeClusterArgs(**base)


def test_cluster_webhook_firewall_and_kubeconfig(declare):
    seen: dict[str, str] = {}

    def program():
        gc = GkeCluster("c", cluster_args())
        gc.kubeconfig.apply(lambda k: seen.setdefault("kubeconfig", k))

    found = declare(program)
    fw = found.one("compute/firewall:Firewall").inputs
    assert fw["sourceRanges"] == ["172.16.0.0/28"] and fw["allows"] == [{"protocol": "tcp", "ports": ["9443", "8082"]}]
    assert fw["targetServiceAccounts"] == ["c-gke-nodes@my-proj.iam.gserviceaccount.com"]
    c = found.one("container/cluster:Cluster").inputs
    assert c["privateClusterConfig"]["enablePrivateNodes"] is True
    assert c["privateClusterConfig"]["enablePrivateEndpoint"] is False
    assert c["masterAuthorizedNetworksConfig"] == {"cidrBlocks": [], "gcpPublicCidrsAccessEnabled": False}
    assert "enableMultiNetworking" not in c  # only with GPUDirect node networks
    roles = sorted(r.inputs["role"] for r in found.of_type("projects/iAMMember:IAMMember"))
    assert roles == ["roles/artifactregistry.reader", "roles/container.defaultNodeServiceAccount"]
    assert (
        "command: gke-gcloud-auth-plugin" in seen["kubeconfig"] and "server: https://172.16.0.2" in seen["kubeconfig"]
    )
    assert "token" not in seen["kubeconfig"]
