"""OverSubscribe=EXCLUSIVE in the replay: where `fleet render slurm-conf` renders a partition so (every machine type
of it an 8-GPU one with GPU NICs, `fleet.slurm.conf.whole_node`), the simulated Slurm gives each job whole nodes and
the replayed daemon plans whole nodes for it, as slurmctld and the daemon do in production."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest

from autoscaler.replay.baselines import SlurmPowerSavePolicy
from autoscaler.replay.gpu_fleet import DEFAULT_POLICY, GpuFleetPolicy
from autoscaler.replay.scenario import Scenario
from autoscaler.replay.simslurm import SimSlurm, SlurmDriver
from autoscaler.replay.state import JobState
from fleet.catalog import load_catalog
from fleet.slurm.conf import whole_node
from tests.replay.conftest import job

MEGA = Scenario(machine_family="a3-megagpu", region="us-east4")
HIGH = Scenario()  # a3-highgpu: 1g, 2g, 4g and 8g (the 8g has GPUDirect-TCPX NICs) in one partition
SMALL = [job(i, 0, 600, 1) for i in range(8)]


def _gpu_fleet(sc: Scenario) -> SlurmDriver:
    return GpuFleetPolicy.for_scenario(sc)


def _power_save(sc: Scenario) -> SlurmDriver:
    return SlurmPowerSavePolicy()


def _assert_one_job_per_node(sim: SimSlurm) -> None:
    """Every job runs, alone, on a node of its own that it holds whole."""
    jobs = sim.state.jobs
    assert [j.state for j in jobs] == [JobState.RUNNING] * len(jobs)
    assert all(len(j.placed_on) == 1 for j in jobs)
    assert len({j.placed_on[0].name for j in jobs}) == len(jobs)  # no two jobs on one node
    assert all(list(j.placed_on[0].jobs) == [j.idx] and j.placed_on[0].free == 0 for j in jobs)


@pytest.mark.parametrize("make", [_gpu_fleet, _power_save], ids=["gpu-fleet", "slurm-power-save"])
def test_eight_one_gpu_jobs_on_a3_mega_get_eight_whole_nodes(make: Callable[[Scenario], SlurmDriver]) -> None:
    """`fleet render slurm-conf --stack gcp-a3mega-slurm` writes OverSubscribe=EXCLUSIVE on the a3-megagpu-8g
    partitions: slurmctld gives every job whole nodes (slurm.conf(5)), so 8 one-GPU jobs take 8 nodes, not one."""
    sim = SimSlurm(SMALL, MEGA, make(MEGA)).run(until=500)  # all running by then (boot 360 s, launch pass 390 s)
    _assert_one_job_per_node(sim)
    assert all(sim.exclusive(j) for j in sim.state.jobs)
    done = SimSlurm(SMALL, MEGA, make(MEGA)).run()
    assert done.counters.nodes_launched == 8


def test_slurm_power_save_on_the_default_family_takes_whole_a3_high_nodes() -> None:
    """slurm-power-save runs the family's 8-GPU type alone; a3-highgpu-8g has GPU NICs, so its partition is
    OverSubscribe=EXCLUSIVE too (Cluster Toolkit sets it on its A3 partitions)."""
    assert whole_node(load_catalog().machine("a3-highgpu-8g"))
    sim = SimSlurm(SMALL, HIGH, SlurmPowerSavePolicy()).run(until=500)
    _assert_one_job_per_node(sim)


def test_the_replayed_daemon_plans_one_whole_node_per_job_it_holds() -> None:
    """With a reservation and a batch window the daemon holds the overflow and launches for the pending jobs itself:
    it reads them as squeue shows them, taking their nodes whole (`WorkUnit.whole_node`, as the daemon's snapshot
    sets it from squeue's `shared`), and releases one node per job in one go, not one shared node."""
    sc = Scenario(machine_family="a3-megagpu", region="us-east4", reserved_nodes=1)
    d = GpuFleetPolicy(policy=replace(DEFAULT_POLICY, batch_window_s=60.0))
    sim = SimSlurm(SMALL, sc, d).run()
    launches = [(pool, len(names)) for _, _, pool, _, names, outcome in d.launch_log if outcome == "ok"]
    assert launches == [("a3-megagpu-8g-reserved", 1), ("a3-megagpu-8g-on-demand", 7)]
    assert sim.counters.nodes_launched == 8


def test_a_job_that_may_not_use_spot_takes_back_a_reserved_node_a_spot_job_holds_whole() -> None:
    """Partition-priority preemption (`Policy.preempt_spot`) with whole nodes: a one-GPU spot-tolerant job holds the
    reserved a3-megagpu-8g node whole, so a 4-GPU job that may not use spot has no room beside it; slurmctld
    requeues the spot job off it (which frees all 8 GPUs, not 1) and the job starts there at once."""
    sc = Scenario(machine_family="a3-megagpu", region="us-east4", reserved_nodes=1, spot_fraction=0.5)
    trace = [job(0, 0, 7200, 1, spot_ok=True), job(1, 1000, 600, 4)]
    sim = SimSlurm(trace, sc, GpuFleetPolicy(policy=DEFAULT_POLICY)).run()
    j0, j1 = sim.state.jobs
    assert sim.slurm_counters["preempt_requeues"] == 1 and j0.preemptions == 1
    assert j1.first_start == 1000  # the reserved node is up: no boot


def test_a_partition_that_mixes_shapes_is_not_exclusive() -> None:
    """The control: gpu-fleet's a3-highgpu partition holds 1g, 2g and 4g nodes too, so the render leaves it shared
    and small jobs may share an a3-highgpu-8g node (here with `Policy.share_nodes`, whose constraint allows it)."""
    d = GpuFleetPolicy.for_scenario(HIGH, share_nodes=True)
    sim = SimSlurm(SMALL, HIGH, d).run(until=500)
    assert {n.name for j in sim.state.jobs for n in j.placed_on} == {"a3-highgpu-8g-on-demand-0"}
    assert not any(sim.exclusive(j) for j in sim.state.jobs)
