"""When the Kubernetes daemon ticks before its poll: the watch events a tick would act on, and the loop's timing.

The daemon reads everything each tick (`autoscaler/kube/loop.py`: from the watches' cache, or by listing) and
polls every `loop.interval_s` (10 s).  Between polls it watches three resources (`autoscaler/kube/watch.py`, the
API's `?watch=true` streams; a fourth, DaemonSets, only keeps the cache current) and ticks at once on an event
that changes what a tick decides, as Cluster Autoscaler and Karpenter react to informer events rather than to
their resync period:

- a ProvisioningRequest of the class it serves ADDED (Kueue reserved quota for a workload: serve it) or DELETED
  (the capacity booked for it is free for the next one);
- a Node that became Ready with its GPUs (`source.node_ready`: a request booked onto it can be answered
  Provisioned) or was DELETED (a spot preemption: its booking and its pods are served again);
- a GPU pod (not a DaemonSet's) that reached Succeeded or Failed or was deleted while bound or waiting (its node
  may be idle now), or that kube-scheduler found Unschedulable (a workload's pods recreated after a preemption are
  served as unschedulable pods);
- with Cluster API pools, a Machine whose `status.nodeRef` appeared (Cluster API sets it after the Node registered:
  only then does the daemon know which Machine a Ready node is, and answer its request), or that failed (phase
  Failed or a failureReason: the launch failed, and its request is served again on another offering).

Not a wake-up: the daemon's own writes (request status, cordons, evictions of DaemonSet pods), pod creations,
status churn.  `WakeFilter` remembers, per node and per GPU pod, only what a transition needs (Ready or not; the
pod's state), seeded from the list each watch starts with.

The loop's timing (`next_tick_at`, pure): the poll keeps its phase (ticks at start + k * interval); a wake-up
ticks at once unless the last tick started less than `MIN_GAP_S` ago, then at that gap, so a burst of events
costs at most one tick a second.  A tick that cordoned nodes asks for one more `MIN_GAP_S` later: the daemon
deletes a cordoned node at the tick after the cordon (a pod kube-scheduler bound in between is seen), and that
tick need not wait for the poll.

The replay's Kueue gpu-fleet (`autoscaler/replay/gpu_fleet_kube.py`) ticks `WAKE_LATENCY_S` after such an event,
under the same gap.  Pure: no I/O, no clock, no Kubernetes client.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from autoscaler.kube.source import (
    finished,
    is_daemonset_pod,
    machine_failed,
    node_ready,
    pod_gpus,
    unschedulable,
)
from fleet.provisioning_class import GPU_FLEET_CLASS

#: the least time between the starts of two ticks when woken (the poll is not held back by it): under constant
#: churn a woken daemon ticks up to once a second where the poll alone ticked every 10 s.  Its reads come from
#: the watches' cache (`autoscaler/kube/cache.py`); without it (`loop.watch_cache: false`) each tick lists the
#: cluster's ProvisioningRequests, Nodes and Pods, and `loop.watch_min_gap_s` raises the gap on a large cluster
MIN_GAP_S = 1.0
#: event -> woken tick, as the replay models it: a watch event reaches the daemon within milliseconds of the write
#: on a real API server, and the tick's own calls (its writes, the Lease, PodTemplates; the reads of a large cluster
#: without the watches' cache) take some hundreds of milliseconds.  Not measured on a real API server (none runs on
#: these machines); against the local fake, with the real client, request created -> launch took median 0.83 s, max
#: 1.08 s over 10 rounds with 2,000 other pods in the cluster and the cache (0.81 s / 0.98 s listing every tick),
#: the tick's own calls most of it (`bench/kube_wake_latency.py`, twentieth round).  The Slurm daemon's submit
#: wake-up figure (`autoscaler.replay.gpu_fleet.SUBMIT_WAKE_LATENCY_S`).
WAKE_LATENCY_S = 1.0

PROVISIONING_REQUESTS, NODES, PODS, MACHINES = "provisioningrequests", "nodes", "pods", "machines"
DAEMONSETS = "daemonsets"  # watched for the cache alone: what they take of a new node (no change wakes the loop)
WATCHED = (PROVISIONING_REQUESTS, NODES, PODS, DAEMONSETS)
#: watched too when the daemon manages Cluster API pools: a Machine's `status.nodeRef` is set only after its Node
#: registered, so the tick the Node's Ready woke may not see which Machine it is yet
WATCHED_CAPI = (*WATCHED, MACHINES)


class PodState(Enum):
    WAITING = "waiting"  # pending, not placed (unschedulable or not yet looked at)
    UNSCHEDULABLE = "unschedulable"
    BOUND = "bound"  # on a node, not finished
    FINISHED = "finished"


def pod_state(pod: Mapping[str, Any]) -> PodState:
    if finished(pod):
        return PodState.FINISHED
    if (pod.get("spec") or {}).get("nodeName"):
        return PodState.BOUND
    return PodState.UNSCHEDULABLE if unschedulable(pod) else PodState.WAITING


def _key(obj: Mapping[str, Any]) -> str:
    md = obj.get("metadata") or {}
    return f"{md.get('namespace', '')}/{md.get('name', '')}"


def _has_node(machine: Mapping[str, Any]) -> bool:
    return bool(((machine.get("status") or {}).get("nodeRef") or {}).get("name"))


def _gpu_pod(pod: Mapping[str, Any]) -> bool:
    return not is_daemonset_pod(pod) and pod_gpus(pod.get("spec") or {}) > 0


@dataclass
class WakeFilter:
    """Which watch events wake the daemon (see the module docstring).  `seed` with each list a watch starts from;
    `wakes` returns why an event wakes it, or None."""

    #: the class of the requests the daemon serves (`KubernetesSection.provisioning_class`): others never wake it
    provisioning_class: str = GPU_FLEET_CLASS
    ready: dict[str, bool] = field(default_factory=dict)  # node name -> Ready with GPUs at its last event
    pods: dict[str, PodState] = field(default_factory=dict)  # GPU pod key -> its state at its last event
    #: Machine key -> (had a nodeRef, had failed) at its last event
    machines: dict[str, tuple[bool, bool]] = field(default_factory=dict)

    def seed(self, resource: str, items: Iterable[Mapping[str, Any]]) -> None:
        if resource == NODES:
            self.ready = {_key(n): node_ready(n) for n in items}
        elif resource == PODS:
            self.pods = {_key(p): pod_state(p) for p in items if _gpu_pod(p)}
        elif resource == MACHINES:
            self.machines = {_key(m): (_has_node(m), machine_failed(m)) for m in items}

    def wakes(self, resource: str, event: str, obj: Mapping[str, Any]) -> str | None:
        if event not in ("ADDED", "MODIFIED", "DELETED"):
            return None  # BOOKMARK, ERROR: nothing changed
        key = _key(obj)
        if resource == PROVISIONING_REQUESTS:
            if (obj.get("spec") or {}).get("provisioningClassName") != self.provisioning_class:
                return None  # e.g. GKE's queued-provisioning class, served by GKE itself
            return {"ADDED": "request created", "DELETED": "request deleted"}.get(event)
        if resource == NODES:
            was = self.ready.pop(key, False)
            if event == "DELETED":
                return "node deleted"
            now = self.ready[key] = node_ready(obj)
            return "node ready" if now and not was else None
        if resource == MACHINES:
            had_node, had_failed = self.machines.pop(key, (False, False))
            if event == "DELETED":
                return None  # its Node's deletion wakes the daemon
            has_node, failed = self.machines[key] = (_has_node(obj), machine_failed(obj))
            if failed and not had_failed:
                return "machine failed"  # a launch that failed: its request is served again elsewhere
            return "machine has its node" if has_node and not had_node else None
        if resource == PODS and _gpu_pod(obj):
            before = self.pods.pop(key, None)
            if event == "DELETED":
                return "GPU pod deleted" if before in (PodState.BOUND, PodState.UNSCHEDULABLE) else None
            state = self.pods[key] = pod_state(obj)
            if state is before:
                return None
            if state is PodState.FINISHED:
                return "GPU pod finished"
            if state is PodState.UNSCHEDULABLE:
                return "GPU pod unschedulable"
        return None


def next_tick_at(
    now: float, *, next_poll: float, last_tick: float | None, woken: bool, min_gap_s: float = MIN_GAP_S
) -> float:
    """When the loop ticks next: the poll, or a wake-up at once but no sooner than `min_gap_s` after the last
    tick's start."""
    if not woken:
        return next_poll
    earliest = now if last_tick is None else max(now, last_tick + min_gap_s)
    return min(next_poll, earliest)


def next_poll_after(now: float, start: float, interval_s: float) -> float:
    """The first poll of the grid start + k * interval_s after `now` (the poll keeps its phase)."""
    k = math.floor((now - start) / interval_s) + 1
    return start + k * interval_s
