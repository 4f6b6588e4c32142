"""The simulated Slurm behaves as slurmctld 22.05 does with power-saved CLOUD nodes (see its module docstring)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import pytest

from autoscaler.cloud import OfferingKey
from autoscaler.model import Pool, ScaleUp, request_id_for
from autoscaler.replay.baselines import SlurmPowerSavePolicy
from autoscaler.replay.scenario import Scenario
from autoscaler.replay.simslurm import SimSlurm, SlurmSettings
from autoscaler.replay.state import Job, JobState
from fleet.catalog import CapacityType
from tests.replay.conftest import job


@dataclass
class Recorder:
    """A driver that creates what ResumeProgram names (in the pool's first zone), records every hook call, and
    can leave the first `stuck` resumes without an instance (a boot that never comes)."""

    settings: SlurmSettings = field(default_factory=SlurmSettings)
    only: list[str] | None = None  # machine types of the pools (None: the scenario's)
    capacity: CapacityType | None = None  # only pools of this capacity type
    stuck: int = 0
    name: str = "recorder"
    description: str = "test driver"
    resumes: list[tuple[float, tuple[str, ...], dict[str, str | None]]] = field(default_factory=list)
    suspends: list[tuple[float, tuple[str, ...]]] = field(default_factory=list)
    fails: list[tuple[float, tuple[str, ...]]] = field(default_factory=list)

    def pools(self, scenario: Scenario) -> list[Pool]:
        return [p for p in scenario.pools(self.only) if self.capacity in (None, p.capacity_type)]

    def slurm_settings(self, scenario: Scenario) -> SlurmSettings:
        return self.settings

    def resume(self, sim: SimSlurm, names: Sequence[str], jobs: Mapping[str, Job | None]) -> None:
        self.resumes.append((sim.now, tuple(names), {n: (j.id if j else None) for n, j in jobs.items()}))
        if self.stuck > 0:
            self.stuck -= 1
            return
        for n in names:
            pool = sim.names[n].pool
            key = OfferingKey(pool.provider, pool.zones[0], pool.machine_type, pool.capacity_type, pool.reservation)
            sim.launch(ScaleUp(pool.name, key, (n,), request_id_for(pool.name, key, (n,), sim.now), (), "test"))

    def suspend(self, sim: SimSlurm, names: Sequence[str]) -> None:
        self.suspends.append((sim.now, tuple(names)))
        for n in names:
            sim.delete(sim.names[n].pool.name, [n])

    def resume_fail(self, sim: SimSlurm, names: Sequence[str]) -> None:
        self.fails.append((sim.now, tuple(names)))
        sim.return_to_service(names)  # what the daemon does: `scontrol update state=resume`

    def tick(self, sim: SimSlurm) -> float | None:
        return None


def test_jobs_get_cloud_nodes_at_submit_by_weight_then_node_order_and_one_batched_resume() -> None:
    d = Recorder()
    jobs = [job(0, 0, 600, 8), job(1, 0, 600, 8), job(2, 0, 600, 1), job(3, 0.5, 600, 2)]
    SimSlurm(jobs, Scenario(reserved_nodes=1), d).run()
    (at, _, owners), *later = d.resumes
    assert at == 1.0 and later == []  # ResumeProgram 1 s after the first allocation, with every job since
    assert owners == {
        "a3-highgpu-8g-reserved-0": "j0",  # Weight 1: the reservation first
        "a3-highgpu-8g-on-demand-0": "j1",  # the reservation is full: the next Weight, first 8-GPU node
        "a3-highgpu-1g-on-demand-0": "j2",  # node-table order within a Weight: the smallest shape that fits
        "a3-highgpu-2g-on-demand-0": "j3",
    }


def test_small_jobs_pack_onto_a_node_that_is_still_powering_up() -> None:
    """In a partition that is not OverSubscribe=EXCLUSIVE (a2-highgpu-8g has no GPU NICs)."""
    sc = Scenario(machine_family="a2-highgpu")
    eng = SimSlurm([job(i, t, 600, 1) for i, t in enumerate((0, 0.2, 5))], sc, SlurmPowerSavePolicy()).run()
    assert eng.counters.nodes_launched == 1 and eng.slurm_counters["resume_calls"] == 1
    # they all waited for it, then for slurmctld's launch pass after it registered at 361 s
    assert [j.first_start for j in eng.state.jobs] == pytest.approx([390, 390, 390])


def test_a_job_bound_to_a_booting_node_starts_at_slurmctlds_next_launch_pass_not_at_the_registration() -> None:
    """slurmctld defers the batch launch of a job whose node is powered down and retries it in its background loop:
    on 22.05.8 every such job started on one 30 s grid, 0.5-28.6 s after its node registered
    (`bench/late_bind_latency.py --bind`).  A job allocated a node that is already up starts at once (an 8-GPU node
    without GPU NICs: its partition is not OverSubscribe=EXCLUSIVE, so the jobs share it)."""
    d = Recorder(only=["a2-highgpu-8g"])
    sc = Scenario(machine_family="a2-highgpu")
    eng = SimSlurm([job(0, 0, 600, 1), job(1, 370, 600, 1), job(2, 400, 600, 1)], sc, d).run()
    j0, j1, j2 = eng.state.jobs
    assert eng.counters.nodes_launched == 1  # ResumeProgram at 1 s, registered at 361 s
    assert j0.first_start == 390  # the pass after the registration
    assert j1.first_start == 370 and j2.first_start == 400  # the node was up when they were allocated it: at once
    # `fleet simulate --slurm-launch-pass 0`: at the registration, as the replay modelled it before
    no_pass = SimSlurm([job(0, 0, 600, 1)], Scenario(slurm_launch_pass_s=0), Recorder(only=["a3-highgpu-8g"]))
    assert no_pass.run().state.jobs[0].first_start == 361


def test_a_job_is_configuring_until_its_nodes_register() -> None:
    d = Recorder(only=["a3-highgpu-8g"])
    sim = SimSlurm([job(0, 0, 600, 16)], Scenario(), d)
    sim.clock.advance_to(0)
    sim.state.submit(sim.state.jobs[0])
    sim.schedule(0)
    j = sim.state.jobs[0]
    assert j.state is JobState.CONFIGURING and len(j.placed_on) == 2 and sim.state.pending_count == 0


def test_resume_timeout_downs_the_node_requeues_the_job_and_calls_resume_fail() -> None:
    d = Recorder(settings=SlurmSettings(resume_timeout_s=600), only=["a3-highgpu-8g"], stuck=1)
    eng = SimSlurm([job(0, 0, 600, 8)], Scenario(), d).run()
    assert d.fails == [(600.0, ("a3-highgpu-8g-on-demand-0",))]
    assert eng.slurm_counters == {
        "resume_calls": 2,
        "resume_timeouts": 1,
        "suspends": 0,
        "requeues": 1,
        "power_ups": 0,
        "preempt_requeues": 0,
    }
    # requeued at 600 s, eligible again after Slurm's requeue hold (120 s), resumed 1 s later, booted in 360 s, then
    # launched at the next 30 s pass
    assert eng.state.jobs[0].first_start == pytest.approx(1110)


def test_slurm_power_save_with_a_boot_longer_than_resume_timeout_loses_the_job_to_down_nodes() -> None:
    """slurm-gcp's ResumeTimeout 300 s against a 360 s boot: every node goes DOWN before it registers."""
    sim = SimSlurm([job(0, 0, 600, 8)], Scenario(), SlurmPowerSavePolicy(resume_timeout_s=300)).run(until=1800)
    assert sim.slurm_counters["resume_timeouts"] >= 2 and sim.state.jobs[0].first_start is None
    assert SlurmPowerSavePolicy().slurm_settings(Scenario()).resume_timeout_s == 600  # what the replay uses
    assert SlurmPowerSavePolicy().slurm_settings(Scenario(boot_seconds=200)).resume_timeout_s == 300


def test_idle_nodes_are_suspended_after_suspend_time_and_the_name_comes_back_after_suspend_timeout() -> None:
    d = Recorder(only=["a3-highgpu-8g"])
    eng = SimSlurm([job(0, 0, 600, 8), job(1, 2000, 100, 8)], Scenario(), d).run()
    # up at 361, the job launched at the 390 s pass, idle at 990, SuspendTime 300
    assert d.suspends == [(990.0 + 300, ("a3-highgpu-8g-on-demand-0",))]
    assert [names for _, names, _ in d.resumes] == [("a3-highgpu-8g-on-demand-0",)] * 2  # the name is reused
    assert eng.counters.nodes_launched == 2


def test_reserved_nodes_in_suspend_exc_nodes_stay_up() -> None:
    d = Recorder(settings=SlurmSettings(suspend_exc=frozenset({CapacityType.RESERVATION})))
    eng = SimSlurm([job(0, 0, 600, 8), job(1, 2000, 100, 8)], Scenario(reserved_nodes=1), d).run()
    assert d.suspends == [] and eng.state.jobs[1].first_start == 2000  # no boot for the second job


def test_a_job_stays_pending_only_while_no_node_can_be_placed() -> None:
    d = Recorder(capacity=CapacityType.RESERVATION)
    eng = SimSlurm([job(0, 0, 600, 8), job(1, 10, 100, 8)], Scenario(reserved_nodes=1), d).run()
    j0, j1 = eng.state.jobs
    assert j1.first_start == j0.end  # pending (no free name) until the reserved node was free, then no boot
    assert len(d.resumes) == 1


@dataclass
class Cordoning(Recorder):
    """Drains `name` at the first tick at or after `at` (the daemon's cordon of a busy oversized node)."""

    cordon: str = "a3-highgpu-8g-on-demand-0"
    at: float = 1000.0
    states: list[tuple[float, str, int]] = field(default_factory=list)

    def tick(self, sim: SimSlurm) -> float | None:
        nm = sim.names.get(self.cordon)
        if sim.now >= self.at and nm is not None and nm.node.state.value == "busy":
            sim.drain([self.cordon])
        if nm is not None:
            self.states.append((sim.now, nm.node.state.value, len(nm.node.jobs)))
        return sim.now + 100.0 if sim.now < 5000 else None


def test_a_busy_node_drained_keeps_its_job_takes_no_other_and_stays_drained_once_empty() -> None:
    d = Cordoning(only=["a3-highgpu-8g"], capacity=CapacityType.ON_DEMAND)
    eng = SimSlurm([job(0, 0, 3600, 2), job(1, 1200, 600, 2)], Scenario(), d).run()
    first, second = eng.state.jobs
    assert second.state is JobState.DONE
    assert first.state is JobState.DONE and first.gpu_seconds == pytest.approx(2 * 3600)  # never stopped
    owners = [owners for _, _, owners in d.resumes]
    assert owners[1] == {"a3-highgpu-8g-on-demand-1": "j1"}  # the drained node's free GPUs took nothing
    assert first.end is not None and first.end > d.at
    assert [(s, n) for t, s, n in d.states if d.at <= t < first.end][:1] == [("draining", 1)]  # drained, job on
    assert eng.names[d.cordon].node.jobs_run == 1  # nothing else ever ran there


@dataclass
class Releasing(Recorder):
    """Holds every pool (the daemon's hold: powered-down names drained) and, at its first tick at or after `at`,
    undrains the two lowest names of the 8-GPU on-demand pool for the pending gang."""

    at: float = 100.0
    released_at: float | None = None

    def tick(self, sim: SimSlurm) -> float | None:
        if not sim.held:
            sim.hold(frozenset(sim.pools))
        if self.released_at is None and sim.now >= self.at:
            pool = sim.pools["a3-highgpu-8g-on-demand"]
            sim.release(pool.name, sim.held_indices(pool, 2), grace_s=30.0)
            self.released_at = sim.now
            return None
        return self.at


def test_released_names_are_allocated_at_slurmctlds_next_scheduling_pass_not_at_the_undrain() -> None:
    # measured on slurmctld 22.05.8 (bench/probe_drain_transitions.py --what release): the undrain of a drained
    # powered-down name -> the pending job allocated, about a second later
    d = Releasing(only=["a3-highgpu-8g"], capacity=CapacityType.ON_DEMAND)
    eng = SimSlurm([job(0, 0, 600, 16)], Scenario(), d).run()
    gang = eng.state.jobs[0]
    assert d.released_at == pytest.approx(100.0)
    assert len(d.resumes) == 1
    allocated_at, names, owners = d.resumes[0]
    assert names == ("a3-highgpu-8g-on-demand-0", "a3-highgpu-8g-on-demand-1")
    assert set(owners.values()) == {"j0"}
    lag = SlurmSettings().release_allocation_s + SlurmSettings().resume_batch_s  # allocation, then ResumeProgram
    assert allocated_at == pytest.approx(d.released_at + lag)
    registered = d.released_at + lag + Scenario().boot_seconds
    assert gang.first_start == pytest.approx(30 * math.ceil(registered / 30))  # slurmctld's next launch pass


def test_a_gang_gets_every_node_from_one_pool_the_lowest_weight_that_holds_it() -> None:
    """The rendered topology.conf joins no two pools (`fleet.slurm.topology`; tests/e2e/test_gang_pools.py on
    slurmctld): a 3-node gang with 2 reserved names free takes 3 on-demand names, not the 2 reserved plus one; the
    2-node gang after it takes the reservation."""
    d = Recorder(only=["a3-highgpu-8g"])
    eng = SimSlurm([job(0, 0, 600, 24), job(1, 0.1, 600, 16)], Scenario(reserved_nodes=2), d).run()
    owners: dict[str, str | None] = {}
    for _, _, o in d.resumes:
        owners.update(o)
    assert owners == {
        **{f"a3-highgpu-8g-on-demand-{i}": "j0" for i in range(3)},
        **{f"a3-highgpu-8g-reserved-{i}": "j1" for i in range(2)},
    }
    assert eng.state.partial_gang_gpu_s == 0.0


def test_an_up_node_allocated_to_a_gang_that_waits_for_boots_is_partial_gang_waste() -> None:
    """Slurm allocates a gang an idle node that is up and powered-down names of the same pool at once; the up node
    then waits, allocated and idle, for the others to boot: that wait is counted, as the baselines' engine counts
    a registered node nominated for a gang."""
    placed: list[list[str]] = []

    @dataclass
    class Watching(Recorder):
        def resume(self, sim: SimSlurm, names: Sequence[str], jobs: Mapping[str, Job | None]) -> None:
            placed.extend(sorted(n.name for n in j.placed_on) for j in jobs.values() if j is not None and j.is_gang)
            super().resume(sim, names, jobs)

    # j0 boots reserved-0 and leaves it up (reserved nodes are never suspended); the gang j1 takes it and boots one
    eng = SimSlurm(
        [job(0, 0, 60, 8), job(1, 2000, 600, 16)], Scenario(reserved_nodes=2), Watching(only=["a3-highgpu-8g"])
    )
    eng.run()
    assert placed == [["a3-highgpu-8g-reserved-0", "a3-highgpu-8g-reserved-1"]]  # one name up, one booted
    gang = eng.state.jobs[1]
    registered = 2000.0 + SlurmSettings().resume_batch_s + Scenario().boot_seconds  # reserved-1 booted
    assert gang.first_start == pytest.approx(2370.0)  # slurmctld's launch pass after the registration
    # the up node waited for the boot; the launch pass after it is every booted job's wait, not the gang's
    assert eng.state.partial_gang_gpu_s == pytest.approx(8 * (registered - 2000.0))


def test_a_gang_never_gets_a_name_its_exclusion_lists() -> None:
    """`scontrol update jobid=N ExcNodeList=...` (the daemon's, `core.gang_exclusions`): the gang takes powered-down
    names instead of the up node it may not have, all from the one pool."""
    d = Recorder(settings=SlurmSettings(suspend_time_s=3600), only=["a3-highgpu-8g"], capacity=CapacityType.ON_DEMAND)
    sim = SimSlurm([job(0, 0, 60, 8), job(1, 2000, 600, 16)], Scenario(), d)
    sim.exclude(sim.state.jobs[1], frozenset({"a3-highgpu-8g-on-demand-0"}))
    sim.run()
    owners: dict[str, str | None] = {}
    for _, _, o in d.resumes:
        owners.update(o)
    assert owners == {
        "a3-highgpu-8g-on-demand-0": "j0",
        "a3-highgpu-8g-on-demand-1": "j1",  # not -0, up and idle since j0 ended
        "a3-highgpu-8g-on-demand-2": "j1",
    }
    assert sim.state.partial_gang_gpu_s == 0.0
