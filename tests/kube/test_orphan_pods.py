"""Unschedulable pods of admitted workloads that no pending ProvisioningRequest stands for
(`autoscaler.kube.source.unschedulable_units`), with the metadata Kueue 0.14 puts on an admitted pod: the
`kueue.x-k8s.io/podset` label and, from its ProvisioningRequest admission check's podSetUpdates, the request the
pod consumes (`autoscaling.x-k8s.io/consume-provisioning-request`).  Kueue sets no workload label on pods."""

from __future__ import annotations

from typing import Any

from autoscaler.kube.source import CONSUMES, CONSUMES_LEGACY, unschedulable_units


def _pod(name: str, request: str | None, *, gpus: int = 8, key: str = CONSUMES, scheduled: bool = False) -> dict:
    annotations = {key: request} if request else {}
    status: dict[str, Any] = (
        {"phase": "Running"}
        if scheduled
        else {
            "phase": "Pending",
            "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
        }
    )
    return {
        "metadata": {"name": name, "namespace": "team-a", "labels": {"kueue.x-k8s.io/podset": "main"},
                     "annotations": annotations},
        "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}],
                 **({"nodeName": "n1"} if scheduled else {})},
        "status": status,
    }  # fmt: skip


def test_the_pods_of_a_provisioned_request_that_lost_their_node_form_one_gang() -> None:
    pods = [_pod("train-0", "wl-9-prov-1"), _pod("train-1", "wl-9-prov-1", key=CONSUMES_LEGACY)]
    (unit,) = unschedulable_units(pods, [], [])
    assert (unit.id, unit.nodes, unit.gpus_per_node) == ("pods/team-a/wl-9-prov-1", 2, 8)


def test_pods_a_pending_request_stands_for_pods_of_no_request_and_placed_pods_form_none() -> None:
    pending = [_pod("a-0", "wl-1-prov-1")]
    assert unschedulable_units(pending, ["pr/team-a/wl-1-prov-1"], []) == []  # the request is served instead
    assert unschedulable_units([_pod("x", None)], [], []) == []  # not Kueue's: the Cluster Autoscaler's business
    assert unschedulable_units([_pod("b-0", "wl-2-prov-1", scheduled=True)], [], []) == []
    assert unschedulable_units([_pod("c-0", "wl-3-prov-1", gpus=0)], [], []) == []  # no GPU asked
