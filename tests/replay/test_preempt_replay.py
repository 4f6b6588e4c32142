"""Reserved capacity taken back from spot-tolerant work, on the simulated Slurm (`Policy.preempt_spot`,
fleet/slurm/preempt.py): the daemon holds the on-demand overflow, so a job that may not use spot and finds the
reservation full requeues a spot-tolerant job off it, as slurmctld's partition-priority preemption does, instead
of an on-demand node being bought; a job preemption cannot place gets on-demand at the daemon's next poll."""

from __future__ import annotations

import math
from dataclasses import replace

from autoscaler.replay.gpu_fleet import DEFAULT_POLICY, GpuFleetPolicy
from autoscaler.replay.scenario import Scenario
from autoscaler.replay.simslurm import SimSlurm
from fleet.catalog import CapacityType
from tests.replay.conftest import job

BOOT = 361  # ResumeProgram 1 s after the allocation, then the 360 s boot
#: the reserved node is launched up front (`Policy.launch_reserved_nodes`) one boot before the first submission, where
#: the replay starts, and registers 1 s after it (the ResumeProgram's second)
UP = 1


def launch_pass(registered: float) -> float:
    """When a job allocated a booting node starts: slurmctld's next 30 s launch pass after the node registered
    (`SlurmSettings.launch_pass_s`); a job allocated a node already up starts at once."""
    return 30 * math.ceil(registered / 30)


SC = Scenario(reserved_nodes=1, spot_fraction=0.5)  # offers spot pools; the trace says which jobs tolerate spot


def _trace() -> list:  # type: ignore[type-arg]
    return [
        job(0, 0, 7200, 8, spot_ok=True),  # fills the reserved node
        job(1, 1000, 600, 8),  # may not use spot: takes the reserved node back
        job(2, 1200, 600, 8),  # may not use spot, nothing left to preempt: on-demand
    ]


def _run(preempt: bool) -> SimSlurm:
    pol = GpuFleetPolicy(policy=replace(DEFAULT_POLICY, preempt_spot=preempt))
    return SimSlurm(_trace(), SC, pol).run()


def _on_demand_launches(sim: SimSlurm) -> list[tuple[str, ...]]:
    """The on-demand instances the driver created, by launch."""
    log = sim.driver.launch_log  # type: ignore[attr-defined]
    return [names for _, _, pool, _, names, outcome in log if pool.endswith("-on-demand") and outcome == "ok"]


def test_a_job_that_may_not_use_spot_requeues_spot_work_off_the_reservation_instead_of_buying_on_demand() -> None:
    sim = _run(preempt=True)
    jobs = {j.id: j for j in sim.state.jobs}
    assert sim.held == {p.name for p in sim.pool_list if p.capacity_type is CapacityType.ON_DEMAND}
    assert jobs["j0"].first_start == launch_pass(UP)  # allocated the reserved node while it booted
    assert jobs["j1"].first_start == 1000  # on the reserved node, up already: no wait, no boot
    assert jobs["j0"].preemptions == 1 and sim.slurm_counters["preempt_requeues"] == 1
    # j0 had run 970 s, short of its first checkpoint (every 1800 s): it starts over on spot once eligible again
    # (the 120 s requeue hold), so it ends a boot, a launch pass and its full run after that
    assert jobs["j0"].end == launch_pass(1000 + 120 + BOOT) + 7200
    by_cap = sim.cloud.ledger.cost_by_capacity(sim.t_end)
    assert by_cap.get(CapacityType.SPOT, 0) > 0
    # j2 found the reservation busy with j1 (nothing spot-tolerant to requeue): released to on-demand at the
    # daemon's next 10 s poll, then booted
    assert 1200 + BOOT <= jobs["j2"].first_start <= launch_pass(1200 + 10 + BOOT)
    assert len(_on_demand_launches(sim)) == 1  # j2's node only: none was bought for j1


def test_without_it_the_job_overflows_to_on_demand_and_spot_work_keeps_the_reservation() -> None:
    sim = _run(preempt=False)
    jobs = {j.id: j for j in sim.state.jobs}
    assert sim.held == frozenset() and sim.slurm_counters["preempt_requeues"] == 0
    assert jobs["j0"].preemptions == 0 and jobs["j0"].end == launch_pass(UP) + 7200
    assert jobs["j1"].first_start == launch_pass(1000 + BOOT)  # Slurm powered up an on-demand node at submit
    assert len(_on_demand_launches(sim)) == 2  # one for j1, one for j2


