"""Standby nodes on the simulated Slurm, driven by the daemon's decision core (what tests/e2e/test_standby.py shows
on a real slurmctld): the standby node is powered up ahead of demand, a job starts on it without a boot, a
replacement is powered up, and SuspendExcNodes `<nodes>:<count>` keeps Slurm from powering the standby node down."""

from __future__ import annotations

from dataclasses import replace

from autoscaler.model import Policy
from autoscaler.replay.gpu_fleet import DEFAULT_POLICY, GpuFleetPolicy
from autoscaler.replay.run import replay_engine
from autoscaler.replay.scenario import Scenario
from autoscaler.replay.simslurm import SlurmSettings
from tests.replay.conftest import job

JOBS = [job(0, 100.0, 60.0, 1), job(1, 2500.0, 600.0, 1), job(2, 4000.0, 600.0, 1)]


def _run(exc: int) -> tuple[list[float], int]:
    policy: Policy = replace(DEFAULT_POLICY, idle_timeout_s=0.0, standby_by_machine={"a3-highgpu-1g": 1})
    slurm = SlurmSettings(suspend_time_s=120.0, suspend_exc_count=exc)
    eng = replay_engine(JOBS, Scenario(), GpuFleetPolicy(policy=policy, slurm=slurm)).run()
    waits = [j.first_start - j.submit for j in eng.state.jobs]
    return waits, eng.counters.nodes_launched


def test_a_job_starts_on_the_standby_node_and_the_replacement_is_the_only_extra_boot() -> None:
    waits, launched = _run(exc=1)
    # the replay starts a boot before the first job: that one finds the standby node still powering up
    assert waits[0] < 5.0 and waits[1:] == [0.0, 0.0]  # the later ones start on a standby node at once
    assert launched == 4  # the first standby node, then one replacement per job: no churn


def test_without_suspend_exc_nodes_slurm_powers_the_standby_node_down_and_it_churns() -> None:
    waits, launched = _run(exc=0)
    assert launched > 3  # suspended after SuspendTime idle, powered up again
    assert max(waits) > 0  # and not always up when a job comes
