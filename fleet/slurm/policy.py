"""A Slurm cluster's autoscaler policy as the daemon will read it, for the parts of the render that follow it
(SuspendTime, SuspendExcNodes counts, preemption, under strict late binding the job_submit.lua's hard
constraint, and where the daemon may hold pools the lua's submit wake-up and the scheduler's `batch_sched_delay`)."""

from __future__ import annotations

from autoscaler.model.policy import Policy, PolicyError, policy_from_mapping
from fleet.spec.model import ClusterSpec


def cluster_policy(cluster: ClusterSpec) -> Policy | None:
    """`slurm.autoscaler.policy` parsed; None when it does not parse (the spec rule `autoscaler_policy` reports
    that, naming the field)."""
    raw = cluster.slurm.autoscaler.policy if cluster.slurm is not None else {}
    try:
        return policy_from_mapping(raw)
    except PolicyError:
        return None


def late_binding_constrains(cluster: ClusterSpec) -> bool:
    """Whether the cluster's job_submit.lua pins each GPU job to its right-sized machine type with a hard
    `--constraint` (`fleet.slurm.job_submit`'s constrain mode) instead of `--prefer`: its policy turns strict late
    binding on (`late_bind`) and it has no reservation pool (the daemon holds every pool only then: reserved
    nodes, paid for anyway, are never held)."""
    policy = cluster_policy(cluster)
    return policy is not None and policy.binds_late(p.capacity for p in cluster.pools)


def gates_gangs(cluster: ClusterSpec) -> bool:
    """Whether the cluster's job_submit.lua holds each gang back for the daemon before slurmctld first tries it
    (`Policy.gates_gangs`, `autoscaler.slurm.gang_gate`): wherever strict late binding is off."""
    policy = cluster_policy(cluster)
    return policy is not None and policy.gates_gangs(p.capacity for p in cluster.pools)


def submit_wakes_daemon(cluster: ClusterSpec) -> bool:
    """Whether the cluster's job_submit.lua rewrites the daemon's wake-up file at every submission
    (`autoscaler.slurm.wake`): whenever the daemon may hold pools (`Policy.may_hold`), so that a job for a held pool
    is served within a second and not at the next poll, or gates gangs (`gates_gangs`), so that a gated gang is
    released within a second (`Policy.releases_jobs`; the daemon watches the file only while it holds a pool or
    gates gangs)."""
    policy = cluster_policy(cluster)
    return policy is not None and policy.releases_jobs(p.capacity for p in cluster.pools)


def late_binding_shares_nodes(cluster: ClusterSpec) -> bool:
    """Whether the constrain-mode job_submit.lua lets each job take every shape of its right-sized one's share group
    (`fleet.slurm.job_submit.share_groups`): strict late binding and the policy's `share_nodes`."""
    policy = cluster_policy(cluster)
    return late_binding_constrains(cluster) and policy is not None and policy.share_nodes


#: a held node booted for a pending job (late binding) starts it only at slurmctld's next scheduling pass after
#: the daemon undrains it, and 22.05 defers that pass by up to `batch_sched_delay` (3 s by default, slurm.conf(5):
#: "how long the scheduling of batch jobs can be delayed"), billed idle on a GPU node.  Measured on slurmctld
#: 22.05.8 in the late-binding flow (bench/late_bind_latency.py): a held boot's registration -> its job RUNNING,
#: 2.17 s and 2.23 s mean (12 and 8 boots, max 3.06 s) at the default, 0.99 s mean (max 1.07 s) with 0.  An
#: undrain of a node registered long before shows ~1.9 s either way (bench/probe_drain_transitions.py --what
#: undrain): the deferral comes with the boot's registration, not with every undrain.  A held powered-down name the
#: daemon releases (the reservation hold, the preemption hold) is allocated to its job 0.88-1.0 s after the undrain
#: with 0 (`--what release`, 6 rounds), 0.88-1.9 s at the default, so any cluster that may hold pools gets it.
#: The default exists for sites submitting hundreds of jobs a second; a site that does can set it back through
#: `slurm.extra_config` (its SchedulerParameters options win, fleet/slurm/options.py).
HOLD_SCHEDULER_OPTIONS = "batch_sched_delay=0"


def hold_settings(cluster: ClusterSpec) -> dict[str, str]:
    """The slurm.conf options a cluster whose daemon may release jobs to slurmctld (held pools' names, gated gangs:
    `Policy.releases_jobs`) adds, none otherwise: a job released by the daemon is allocated at slurmctld's next
    pass."""
    return {"SchedulerParameters": HOLD_SCHEDULER_OPTIONS} if submit_wakes_daemon(cluster) else {}
