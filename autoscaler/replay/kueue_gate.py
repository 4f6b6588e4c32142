"""Kueue's admission in front of a replay: which trace jobs reach the autoscaler, and when.  Pure.

On Kubernetes with Kueue a submitted workload waits for *quota* before anything provisions for it: Kueue admits
it (reserves quota in its team's ClusterQueue, borrowing from the cohort when the other teams are idle), and
only an admitted workload gets a ProvisioningRequest, i.e. reaches the autoscaler.  `fleet simulate --scheduler
kueue` replays a trace behind this gate (`KueueGate`, consulted by the engine when jobs arrive and when jobs
end), with the semantics of `autoscaler.replay.kueue_admission` (quota, cohort borrowing / lending limits, gang
admission of the whole workload, BestEffortFIFO).  A job's wait is then quota (submission -> admission) plus
provisioning (admission -> start), reported apart.

Setup (`KueueSetup`): jobs go to `teams` ClusterQueues by a seeded draw (the ITP trace has no users); the teams
share `quota_gpus` of nominal GPU quota evenly, in one cohort, each borrowing at most `borrowing_limit` GPUs
(None: whatever the cohort lends).  Default quota (`default_quota_gpus`): the trace's p95 concurrent GPU
demand (time-weighted, every job running from its submission), rounded up to whole 8-GPU nodes and at least
the largest job: quota cuts the demand peaks, not the typical load.  Or the ClusterQueues a stack declares:
`--kueue-queues FILE`, the stack output `clusters.<name>.kueue_queues` (`queues_from_output`).

`admitted_schedule` is the gate with instant capacity (each admitted job starts at once): the admitted demand
no autoscaler can beat, which the run's lower bound is computed over (docs/simulate.md says why)."""

from __future__ import annotations

import dataclasses
import heapq
import math
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from autoscaler.replay.kueue_admission import Admission, ClusterQueue, Workload, even_queues
from autoscaler.replay.trace import TraceJob


class KueueSetupError(ValueError):
    """A Kueue setup the replay cannot use; the message starts with the flag (or file) and says why."""


class _Job(Protocol):
    @property
    def id(self) -> str: ...

    @property
    def submit(self) -> float: ...

    @property
    def gpus(self) -> int: ...


@dataclass(frozen=True)
class KueueSetup:
    """The Kueue side of a replay (`fleet simulate --kueue-*`)."""

    teams: int = 2
    quota_gpus: int | None = None  # None: `default_quota_gpus` of the trace
    borrowing_limit: int | None = None  # GPUs a team may borrow beyond its nominal (None: no cap)
    queues: tuple[ClusterQueue, ...] = ()  # from a stack's output (--kueue-queues); replaces teams / quota
    queues_source: str | None = None
    seed: int = 0

    def build(self, jobs: Sequence[TraceJob]) -> tuple[list[ClusterQueue], dict[str, str], str]:
        """(ClusterQueues, job id -> queue name, how the quota was chosen).  Every job must be admissible in its
        queue some day (it fits the most its queue can ever hold), else `KueueSetupError`."""
        if self.queues:
            queues = list(self.queues)
            rule = f"ClusterQueues of {self.queues_source or 'the stack output'}"
        else:
            if self.teams < 1:
                raise KueueSetupError(f"--kueue-teams: must be >= 1, got {self.teams}")
            if self.borrowing_limit is not None and self.borrowing_limit < 0:
                raise KueueSetupError(f"--kueue-borrowing-limit: must be >= 0 GPUs, got {self.borrowing_limit}")
            if self.quota_gpus is None:
                quota, rule = default_quota_gpus(jobs), "p95 concurrent demand of the trace, whole 8-GPU nodes"
            else:
                quota, rule = self.quota_gpus, "--kueue-quota-gpus"
            if quota < self.teams:
                raise KueueSetupError(
                    f"--kueue-quota-gpus: {quota} GPUs cannot give each of {self.teams} teams a nominal quota"
                )
            queues = even_queues(self.teams, quota, borrowing_limit=self.borrowing_limit)
        names = [q.name for q in queues]
        rng = random.Random(self.seed)
        team_of = {j.id: names[rng.randrange(len(names))] for j in sorted(jobs, key=lambda j: (j.submit, j.id))}
        by_name = {q.name: q for q in queues}
        for j in jobs:
            q = by_name[team_of[j.id]]
            most = reach(q, queues)
            if j.gpus > most:
                flag = self.queues_source or (
                    "--kueue-borrowing-limit"
                    if self.borrowing_limit is not None
                    else "--kueue-quota-gpus"
                    if self.quota_gpus is not None
                    else "--kueue-teams"
                )
                raise KueueSetupError(
                    f"{flag}: job {j.id} needs {j.gpus} GPUs, more than ClusterQueue {q.name} can ever admit "
                    f"({most} GPUs: nominal {q.nominal_gpus} + what it may borrow); Kueue would leave it pending "
                    "for ever"
                )
        return queues, team_of, rule


