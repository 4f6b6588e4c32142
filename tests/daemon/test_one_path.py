"""The replay and the daemon take the same decisions for the same inputs (issue 8, "one decision path").

A small scenario (several machine shapes, spot and on-demand pools, a gang, a scheduled stockout in one zone) is
replayed: the simulated Slurm allocates CLOUD nodes and calls ResumeProgram, the replay's gpu-fleet driver serves
it through the decision core on the sim cloud.  Then the very same ResumeProgram calls are fed, at the same
times, to the daemon (`Daemon.tick`, its SQLite store, the hook's power queue) over an in-memory Slurm that shows
those nodes POWERING_UP and a fake cloud stocked out exactly when the sim cloud was.  Every launch attempt -
request id, pool, offering (zone, capacity type), node names, outcome - must be identical.  If someone forks the
decision logic again (a replay-only planner call, a daemon-only rule), this test fails."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from autoscaler.core.settings import SettingsTracker, settings_policy
from autoscaler.daemon.config import LoopConfig
from autoscaler.daemon.lock import LeaderLock
from autoscaler.daemon.state import StateStore
from autoscaler.daemon.tick import HOLD_REASON, LATE_BIND_REASON, Daemon
from autoscaler.model import NodeState
from autoscaler.replay.facts import scenario_facts
from autoscaler.replay.gpu_fleet import DEFAULT_POLICY, INTERVAL_S, GpuFleetPolicy
from autoscaler.replay.scenario import Scenario
from autoscaler.replay.simslurm import SimSlurm
from autoscaler.replay.state import Job, JobState
from autoscaler.replay.trace import TraceJob
from autoscaler.sim import StockoutWindow
from autoscaler.slurm.constraint import RIGHT_SIZED_MARK, constraint_expression
from autoscaler.slurm.readers import SlurmJob, SlurmNode
from fleet.catalog import CapacityType
from tests.daemon.fakes import FakeCloud, FakeSlurm

OUT_ZONE = "us-central1-a"
OUT_FROM, OUT_TO = 0.0, 1500.0  # on-demand 8g stocks out in one zone for the first 25 minutes


class RecordingFleet(GpuFleetPolicy):
    """The replay's gpu-fleet driver, recording the ResumeProgram calls Slurm made.  Late binding off by default:
    the resume path alone (`test_daemon_tick_launches_exactly_what_the_replay_launched`); the late-binding test
    below turns it on."""

    def __init__(self) -> None:
        super().__init__(policy=replace(DEFAULT_POLICY, late_bind=False))
        self.resumes: list[tuple[float, tuple[str, ...], dict[str, int | None]]] = []

    def resume(self, sim: SimSlurm, names, jobs) -> None:  # type: ignore[no-untyped-def]
        owners: dict[str, int | None] = {n: (j.idx + 1 if isinstance(j, Job) else None) for n, j in jobs.items()}
        self.resumes.append((sim.now, tuple(names), owners))
        super().resume(sim, names, jobs)


def _queue_resumes(store: StateStore, resumes: list, t: float) -> None:  # type: ignore[type-arg]
    """What `fleet slurm resume HOSTLIST` queued by `t` of the replay's ResumeProgram calls (popped from `resumes`)."""
    while resumes and resumes[0][0] <= t:
        at, names, owners = resumes.pop(0)
        for n in names:
            store.enqueue_power("resume", [n], at, {n: (owners[n],)} if owners[n] else {})


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


