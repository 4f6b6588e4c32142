"""Managed-instance state, request ids, names and quota metrics (pure translations)."""

from __future__ import annotations

import uuid

import pytest

from autoscaler.cloud import CloudNodeStatus
from autoscaler.gce.translate import ManagedVm, gce_request_id, gpu_quota_metric, invalid_names, node_status
from fleet.catalog import CapacityType


@pytest.mark.parametrize(
    ("action", "status", "expected"),
    [
        ("CREATING", None, (CloudNodeStatus.PROVISIONING, False)),
        ("CREATING", "PROVISIONING", (CloudNodeStatus.PROVISIONING, False)),
        ("CREATING", "RUNNING", (CloudNodeStatus.PROVISIONING, False)),
        ("NONE", "STAGING", (CloudNodeStatus.PROVISIONING, False)),
        ("NONE", "RUNNING", (CloudNodeStatus.RUNNING, False)),
        ("VERIFYING", "RUNNING", (CloudNodeStatus.RUNNING, False)),
        ("DELETING", "RUNNING", (CloudNodeStatus.STOPPING, False)),
        ("NONE", "STOPPING", (CloudNodeStatus.STOPPING, False)),
        ("RECREATING", "TERMINATED", (CloudNodeStatus.GONE, True)),  # a MIG that repairs (not the stack's)
        ("NONE", "TERMINATED", (CloudNodeStatus.GONE, True)),  # the stack's spot VM stopped on preemption
        ("NONE", "STOPPED", (CloudNodeStatus.GONE, False)),
    ],
)
def test_node_status(action: str, status: str | None, expected: tuple[CloudNodeStatus, bool]) -> None:
    assert node_status(ManagedVm("n-0", "z", action, status)) == expected


def test_gce_request_id_is_a_stable_uuid_per_call_target() -> None:
    a = gce_request_id("req-1", "createInstances", "p", "z", "mig", "n-0")
    assert uuid.UUID(a).version == 5
    assert a == gce_request_id("req-1", "createInstances", "p", "z", "mig", "n-0")
    assert a != gce_request_id("req-1", "createInstances", "p", "z", "mig", "n-1")
    assert a != gce_request_id("req-2", "createInstances", "p", "z", "mig", "n-0")


def test_invalid_names() -> None:
    names = ["c1-spot-0", "c1-spot-17", "c1-spot-x", "c1-spot", "other-1", "C1-SPOT-2", "c1-spot-" + "1" * 60]
    assert invalid_names(names, "c1-spot") == names[2:]


def test_gpu_quota_metric() -> None:
    assert gpu_quota_metric("nvidia-h100-mega-80gb", CapacityType.ON_DEMAND) == "NVIDIA_H100_MEGA_GPUS"
    assert gpu_quota_metric("nvidia-h100-80gb", CapacityType.SPOT) == "PREEMPTIBLE_NVIDIA_H100_GPUS"
    assert gpu_quota_metric("nvidia-h100-80gb", CapacityType.FLEX_START) == "PREEMPTIBLE_NVIDIA_H100_GPUS"
    assert gpu_quota_metric("nvidia-h100-80gb", CapacityType.RESERVATION) is None
    assert gpu_quota_metric("nvidia-unknown", CapacityType.ON_DEMAND) is None
