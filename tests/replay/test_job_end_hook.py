"""EpilogSlurmctld in the replay: the simulated Slurm tells the driver when a job ends, and the gpu-fleet driver
ticks when the daemon's watcher would (JOB_END_LATENCY_S after, measured on real slurmctld by
bench/job_end_latency.py), so a freed node is billed until then, not until the next 10 s poll."""

from __future__ import annotations

from dataclasses import replace

from autoscaler.replay.baselines import SlurmPowerSavePolicy
from autoscaler.replay.gpu_fleet import DEFAULT_POLICY, INTERVAL_S, JOB_END_LATENCY_S, GpuFleetPolicy
from autoscaler.replay.scenario import Scenario
from autoscaler.replay.simslurm import SimSlurm
from autoscaler.replay.trace import TraceJob


class Fleet(GpuFleetPolicy):
    def __init__(self) -> None:
        super().__init__(policy=replace(DEFAULT_POLICY, idle_timeout_s=0.0, late_bind=False))  # the resume path
        self.ends: list[tuple[float, int, tuple[str, ...]]] = []
        self.deleted: list[tuple[float, tuple[str, ...]]] = []

    def job_end(self, sim: SimSlurm, job, names) -> None:  # type: ignore[no-untyped-def]
        assert all(sim.names[n].node.jobs == {} for n in names)  # already free when the hook runs
        self.ends.append((sim.now, job.idx, tuple(names)))
        super().job_end(sim, job, names)

    def tick(self, sim: SimSlurm) -> float | None:
        real = sim.delete

        def delete(pool, names):  # type: ignore[no-untyped-def]
            out = real(pool, names)
            self.deleted.append((sim.now, tuple(out)))
            return out

        sim.delete = delete  # type: ignore[method-assign]
        try:
            return super().tick(sim)
        finally:
            sim.delete = real  # type: ignore[method-assign]


def test_a_freed_node_is_deleted_at_the_job_end_wake_up_not_the_next_poll() -> None:
    trace = [
        TraceJob("a", 0, 1003, 8, False),
        TraceJob("gang", 5, 2007, 16, False),
        TraceJob("last", 9, 4000, 1, False),
    ]
    d = Fleet()
    SimSlurm(trace, Scenario(), d).run()
    ends = {idx: (at, names) for at, idx, names in d.ends}
    assert set(ends) == {0, 1, 2} and len(ends[1][1]) == 2  # every job, with all of a gang's nodes
    for idx in (0, 1):  # the last job's end stops the replay
        at, names = ends[idx]
        assert (at + JOB_END_LATENCY_S, names) in d.deleted
        assert (at + JOB_END_LATENCY_S) % INTERVAL_S != 0  # off the poll grid: the wake-up did it


def test_slurm_power_save_has_no_job_end_hook() -> None:
    """The baseline is Slurm's own power saving: nothing wakes on a job's end, SuspendTime frees the node."""
    assert not hasattr(SlurmPowerSavePolicy(), "job_end")
    sim = SimSlurm([TraceJob("a", 0, 1003, 8, False)], Scenario(), SlurmPowerSavePolicy()).run()
    assert sim.state.done == 1
