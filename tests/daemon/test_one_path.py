"""The replay and the daemon take the same decisions for the same inputs (issue 8, "one decision path").

A small scenario (several machine shapes, spot and on-demand pools, a gang, a scheduled stockout in one zone) is
replayed: the simulated Slurm allocates CLOUD nodes and calls ResumeProgram, the replay's gpu-fleet driver serves
it through the decision core on the sim cloud.  Then the very same ResumeProgram calls are fed, at the same
times, to the daemon (`Daemon.tick`, its SQLite store, the hook's power queue) over an in-memory Slurm that shows
those nodes POWERING_UP and a fake cloud stocked out exactly when the sim cloud was.  Every launch attempt -
request id, pool, offering (zone, capacity type), node names, outcome - must be identical.  If someone forks the
decision logic again (a replay-only planner call, a daemon-only rule), this test fails."""

from __future__ import annotations

from pathlib import Path

from autoscaler.daemon.config import LoopConfig
from autoscaler.daemon.lock import LeaderLock
from autoscaler.daemon.state import StateStore
from autoscaler.daemon.tick import Daemon
from autoscaler.replay.gpu_fleet import GpuFleetPolicy
from autoscaler.replay.scenario import Scenario
from autoscaler.replay.simslurm import SimSlurm
from autoscaler.replay.state import Job
from autoscaler.replay.trace import TraceJob
from autoscaler.sim import StockoutWindow
from fleet.catalog import CapacityType
from tests.daemon.fakes import FakeCloud, FakeSlurm

OUT_ZONE = "us-central1-a"
OUT_FROM, OUT_TO = 0.0, 1500.0  # on-demand 8g stocks out in one zone for the first 25 minutes


class RecordingFleet(GpuFleetPolicy):
    """The replay's gpu-fleet driver, recording the ResumeProgram calls Slurm made."""

    def __init__(self) -> None:
        super().__init__()
        self.resumes: list[tuple[float, tuple[str, ...], dict[str, int | None]]] = []

    def resume(self, sim: SimSlurm, names, jobs) -> None:  # type: ignore[no-untyped-def]
        owners: dict[str, int | None] = {n: (j.idx + 1 if isinstance(j, Job) else None) for n, j in jobs.items()}
        self.resumes.append((sim.now, tuple(names), owners))
        super().resume(sim, names, jobs)


def _trace() -> list[TraceJob]:
    shapes = [(0, 3000, 8, False), (0, 3000, 8, True), (5, 2000, 1, False), (5, 2000, 2, True), (30, 4000, 16, False)]
    shapes += [(400, 1000, 8, False), (420, 1000, 4, True), (2000, 600, 8, False), (2100, 900, 24, True)]
    return [TraceJob(f"j{i}", t, d, g, s) for i, (t, d, g, s) in enumerate(shapes)]


def _replay() -> tuple[SimSlurm, RecordingFleet, Scenario]:
    sc = Scenario(spot_fraction=0.5)
    out = StockoutWindow(
        zone=OUT_ZONE, start=OUT_FROM, end=OUT_TO, machine_type="a3-highgpu-8g", capacity_type=CapacityType.ON_DEMAND
    )
    cfg = sc.sim_config().model_copy(update={"stockout_windows": (out,), "preemption_rate_per_hour": 0.0})
    driver = RecordingFleet()
    sim = SimSlurm(_trace(), sc, driver, sim_config=cfg).run()
    return sim, driver, sc


def test_daemon_tick_launches_exactly_what_the_replay_launched(tmp_path: Path) -> None:
    sim, driver, sc = _replay()
    attempts = driver.launch_log
    assert any(o == "refused" for *_, o in attempts), "the scenario must exercise a stockout fallback"
    assert any(len(names) > 1 for *_, names, _ in attempts), "and a gang"
    assert {p for _, _, p, *_ in attempts} >= {
        "a3-highgpu-8g-on-demand",
        "a3-highgpu-8g-spot",
        "a3-highgpu-1g-on-demand",
    }

    pools = sc.pools()
    offers = [o for o in sim.cloud.offerings() if o.key.capacity_type is not CapacityType.RESERVATION]
    cloud = FakeCloud(offers=list(offers))
    slurm = FakeSlurm()
    for p in pools:
        used = sorted(
            {n for _, names, _ in driver.resumes for n in names if n.rpartition("-")[0] == p.node_name_prefix}
        )
        slurm.add_cloud_nodes(used, gpus=p.gpus_per_node)
    clock = [0.0]
    store = StateStore(tmp_path / "state.db")
    daemon = Daemon(
        pools=pools,
        provider=cloud,
        slurm=slurm,
        store=store,
        policy=driver.policy,
        loop=LoopConfig(),
        lock=LeaderLock(store.path),
        clock=lambda: clock[0],
    )
    seen: list[tuple[float, str, str, str, tuple[str, ...], str]] = []
    resumes = list(driver.resumes)
    try:
        for t in sorted(set(driver.tick_log)):
            clock[0] = t
            while resumes and resumes[0][0] <= t:  # what `fleet slurm resume HOSTLIST` queues, and Slurm's side
                at, names, owners = resumes.pop(0)
                for n in names:
                    store.enqueue_power("resume", [n], at, {n: (owners[n],)} if owners[n] else {})
                    slurm.set(n, "mixed", "POWERING_UP", "NOT_RESPONDING", gpus_used=1)
            cloud.stocked_out = {
                o.key
                for o in offers
                if o.key.zone == OUT_ZONE
                and o.key.machine_type == "a3-highgpu-8g"
                and o.key.capacity_type is CapacityType.ON_DEMAND
                and OUT_FROM <= t < OUT_TO
            }
            res = daemon.tick()
            assert res.ok, res.error
            for c in res.commands:
                if c["command"] == "launch":
                    outcome = "ok" if c["outcome"] == "ok" else "refused"
                    seen.append((t, c["request_id"], c["pool"], c["offering"], tuple(c["names"]), outcome))
    finally:
        daemon.lock.release()
        store.close()
    assert seen == attempts
    assert cloud.duplicates == 0
