"""A Slurm cluster's autoscaler policy as the daemon will read it, for the parts of the render that follow it
(SuspendTime, SuspendExcNodes counts, preemption, and the job_submit.lua's hard constraint under strict late
binding)."""

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