def _daemon(tmp_path: Path, sc: Scenario, cloud: FakeCloud, slurm: FakeSlurm, policy, clock: list[float], **kw):  # type: ignore[no-untyped-def]
    """The daemon as `build_daemon` wires it, over the scenario's pools, a fake cloud and Slurm, on a test clock."""
    store = StateStore(tmp_path / "state.db")
    # partitions as the simulated Slurm has them (`_squeue`): spot-tolerant jobs in "spot", which every pool
    # serves, the rest in "default", which spot pools do not: the daemon tells the two apart by partition
    spot = CapacityType.SPOT
    pools = [
        replace(p, queues=frozenset({"spot"} if p.capacity_type is spot else {"default", "spot"})) for p in sc.pools()
    ]
    return Daemon(
        pools=pools,
        provider=cloud,
        slurm=slurm,
        store=store,
        policy=policy,
        loop=LoopConfig(),
        lock=LeaderLock(store.path),
        clock=lambda: clock[0],
        **kw,
    )


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
    daemon = _daemon(tmp_path, sc, cloud, slurm, driver.policy, clock)
    store = daemon.store
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


class SnapshotFleet(RecordingFleet):
    """Also records, before each tick, what squeue/sinfo would show of the simulated Slurm (the canned Slurm the
    daemon reads), and every hold release."""

    def __init__(self, policy) -> None:  # type: ignore[no-untyped-def]
        super().__init__()
        self.policy = policy
        self.views: dict[float, tuple[dict[str, SlurmNode], list[SlurmJob], list]] = {}
        self.releases: list[tuple[float, tuple[str, ...]]] = []

    def tick(self, sim: SimSlurm) -> float | None:
        self.views[sim.now] = (_sinfo(sim), _squeue(sim), list(sim.cloud.offerings()))
        real = sim.release

        def release(pool, indices, *, grace_s):  # type: ignore[no-untyped-def]
            self.releases.append((sim.now, tuple(sim.pools[pool].node_name(i) for i in indices)))
            real(pool, indices, grace_s=grace_s)

        sim.release = release  # type: ignore[method-assign]
        try:
            return super().tick(sim)
        finally:
            sim.release = real  # type: ignore[method-assign]


def _sinfo(sim: SimSlurm, names_per_pool: int = 6) -> dict[str, SlurmNode]:
    out: dict[str, SlurmNode] = {}
    for pool in sim.pool_list:
        for i in range(min(pool.max_nodes, names_per_pool)):
            name = pool.node_name(i)
            nm = sim.names.get(name)
            if nm is None:
                flags = {"CLOUD", "POWERED_DOWN"}
                reason = ""
                released = sim.released[pool.name].get(i)
                if pool.name in sim.held and (released is None or sim.now - released > sim.release_grace_s):
                    flags.add("DRAIN")
                    reason = LATE_BIND_REASON if sim.conf.constrain else HOLD_REASON
                out[name] = SlurmNode(name, "idle", frozenset(flags), pool.gpus_per_node, 0, ("default",), (), reason)
                continue
            node = nm.node
            used = node.gpus - node.free
            state = "idle" if not node.jobs else ("allocated" if node.free == 0 else "mixed")
            flags = {"CLOUD"}
            reason = ""
            if not node.registered:
                flags |= {"POWERING_UP", "NOT_RESPONDING"}
            if node.state is NodeState.DRAINING:
                flags.add("DRAIN")
            if nm.held_boot:  # booted drained (late binding): drained until the daemon undrains it; slurmctld
                flags.add("DRAIN")  # 22.05 clears the reason at the power-up (tests/e2e/test_late_binding.py)
            if node.state is NodeState.DELETING:
                flags.add("POWERING_DOWN")
            out[name] = SlurmNode(
                name, state, frozenset(flags), node.gpus, used, ("default",), (), reason,
                alloc_cpus=1 if node.jobs else 0, extra={"last_busy": node.since},
            )  # fmt: skip
    return out


def _squeue(sim: SimSlurm) -> list[SlurmJob]:
    """The pending jobs, then the running ones on the nodes they hold (what the preemption hold reads)."""
    running = [j for j in sim.state.jobs if j.state is JobState.RUNNING]
    return _pending(sim) + [_running(sim, j) for j in running]


