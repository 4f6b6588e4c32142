"""The simulated Slurm picks nodes as slurmctld 22.05 does in tests/e2e/test_weights.py: a node that needs no
power-up before any powered-down one, the lowest rendered Weight among them; the 8-GPU pool listed first."""

from __future__ import annotations

from autoscaler.model import Pool
from autoscaler.replay.scenario import Scenario
from autoscaler.replay.simslurm import SimSlurm, SlurmSettings
from fleet.catalog import load_catalog
from fleet.slurm.weights import pool_weights
from tests.replay.conftest import job
from tests.replay.test_simslurm import Recorder


class EightFirst(Recorder):
    """On-demand a3-highgpu-8g and -1g pools, the 8-GPU pool listed first (node-table order)."""

    def pools(self, scenario: Scenario) -> list[Pool]:
        return list(reversed(scenario.pools(["a3-highgpu-1g", "a3-highgpu-8g"])))


def test_the_simulated_slurm_reads_the_rendered_weights() -> None:
    sc = Scenario()
    sim = SimSlurm([job(0, 0, 60, 1)], sc, EightFirst())
    rows = [(p.name, p.capacity_type, p.machine_type) for p in sim.pool_list]
    assert sim.weight == pool_weights(rows, load_catalog(), sc.region)
    assert [p.machine_type for p in sim.pool_list] == ["a3-highgpu-8g", "a3-highgpu-1g"]
    assert sim.weight["a3-highgpu-1g-on-demand"] < sim.weight["a3-highgpu-8g-on-demand"]


def test_a_powered_up_node_with_the_lowest_weight_gets_the_job_before_a_powered_down_one() -> None:
    """1g-0 is powered down again (SuspendTime) while 1g-1 and 8g-0 are up and idle: the next 1-GPU job takes 1g-1
    (up, the lowest Weight of the up nodes), not 1g-0 (powered down, lower index) nor 8g-0 (up, listed first)."""
    d = EightFirst(settings=SlurmSettings(suspend_time_s=200, suspend_timeout_s=60))
    jobs = [
        job(0, 0, 60, 1),  # 1g-0: idle at ~420, suspended at ~620, powered down at ~680
        job(1, 0.5, 1000, 1),  # 1g-1 (1g-0 is full): idle at ~1360
        job(2, 0.5, 1000, 8),  # 8g-0: idle at ~1360
        job(3, 1400, 60, 1),  # 1g-1 and 8g-0 up and idle, 1g-0 powered down
    ]
    sim = SimSlurm(jobs, Scenario(), d).run(until=1401)
    ran = {j.trace.id: j for j in sim.state.jobs}
    assert [n.name for n in ran["j3"].placed_on] == ["a3-highgpu-1g-on-demand-1"]
    first = {name: owner for _, _, owners in d.resumes for name, owner in owners.items()}
    assert first == {  # the powered-down step: the rendered Weights (22.05 ignores them here: see the e2e test)
        "a3-highgpu-1g-on-demand-0": "j0",
        "a3-highgpu-1g-on-demand-1": "j1",
        "a3-highgpu-8g-on-demand-0": "j2",
    }
    assert ran["j3"].first_start == 1400  # no boot: it ran on a node that was up
    assert sim.slurm_counters["resume_calls"] == 1  # j3 powered nothing up
    assert d.suspends[0][1] == ("a3-highgpu-1g-on-demand-0",)


def _second_job_on(prefer: bool) -> str:
    d = EightFirst(settings=SlurmSettings(suspend_time_s=5000, prefer=prefer))
    jobs = [job(0, 0, 100, 8), job(1, 600, 60, 1)]  # 8g-0 is up and idle when the 1-GPU job comes
    sim = SimSlurm(jobs, Scenario(), d).run(until=601)
    return sim.state.jobs[1].placed_on[0].name


def test_the_rendered_prefer_right_sizes_over_an_idle_larger_node() -> None:
    """job_submit.lua's --prefer (tests/e2e/test_weights.py): the 1-GPU job powers up a 1-GPU node rather than
    pin the idle 8-GPU one; without it (stock Slurm) the up node wins."""
    assert _second_job_on(prefer=True) == "a3-highgpu-1g-on-demand-0"
    assert _second_job_on(prefer=False) == "a3-highgpu-8g-on-demand-0"


def _small_job_on_the_reservation(driver_for_scenario) -> tuple[str, ...]:  # type: ignore[no-untyped-def]
    """Three reserved 8-GPU nodes: an 8-GPU job takes node 0, a 4-GPU job node 1; the 8-GPU job ends, and then a
    1-GPU job comes.  Returns the names of the nodes the three jobs ran on."""
    sc = Scenario(reserved_nodes=3)
    jobs = [job(0, 0, 1000, 8), job(1, 1, 50_000, 4), job(2, 3000, 60, 1)]
    early = SimSlurm(jobs, sc, driver_for_scenario(sc)).run(until=2)  # (the replay does not resume)
    late = SimSlurm(jobs, sc, driver_for_scenario(sc)).run(until=3001)
    return (*(early.state.jobs[i].placed_on[0].name for i in (0, 1)), late.state.jobs[2].placed_on[0].name)


def test_the_daemon_reweighs_reserved_nodes_so_small_work_goes_to_the_fullest_that_fits() -> None:
    """Best fit on the reservation (`autoscaler.core.weights`): gpu-fleet's tick gives the partly used reserved node
    a lower Weight than the empty one, so the 1-GPU job leaves the empty node whole for the next 8-GPU job.  A
    driver that leaves the rendered Weights (all equal) gets first fit: the empty node, the lowest index."""
    from autoscaler.replay.gpu_fleet import GpuFleetPolicy

    *_, small = _small_job_on_the_reservation(GpuFleetPolicy.for_scenario)
    first = _small_job_on_the_reservation(lambda sc: Recorder(settings=SlurmSettings(suspend_time_s=5000)))
    assert first[0] == first[2] and first[1] != first[0]  # rendered Weights: back to the emptied node
    assert small == first[1]  # re-weighed: onto the node the 4-GPU job runs on