def reach(q: ClusterQueue, queues: Sequence[ClusterQueue]) -> int:
    """The most GPUs `q` can hold: its nominal plus what the rest of its cohort lends, up to its borrowing limit."""
    if q.cohort is None:
        return q.nominal_gpus
    lent = sum(
        o.nominal_gpus if o.lending_limit is None else min(o.lending_limit, o.nominal_gpus)
        for o in queues
        if o.cohort == q.cohort and o.name != q.name
    )
    borrow = lent if q.borrowing_limit is None else min(lent, q.borrowing_limit)
    return q.nominal_gpus + borrow


def concurrent_demand_percentile(jobs: Iterable[TraceJob], q: float) -> float:
    """The `q`-th percentile over time of the GPUs demanded (every job running from its submission)."""
    events: list[tuple[float, int]] = []
    for j in jobs:
        events += [(j.submit, j.gpus), (j.submit + j.duration, -j.gpus)]
    if not events:
        return 0.0
    events.sort()
    level = 0
    spans: dict[int, float] = {}
    prev = events[0][0]
    for t, d in events:
        if t > prev:
            spans[level] = spans.get(level, 0.0) + (t - prev)
            prev = t
        level += d
    total = sum(spans.values())
    if total <= 0:
        return float(max(j.gpus for j in jobs))  # type: ignore[union-attr]
    acc = 0.0
    for lv in sorted(spans):
        acc += spans[lv]
        if acc >= total * q / 100.0:
            return float(lv)
    return float(max(spans))


def default_quota_gpus(jobs: Sequence[TraceJob], node_gpus: int = 8) -> int:
    """The trace's p95 concurrent GPU demand, rounded up to whole `node_gpus` nodes, at least the largest job."""
    p95 = concurrent_demand_percentile(jobs, 95)
    biggest = max((j.gpus for j in jobs), default=node_gpus)
    return max(node_gpus, math.ceil(max(p95, biggest) / node_gpus) * node_gpus)


@dataclass
class KueueGate:
    """The admission gate a replay engine consults: `arrive` when a job is submitted, `finish` when it ends,
    `admit` once per instant after those, and again after the autoscaler decided (returns the jobs whose pods
    exist now: to be submitted to the cluster, in admission order).

    `admission_check=False`: a workload's pods are created once its quota is reserved (Kueue without admission
    checks; Cluster Autoscaler and Karpenter then scale on the unschedulable pods).  `admission_check=True`: the
    ProvisioningRequest check (`ProvisioningRequestConfig`): a workload with quota reserved waits in `checking`
    (its ProvisioningRequest is out) until the autoscaler calls `provisioned(job_id)`, and only then is it
    admitted and its pods created."""

    queues: list[ClusterQueue]
    team_of: Mapping[str, str]
    admission_check: bool = False
    admission: Admission = field(init=False)
    admitted_at: dict[str, float] = field(default_factory=dict)  # job id -> quota reserved (Kueue's admission)
    checking: dict[str, Any] = field(default_factory=dict)  # job id -> job: quota reserved, request not provisioned
    #: with the admission check, the jobs that finished since the autoscaler last took them (`take_finished`):
    #: the pods of their requests succeeded, which the daemon times (`autoscaler.kube.runs`)
    finished: list[Any] = field(default_factory=list)
    _jobs: dict[str, Any] = field(default_factory=dict)
    _released: list[Any] = field(default_factory=list)
    _dirty: bool = False

    def __post_init__(self) -> None:
        self.admission = Admission.of(self.queues)

    def arrive(self, job: _Job, now: float) -> None:
        self._jobs[job.id] = job
        self.admission.submit(Workload(job.id, self.team_of[job.id], job.gpus, job.submit))
        self._dirty = True

    def finish(self, job: _Job) -> None:
        """The workload finished: its quota is free for the next ones."""
        if job.id in self.admission.admitted:
            self.admission.finish(job.id)
            self._dirty = True
        if self.admission_check:
            self.finished.append(job)

    def take_finished(self) -> list[Any]:
        """The jobs that finished since the last call (with the admission check; none without)."""
        out, self.finished = self.finished, []
        return out

    def provisioned(self, job_id: str) -> None:
        """The autoscaler answered the workload's ProvisioningRequest Provisioned: Kueue admits it, pods follow."""
        job = self.checking.pop(job_id, None)
        if job is not None:
            self._released.append(job)

    def admit(self, now: float) -> tuple[list[Any], bool]:
        """(jobs whose pods exist now, in admission order; whether any workload got quota or passed its check)."""
        out, self._released = self._released, []
        news = bool(out)
        if not self._dirty:
            return out, news
        self._dirty = False
        for w in self.admission.admit():
            news = True
            self.admitted_at[w.id] = now
            job = self._jobs.pop(w.id)
            if self.admission_check:
                self.checking[w.id] = job
            else:
                out.append(job)
        return out, news

    @property
    def waiting(self) -> int:
        return sum(len(ws) for ws in self.admission.waiting.values())

    def usage(self) -> dict[str, int]:
        return dict(self.admission.usage)


