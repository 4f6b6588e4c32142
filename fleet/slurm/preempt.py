"""Partition-priority preemption of spot-tolerant work off reserved capacity: when `fleet render slurm-conf`
renders it, and with which PriorityTier per partition.

A reservation is paid for whether used or not, so it should serve the work whose alternative is dearest: jobs
that may not run on spot.  Spot-tolerant jobs take reserved nodes first-come (the reservation has the lowest
Weight), so on a busy cluster an on-demand-only job finds the reservation full of work that could have run on
spot, and overflows to on-demand capacity.  Slurm's own answer is partition-priority preemption (slurm.conf(5),
PreemptType, PreemptMode, PartitionName PriorityTier; https://slurm.schedmd.com/preempt.html): a job in a
partition of a higher PriorityTier requeues jobs of lower-tier partitions off the nodes the two share.  So with
`Policy.preempt_spot` (the default) and a reservation pool that a spot-tolerant partition shares with one that is
not, the render writes `PreemptType=preempt/partition_prio`, `PreemptMode=REQUEUE`, PriorityTier 1 on
spot-tolerant partitions and 10 on the others, and `preempt_youngest_first` in SchedulerParameters.

Which spot-tolerant job goes first: by default slurmctld 22.05 requeues the earliest submitted candidate (measured,
whatever the nodes' order or the jobs' start times: bench/probe_preempt_order.py).  A requeued job resumes from its
last checkpoint, so what preemption destroys is the work since then: at most the job's run so far, and at most one
checkpoint interval.  The job that started last has run the least, so it has the least to lose;
`SchedulerParameters=preempt_youngest_first` ("sort by the job start times to favor preempting younger jobs over
older", slurm.conf(5) of 22.05; later releases read it there too, and also as `PreemptParameters=youngest_first`,
a key 22.05's slurmctld refuses) picks it.  A site's own SchedulerParameters (`slurm.extra_config`) are merged
with it (`fleet.slurm.options`).  Replayed on the res40 runs (docs/simulate.md):
cluster04 x1.1366 -> x1.1269, cluster07 x1.0596 -> x1.0513 against the default order.

slurmctld preempts only for a job that cannot start otherwise, and a powered-down CLOUD node counts as otherwise
(measured on 22.05: bench/probe_preempt_reservation.py), so the daemon holds the on-demand overflow pools
(`autoscaler.core.hold.held_pools`) and releases a name at its next tick to a job that preemption could not
place.  A requeued job resumes from its checkpoint; one that cannot be requeued (`--no-requeue`, an interactive
`srun`) is cancelled, as a spot VM's preemption would end it: spot-tolerant partitions are for checkpointing
batch work.  Pure: the render and the spec rules call it."""

from __future__ import annotations

from fleet.catalog import CapacityType
from fleet.slurm.policy import cluster_policy
from fleet.spec.model import ClusterSpec

#: PriorityTier of spot-tolerant partitions and of every other partition when preemption is rendered
SPOT_TIER = 1
OTHER_TIER = 10
#: the victim order: the job that started last first (module doc)
YOUNGEST_FIRST = "preempt_youngest_first"


def shared_reservation_pools(cluster: ClusterSpec) -> tuple[str, ...]:
    """Reservation pools that both a spot-tolerant partition and a partition that is not spot-tolerant use: the
    capacity preemption can hand from spot-tolerant work to the rest."""
    if cluster.slurm is None:
        return ()
    reserved = {p.name for p in cluster.pools if p.capacity is CapacityType.RESERVATION}
    spot = {p for part in cluster.slurm.partitions if part.spot_tolerant for p in part.pools}
    other = {p for part in cluster.slurm.partitions if not part.spot_tolerant for p in part.pools}
    return tuple(sorted(reserved & spot & other))


def preempts_spot(cluster: ClusterSpec) -> bool:
    """True when the render writes partition-priority preemption for `cluster` (module doc)."""
    policy = cluster_policy(cluster)
    return policy is not None and policy.preempt_spot and bool(shared_reservation_pools(cluster))


def preemption_settings(cluster: ClusterSpec) -> dict[str, str]:
    """The slurm.conf keys preemption adds (none when `preempts_spot` is False)."""
    if not preempts_spot(cluster):
        return {}
    return {
        "PreemptType": "preempt/partition_prio",
        "PreemptMode": "REQUEUE",
        "SchedulerParameters": YOUNGEST_FIRST,
    }


def partition_tiers(cluster: ClusterSpec) -> dict[str, int]:
    """Partition name -> its PriorityTier under preemption; empty when preemption is not rendered (Slurm's default
    tier, 1, for all)."""
    if cluster.slurm is None or not preempts_spot(cluster):
        return {}
    return {p.name: SPOT_TIER if p.spot_tolerant else OTHER_TIER for p in cluster.slurm.partitions}