def _running(sim: SimSlurm, j: Job) -> SlurmJob:
    nodes = tuple(sorted(n for n, nm in sim.names.items() if j.idx in nm.node.jobs))
    partition = "spot" if j.spot_ok else "default"
    return SlurmJob(
        j.idx + 1,
        j.id,
        "RUNNING",
        "None",
        partition,
        j.nodes,
        j.gpus_per_node,
        None,
        (),
        0,
        None,
        j.pending_since,  # squeue's submit time: a requeue stamps it anew
        nodes=nodes,
        exclusive=sim.exclusive(j),  # squeue's `shared`: none on an OverSubscribe=EXCLUSIVE partition
    )


def _pending(sim: SimSlurm) -> list[SlurmJob]:
    return [
        SlurmJob(
            j.idx + 1,
            j.id,
            "PENDING",
            "Resources",
            "spot" if j.spot_ok else "default",
            j.nodes,
            j.gpus_per_node,
            None,
            tuple(sorted({f for term in sim.allowed(j) or () for f in term.split("&")})),  # as squeue lists them
            0,
            None,
            j.pending_since,  # squeue's submit time: a requeue stamps it anew (job_mgr.c batch_requeue_fini)
            exclusive=sim.exclusive(j),  # squeue's `shared`: none on an OverSubscribe=EXCLUSIVE partition
            constraint=constraint_expression(sim.allowed(j) or ()),  # the job_submit.lua's constraint, as widened
            admin_comment=RIGHT_SIZED_MARK if sim.allowed(j) else "",  # the lua's mark on what it constrained
            excluded_nodes=tuple(sorted(sim.excluded.get(j.idx, ()))),  # the ExcNodeList the driver set
        )
        for j in sim.pending_jobs()
    ]


def _own_exclusions(store: StateStore, jobs: list[SlurmJob], at: float) -> None:
    """The driver's ExcNodeLists in the daemon's store: its twin set them, so they are the daemon's own, not a
    user's ``--exclude`` (which the plan would keep the job off: `WorkUnit.avoid`)."""
    for j in jobs:
        if j.excluded_nodes:
            store.set_gang_exclusion(j.job_id, j.excluded_nodes, at)


def _daemon_follows(tmp_path: Path, sc: Scenario, trace: list[TraceJob], policy) -> SnapshotFleet:  # type: ignore[no-untyped-def]
    """Replay `trace` on the simulated Slurm with `policy` fixed, then feed the daemon the same views and
    ResumeProgram calls at the same times: it must release the same held names and launch the same instances."""
    driver = SnapshotFleet(policy)
    SimSlurm(trace, sc, driver).run()
    assert driver.releases, "the scenario must release a held overflow node"

    cloud = FakeCloud(offers=[])
    slurm = FakeSlurm()
    clock = [0.0]
    daemon = _daemon(tmp_path, sc, cloud, slurm, policy, clock)
    store = daemon.store
    launched: list[tuple[float, str, tuple[str, ...]]] = []
    released: list[tuple[float, tuple[str, ...]]] = []
    resumes = list(driver.resumes)
    try:
        for t in sorted(driver.views):
            clock[0] = t
            slurm.nodes_, jobs, offers = dict(driver.views[t][0]), driver.views[t][1], driver.views[t][2]
            slurm.jobs_ = jobs
            cloud.offers = offers
            _own_exclusions(store, jobs, t)
            _queue_resumes(store, resumes, t)
            res = daemon.tick()
            assert res.ok, res.error
            for c in res.commands:
                if c["command"] == "launch" and c["outcome"] == "ok":
                    launched.append((t, c["offering"], tuple(c["names"])))
                if c["command"] == "scontrol-undrain" and "released from the hold" in c["reason"]:
                    released.append((t, tuple(c["names"])))
    finally:
        daemon.lock.release()
        store.close()
    assert released == driver.releases
    assert launched == [(t, o, n) for t, _, _, o, n, out in driver.launch_log if out == "ok"]
    return driver