def test_preemption_frees_only_what_the_job_needs_latest_started_first() -> None:
    """Four 2-GPU spot-tolerant jobs share the reserved node; a 4-GPU job that may not use spot requeues two of them,
    not all four: the latest started (`preempt_youngest_first`), here all started together (submitted at once, the
    reserved node up), so the latest submitted."""
    trace = [job(i, UP + 1, 7200, 2, spot_ok=True) for i in range(4)] + [job(4, 2000, 600, 4)]
    sim = SimSlurm(trace, SC, GpuFleetPolicy(policy=DEFAULT_POLICY)).run()
    jobs = {j.id: j for j in sim.state.jobs}
    assert sim.slurm_counters["preempt_requeues"] == 2
    assert jobs["j0"].preemptions == jobs["j1"].preemptions == 0  # (j2, j3 may also meet a spot preemption later)
    assert jobs["j2"].preemptions >= 1 and jobs["j3"].preemptions >= 1
    assert jobs["j4"].first_start == 2000


def test_the_latest_started_job_goes_first_even_when_it_was_submitted_first() -> None:
    """preempt_youngest_first orders by start time, not by submission (without it slurmctld 22.05 takes the earliest
    submitted: bench/probe_preempt_order.py).  The four jobs' start times are rewritten so that the two submitted
    first started last (as a requeued job restarts later than the jobs submitted after it)."""
    trace = [job(i, i, 7200, 2, spot_ok=True) for i in range(4)] + [job(4, 9000, 600, 4)]
    sim = SimSlurm(trace, SC, GpuFleetPolicy(policy=DEFAULT_POLICY)).run(until=2000)
    jobs = sim.state.jobs
    # all four on the reserved node (j0 allocated it while it booted, the others once it was up); on-demand held
    assert [j.start for j in jobs[:4]] == [launch_pass(UP), 1, 2, 3] and sim.held
    jobs[0].start, jobs[1].start = 1950.0, 1900.0
    sim.state.submit(jobs[4])
    sim.schedule(2000)
    assert [j.preemptions for j in jobs[:4]] == [1, 1, 0, 0]
    assert jobs[4].placed_on and jobs[4].placed_on[0].capacity_type is CapacityType.RESERVATION


def test_a_held_pools_floor_is_booted_drained_then_undrained_not_released() -> None:
    """A floor (`min_nodes`) in the on-demand pool the preemption hold keeps drained: the driver boots it drained and
    undrains it once registered, as the daemon does (tests/daemon/test_preempt_hold.py); released instead, no job
    would take it and it would be held again."""

    class WithFloor(GpuFleetPolicy):
        def pools(self, scenario: Scenario) -> list:  # type: ignore[type-arg]
            out = [replace(p, min_nodes=1) if p.name == "a3-highgpu-8g-on-demand" else p for p in scenario.pools()]
            self._pools = out
            return out

    sim = SimSlurm([job(0, 5000, 600, 8)], SC, WithFloor(policy=DEFAULT_POLICY)).run(until=5030)  # starts at 4640
    assert "a3-highgpu-8g-on-demand" in sim.held
    (od,) = [nm for nm in sim.names.values() if nm.pool.name == "a3-highgpu-8g-on-demand"]
    assert od.launched and od.node.registered and od.node.name in sim.idle  # up, idle, allocatable
    assert not sim.held_boots()  # undrained once registered


def test_a_submission_wakes_the_holding_daemon_so_a_job_preemption_cannot_place_is_released_at_once() -> None:
    """Under the preemption hold the rendered job_submit.lua wakes the daemon at every submission, as under late
    binding (fleet.slurm.policy.submit_wakes_daemon; tests/e2e/test_preempt.py on slurmctld): j2, submitted between
    two polls with nothing to preempt, is released a second later (the wake-up), allocated a second after that
    (slurmctld's pass after the undrain) and resumed in the ResumeProgram's second, not at the next 10 s poll."""
    trace = [job(0, 0, 7200, 8, spot_ok=True), job(1, 1000, 600, 8), job(2, 1203, 600, 8)]
    sim = SimSlurm(trace, SC, GpuFleetPolicy(policy=DEFAULT_POLICY)).run()
    assert sim.conf.submit_wake
    jobs = {j.id: j for j in sim.state.jobs}
    # released 1 s after its submission, allocated 1 s later, booted; then slurmctld's next launch pass
    assert jobs["j2"].first_start == launch_pass(1203 + 1 + 1 + BOOT)  # before the wake-up: 1210 + 1 + BOOT
