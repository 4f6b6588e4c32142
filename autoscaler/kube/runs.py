"""Workload runs the Kubernetes daemon observes: how long each ProvisioningRequest's workload ran.  Pure.

The settings rule wants the mean run of the work it has seen (`autoscaler.core.settings`: the reservation hold,
the warm cap bounded by runs, and `expected_run_s`, with which the planner prices a spot-tolerant workload on a
running on-demand node against a spot node of its own).  The Slurm daemon reads it from squeue; here it comes
from the pods Kueue releases once a request is Provisioned.  Kueue's ProvisioningRequest admission check puts
the request's name on every pod of the workload (`autoscaler.kube.source.consumed_request`: the `PodSetUpdates`
annotation `autoscaling.x-k8s.io/consume-provisioning-request`, or the older `cluster-autoscaler.kubernetes.io`
key), so the pods of one request are one workload:

- it **started** at the earliest `status.startTime` of its pods that have not failed (the kubelet's, so a run
  shorter than the daemon's poll is still timed from its real start; a failed attempt's pods do not count);
- it **ended** once every pod of it has finished and one succeeded, at the latest `finishedAt` of their
  terminated containers (the poll's time when none says);
- its **run** is end minus start, reported once (`ended_at` is the poll that saw it, as the Slurm daemon's
  history has the tick that found a job gone from squeue).

What is not a run: a workload whose pods all failed (a spot node reclaimed, a crash: Kueue or the Job
controller runs it again, as Slurm's requeued job stays in the queue), and one whose pods vanished before the
daemon saw them finish (the pod garbage collector deletes the pods of a deleted node, so a reclaimed spot node
looks like this; a Job's finished pods stay listed until the Job goes, `ttlSecondsAfterFinished` included, so a
completed workload is seen unless its TTL is shorter than the poll).  Its start is forgotten; the next pods of
the request start it afresh.

The watch lives in the leading replica's memory and needs no hand-on: a run is timed from the pods' own
`startTime` and `finishedAt`, which a new leader reads as well (the runs already reported ride on the Lease with
the arrivals, `autoscaler.kube.leader_state`, and a second report of one is ignored: `ArrivalLog.ended`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from autoscaler.kube.source import consumed_request, finished, ts


@dataclass(frozen=True)
class Run:
    """A workload that ended: the request it consumed (`pr/<namespace>/<name>`), when it was seen ended, its run."""

    key: str
    ended_at: float
    run_s: float


def _finished_at(pod: Mapping[str, Any]) -> float:
    """The latest `finishedAt` of the pod's terminated containers (0 when none says)."""
    st = pod.get("status") or {}
    ends = [
        ts(((c.get("state") or {}).get("terminated") or {}).get("finishedAt"))
        for c in (st.get("containerStatuses") or [])
    ]
    return max(ends, default=0.0)


@dataclass
class RunWatch:
    """The runs of the workloads seen, from the pods read at each poll (see the module docstring)."""

    started: dict[str, float] = field(default_factory=dict)  # request key -> its workload's start
    reported: set[str] = field(default_factory=set)  # request keys whose run was reported, pods still listed

    def observe(self, pods: Iterable[Mapping[str, Any]], now: float) -> list[Run]:
        """The runs that ended by this poll, each reported once; `pods`: every pod the poll read."""
        by_request: dict[str, list[Mapping[str, Any]]] = {}
        for p in pods:
            key = consumed_request(p)
            if key is not None:
                by_request.setdefault(key, []).append(p)
        runs: list[Run] = []
        for key, mine in by_request.items():
            if key in self.reported:
                continue
            live = [p for p in mine if (p.get("status") or {}).get("phase") != "Failed"]
            starts = [s for s in (ts((p.get("status") or {}).get("startTime")) for p in live) if s > 0]
            if starts:
                self.started[key] = min(starts)  # the current attempt's pods: a failed one's do not count
            if key not in self.started or not all(finished(p) for p in mine):
                continue
            start = self.started.pop(key)
            if not live:
                continue  # not a run: reclaimed or crashed, to be run again
            end = max((_finished_at(p) for p in live), default=0.0) or now
            runs.append(Run(key, now, max(0.0, end - start)))
            self.reported.add(key)
        for key in [k for k in self.started if k not in by_request]:  # gone before they were seen to finish
            del self.started[key]
        self.reported &= set(by_request)  # nothing of it listed any more: nothing to report twice
        return runs