def test_with_a_reservation_hold_the_daemon_holds_and_releases_exactly_what_the_replay_did(tmp_path: Path) -> None:
    sc = Scenario(reserved_nodes=1)
    trace = [
        TraceJob(f"j{i}", t, d, 8, False) for i, (t, d) in enumerate([(0, 900), (100, 300), (200, 3000), (300, 60)])
    ]
    # the rule's settings for this trace, fixed for the run (how the settings evolve is the next test's), with a
    # hold budget the operator set (the default, 0, holds nothing)
    facts = replace(scenario_facts(sc, trace, 0.5), reservation_hold_max_s=3600.0)
    policy = settings_policy(replace(DEFAULT_POLICY, wait_value_usd_per_gpu_hour=0.5), (), facts)
    assert policy.batch_window_s > 0
    _daemon_follows(tmp_path, sc, trace, policy)


def test_on_an_exclusive_partition_the_daemon_plans_whole_nodes_as_the_replay_did(tmp_path: Path) -> None:
    """A3 Mega's partition is OverSubscribe=EXCLUSIVE (`fleet.slurm.conf.whole_node`): squeue shows its small jobs
    taking their nodes whole, and under a reservation hold the daemon releases one overflow node per job, as the
    replay did (which packed them on shared nodes before the forty-eighth round)."""
    sc = Scenario(machine_family="a3-megagpu", region="us-east4", reserved_nodes=1)
    trace = [
        TraceJob(f"j{i}", t, d, 1, False)
        for i, (t, d) in enumerate([(0, 900), (10, 300), (20, 3000), (30, 60), (40, 600), (900, 1200)])
    ]
    facts = replace(scenario_facts(sc, trace, 0.5), reservation_hold_max_s=3600.0)
    policy = settings_policy(replace(DEFAULT_POLICY, wait_value_usd_per_gpu_hour=0.5), (), facts)
    assert policy.batch_window_s > 0
    _daemon_follows(tmp_path, sc, trace, policy)


def test_taking_the_reservation_back_from_spot_work_the_daemon_releases_what_the_replay_did(tmp_path: Path) -> None:
    """`Policy.preempt_spot` with a reservation and spot pools: no batch window, yet the on-demand overflow is held
    so that Slurm preempts spot-tolerant work off the reserved node; a job preemption cannot place is released to
    on-demand at the next tick, by the daemon exactly as by the replay."""
    sc = Scenario(reserved_nodes=1, spot_fraction=0.5)
    shapes = [(0, 3000, True), (500, 300, False), (600, 300, False), (2000, 600, False)]
    trace = [TraceJob(f"j{i}", t, d, 8, s) for i, (t, d, s) in enumerate(shapes)]
    policy = settings_policy(DEFAULT_POLICY, (), scenario_facts(sc, trace, 0.0))
    assert policy.batch_window_s == 0 and policy.preempt_spot
    driver = _daemon_follows(tmp_path, sc, trace, policy)
    assert len(driver.releases) == 1  # j2 only: j1 took the reserved node from j0, j3 found it free
    assert driver.releases[0][1][0].split("-")[-2] != "resv"


class JobEndFleet(SnapshotFleet):
    """Also records the simulated Slurm's EpilogSlurmctld calls and every node the driver's ticks deleted."""

    def __init__(self, policy) -> None:  # type: ignore[no-untyped-def]
        super().__init__(policy)
        self.job_ends: list[tuple[float, int, tuple[str, ...]]] = []
        self.deletes: list[tuple[float, str, tuple[str, ...]]] = []

    def job_end(self, sim: SimSlurm, job, names) -> None:  # type: ignore[no-untyped-def]
        self.job_ends.append((sim.now, job.idx + 1, tuple(names)))
        super().job_end(sim, job, names)

    def tick(self, sim: SimSlurm) -> float | None:
        real = sim.delete

        def delete(pool, names):  # type: ignore[no-untyped-def]
            out = real(pool, names)
            self.deletes.append((sim.now, pool, tuple(out)))
            return out

        sim.delete = delete  # type: ignore[method-assign]
        try:
            return super().tick(sim)
        finally:
            sim.delete = real  # type: ignore[method-assign]


