"""The gang gate in the replay (`SlurmSettings.gang_gate_s`, the driver's `_open_gates`): in a pool the daemon does
not hold, a gang released off the warm node boots whole instead of pinning it (tests/e2e/test_gang_gate.py shows
both on slurmctld)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from autoscaler.replay.gpu_fleet import BOUND_RESUME_LATENCY_S, DEFAULT_POLICY, GpuFleetPolicy
from autoscaler.replay.scenario import Scenario
from autoscaler.replay.simslurm import SimSlurm
from autoscaler.replay.state import JobState
from tests.replay.conftest import job

#: one reserved node (launched up front) and the on-demand overflow beside it, which nothing holds (no spot pool, no
#: hold budget)
SC = Scenario(reserved_nodes=1)
#: j0 keeps the reserved node busy; j1 boots an on-demand node, which is idle (kept) when the gang j2 comes
TRACE = [job(0, 0, 3000, 8), job(1, 0, 100, 8), job(2, 600, 600, 16)]
POLICY = replace(DEFAULT_POLICY, idle_timeout_s=900.0)


def _run(gate: bool) -> SimSlurm:
    driver = GpuFleetPolicy(policy=replace(POLICY, gang_gate=gate))
    return SimSlurm(TRACE, SC, driver).run()


def test_a_gang_released_through_the_gate_boots_whole_and_leaves_the_warm_node_free() -> None:
    sim = _run(gate=True)
    assert sim.conf.gang_gate_s > 0 and sim.conf.submit_wake
    assert sim.state.partial_gang_gpu_s == 0
    assert all(j.state is JobState.DONE for j in sim.state.jobs)
    # the gang's two nodes launched together, neither of them j1's warm node: the 600 s poll released it, slurmctld
    # allocated it 0.2 s later, called ResumeProgram 1 s after that, and the daemon's hook watcher created them
    created = BOUND_RESUME_LATENCY_S
    assert [(t, names) for t, _, pool, _, names, _ in sim.driver.launch_log if "on-demand" in pool] == [
        (1.0 + created, ("a3-highgpu-8g-on-demand-0",)),
        (601.2 + created, ("a3-highgpu-8g-on-demand-1", "a3-highgpu-8g-on-demand-2")),
    ]

    old = _run(gate=False)  # slurmctld gave the gang the warm node and a boot: the warm node waited for it
    assert old.conf.gang_gate_s == 0
    assert [names for _, _, pool, _, names, _ in old.driver.launch_log if "on-demand" in pool][1:] == [
        ("a3-highgpu-8g-on-demand-1",)
    ]
    # the warm node, from the allocation to the boot's registration
    assert old.state.partial_gang_gpu_s == pytest.approx(8 * (361 + created))
    assert old.state.jobs[2].first_start == sim.state.jobs[2].first_start  # both wait for the boot and the pass
