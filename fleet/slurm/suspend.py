"""The shortest SuspendTime a Slurm cluster may have: the settings rule's longest idle keep plus one daemon tick.

slurmctld powers a CLOUD node down after SuspendTime idle, whatever the autoscaler daemon means to keep.  The
settings rule (`autoscaler.planner.rule`) keeps an idle node of a shape for at most its break-even time
T = boot * (1 + w / p) (`break_even_idle_s`: boot = the catalog's boot-to-ready time, p = the shape's on-demand
$/GPU-hour in the spec's region, w = the cluster's `autoscaler.policy.wait_value_usd_per_gpu_hour`).  That bound
is static given the spec, so the rendered SuspendTime is at least the longest T over the cluster's pools (the
rule's `longest_idle_keep_s`, which the replay's SuspendTime reads too) plus one daemon tick (the daemon acts on
its own keep at its next poll); a spec that sets a shorter `slurm.suspend_time` is refused
(`fleet.spec.rules.slurm_suspend_time`).  Reservation pools are left out: they are in SuspendExcNodes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from autoscaler.model.policy import DEFAULT_WAIT_VALUE_USD_PER_GPU_HOUR, Policy
from autoscaler.planner.rule import FleetFacts, ShapeFacts, break_even_idle_s, longest_idle_keep_s
from fleet.catalog import CapacityType, Catalog
from fleet.slurm.policy import cluster_policy
from fleet.spec.model import ClusterSpec, FleetSpec

#: the daemon's poll interval (autoscaler/daemon/config.py `LoopConfig.interval_s` default; a test checks they agree)
DAEMON_TICK_S = 10.0


@dataclass(frozen=True)
class SuspendFloor:
    """The shortest SuspendTime for a cluster, and where it comes from."""

    seconds: int  # ceil(longest keep + tick); 0 when no pool is ever suspended
    longest_keep_s: float
    machine_type: str | None  # the shape with the longest keep
    boot_s: float
    wait_value: float | None  # $/GPU-h; None: each shape's own on-demand price

    def explain(self) -> str:
        if self.machine_type is None:
            return "no pool is ever powered down"
        w = "each shape's on-demand price" if self.wait_value is None else f"{self.wait_value:g} $/GPU-h"
        return (
            f"the settings rule keeps an idle {self.machine_type} up to {self.longest_keep_s:.0f} s "
            f"(boot {self.boot_s:g} s x (1 + wait value / price), wait value {w}) + one {DAEMON_TICK_S:g} s daemon "
            f"tick = {self.seconds} s"
        )


def _wait_value(cluster: ClusterSpec) -> float | None:
    policy = cluster_policy(cluster)
    return DEFAULT_WAIT_VALUE_USD_PER_GPU_HOUR if policy is None else policy.wait_value_usd_per_gpu_hour


def suspend_floor(spec: FleetSpec, cluster: ClusterSpec, catalog: Catalog) -> SuspendFloor:
    """The shortest SuspendTime for `cluster` (see the module docstring): the rule's `longest_idle_keep_s` over
    the cluster's non-reservation machine types (the same function the replay's SuspendTime reads)."""
    w = _wait_value(cluster)
    shapes: dict[str, ShapeFacts] = {}
    boot = 0.0
    for pool in cluster.pools:
        if pool.capacity is CapacityType.RESERVATION:
            continue
        m = catalog.machine(pool.machine_type)
        price = m.price(spec.region)
        if price is None or price.on_demand <= 0:
            continue
        shapes[m.name] = ShapeFacts(m.name, m.gpu_count, price.on_demand)
        boot = max(boot, m.ready_s)
    if not shapes:
        return SuspendFloor(0, 0.0, None, 0.0, w)
    facts = FleetFacts(boot_s=boot, shapes=tuple(shapes.values()), wait_value_usd_per_gpu_hour=w)
    keep = longest_idle_keep_s(facts)
    machine = max(facts.shapes, key=lambda s: break_even_idle_s(boot, s.usd_per_gpu_hour, facts.wait_value(s)))
    return SuspendFloor(math.ceil(keep + DAEMON_TICK_S), keep, machine.machine_type, boot, w)


def suspend_time(spec: FleetSpec, cluster: ClusterSpec, catalog: Catalog) -> int:
    """The SuspendTime `fleet render slurm-conf` writes: the spec's `slurm.suspend_time`, else the floor (never
    under 60 s, the spec's own minimum)."""
    assert cluster.slurm is not None
    if cluster.slurm.suspend_time is not None:
        return cluster.slurm.suspend_time
    return max(60, suspend_floor(spec, cluster, catalog).seconds)


def standby_exclusion(cluster: ClusterSpec) -> int:
    """How many idle nodes of each on-demand pool slurmctld must not power down (SuspendExcNodes
    `<pool's nodes>:<count>`): the daemon's `standby_max_nodes` when the cluster values waiting (its standby nodes,
    `autoscaler.planner.standby`, idle longer than SuspendTime by design), else 0.  Slurm 22.05 keeps that many
    usable idle nodes of the range up (tests/e2e/test_standby.py); the daemon deletes the ones it does not keep."""
    policy = cluster_policy(cluster)
    return 0 if policy is None else standby_exclusion_count(policy)


def standby_exclusion_count(policy: Policy) -> int:
    """The SuspendExcNodes count of each on-demand pool for a daemon running `policy` (`standby_exclusion`; the
    replay's simulated Slurm reads the same): its `standby_max_nodes` when it values waiting, else 0."""
    w = policy.wait_value_usd_per_gpu_hour
    return policy.standby_max_nodes if w is None or w > 0 else 0
