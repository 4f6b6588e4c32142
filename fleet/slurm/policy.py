"""A Slurm cluster's autoscaler policy as the daemon will read it, for the parts of the render that follow it
(SuspendTime, SuspendExcNodes counts, preemption)."""

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
