"""Kueue's admission, for replays: ClusterQueue quotas, cohort borrowing and lending, gang admission.  Pure.

In a Kueue cluster a workload does not reach the autoscaler when it is submitted: Kueue first *admits* it
(reserves quota in its ClusterQueue), and only then does the ProvisioningRequest admission check ask the
autoscaler for nodes.  So on Kubernetes the wait a researcher sees is queueing for quota plus provisioning,
and the demand the autoscaler sees is shaped by the quotas.  This module is that gate, with the semantics of
Kueue's documentation (kueue.sigs.k8s.io, "Cluster Queue" and "Cohort"):

- a ClusterQueue has a `nominal` quota of GPUs; a workload is admitted when its CQ's usage plus the
  workload's GPUs fit in `nominal + borrowable`;
- in a cohort each CQ keeps `nominal - lending_limit` for itself (all of it lendable without a limit); the
  cohort's capacity is the sum of the lendable parts, and its usage the sum of each CQ's usage beyond its kept
  part: a workload fits when that usage stays within the capacity and the CQ stays within `nominal +
  borrowing_limit` (None: no cap);
- a workload is admitted whole or not at all (all its pods together: gang admission);
- `BestEffortFIFO` (Kueue's default queueing strategy): a workload that does not fit does not block the
  ones behind it in its queue; `StrictFIFO` does.  Within a queue: higher priority first, then older.
- Preemption (reclaimWithinCohort, withinClusterQueue) is not modelled: admitted workloads run to the end.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal


@dataclass(frozen=True)
class ClusterQueue:
    name: str
    nominal_gpus: int
    cohort: str | None = None
    borrowing_limit: int | None = None  # GPUs it may borrow at most (None: any the cohort lends)
    lending_limit: int | None = None  # GPUs of its nominal it lends at most (None: all of the unused)
    strategy: Literal["BestEffortFIFO", "StrictFIFO"] = "BestEffortFIFO"
    #: the ResourceFlavors its quota was summed from (a stack's output); empty: one quota over every pool
    flavors: tuple[str, ...] = ()


@dataclass(frozen=True)
class Workload:
    id: str
    queue: str  # ClusterQueue name
    gpus: int
    created: float
    priority: int = 0


@dataclass
class Admission:
    """The admission state of a replay: usage per ClusterQueue, the waiting workloads."""

    queues: dict[str, ClusterQueue]
    usage: dict[str, int] = field(default_factory=dict)
    waiting: dict[str, list[Workload]] = field(default_factory=dict)
    admitted: dict[str, Workload] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for q in self.queues:
            self.usage.setdefault(q, 0)
            self.waiting.setdefault(q, [])

    @classmethod
    def of(cls, queues: Iterable[ClusterQueue]) -> Admission:
        return cls({q.name: q for q in queues})

    def submit(self, w: Workload) -> None:
        if w.queue not in self.queues:
            raise ValueError(f"workload {w.id}: no ClusterQueue {w.queue!r} (known: {sorted(self.queues)})")
        self.waiting[w.queue].append(w)

    def finish(self, workload_id: str) -> None:
        w = self.admitted.pop(workload_id, None)
        if w is not None:
            self.usage[w.queue] -= w.gpus

    @staticmethod
    def guaranteed(q: ClusterQueue) -> int:
        """The part of `q`'s nominal quota it never lends (nominal - lending limit)."""
        return 0 if q.lending_limit is None else max(0, q.nominal_gpus - q.lending_limit)

    def _cohort_use(self, cohort: str, override: tuple[str, int] | None = None) -> tuple[int, int]:
        """(cohort capacity, cohort usage): what its queues put in, and what is used beyond the guaranteed parts."""
        cap = use = 0
        for o in self.queues.values():
            if o.cohort != cohort:
                continue
            g = self.guaranteed(o)
            u = override[1] if override and override[0] == o.name else self.usage[o.name]
            cap += o.nominal_gpus - g
            use += max(0, u - g)
        return cap, use

    def fits(self, w: Workload) -> bool:
        q = self.queues[w.queue]
        after = self.usage[q.name] + w.gpus
        if q.cohort is None:
            return after <= q.nominal_gpus
        if q.borrowing_limit is not None and after > q.nominal_gpus + q.borrowing_limit:
            return False
        cap, use = self._cohort_use(q.cohort, (q.name, after))
        return use <= cap

    def admit(self) -> list[Workload]:
        """Admit every waiting workload that fits now, queue by queue in priority-then-age order."""
        out: list[Workload] = []
        progress = True
        while progress:  # an admission can change what a cohort lends: go round until nothing moves
            progress = False
            for name in sorted(self.queues):
                q = self.queues[name]
                queue = sorted(self.waiting[name], key=lambda w: (-w.priority, w.created, w.id))
                keep: list[Workload] = []
                blocked = False
                for w in queue:
                    if not blocked and self.fits(w):
                        self.usage[name] += w.gpus
                        self.admitted[w.id] = w
                        out.append(w)
                        progress = True
                    else:
                        keep.append(w)
                        if q.strategy == "StrictFIFO":
                            blocked = True
                self.waiting[name] = keep
        return out


def split_teams(
    job_ids: Sequence[str], teams: int, seed: int
) -> dict[str, str]:  # job id -> ClusterQueue name ("team-1" ...)
    """A seeded, even assignment of a trace's jobs to `teams` ClusterQueues (the ITP trace has no users)."""
    import random

    rng = random.Random(seed)
    return {j: f"team-{rng.randrange(teams) + 1}" for j in job_ids}


def even_queues(
    teams: int, total_gpus: int, *, cohort: str | None = "research", borrowing_limit: int | None = None
) -> list[ClusterQueue]:
    """`teams` ClusterQueues sharing `total_gpus` of nominal quota evenly, in one cohort."""
    base, extra = divmod(total_gpus, teams)
    return [
        ClusterQueue(f"team-{i + 1}", base + (1 if i < extra else 0), cohort, borrowing_limit) for i in range(teams)
    ]
