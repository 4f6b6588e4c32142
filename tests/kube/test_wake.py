"""Which watch events wake the Kubernetes daemon between polls, and when the loop ticks (`autoscaler.kube.wake`)."""

from __future__ import annotations

import copy

from autoscaler.kube.wake import (
    MACHINES,
    MIN_GAP_S,
    NODES,
    PODS,
    PROVISIONING_REQUESTS,
    WakeFilter,
    next_poll_after,
    next_tick_at,
)
from tests.kube.cluster import provisioning_request, ready_node


def gpu_pod(name: str, *, node: str | None = None, phase: str = "Pending", unschedulable: bool = False) -> dict:
    status: dict = {"phase": phase}
    if unschedulable:
        status["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]
    spec: dict = {"containers": [{"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "8"}}}]}
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "team-a"}, "spec": spec,
            "status": status}  # fmt: skip


def not_ready(node: dict) -> dict:
    out = copy.deepcopy(node)
    out["status"]["conditions"][0]["status"] = "False"
    return out


def test_a_new_request_wakes_the_daemon_and_its_own_status_writes_do_not() -> None:
    f = WakeFilter()
    pr = provisioning_request("wl-1", "team-a", "train", 2)
    assert f.wakes(PROVISIONING_REQUESTS, "ADDED", pr) == "request created"
    assert f.wakes(PROVISIONING_REQUESTS, "MODIFIED", pr) is None  # the daemon's Accepted / Provisioned answers
    assert f.wakes(PROVISIONING_REQUESTS, "DELETED", pr) == "request deleted"  # its booking is free
    assert f.wakes(PROVISIONING_REQUESTS, "BOOKMARK", {"metadata": {"resourceVersion": "9"}}) is None
    other = copy.deepcopy(pr)
    other["spec"]["provisioningClassName"] = "queued-provisioning.gke.io"  # GKE serves those itself
    assert f.wakes(PROVISIONING_REQUESTS, "ADDED", other) is None


def test_a_node_wakes_the_daemon_when_it_becomes_ready_not_when_it_is_cordoned() -> None:
    f = WakeFilter()
    booting = not_ready(ready_node("n1", {}))
    f.seed(NODES, [booting])
    assert f.wakes(NODES, "MODIFIED", booting) is None
    ready = ready_node("n1", {})
    assert f.wakes(NODES, "MODIFIED", ready) == "node ready"
    cordoned = copy.deepcopy(ready)
    cordoned["spec"]["unschedulable"] = True
    assert f.wakes(NODES, "MODIFIED", cordoned) is None  # the daemon's own cordon
    assert f.wakes(NODES, "DELETED", cordoned) == "node deleted"  # a preemption, or the daemon's delete


def test_a_node_listed_ready_does_not_wake_on_its_heartbeats() -> None:
    f = WakeFilter()
    f.seed(NODES, [ready_node("n1", {})])
    assert f.wakes(NODES, "MODIFIED", ready_node("n1", {})) is None
    assert f.wakes(NODES, "ADDED", ready_node("n2", {})) == "node ready"  # a node that joins Ready


def test_gpu_pods_wake_the_daemon_when_they_finish_or_cannot_be_placed() -> None:
    f = WakeFilter()
    assert f.wakes(PODS, "ADDED", gpu_pod("p")) is None  # created: kube-scheduler looks first
    assert f.wakes(PODS, "MODIFIED", gpu_pod("p", unschedulable=True)) == "GPU pod unschedulable"
    assert f.wakes(PODS, "MODIFIED", gpu_pod("p", unschedulable=True)) is None  # still: no new fact
    assert f.wakes(PODS, "MODIFIED", gpu_pod("p", node="n1", phase="Running")) is None
    assert f.wakes(PODS, "MODIFIED", gpu_pod("p", node="n1", phase="Succeeded")) == "GPU pod finished"
    assert f.wakes(PODS, "DELETED", gpu_pod("p", node="n1", phase="Succeeded")) is None  # its GPUs freed already
    f.seed(PODS, [gpu_pod("q", node="n1", phase="Running")])
    assert f.wakes(PODS, "DELETED", gpu_pod("q", node="n1", phase="Running")) == "GPU pod deleted"


def test_pods_without_gpus_and_daemonset_pods_never_wake_the_daemon() -> None:
    f = WakeFilter()
    plain = gpu_pod("web", node="n1", phase="Running")
    plain["spec"]["containers"][0]["resources"] = {}
    assert f.wakes(PODS, "MODIFIED", {**plain, "status": {"phase": "Succeeded"}}) is None
    ds = gpu_pod("dcgm", node="n1", phase="Running")
    ds["metadata"]["ownerReferences"] = [{"kind": "DaemonSet", "name": "dcgm", "apiVersion": "apps/v1", "uid": "u"}]
    assert f.wakes(PODS, "DELETED", ds) is None  # the daemon evicts these itself when it drains a node


def test_a_wake_up_ticks_at_once_but_never_within_the_gap_and_the_poll_keeps_its_phase() -> None:
    assert next_tick_at(105.0, next_poll=110.0, last_tick=100.0, woken=False) == 110.0
    assert next_tick_at(105.0, next_poll=110.0, last_tick=100.0, woken=True) == 105.0
    assert next_tick_at(100.2, next_poll=110.0, last_tick=100.0, woken=True) == 100.0 + MIN_GAP_S
    assert next_tick_at(109.9, next_poll=110.0, last_tick=109.5, woken=True) == 110.0  # the poll is not held back
    assert next_poll_after(104.0, 100.0, 10.0) == 110.0  # a woken tick at 104 leaves the grid 100, 110, 120
    assert next_poll_after(110.0, 100.0, 10.0) == 120.0
    assert next_poll_after(131.5, 100.0, 10.0) == 140.0  # a long tick skips the polls it overran


def test_a_machine_wakes_the_daemon_when_cluster_api_ties_it_to_its_node() -> None:
    """Cluster API sets `status.nodeRef` after the Node registered: the tick the Node's Ready woke may not know the
    Machine yet, so the nodeRef's arrival wakes another."""
    f = WakeFilter()
    machine = {"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine", "spec": {},
               "metadata": {"name": "m-0", "namespace": "capi-system"}, "status": {"phase": "Pending"}}  # fmt: skip
    f.seed(MACHINES, [machine])
    assert f.wakes(MACHINES, "MODIFIED", machine) is None
    running = copy.deepcopy(machine)
    running["status"] = {"phase": "Running", "nodeRef": {"name": "m-0"}}
    assert f.wakes(MACHINES, "MODIFIED", running) == "machine has its node"
    assert f.wakes(MACHINES, "MODIFIED", running) is None
    assert f.wakes(MACHINES, "DELETED", running) is None  # its Node's deletion is the event
    failed = copy.deepcopy(machine)
    failed["status"] = {"phase": "Failed", "deprecated": {"v1beta1": {"failureReason": "InsufficientCapacity"}}}
    assert f.wakes(MACHINES, "MODIFIED", failed) == "machine failed"  # served again on another offering at once
    assert f.wakes(MACHINES, "MODIFIED", failed) is None
