"""Reserved nodes launched up front on the simulated Slurm, for gpu-fleet (`Policy.launch_reserved_nodes`: its
queue-depth plan brings the reservation pool to its floor and the driver powers the names up, as the daemon does)
and for the slurm-power-save baseline (Cluster Toolkit's static reserved nodeset, `static_reserved`).

The trace: one whole-node job, then a 2-node gang when two reserved nodes are free.  With reserved names powered
up only as jobs take them, the first job's node is up and the second reserved name powered down when the gang
arrives: Slurm gives the gang both, and the node that is up waits, allocated and idle, for the other's boot
(partial-gang waste, reserved time that is paid either way).  With every reserved node up, the gang starts at
once."""

from __future__ import annotations

from dataclasses import replace

import pytest

from autoscaler.replay.baselines.slurm_power_save import SlurmPowerSavePolicy
from autoscaler.replay.gpu_fleet import BOUND_RESUME_LATENCY_S, DEFAULT_POLICY, GpuFleetPolicy
from autoscaler.replay.scenario import Scenario
from autoscaler.replay.simslurm import SimSlurm
from autoscaler.replay.state import JobState
from fleet.catalog import CapacityType
from tests.replay.conftest import job

SC = Scenario(reserved_nodes=2)
TRACE = [job(0, 0, 100, 8), job(1, 600, 600, 16)]  # 16 GPUs: a gang of two 8-GPU nodes, within SuspendTime
UP = 1  # launched one boot before the first submission (the replay starts there), registered 1 s after it
#: j0, allocated the reserved node while it boots, starts at slurmctld's next launch pass after it registered
FIRST = 30


def _run(driver: object) -> SimSlurm:
    return SimSlurm(TRACE, SC, driver).run()  # type: ignore[arg-type]


def _reserved_up(sim: SimSlurm) -> list[str]:
    return sorted(n for n, nm in sim.names.items() if nm.pool.capacity_type is CapacityType.RESERVATION)


@pytest.mark.parametrize(
    "up_front, down_front",
    [
        (
            GpuFleetPolicy(policy=DEFAULT_POLICY),
            GpuFleetPolicy(policy=replace(DEFAULT_POLICY, launch_reserved_nodes=False)),
        ),
        (SlurmPowerSavePolicy(), SlurmPowerSavePolicy(static_reserved=False)),
    ],
    ids=["gpu-fleet", "slurm-power-save"],
)
def test_every_reserved_node_is_up_before_work_so_a_gang_starts_whole_at_once(up_front, down_front) -> None:  # type: ignore[no-untyped-def]
    sim = _run(up_front)
    j0, j1 = sim.state.jobs
    # no boot for either (j1's nodes are up); under gpu-fleet j1, a gang, waits for the lua's gate (the on-demand
    # overflow pool beside the reservation is not held): released at the 600 s poll, tried 0.2 s later
    # (autoscaler/slurm/gang_gate.py, `SlurmSettings.gate_allocation_s`)
    gate = up_front.slurm_settings(SC).gate_allocation_s if isinstance(up_front, GpuFleetPolicy) else 0
    assert j0.first_start == FIRST and j1.first_start == 600 + gate
    assert sim.state.partial_gang_gpu_s == 0
    assert all(j.state is JobState.DONE for j in sim.state.jobs)
    assert _reserved_up(sim) == ["a3-highgpu-8g-reserved-0", "a3-highgpu-8g-reserved-1"]  # never power-saved
    assert sim.cloud.ledger.cost_by_capacity(sim.t_end).get(CapacityType.ON_DEMAND, 0) == 0

    # reserved names powered up only as jobs take them: the gang's second node boots while the first waits
    late = _run(down_front)
    j0, j1 = late.state.jobs
    assert j0.first_start == 390 and j1.first_start == 990  # each registered 361 s after its job, the next pass
    # the up node waited for the other's boot (and, under gpu-fleet, the daemon's hook watcher before it)
    watch = BOUND_RESUME_LATENCY_S if isinstance(up_front, GpuFleetPolicy) else 0.0
    assert late.state.partial_gang_gpu_s == pytest.approx(8 * (361 + watch))