def test_job_end_wake_ups_make_the_daemon_delete_exactly_what_and_when_the_replay_did(tmp_path: Path) -> None:
    """EpilogSlurmctld: the replay's driver ticks JOB_END_LATENCY_S after each job's end; the daemon, fed the same
    wake-up rows and Slurm views at those times, deletes the same nodes in the same ticks and settles the rows."""
    from dataclasses import replace

    from autoscaler.replay.gpu_fleet import DEFAULT_POLICY, INTERVAL_S, JOB_END_LATENCY_S

    sc = Scenario()
    shapes = [(0, 1234, 1), (3, 777, 2), (7, 2001, 8), (12, 555, 16), (400, 1203, 1), (1500, 333, 4)]
    trace = [TraceJob(f"j{i}", t, d, g, False) for i, (t, d, g) in enumerate(shapes)]
    # a freed node is not kept: deleted at the job's end (late binding off: a job waiting for its shape would take
    # it first; the late-binding test covers that path)
    policy = replace(DEFAULT_POLICY, idle_timeout_s=0.0, late_bind=False)
    driver = JobEndFleet(policy)
    SimSlurm(trace, sc, driver).run()
    assert len(driver.job_ends) == len(trace)
    ends = driver.job_ends[:-1]  # the replay stops at the last job's end (its nodes are released with the run)
    woken = {round(at + JOB_END_LATENCY_S, 6) for at, _, _ in ends}
    grid = {t for t in driver.views if abs(t / INTERVAL_S - round(t / INTERVAL_S)) < 1e-6}
    by_wake = [d for d in driver.deletes if d[2] and round(d[0], 6) in woken and d[0] not in grid]
    assert [names for _, _, names in by_wake] == [names for _, _, names in ends], (
        "every freed node must be deleted by its job's wake-up, off the poll grid"
    )

    cloud = FakeCloud(offers=[])
    slurm = FakeSlurm()
    clock = [0.0]
    daemon = _daemon(tmp_path, sc, cloud, slurm, policy, clock)
    store = daemon.store
    deleted: list[tuple[float, str, tuple[str, ...]]] = []
    settled: dict[float, list[int | None]] = {}
    resumes, hooks = list(driver.resumes), list(ends)
    try:
        for t in sorted(driver.views):
            clock[0] = t
            slurm.nodes_, slurm.jobs_, cloud.offers = dict(driver.views[t][0]), driver.views[t][1], driver.views[t][2]
            _queue_resumes(store, resumes, t)
            while hooks and hooks[0][0] <= t:  # what deploy/slurm/epilog_slurmctld.sh queues
                at, job_id, names = hooks.pop(0)
                store.enqueue_job_end(job_id, names, at)
            res = daemon.tick()
            assert res.ok, res.error
            deleted += [(t, c["pool"], tuple(c["names"])) for c in res.commands if c["command"] == "delete"]
            if res.job_ends:
                settled[t] = res.job_ends
        assert store.open_job_ends() == []
    finally:
        daemon.lock.release()
        store.close()
    assert deleted == [d for d in driver.deletes if d[2]]
    # each deleting wake-up tick settled the job whose end woke it
    for at, job_id, _ in ends:
        assert job_id in settled[at + JOB_END_LATENCY_S]


