"""When an idle node's idle timeout starts on Kubernetes: at the first tick that saw it idle, never at its Ready
time, so a node that ran work for hours is kept warm for its shape's idle timeout after its pods finish."""

from __future__ import annotations

from autoscaler.cloud import CloudNode, CloudNodeStatus, OfferingKey
from autoscaler.kube.source import NodeFacts, inventory_nodes
from autoscaler.model import NodeState, Pool
from fleet.catalog import CapacityType

T = 1_800_000_000.0
MT = "a3-highgpu-8g"
POOL = Pool(
    name="h100", machine_type=MT, gpu_type="nvidia-h100-80gb", gpus_per_node=8, zones=("us-central1-a",),
    capacity_type=CapacityType.ON_DEMAND, max_nodes=4,
)  # fmt: skip
KEY = OfferingKey("gcp", "us-central1-a", MT, CapacityType.ON_DEMAND)
CLOUD = [CloudNode("h100-0", "h100", KEY, CloudNodeStatus.RUNNING, T - 4000.0, None)]


def _facts(workload: int) -> dict[str, NodeFacts]:
    return {
        "h100-0": NodeFacts(
            name="h100-0",
            pool="h100",
            ready=True,
            cordoned=False,
            workload=workload,
            gpus=8,
            gpus_used=8 * workload,
            zone="us-central1-a",
            since=T - 3600.0,  # Ready an hour ago
        )
    }


def test_a_node_whose_pods_just_finished_is_idle_from_now_not_from_its_ready_time() -> None:
    [busy] = inventory_nodes([POOL], CLOUD, _facts(1), {}, {}, T - 10.0)
    assert busy.state is NodeState.BUSY
    [idle] = inventory_nodes([POOL], CLOUD, _facts(0), {}, {}, T)
    assert idle.state is NodeState.READY_IDLE
    assert idle.idle_for(T) == 0.0  # was 3,600 s: past any idle timeout, cordoned at once


def test_a_node_a_tick_already_saw_idle_keeps_counting_from_then() -> None:
    [idle] = inventory_nodes([POOL], CLOUD, _facts(0), {}, {"h100-0": T - 300.0}, T)
    assert idle.idle_for(T) == 300.0