def admitted_schedule(
    jobs: Sequence[TraceJob], queues: list[ClusterQueue], team_of: Mapping[str, str]
) -> list[TraceJob]:
    """The trace as Kueue would release it if capacity were instant: each job with `submit` = its admission time
    (the gate replayed with every admitted job starting at once and ending `duration` later)."""
    gate = KueueGate(queues, team_of)
    order = sorted(jobs, key=lambda j: (j.submit, j.id))
    ends: list[tuple[float, int, TraceJob]] = []
    out: list[TraceJob] = []
    i = seq = 0
    while i < len(order) or ends:
        t = min(order[i].submit if i < len(order) else math.inf, ends[0][0] if ends else math.inf)
        while ends and ends[0][0] <= t:
            gate.finish(heapq.heappop(ends)[2])
        while i < len(order) and order[i].submit <= t:
            gate.arrive(order[i], t)
            i += 1
        for j in gate.admit(t)[0]:
            out.append(dataclasses.replace(j, submit=t))
            seq += 1
            heapq.heappush(ends, (t + j.duration, seq, j))
    return out


def queues_from_output(data: Any, source: str) -> list[ClusterQueue]:
    """ClusterQueues from a stack's `clusters.<name>.kueue_queues` output (a list per team: cohort, and per flavor
    nominal / borrowing / lending GPUs).  Accepts the list itself, `{"kueue_queues": [...]}`, or the stack outputs
    (`{"clusters": {...}}`, optionally under `"outputs"`).  A team's GPUs are summed over its flavors (the replay
    has one GPU resource); a limit is None when any flavor has none."""
    rows = _find_rows(data, source)
    if not isinstance(rows, list) or not rows:
        raise KueueSetupError(f"{source}: kueue_queues: expected a non-empty list of teams")
    out: list[ClusterQueue] = []
    for i, row in enumerate(rows):
        where = f"{source}: kueue_queues[{i}]"
        if not isinstance(row, dict):
            raise KueueSetupError(f"{where}: expected an object, got {type(row).__name__}")
        name = row.get("cluster_queue") or row.get("team")
        if not isinstance(name, str) or not name:
            raise KueueSetupError(f"{where}: cluster_queue: missing")
        flavors = row.get("flavors")
        if not isinstance(flavors, dict) or not flavors:
            raise KueueSetupError(f"{where}.flavors: expected an object of flavors with nominal_gpus")
        nominal, borrow, lend = 0, 0, 0
        borrow_none = lend_none = False
        for fname, f in flavors.items():
            fw = f"{where}.flavors.{fname}"
            if not isinstance(f, dict):
                raise KueueSetupError(f"{fw}: expected an object")
            nominal += _gpus(f.get("nominal_gpus"), f"{fw}.nominal_gpus", required=True)
            b = _gpus(f.get("borrowing_limit_gpus"), f"{fw}.borrowing_limit_gpus")
            lv = _gpus(f.get("lending_limit_gpus"), f"{fw}.lending_limit_gpus")
            borrow_none |= f.get("borrowing_limit_gpus") is None
            lend_none |= f.get("lending_limit_gpus") is None
            borrow += b
            lend += lv
        cohort = row.get("cohort")
        if cohort is not None and not isinstance(cohort, str):
            raise KueueSetupError(f"{where}.cohort: expected a string or null")
        borrowing, lending = None if borrow_none else borrow, None if lend_none else lend
        out.append(ClusterQueue(name, nominal, cohort, borrowing, lending, flavors=tuple(flavors)))
    names = [q.name for q in out]
    if len(set(names)) != len(names):
        raise KueueSetupError(f"{source}: kueue_queues: duplicate ClusterQueue names {sorted(names)}")
    if sum(q.nominal_gpus for q in out) < 1:
        raise KueueSetupError(f"{source}: kueue_queues: no nominal GPU quota at all")
    return out


def _gpus(value: Any, where: str, *, required: bool = False) -> int:
    if value is None:
        if required:
            raise KueueSetupError(f"{where}: missing")
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise KueueSetupError(f"{where}: expected a whole number of GPUs >= 0, got {value!r}")
    return value


def _find_rows(data: Any, source: str) -> Any:
    if isinstance(data, list):
        return data
    if not isinstance(data, dict):
        raise KueueSetupError(f"{source}: expected the kueue_queues list or the stack outputs object")
    if "kueue_queues" in data:
        return data["kueue_queues"]
    clusters = (data.get("outputs") or data).get("clusters") if isinstance(data.get("outputs") or data, dict) else None
    if not isinstance(clusters, dict):
        raise KueueSetupError(f"{source}: no kueue_queues and no clusters.<name>.kueue_queues in it")
    with_queues = {n: c for n, c in clusters.items() if isinstance(c, dict) and "kueue_queues" in c}
    if len(with_queues) != 1:
        raise KueueSetupError(
            f"{source}: {len(with_queues)} clusters with kueue_queues ({sorted(with_queues)}): the file must hold one"
        )
    return next(iter(with_queues.values()))["kueue_queues"]