def test_the_daemon_learns_exactly_the_settings_the_replay_learned(tmp_path: Path) -> None:
    """The settings rule over observed history (autoscaler/core/settings.py) in both: the replay's gpu-fleet
    learns from what the simulated Slurm showed by each moment, the daemon from squeue read at every 10 s poll
    and hook-driven tick.  Fed the same squeue, both must hold the same settings at every refresh point."""
    sc = Scenario(preemption_rate_per_hour=0.0)
    trace = [TraceJob(f"a{i}", 120.0 * i, 600.0, 1, False) for i in range(60)]  # a 1-GPU job every 2 min
    trace += [TraceJob(f"b{i}", 900.0 * i + 30, 2400.0, 8, False) for i in range(8)]
    driver = GpuFleetPolicy.for_scenario(sc)
    sim = SimSlurm(trace, sc, driver).run()
    assert driver.tracker is not None and len(driver.tracker.log) >= 2, "the settings must change during the run"
    assert any(p.idle_timeout_for("a3-highgpu-1g") > 0 for _, p in driver.tracker.log)
    jobs = sorted(sim.state.jobs, key=lambda j: j.submit)
    assert all(j.preemptions == 0 and j.start is not None and j.end is not None for j in jobs)

    def squeue(t: float) -> list[SlurmJob]:
        out = []
        for j in jobs:
            if j.submit <= t < j.end:  # type: ignore[operator]
                running = j.start <= t  # type: ignore[operator]
                out.append(
                    SlurmJob(
                        j.idx + 1, j.id, "RUNNING" if running else "PENDING", "None", "default", j.nodes,
                        j.gpus_per_node, None, (), 0, None, j.submit, start_time=j.start if running else None,
                    )
                )  # fmt: skip
        return out

    t0 = driver.tick_log[0]
    end = max(j.end for j in jobs)  # type: ignore[type-var]
    polls = [t0 + k * INTERVAL_S for k in range(int((end - t0) / INTERVAL_S) + 2)]
    times = sorted(set(polls) | set(driver.tick_log))
    clock = [t0]
    cloud = FakeCloud(offers=list(sim.cloud.offerings()))
    settings = SettingsTracker(base=driver.tracker.base, boot_s=sc.ready_s)
    daemon = _daemon(tmp_path, sc, cloud, FakeSlurm(), driver.tracker.base, clock, settings=settings)
    store = daemon.store
    try:
        for t in times:
            clock[0] = t
            daemon.slurm.jobs_ = squeue(t)  # type: ignore[attr-defined]
            assert daemon.tick().ok
    finally:
        daemon.lock.release()
        store.close()
    assert daemon.settings is not None
    last = driver.tick_log[-1]  # the replay stops ticking when its last job ends; the daemon polls on
    assert [(at, p) for at, p in daemon.settings.log if at <= last] == driver.tracker.log


class LateBindFleet(SnapshotFleet):
    """Also records every drained boot, undrain of a registered held boot and constraint widening."""

    def __init__(self, policy) -> None:  # type: ignore[no-untyped-def]
        super().__init__(policy)
        self.boots: list[tuple[float, tuple[str, ...]]] = []
        self.undrains: list[tuple[float, tuple[str, ...]]] = []
        self.widened: list[tuple[float, int, str]] = []
        self.resume_fails: list[tuple[float, tuple[str, ...]]] = []

    def resume_fail(self, sim: SimSlurm, names) -> None:  # type: ignore[no-untyped-def]
        self.resume_fails.append((sim.now, tuple(names)))
        super().resume_fail(sim, names)

    def tick(self, sim: SimSlurm) -> float | None:
        boot, undrain, allow = sim.boot_held, sim.undrain_held, sim.allow

        def boot_held(pool, count):  # type: ignore[no-untyped-def]
            out = boot(pool, count)
            if out:
                self.boots.append((sim.now, tuple(out)))
            return out

        def undrain_held(names):  # type: ignore[no-untyped-def]
            self.undrains.append((sim.now, tuple(names)))
            undrain(names)

        def allow_(job, machine_types):  # type: ignore[no-untyped-def]
            self.widened.append((sim.now, job.idx + 1, "|".join(sorted(machine_types))))
            allow(job, machine_types)

        sim.boot_held, sim.undrain_held, sim.allow = boot_held, undrain_held, allow_  # type: ignore[method-assign]
        try:
            return super().tick(sim)
        finally:
            sim.boot_held, sim.undrain_held, sim.allow = boot, undrain, allow  # type: ignore[method-assign]


