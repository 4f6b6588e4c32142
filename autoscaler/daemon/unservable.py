"""Jobs no managed pool can ever serve, however much capacity the cloud has: explained once, counted always.

A job submitted with `-N 100` to a partition whose pools hold 16 nodes, or asking 16 GPUs per node of
8-GPU machines, or sent to a partition no pool serves, waits forever (Slurm reports PartitionNodeLimit /
PartitionConfig / Resources).  Waiting for capacity cannot help, so the daemon logs one WARNING per job
with the reason (not one per tick) and exports `gpu_fleet_autoscaler_unservable_jobs{reason}`.
`why_unservable` is pure; `UnservableJobs` remembers which jobs were already reported.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from loguru import logger

from autoscaler.daemon.metrics import Metrics
from autoscaler.model import Pool, WorkUnit


def why_unservable(unit: WorkUnit, pools: Sequence[Pool]) -> tuple[str, str] | None:
    """(reason, detail) when no pool could serve `unit` even with every node free; None when one could."""
    serving = [p for p in pools if p.serves(unit.queue)]
    if not serving:
        return "no-pool", f"no managed pool serves partition {unit.queue!r}"
    typed = [p for p in serving if unit.gpu_types is None or p.gpu_type in unit.gpu_types]
    if unit.machine_types is not None:
        typed = [p for p in typed if p.machine_type in unit.machine_types]
    if not typed:
        return "no-gpu-type", (
            f"the pools serving {unit.queue!r} ({', '.join(sorted(p.name for p in serving))}) have none of the"
            f" requested GPU / machine types"
        )
    fit = [p for p in typed if p.gpus_per_node >= unit.gpus_per_node]
    if not fit:
        most = max(p.gpus_per_node for p in typed)
        return "too-many-gpus-per-node", f"needs {unit.gpus_per_node} GPUs per node; the pools have at most {most}"
    big = max(p.max_nodes for p in fit)
    if unit.nodes > big:
        names = ", ".join(sorted(p.name for p in fit))
        return (
            "too-many-nodes",
            f"needs {unit.nodes} nodes; the largest pool serving {unit.queue!r} ({names}) has {big}",
        )
    return None


class UnservableJobs:
    def __init__(self) -> None:
        self.reported: set[str] = set()

    def update(self, pending: Sequence[WorkUnit], pools: Sequence[Pool], metrics: Metrics) -> dict[str, str]:
        """Log newly seen unservable units once, export the gauge; returns unit id -> reason for this tick."""
        now: dict[str, str] = {}
        for u in pending:
            why = why_unservable(u, pools)
            if why is None:
                continue
            reason, detail = why
            now[u.id] = reason
            if u.id not in self.reported:
                logger.bind(unit=u.id, reason=reason, partition=u.queue).warning(
                    "{} can never be served by the managed pools: {} (reported once)", u.id, detail
                )
        self.reported = set(now)  # a job that left the queue and comes back is reported again
        metrics.unservable_jobs.clear()
        for reason, n in Counter(now.values()).items():
            metrics.unservable_jobs.labels(reason=reason).set(n)
        return now