def _late_bind_daemon(tmp_path: Path, sc: Scenario, driver: LateBindFleet, policy, outs=()) -> dict[str, list]:  # type: ignore[no-untyped-def]
    """The daemon fed `driver`'s views, ResumeProgram and ResumeTimeout calls and the sim cloud's stockout windows
    `outs` at the replay's tick times: its boots, undrains of registered boots, releases, widenings, launches and
    aborted boots (`power_down_force`)."""
    cloud = FakeCloud(offers=[])
    slurm = FakeSlurm()
    clock = [0.0]
    daemon = _daemon(tmp_path, sc, cloud, slurm, policy, clock)
    store = daemon.store
    got: dict[str, list] = {"boot": [], "undrain": [], "release": [], "widen": [], "launch": [], "abort": []}
    resumes, fails = list(driver.resumes), list(driver.resume_fails)
    try:
        for t in sorted(driver.views):
            clock[0] = t
            slurm.nodes_, slurm.jobs_, cloud.offers = dict(driver.views[t][0]), driver.views[t][1], driver.views[t][2]
            while fails and fails[0][0] <= t:  # ResumeTimeout: what `fleet slurm resume-fail HOSTLIST` queues
                at, names = fails.pop(0)
                store.enqueue_power("resume_fail", list(names), at, {})
            cloud.stocked_out = {  # the sim cloud's stockout windows
                o.key
                for o in cloud.offers
                for w in outs
                if (o.key.zone, o.key.machine_type, o.key.capacity_type) == (w.zone, w.machine_type, w.capacity_type)
                and w.start <= t < w.end
            }
            _own_exclusions(store, slurm.jobs_, t)
            _queue_resumes(store, resumes, t)
            res = daemon.tick()
            assert res.ok, res.error
            for c in res.commands:
                if c["outcome"] != "ok":
                    continue
                if c["command"] == "scontrol-power_up":
                    got["boot"].append((t, tuple(c["names"])))
                elif c["command"] == "scontrol-undrain" and "registered" in c["reason"]:
                    got["undrain"].append((t, tuple(c["names"])))
                elif c["command"] == "scontrol-undrain" and "released" in c["reason"]:
                    got["release"].append((t, tuple(c["names"])))
                elif c["command"] == "scontrol-features":
                    got["widen"].append((t, c["job_id"], c["features"]))
                elif c["command"] == "launch":
                    got["launch"].append((t, c["offering"], tuple(c["names"])))
                elif c["command"] == "scontrol-power_down_force" and "no longer needed" in c["reason"]:
                    got["abort"].append((t, tuple(c["names"])))
    finally:
        daemon.lock.release()
        store.close()
    return got


def test_under_late_binding_the_daemon_boots_undrains_widens_and_launches_what_the_replay_did(tmp_path: Path) -> None:
    """Strict late binding (`Policy.late_bind`, no reservation): every pool held, jobs hard-constrained to their
    right-sized machine type, launches booted drained and undrained once registered (a gang's names together),
    and - with every zone of the 1-GPU shape stocked out for a while - a job's constraint widened to the shape the
    plan falls back to.  Fed the simulated Slurm's views and ResumeProgram calls at the same times, the daemon
    boots, undrains, widens and launches exactly what the replay's driver did."""
    sc = Scenario(preemption_rate_per_hour=0.0)
    one_g = next(p for p in sc.pools() if p.machine_type == "a3-highgpu-1g")
    outs = tuple(
        StockoutWindow(
            zone=z, start=0.0, end=1500.0, machine_type="a3-highgpu-1g", capacity_type=CapacityType.ON_DEMAND
        )
        for z in one_g.zones
    )
    cfg = sc.sim_config().model_copy(update={"stockout_windows": outs})
    shapes = [(0, 900, 1), (5, 600, 1), (20, 1200, 8), (40, 800, 16), (700, 300, 1), (1000, 400, 1), (2000, 500, 1)]
    shapes += [(2010, 700, 2), (2400, 300, 1), (2405, 200, 1)]
    trace = [TraceJob(f"j{i}", t, d, g, False) for i, (t, d, g) in enumerate(shapes)]
    policy = replace(DEFAULT_POLICY, late_bind=True, idle_timeout_s=120.0)
    driver = LateBindFleet(policy)
    SimSlurm(trace, sc, driver, sim_config=cfg).run()
    assert driver.boots and driver.undrains, "the scenario must boot held names and undrain them"
    assert any(sum("8g" in n for n in names) == 2 for _, names in driver.boots), "and boot a gang's names together"
    assert not driver.releases  # gangs are booted too since the twenty-ninth round
    assert any("a3-highgpu-2g" in f for *_, f in driver.widened), "and widen a 1-GPU job to the 2-GPU shape"

    got = _late_bind_daemon(tmp_path, sc, driver, policy, outs)
    assert got["boot"] == driver.boots
    assert got["undrain"] == driver.undrains
    assert got["release"] == driver.releases
    assert got["widen"] == driver.widened
    assert got["launch"] == [(t, o, n) for t, _, _, o, n, out in driver.launch_log if out == "ok"]


def test_after_aborting_a_surplus_boot_the_daemon_boots_the_next_job_when_the_replay_does(tmp_path: Path) -> None:
    """Late binding without an idle keep: j1's boot turns surplus when j0's node frees and is aborted; j2 arrives
    while the aborted name powers down (SuspendTimeout).  The daemon, which does not count a POWERING_DOWN name as a
    boot on its way, boots j2 a name at once; so must the replay (it once held j2 back until the name powered
    off, 300 s later)."""
    sc = Scenario(preemption_rate_per_hour=0.0)
    trace = [TraceJob("j0", 0, 70, 1, False), TraceJob("j1", 400, 5000, 1, False), TraceJob("j2", 440, 5000, 1, False)]
    policy = replace(DEFAULT_POLICY, late_bind=True, idle_timeout_s=0.0)
    driver = LateBindFleet(policy)
    SimSlurm(trace, sc, driver).run()
    got = _late_bind_daemon(tmp_path, sc, driver, policy)
    assert got["abort"], "the scenario must abort a surplus held boot"
    assert [names for _, names in driver.boots] == [
        ("a3-highgpu-1g-on-demand-0",),
        ("a3-highgpu-1g-on-demand-1",),
        ("a3-highgpu-1g-on-demand-2",),  # j2's own boot, while -1 powers down
    ]
    assert got["boot"] == driver.boots
    assert got["launch"] == [(t, o, n) for t, _, _, o, n, out in driver.launch_log if out == "ok"]


def test_with_shared_nodes_the_daemon_boots_undrains_and_launches_what_the_replay_did(tmp_path: Path) -> None:
    """`Policy.share_nodes` under late binding: the lua's constraint takes the family, the plan boots the family's
    largest shape for small jobs and packs the next ones onto its free GPUs.  Fed the same views, the daemon boots,
    undrains, widens and launches exactly what the replay's driver did."""
    sc = Scenario(preemption_rate_per_hour=0.0)
    shapes = [(0, 900, 1), (5, 600, 1), (20, 1200, 2), (40, 800, 16), (700, 300, 1), (1000, 400, 4), (2000, 500, 1)]
    trace = [TraceJob(f"j{i}", t, d, g, False) for i, (t, d, g) in enumerate(shapes)]
    policy = replace(DEFAULT_POLICY, late_bind=True, idle_timeout_s=120.0, share_nodes=True, defragment=False)
    driver = LateBindFleet(policy)
    SimSlurm(trace, sc, driver).run()
    booted = [n for _, names in driver.boots for n in names]
    assert booted and all("a3-highgpu-8g" in n for n in booted), "small jobs boot the family's largest shape"
    singles = [n for _, names in driver.boots if len(names) == 1 for n in names]  # the gang boots its two together
    assert len(singles) < 4, "and the next small jobs take its free GPUs"
    got = _late_bind_daemon(tmp_path, sc, driver, policy)
    assert got["boot"] == driver.boots
    assert got["undrain"] == driver.undrains
    assert got["release"] == driver.releases
    assert got["widen"] == driver.widened
    assert got["launch"] == [(t, o, n) for t, _, _, o, n, out in driver.launch_log if out == "ok"]
