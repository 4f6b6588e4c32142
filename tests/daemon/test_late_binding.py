"""Strict late binding in the daemon's tick (`Policy.late_bind`, `autoscaler.core.hold`), over the in-memory Slurm.

Every pool is held (powered-down names drained); for a GPU job Slurm could not place the daemon powers up a drained
name of the planned pool (it registers IDLE+DRAIN, with no job), undrains it once registered, and widens a job's
hard constraint when the plan serves it with another machine type.  The same decisions as the replay's driver are
checked in test_one_path.py; the real slurmctld in tests/e2e/test_late_binding.py."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

import pytest

from autoscaler.cloud import CloudNode, CloudNodeStatus, Offering, OfferingKey
from autoscaler.daemon.tick import LATE_BIND_BOOT_REASON, LATE_BIND_REASON, Daemon, own_reason
from autoscaler.model import Policy, Pool
from autoscaler.slurm.constraint import RIGHT_SIZED_MARK
from autoscaler.slurm.readers import SlurmJob
from fleet.catalog import CapacityType
from tests.daemon.conftest import ZONE_A, ZONE_B, Clock
from tests.daemon.fakes import FakeCloud, FakeSlurm, offering

POLICY = Policy(idle_timeout_s=600, backoff_s=300, late_bind=True)


def _pool(gpus: int) -> Pool:
    return Pool(
        name=f"od-{gpus}g",
        machine_type=f"a3-highgpu-{gpus}g",
        gpu_type="nvidia-h100-80gb",
        gpus_per_node=gpus,
        zones=(ZONE_A, ZONE_B),
        capacity_type=CapacityType.ON_DEMAND,
        max_nodes=3,
        node_name_prefix=f"c1-od{gpus}g",
        queues=frozenset({"gpu"}),
    )


POOLS = [_pool(1), _pool(2)]


def _offers() -> list[Offering]:
    return [
        Offering(
            offering(z, CapacityType.ON_DEMAND, p.machine_type), 11.0 * p.gpus_per_node, p.gpu_type, p.gpus_per_node
        )
        for p in POOLS
        for z in (ZONE_A, ZONE_B)
    ]


def _job(
    job_id: int, features: tuple[str, ...] = ("a3-highgpu-1g",), reason: str = "Resources", *, gpus: int = 1
) -> SlurmJob:
    """A pending job; a constraint of one machine type is the job_submit.lua's (marked), any other the user's."""
    mark = RIGHT_SIZED_MARK if len(features) == 1 else ""
    return SlurmJob(job_id, f"j{job_id}", "PENDING", reason, "gpu", 1, gpus, None, features, 0, None, 1.0,
                    admin_comment=mark)  # fmt: skip


def _boot_for_a_job(fleet: Daemon, slurm: FakeSlurm, clock: Clock) -> None:
    """Hold the pools, then job 7 (1 GPU) pending: the daemon boots c1-od1g-0 drained, ResumeProgram queues it,
    the next tick creates the instance."""
    fleet.tick()
    slurm.jobs_ = [_job(7)]
    clock.advance(1)
    fleet.tick()
    fleet.store.enqueue_power("resume", ["c1-od1g-0"], clock(), {})
    clock.advance(1)
    fleet.tick()


def held_daemon(
    make_daemon: Callable[..., Daemon], slurm: FakeSlurm, cloud: FakeCloud, pools: list[Pool] = POOLS
) -> Daemon:
    """A late-binding daemon over `pools`, every name of theirs powered down in Slurm, every offering in stock."""
    slurm.nodes_.clear()
    for p in pools:
        slurm.add_cloud_nodes([p.node_name(i) for i in range(p.max_nodes)], gpus=p.gpus_per_node)
    cloud.offers = _offers()
    return make_daemon(pools=pools, policy=POLICY)


def node_up(
    cloud: FakeCloud, slurm: FakeSlurm, clock: Clock, gpus: int, index: int, state: str = "idle", **kw: int
) -> None:
    """Name `index` of the `gpus`-GPU pool up a minute: its instance RUNNING, Slurm showing it `state`."""
    pool = next(p for p in POOLS if p.gpus_per_node == gpus)
    name = pool.node_name(index)
    key = offering(ZONE_A, CapacityType.ON_DEMAND, pool.machine_type)
    cloud.nodes_[name] = CloudNode(name, pool.name, key, CloudNodeStatus.RUNNING, clock() - 60, f"i-{name}")
    slurm.set(name, state, **kw)


@pytest.fixture
def fleet(make_daemon: Callable[..., Daemon], slurm: FakeSlurm, cloud: FakeCloud) -> Daemon:
    return held_daemon(make_daemon, slurm, cloud)


def _commands(res, name: str) -> list[dict]:  # type: ignore[no-untyped-def]
    return [c for c in res.commands if c["command"] == name and c["outcome"] == "ok"]


def test_every_pool_is_held_and_a_pending_job_boots_one_drained_name_of_its_shape(
    fleet: Daemon, slurm: FakeSlurm, cloud: FakeCloud, clock: Clock
) -> None:
    res = fleet.tick()
    drains = _commands(res, "scontrol-drain")
    assert sorted(n for c in drains for n in c["names"]) == sorted(slurm.nodes_)  # every powered-down name
    assert all(c["reason"] == LATE_BIND_REASON for c in drains)
    assert not fleet.awaiting_hold_change

    slurm.jobs_ = [_job(7)]
    clock.advance(1)
    res = fleet.tick()
    boots = _commands(res, "scontrol-power_up")
    assert [c["names"] for c in boots] == [["c1-od1g-0"]]  # the right-sized shape, lowest index
    assert slurm.nodes_["c1-od1g-0"].drain and slurm.nodes_["c1-od1g-0"].powering_up  # stays drained
    assert fleet.awaiting_hold_change and not fleet.hold_change_due()
    assert cloud.list_nodes() == []  # the instance comes with ResumeProgram, as for any power-up

    clock.advance(1)  # ResumeProgram not delivered yet: the boot is outstanding, nothing more is booted
    assert _commands(fleet.tick(), "scontrol-power_up") == []

    fleet.store.enqueue_power("resume", ["c1-od1g-0"], clock(), {})  # what `fleet slurm resume` queues
    clock.advance(1)
    res = fleet.tick()
    assert [c["names"] for c in _commands(res, "launch")] == [["c1-od1g-0"]]
    assert _commands(res, "scontrol-power_up") == []  # the booting node is the job's capacity now


@pytest.mark.parametrize("reason", ["", LATE_BIND_BOOT_REASON])
def test_a_registered_held_boot_is_undrained_and_an_admin_drain_is_left_alone(
    fleet: Daemon, slurm: FakeSlurm, clock: Clock, reason: str
) -> None:
    _boot_for_a_job(fleet, slurm, clock)
    slurm.set("c1-od1g-0", "idle", "DRAIN")  # slurmd registered: IDLE+DRAIN
    # slurmctld 22.05 clears the drain reason at the power-up, or shows the boot command's (both measured)
    slurm.nodes_["c1-od1g-0"] = replace(slurm.nodes_["c1-od1g-0"], reason=reason)
    slurm.set("c1-od2g-0", "idle", "DRAIN")  # an admin's drain: never touched
    slurm.nodes_["c1-od2g-0"] = replace(slurm.nodes_["c1-od2g-0"], reason="bad GPU")
    assert fleet.hold_change_due()
    clock.advance(1)
    res = fleet.tick()
    assert [c["names"] for c in _commands(res, "scontrol-undrain")] == [["c1-od1g-0"]]
    assert not slurm.nodes_["c1-od1g-0"].drain and slurm.nodes_["c1-od2g-0"].drain
    assert not fleet.awaiting_hold_change


def test_a_drain_reason_slurmctld_added_to_ours_is_not_ours_to_release() -> None:
    """23.11 appends slurmctld's reasons to a node's (`set_node_reason`): the hold releases only drains that are
    the daemon's alone, never one that also carries slurmctld's (or an admin's) reason."""
    assert own_reason(LATE_BIND_REASON) and own_reason(f"{LATE_BIND_BOOT_REASON} : {LATE_BIND_REASON}")
    assert not own_reason(f"{LATE_BIND_BOOT_REASON} : ResumeTimeout reached")
    assert not own_reason("bad GPU") and not own_reason("")


def test_a_job_served_with_another_shape_has_its_constraint_widened(
    fleet: Daemon, slurm: FakeSlurm, cloud: FakeCloud, clock: Clock
) -> None:
    cloud.stocked_out = {o.key for o in cloud.offers if o.key.machine_type == "a3-highgpu-1g"}
    fleet.tick()
    slurm.jobs_ = [_job(7), _job(8, features=("a3-highgpu-8g", "nvlink"))]  # 8: a user's own constraint
    clock.advance(1)
    fleet.tick()  # boots a 1g name; its launch is refused below and the offering backed off
    fleet.store.enqueue_power("resume", ["c1-od1g-0"], clock(), {})
    clock.advance(1)
    fleet.tick()
    clock.advance(1)
    res = fleet.tick()
    widened = _commands(res, "scontrol-features")
    assert [(c["job_id"], c["features"]) for c in widened] == [(7, "a3-highgpu-1g|a3-highgpu-2g")]
    assert slurm.feature_updates[-1] == (7, "a3-highgpu-1g|a3-highgpu-2g")
    assert any("c1-od2g" in n for c in _commands(res, "scontrol-power_up") for n in c["names"])


def test_a_users_own_constraint_is_served_as_asked_and_never_widened(
    fleet: Daemon, slurm: FakeSlurm, cloud: FakeCloud, clock: Clock
) -> None:
    """A 1-GPU job whose user asked for the 2-GPU machine type (`-C a3-highgpu-2g`: no lua mark) gets a 2-GPU name
    booted for it, even after that shape stocks out: the daemon does not boot a 1-GPU node the job may not use, nor
    rewrite the user's constraint.  (Before the tenth round the plan ignored a job's constraint: it booted the
    right-sized 1-GPU name and widened the user's constraint to it.)"""
    fleet.tick()
    slurm.jobs_ = [replace(_job(9, features=("a3-highgpu-2g",)), admin_comment="")]  # the user's, not the lua's
    clock.advance(1)
    res = fleet.tick()
    assert [c["names"] for c in _commands(res, "scontrol-power_up")] == [["c1-od2g-0"]]
    assert not _commands(res, "scontrol-features")
    cloud.stocked_out = {o.key for o in cloud.offers if o.key.machine_type == "a3-highgpu-2g"}
    fleet.store.enqueue_power("resume", ["c1-od2g-0"], clock(), {})
    for _ in range(3):
        clock.advance(1)
        res = fleet.tick()
        assert not _commands(res, "scontrol-features"), res.commands
        assert not any("c1-od1g" in n for c in _commands(res, "scontrol-power_up") for n in c["names"])
    assert slurm.feature_updates == []


def test_a_job_asking_more_cpus_than_its_gpus_shape_has_gets_a_node_that_holds_it(
    make_daemon: Callable[..., Daemon], slurm: FakeSlurm, cloud: FakeCloud, clock: Clock
) -> None:
    """A 1-GPU job asking 30 CPUs: the lua constrains it to the 2-GPU machine type (tests/slurm/
    test_job_submit_gpus.py) and the daemon, reading the same CPUs per node in squeue, boots a 2-GPU name and widens
    nothing (before the tenth round it booted the 1-GPU shape by GPUs alone, and widened the constraint to it: a
    node the job could never run on)."""
    slurm.nodes_.clear()
    for p in POOLS:  # a3-highgpu-1g / -2g: 26 / 52 CPUs, as sinfo reports the rendered nodes
        slurm.add_cloud_nodes([p.node_name(i) for i in range(p.max_nodes)], gpus=p.gpus_per_node,
                              features=(p.machine_type, "on-demand"), cpus=26 * p.gpus_per_node,
                              memory_mib=226_611 * p.gpus_per_node)  # fmt: skip
    cloud.offers = _offers()
    fleet = make_daemon(pools=POOLS, policy=POLICY)
    fleet.tick()
    slurm.jobs_ = [replace(_job(9, features=("a3-highgpu-2g",)), cpus_per_node=30)]  # marked: the lua's
    clock.advance(1)
    res = fleet.tick()
    assert [c["names"] for c in _commands(res, "scontrol-power_up")] == [["c1-od2g-0"]]
    assert not _commands(res, "scontrol-features")


@pytest.mark.parametrize(("cpus", "cordoned"), [(30, False), (4, True)])
def test_a_node_is_cordoned_as_oversized_only_if_its_work_could_run_on_the_smaller_shape(
    make_daemon: Callable[..., Daemon], slurm: FakeSlurm, cloud: FakeCloud, clock: Clock, cpus: int, cordoned: bool
) -> None:
    """A 2-GPU node running one 1-GPU job: oversized (the 1-GPU shape costs the same per GPU), so cordoned and
    deleted once its job ends - unless the job asks more CPUs than the 1-GPU machine has (26): then this node is
    the right size for it and keeps taking work (before the eleventh round the cordon read GPUs alone).  No idle
    keep: a shape kept warm is never cordoned (`Policy.keeps_warm`)."""
    slurm.nodes_.clear()
    for p in POOLS:
        slurm.add_cloud_nodes([p.node_name(i) for i in range(p.max_nodes)], gpus=p.gpus_per_node,
                              features=(p.machine_type, "on-demand"), cpus=26 * p.gpus_per_node,
                              memory_mib=226_611 * p.gpus_per_node)  # fmt: skip
    cloud.offers = _offers()
    key = offering(ZONE_A, CapacityType.ON_DEMAND, "a3-highgpu-2g")
    cloud.nodes_["c1-od2g-0"] = CloudNode("c1-od2g-0", "od-2g", key, CloudNodeStatus.RUNNING, clock() - 600, "i-1")
    slurm.set("c1-od2g-0", "mixed", gpus_used=1)
    running = SlurmJob(9, "j9", "RUNNING", "None", "gpu", 1, 1, None, (), 0, None, 1.0, nodes=("c1-od2g-0",))
    slurm.jobs_ = [replace(running, cpus_per_node=cpus)]
    fleet = make_daemon(pools=POOLS, policy=replace(POLICY, idle_timeout_s=0.0))
    res = fleet.tick()
    drained = [n for c in _commands(res, "scontrol-drain") if "oversized" in c["reason"] for n in c["names"]]
    assert drained == (["c1-od2g-0"] if cordoned else [])


@pytest.mark.parametrize("shown", ["pending", "powering-up"])
def test_a_held_boot_under_way_is_not_booted_twice_whatever_slurmctld_shows_of_it(
    fleet: Daemon, slurm: FakeSlurm, clock: Clock, shown: str
) -> None:
    """slurmctld 22.05 shows a drained name the daemon powered up with the boot command's reason, first with the
    power-up pending (POWERED_DOWN + POWER_UP), then POWERING_UP, until it registers (measured on real slurmctld:
    tests/e2e/test_late_binding.py, the sized pools).  Both are a boot under way: the next tick boots no second
    name for the job (before the tenth round it did, whenever a tick fell before the instance existed)."""
    fleet.tick()
    slurm.jobs_ = [_job(7)]
    clock.advance(1)
    res = fleet.tick()
    assert [c["names"] for c in _commands(res, "scontrol-power_up")] == [["c1-od1g-0"]]
    node = slurm.nodes_["c1-od1g-0"]
    flags = {"CLOUD", "DRAIN", "POWERED_DOWN", "POWER_UP"} if shown == "pending" else node.flags
    slurm.nodes_["c1-od1g-0"] = replace(node, flags=frozenset(flags), reason=LATE_BIND_BOOT_REASON)
    clock.advance(1)
    res = fleet.tick()
    assert not _commands(res, "scontrol-power_up"), res.commands
    assert fleet.awaiting_hold_change


def test_the_run_loop_sees_a_submission_through_the_wake_up_file(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The job_submit.lua rewrites the file at every submission; the watcher reports each change once, and what
    the file held before the loop started is no submission."""
    import os
    from types import SimpleNamespace

    from autoscaler.daemon.loop import RunLoop

    wake = tmp_path / "submit-wake"
    wake.write_text("1\n")  # a submission from before the daemon started
    loop = RunLoop(SimpleNamespace(submit_wake=wake), interval_s=10)  # type: ignore[arg-type]
    assert loop._submitted() is False  # the baseline, as `run` takes it before the first tick
    assert loop._submitted() is False
    wake.write_text("2\n")
    os.utime(wake, ns=(10**18, 10**18))  # a distinct mtime whatever the filesystem's resolution
    assert loop._submitted() is True
    assert loop._submitted() is False  # reported once
    assert RunLoop(SimpleNamespace(submit_wake=None), interval_s=10)._submitted() is False  # late binding off


def test_widening_a_job_that_moved_on_is_no_failure(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The tick read the job pending; by the widen it started (or left): slurmctld refuses the update, which is
    nothing to do, not a Slurm failure (no warning, counted ok); a controller that does not answer still fails."""
    from autoscaler.daemon.actuate import Actuator
    from autoscaler.daemon.metrics import Metrics
    from autoscaler.daemon.state import StateStore

    slurm = FakeSlurm()
    slurm.jobs_ = [replace(_job(7), state="RUNNING")]
    store = StateStore(tmp_path / "state.db")
    act = Actuator(provider=FakeCloud(offers=[]), slurm=slurm, store=store, metrics=Metrics(), clock=lambda: 0.0)
    try:
        assert act.widen_job(7, "a3-highgpu-1g|a3-highgpu-2g", "test") is True
        assert act.widen_job(8, "a3-highgpu-1g|a3-highgpu-2g", "test") is True  # gone from the queue
        assert slurm.feature_updates == []
        slurm.down = True
        assert act.widen_job(7, "a3-highgpu-1g|a3-highgpu-2g", "test") is False
    finally:
        store.close()


def test_a_restarted_daemon_watches_the_boots_it_finds_under_way(fleet: Daemon, slurm: FakeSlurm) -> None:
    """The names a previous daemon booted drained show in sinfo (POWERING_UP+DRAIN, no reason): the first tick
    takes them as held boots, so the run loop's watcher reads sinfo for their registration again."""
    slurm.set("c1-od1g-0", "idle", "DRAIN", "POWERING_UP", "NOT_RESPONDING")
    assert not fleet.awaiting_hold_change
    fleet.tick()
    assert fleet.awaiting_hold_change and not fleet.hold_change_due()
    slurm.set("c1-od1g-0", "idle", "DRAIN")  # registered
    assert fleet.hold_change_due()


def test_a_held_name_powered_down_is_drained_again_once_slurmctld_takes_the_power_down(
    fleet: Daemon, slurm: FakeSlurm, clock: Clock
) -> None:
    """slurmctld's power thread clears a DRAIN it finds on a node whose power-down is pending (22.05), so the hold
    drains a scaled-down name only once it is POWERING_DOWN; the run loop's watcher reads sinfo meanwhile and ticks
    when the thread has taken it. Drained too early, the name would come back allocatable after SuspendTimeout and
    slurmctld would bind the next job to it."""
    _boot_for_a_job(fleet, slurm, clock)
    slurm.set("c1-od1g-0", "idle", "DRAIN")  # registered, idle since long ago (the job ran elsewhere)
    slurm.jobs_ = []
    clock.advance(1)
    res = fleet.tick()  # undrained, then scaled down: drained with the scale-down's reason, powered down
    assert [c["names"] for c in _commands(res, "scontrol-power_down")] == [["c1-od1g-0"]]
    assert "POWER_DOWN" in slurm.nodes_["c1-od1g-0"].flags  # pending: a drain set now would not last
    assert fleet.awaiting_hold_change and not fleet.hold_change_due()
    clock.advance(1)
    assert _commands(fleet.tick(), "scontrol-drain") == []

    slurm.power_thread()  # POWERING_DOWN: a drain set from now on survives the power-down
    assert fleet.hold_change_due()
    clock.advance(1)
    res = fleet.tick()
    assert [c["names"] for c in _commands(res, "scontrol-drain")] == [["c1-od1g-0"]]
    assert not fleet.awaiting_hold_change
    slurm.power_downs_complete()
    node = slurm.nodes_["c1-od1g-0"]
    assert node.powered_down and node.drain and node.reason == LATE_BIND_REASON  # held: no job is bound to it


def test_a_held_boot_that_never_registers_is_held_again_through_a_power_down(
    fleet: Daemon, slurm: FakeSlurm, clock: Clock
) -> None:
    """ResumeTimeout: slurmctld marks the stuck boot DOWN+POWERED_DOWN, clears its DRAIN and calls ResumeFailProgram.
    The tick backs the offering off and powers the name down instead of `state=resume`, which would clear DOWN and
    DRAIN together and leave it allocatable until the hold's drain (a hole a CI run of the e2e test caught); the
    power thread clears DOWN as it takes the power-down, the name is POWERING_DOWN meanwhile, and the hold drains
    it then; the job, still pending, gets the next name's boot."""
    _boot_for_a_job(fleet, slurm, clock)
    assert fleet.awaiting_hold_change
    slurm.set("c1-od1g-0", "down", "POWERED_DOWN")  # ResumeTimeout reached
    fleet.store.enqueue_power("resume_fail", ["c1-od1g-0"], clock(), {})
    clock.advance(1)
    res = fleet.tick()
    assert _commands(res, "scontrol-resume") == []
    assert [c["names"] for c in _commands(res, "scontrol-power_down")] == [["c1-od1g-0"]]
    boots = [c["names"] for c in _commands(res, "scontrol-power_up")]
    node = slurm.nodes_["c1-od1g-0"]
    assert node.down or node.drain  # never allocatable
    assert fleet.awaiting_hold_change
    slurm.power_thread()  # DOWN and DRAIN cleared, POWERING_DOWN: not allocatable either
    assert fleet.hold_change_due()
    clock.advance(1)
    res = fleet.tick()
    assert [c["names"] for c in _commands(res, "scontrol-drain")] == [["c1-od1g-0"]]
    boots += [c["names"] for c in _commands(res, "scontrol-power_up")]
    slurm.power_downs_complete()
    node = slurm.nodes_["c1-od1g-0"]
    assert node.powered_down and node.drain and not node.down and node.reason == LATE_BIND_REASON
    assert boots == [["c1-od1g-1"]]  # job 7, still pending, boots the next name (watched in its turn)


NO_KEEP = replace(POLICY, idle_timeout_s=0)


def _booting_for_job_7(
    make_daemon: Callable[..., Daemon], slurm: FakeSlurm, cloud: FakeCloud, clock: Clock, policy: Policy
) -> Daemon:
    """Every pool's names in Slurm, a daemon with `policy`, and job 7's held boot under way (`_boot_for_a_job`)."""
    slurm.nodes_.clear()
    for p in POOLS:
        slurm.add_cloud_nodes([p.node_name(i) for i in range(p.max_nodes)], gpus=p.gpus_per_node)
    cloud.offers = _offers()
    fleet = make_daemon(pools=POOLS, policy=policy)
    _boot_for_a_job(fleet, slurm, clock)
    return fleet


@pytest.mark.parametrize("policy", [NO_KEEP, POLICY], ids=["no-idle-keep", "idle-keep-600s"])
def test_a_held_boot_no_job_needs_any_more_is_aborted_when_its_shape_has_no_idle_keep(
    make_daemon: Callable[..., Daemon], slurm: FakeSlurm, cloud: FakeCloud, clock: Clock, policy: Policy
) -> None:
    """Job 7's held boot is under way (instance up, not registered) when the job leaves the queue - it took a node
    that freed up first, or was cancelled.  With no idle keep for the shape the node would be scaled down as it
    registers, so the tick aborts the boot now (`scontrol update state=power_down_force`, which slurmctld 22.05
    takes on a POWERING_UP+DRAIN node: bench/probe_abort_held_boot.py) and deletes the instance, then drains the
    name again once the power thread has taken it.  With an idle keep the boot goes on (the next arrival's)."""
    fleet = _booting_for_job_7(make_daemon, slurm, cloud, clock, policy)
    assert [n.name for n in cloud.list_nodes()] == ["c1-od1g-0"]
    clock.advance(1)
    res = fleet.tick()  # job 7 still pending: its boot is planned for it, nothing is aborted
    assert _commands(res, "scontrol-power_down_force") == [] and cloud.deleted == []

    slurm.jobs_ = []
    clock.advance(1)
    res = fleet.tick()
    if policy.idle_timeout_s > 0:
        assert _commands(res, "scontrol-power_down_force") == [] and cloud.deleted == []
        assert slurm.nodes_["c1-od1g-0"].powering_up
        return
    assert [c["names"] for c in _commands(res, "scontrol-power_down_force")] == [["c1-od1g-0"]]
    assert cloud.deleted == ["c1-od1g-0"] and cloud.list_nodes() == []
    assert fleet.awaiting_hold_change  # watched until the power thread takes it
    slurm.power_thread()
    assert fleet.hold_change_due()
    clock.advance(1)
    res = fleet.tick()
    assert [c["names"] for c in _commands(res, "scontrol-drain")] == [["c1-od1g-0"]]
    slurm.power_downs_complete()
    node = slurm.nodes_["c1-od1g-0"]
    assert node.powered_down and node.drain and node.reason == LATE_BIND_REASON  # held again: no job bound to it
    assert not fleet.awaiting_hold_change


#: an idle keep for the 1-GPU shape and a warm-node cap of one idle node (what the settings rule gives a busy shape)
CAPPED = replace(POLICY, idle_keep_max_by_machine={"a3-highgpu-1g": 1})


@pytest.mark.parametrize("warm", [True, False], ids=["cap-full", "cap-free"])
def test_a_held_boot_no_job_needs_is_aborted_when_the_warm_node_cap_is_full(
    make_daemon: Callable[..., Daemon], slurm: FakeSlurm, cloud: FakeCloud, clock: Clock, warm: bool
) -> None:
    """The shape has an idle keep, but the warm-node cap (`Policy.idle_keep_max_by_machine`) is one idle node: with
    one ready idle node of the shape already kept warm, job 7's boot, surplus once the job left, would register as a
    second idle node and be scaled down as over the cap, so it is aborted now; with the cap free it goes on (the
    next arrival's warm node)."""
    fleet = _booting_for_job_7(make_daemon, slurm, cloud, clock, CAPPED)
    if warm:  # another job's node, up and idle since it ended
        key = offering(ZONE_A, CapacityType.ON_DEMAND, "a3-highgpu-1g")
        cloud.nodes_["c1-od1g-2"] = CloudNode("c1-od1g-2", "od-1g", key, CloudNodeStatus.RUNNING, clock() - 60, "i-9")
        slurm.set("c1-od1g-2", "idle")
    slurm.jobs_ = []
    clock.advance(1)
    res = fleet.tick()
    aborted = _commands(res, "scontrol-power_down_force")
    if not warm:
        assert aborted == [] and cloud.deleted == [] and slurm.nodes_["c1-od1g-0"].powering_up
        return
    assert [c["names"] for c in aborted] == [["c1-od1g-0"]] and cloud.deleted == ["c1-od1g-0"]
    assert "warm-node cap is full" in aborted[0]["reason"]
    assert "c1-od1g-2" in [n.name for n in cloud.list_nodes()]  # the ready node stays warm


def test_which_held_boots_are_surplus() -> None:
    """`core.surplus_held_boots`, the rule the daemon and the replay share: a held boot is aborted only when no
    pending unit is planned onto it and its shape has neither an idle keep nor standby nodes."""
    from autoscaler.core import surplus_held_boots
    from autoscaler.model import Assignment, Placement, Plan

    boots = {"c1-od1g-0": "a3-highgpu-1g", "c1-od1g-1": "a3-highgpu-1g", "c1-od2g-0": "a3-highgpu-2g"}
    planned = Plan(assignments={"job/7": Assignment("job/7", ("c1-od1g-1",), 1, Placement.BOOTING)})
    assert surplus_held_boots(boots, planned, NO_KEEP) == ("c1-od1g-0", "c1-od2g-0")
    assert surplus_held_boots(boots, None, NO_KEEP) == tuple(sorted(boots))  # nothing pending, nothing planned
    assert surplus_held_boots(boots, None, POLICY) == ()  # an idle keep: the next arrival's node
    keep_2g = replace(NO_KEEP, idle_timeout_by_machine={"a3-highgpu-2g": 300.0})
    caps = {"a3-highgpu-1g": 1}
    assert surplus_held_boots(boots, planned, keep_2g) == ("c1-od1g-0",)
    standby_1g = replace(NO_KEEP, standby_by_machine={"a3-highgpu-1g": 1})
    assert surplus_held_boots(boots, None, standby_1g) == ("c1-od2g-0",)
    # a warm-node cap: ready idle nodes kept warm come first, then the lowest-numbered boots up to the cap
    capped = replace(keep_2g, idle_timeout_s=300.0, idle_keep_max_by_machine=caps)
    assert surplus_held_boots(boots, None, capped, {}) == ("c1-od1g-1",)  # room for one 1g boot: the lower name
    assert surplus_held_boots(boots, None, capped, {"a3-highgpu-1g": 1}) == ("c1-od1g-0", "c1-od1g-1")
    assert surplus_held_boots(boots, planned, capped, {"a3-highgpu-1g": 1}) == ("c1-od1g-0",)  # job 7's stays
    assert surplus_held_boots(boots, None, capped) == ()  # idle nodes not counted (None): the cap is not applied
    # a cap on a shape with no idle keep changes nothing: its surplus boots go anyway, each named once
    assert surplus_held_boots(boots, None, replace(NO_KEEP, idle_keep_max_by_machine=caps), {}) == tuple(sorted(boots))


def test_kept_idle_counts_the_ready_idle_nodes_the_plan_keeps() -> None:
    """`core.kept_idle`: ready idle nodes with no work, less those the plan places work on, drains or deletes."""
    from autoscaler.core import kept_idle
    from autoscaler.model import Assignment, DeleteNodes, Node, NodeState, Placement, Plan

    def node(name: str, state: NodeState = NodeState.READY_IDLE, used: int = 0) -> Node:
        mt = "a3-highgpu-1g" if "1g" in name else "a3-highgpu-2g"
        gpus = 1 if "1g" in name else 2
        return Node(name, "od", offering(ZONE_A, CapacityType.ON_DEMAND, mt), state, gpus, gpus_used=used)

    nodes = [node("c1-od1g-0"), node("c1-od1g-1"), node("c1-od1g-2"), node("c1-od2g-0"),
             node("c1-od1g-3", NodeState.BOOTING), node("c1-od2g-1", NodeState.BUSY, 2)]  # fmt: skip
    assert kept_idle(nodes, None, POLICY) == {"a3-highgpu-1g": 3, "a3-highgpu-2g": 1}
    plan = Plan(
        assignments={"job/7": Assignment("job/7", ("c1-od1g-0",), 1, Placement.READY)},
        commands=(DeleteNodes("od", ("c1-od1g-2",), "over the cap"),),
    )
    assert kept_idle(nodes, plan, POLICY) == {"a3-highgpu-1g": 1, "a3-highgpu-2g": 1}
    key = offering(ZONE_A, CapacityType.RESERVATION, "a3-highgpu-1g")
    reserved = Node("c1-res-0", "res", key, NodeState.READY_IDLE, 1)
    assert kept_idle([reserved], None, POLICY) == {}  # kept anyway (`keep_reserved_nodes`), as the cap leaves it out


SPOT_POOLS = [
    replace(_pool(1), queues=frozenset({"gpu", "spotq"})),
    replace(_pool(1), name="sp-1g", capacity_type=CapacityType.SPOT, node_name_prefix="c1-sp1g",
            queues=frozenset({"spotq"}), spot_tolerant=True),
]  # fmt: skip


@pytest.fixture
def spot_fleet(make_daemon: Callable[..., Daemon], slurm: FakeSlurm, cloud: FakeCloud) -> Daemon:
    """An on-demand 1-GPU pool serving `gpu` and `spotq`, a spot one serving `spotq` (spot-tolerant work)."""
    slurm.nodes_.clear()
    for p in SPOT_POOLS:
        slurm.add_cloud_nodes([p.node_name(i) for i in range(p.max_nodes)], gpus=p.gpus_per_node)
    cloud.offers = [
        Offering(offering(z, p.capacity_type, p.machine_type), 11.0 if p.capacity_type is CapacityType.ON_DEMAND
                 else 5.0, p.gpu_type, 1)
        for p in SPOT_POOLS
        for z in (ZONE_A, ZONE_B)
    ]  # fmt: skip
    return make_daemon(pools=SPOT_POOLS, policy=POLICY)


def _spot_job(job_id: int) -> SlurmJob:
    """A spot-tolerant 1-GPU job as the lua constrains it in a spot-tolerant partition (`job_submit.spot_pinned`)."""
    return replace(_job(job_id, ("a3-highgpu-1g", "spot")), partition="spotq", constraint="a3-highgpu-1g&spot",
                   admin_comment=RIGHT_SIZED_MARK)  # fmt: skip


def test_a_spot_pinned_job_gets_a_spot_boot_and_is_widened_off_spot_only_on_a_fallback(
    spot_fleet: Daemon, slurm: FakeSlurm, cloud: FakeCloud, clock: Clock
) -> None:
    """The pin holds while the plan serves the job on spot; when spot stocks out and the plan falls back to
    on-demand, the daemon widens the constraint to the machine type alone (any capacity type), as slurmctld needs
    to start the job on the on-demand node it boots."""
    spot_fleet.tick()
    slurm.jobs_ = [_spot_job(7)]
    clock.advance(1)
    res = spot_fleet.tick()
    assert [c["names"] for c in _commands(res, "scontrol-power_up")] == [["c1-sp1g-0"]]
    assert not _commands(res, "scontrol-features")

    cloud.stocked_out = {o.key for o in cloud.offers if o.key.capacity_type is CapacityType.SPOT}
    spot_fleet.store.enqueue_power("resume", ["c1-sp1g-0"], clock(), {})  # its launch is refused: backed off
    for _ in range(2):
        clock.advance(1)
        res = spot_fleet.tick()
    widened = _commands(res, "scontrol-features")
    assert [(c["job_id"], c["features"]) for c in widened] == [(7, "a3-highgpu-1g")]
    assert slurm.feature_updates[-1] == (7, "a3-highgpu-1g")
    assert [c["names"] for c in _commands(res, "scontrol-power_up")] == [["c1-od1g-0"]]


def _gang(job_id: int, nodes: int = 2, gpus: int = 2) -> SlurmJob:
    return SlurmJob(job_id, f"j{job_id}", "PENDING", "Resources", "gpu", nodes, gpus, None, (f"a3-highgpu-{gpus}g",),
                    0, None, 1.0, admin_comment=RIGHT_SIZED_MARK)  # fmt: skip


def _gang_next_to_a_warm_node(fleet: Daemon, slurm: FakeSlurm, cloud: FakeCloud, clock: Clock) -> OfferingKey:
    """The hold, one 2-GPU node up and idle, and 2-node gang 9 of 2-GPU nodes pending, one tick later: the gang is
    kept off the warm node and its names boot.  Returns the nodes' offering."""
    fleet.tick()
    key = offering(ZONE_A, CapacityType.ON_DEMAND, "a3-highgpu-2g")
    cloud.nodes_["c1-od2g-0"] = CloudNode("c1-od2g-0", "od-2g", key, CloudNodeStatus.RUNNING, clock() - 60, "i-1")
    slurm.set("c1-od2g-0", "idle")
    slurm.jobs_ = [_gang(9)]
    clock.advance(1)
    fleet.tick()
    return key


def test_a_pending_gang_is_kept_off_up_nodes_until_ready_nodes_alone_hold_it(
    fleet: Daemon, make_daemon: Callable[..., Daemon], slurm: FakeSlurm, cloud: FakeCloud, clock: Clock
) -> None:
    """One 2-GPU node is up and idle (kept warm), a 2-node gang of 2-GPU nodes pends: the plan launches the gang
    whole, so before its names are released the gang's ExcNodeList gets the up node (Slurm would give it that node
    first and boot one: the up node would wait for the boot).  Once two ready nodes hold it, the exclusion is
    cleared and nothing is launched - also by a restarted daemon, which finds what it set in its state store."""
    fleet.tick()  # the hold
    key = offering(ZONE_A, CapacityType.ON_DEMAND, "a3-highgpu-2g")
    cloud.nodes_["c1-od2g-0"] = CloudNode("c1-od2g-0", "od-2g", key, CloudNodeStatus.RUNNING, clock() - 60, "i-1")
    slurm.set("c1-od2g-0", "idle")
    slurm.jobs_ = [_gang(9)]
    clock.advance(1)
    res = fleet.tick()
    order = [c["command"] for c in res.commands if c["command"] in ("scontrol-excnodes", "scontrol-power_up")]
    assert order == ["scontrol-excnodes", "scontrol-power_up"]  # excluded before its names boot
    assert slurm.exclusion_updates == [(9, ("c1-od2g-0",))]
    # booted drained, together (one ResumeProgram call: one launch, all or nothing), since the twenty-ninth round;
    # released, Slurm would bind the gang to them and launch it only at its next periodic pass after they register
    assert [c["names"] for c in _commands(res, "scontrol-power_up")] == [["c1-od2g-1", "c1-od2g-2"]]
    assert _commands(res, "scontrol-undrain") == []

    # a user's own --exclude is never touched; the gang's own boots, drained while they come up, stay outside its
    # exclusion: with them in it the exclusion would cover the whole pool, which slurmctld answers with a
    # BadConstraints hold (`leave_schedulable`); drained, Slurm cannot give them before they register, and then they
    # are ready nodes that hold it alone
    slurm.jobs_.append(replace(_gang(10), excluded_nodes=("c1-od2g-2",)))
    clock.advance(1)
    fleet.tick()
    assert all(job_id != 10 for job_id, _ in slurm.exclusion_updates)
    mine = ("c1-od2g-0",)
    assert slurm.exclusion_updates == [(9, mine)]  # unchanged since the first tick

    # the daemon restarts; both other names came up idle (say their boots went to another job that left): ready
    # nodes hold the gang now
    fleet.lock.release()
    fleet.store.close()
    fleet = make_daemon(pools=POOLS, policy=POLICY)
    for i in (1, 2):
        name = f"c1-od2g-{i}"
        cloud.nodes_[name] = CloudNode(name, "od-2g", key, CloudNodeStatus.RUNNING, clock() - 60, f"i-{i + 1}")
        slurm.set(name, "idle")
    slurm.jobs_ = [replace(_gang(9), excluded_nodes=mine)]
    clock.advance(1)
    res = fleet.tick()
    assert slurm.exclusion_updates[-1] == (9, ())  # cleared: Slurm may start it on the ready nodes
    assert _commands(res, "scontrol-undrain") == [] and _commands(res, "launch") == []


def test_a_gang_that_cannot_run_yet_is_not_kept_off_the_up_nodes_until_it_can(
    fleet: Daemon, slurm: FakeSlurm, cloud: FakeCloud, clock: Clock
) -> None:
    """A gang waiting on a dependency is no unit of the plan, so the hold would keep it off every up node and rewrite
    its ExcNodeList whenever that set changes: one scontrol call per such gang, for a job that cannot run.  It is
    left alone until its dependency is met, then kept off the up node like any pending gang."""
    fleet.tick()  # the hold
    key = offering(ZONE_A, CapacityType.ON_DEMAND, "a3-highgpu-2g")
    cloud.nodes_["c1-od2g-0"] = CloudNode("c1-od2g-0", "od-2g", key, CloudNodeStatus.RUNNING, clock() - 60, "i-1")
    slurm.set("c1-od2g-0", "idle")
    slurm.jobs_ = [replace(_gang(9), reason="Dependency", dependency="afterok:8(unfulfilled)")]
    for _ in range(2):
        clock.advance(1)
        res = fleet.tick()
        assert slurm.exclusion_updates == [] and _commands(res, "scontrol-power_up") == []
    slurm.jobs_ = [replace(slurm.jobs_[0], reason="Resources", dependency="")]  # afterok:8 met
    clock.advance(1)
    fleet.tick()
    assert slurm.exclusion_updates == [(9, ("c1-od2g-0",))]


def test_which_gangs_are_kept_off_which_nodes() -> None:
    """`core.gang_exclusions`, the rule the daemon and the replay share: every pending gang is excluded from the
    held pools' nodes that could take one of its members, unless the plan puts it on ready nodes alone; a user's
    own exclusion is never changed; only changes are returned."""
    from autoscaler.core import gang_exclusions
    from autoscaler.model import Assignment, Placement, Plan

    room = {"c1-od2g-0": 2, "c1-od2g-1": 2, "c1-od1g-0": 1}
    plan = Plan(
        assignments={
            "job/9": Assignment("job/9", ("c1-od2g-3", "c1-od2g-4"), 2, Placement.NEW),
            "job/10": Assignment("job/10", ("c1-od2g-0", "c1-od2g-1"), 2, Placement.READY),
            "job/11": Assignment("job/11", ("c1-od2g-1", "c1-od2g-5"), 2, Placement.BOOTING),
        }
    )
    gangs = {"job/9": 2, "job/10": 2, "job/11": 2, "job/12": 2, "job/13": 1}
    two = frozenset({"c1-od2g-0", "c1-od2g-1"})
    mine = frozenset({"job/10"})
    got = gang_exclusions(plan, room, gangs, {"job/10": two, "job/12": frozenset({"x-0"})}, mine)
    assert got == {
        "job/9": two,  # launched whole: off the up nodes
        "job/10": frozenset(),  # on ready nodes alone: cleared
        "job/11": two,  # a ready node with a booting one: would wait, so excluded until both are ready
        "job/13": frozenset(room),  # unplanned, 1 GPU per node: every node that could take a member
    }  # job/12: the user's own exclusion, left alone
    assert gang_exclusions(plan, room, {"job/9": 2}, {"job/9": two}, frozenset({"job/9"})) == {}  # no change
    # a gang Slurm has not tried yet (no pending reason: the core does not plan it) is left to Slurm's first pass,
    # which can start it only whole, on nodes that are up (the held powered-down names are drained)
    assert gang_exclusions(Plan(), room, {"job/14": 2}, {}, frozenset(), frozenset({"job/14"})) == {}
    assert gang_exclusions(Plan(), room, {"job/14": 2}, {}, frozenset()) == {"job/14": two}  # tried: kept off


def test_an_exclusion_never_leaves_a_gang_fewer_nodes_than_it_asks() -> None:
    """slurmctld holds a gang whose ExcNodeList leaves its partitions fewer nodes than it asks (BadConstraints,
    priority 0: tests/e2e/test_late_binding.py makes it on purpose).  With every node of the partition up or booting,
    `leave_schedulable` keeps enough names outside the exclusion: the drained ones first (held boots Slurm cannot
    give yet, the gang's own), then by name; a partition with names to spare is left as it was."""
    from autoscaler.core import gang_exclusions
    from autoscaler.core.gang_exclusion import leave_schedulable
    from autoscaler.model import Plan

    every = frozenset({"p-0", "p-1", "p-2"})
    # two warm nodes and one held boot: a 2-node gang excluded from all three could never be given nodes
    assert leave_schedulable(every, 2, every, frozenset({"p-2"})) == {"p-1"}
    assert leave_schedulable(every, 2, every) == {"p-2"}  # none drained: by name
    assert leave_schedulable(frozenset({"p-0", "p-1"}), 2, every | {"p-3"}) == {"p-0", "p-1"}  # two left outside
    assert leave_schedulable(every, 4, every) == frozenset()  # it asks more than there are: no exclusion at all
    # a name outside that Slurm could power up: an up node could wait for its boot, so the exclusion stays
    assert leave_schedulable(every, 2, every | {"p-3"}, frozenset({"p-2"}), frozenset({"p-3"})) == every
    room = {n: 8 for n in every}
    fits = {"job/9": (2, every)}
    got = gang_exclusions(Plan(), room, {"job/9": 8}, {}, frozenset(), fits=fits, unschedulable=frozenset({"p-0"}))
    assert got == {"job/9": frozenset({"p-2"})}
    assert gang_exclusions(Plan(), room, {"job/9": 8}, {}, frozenset()) == {"job/9": every}  # without: all three


def test_the_daemon_never_excludes_a_gang_from_more_of_its_partition_than_it_can_spare(
    fleet: Daemon, slurm: FakeSlurm, cloud: FakeCloud, clock: Clock
) -> None:
    """The daemon's side of `leave_schedulable`: every name of the gang's partition is up and busy, and the gang has
    been tried; its ExcNodeList (it used to be all three names) leaves it as many names as it asks, so slurmctld
    never finds "Requested node configuration is not available"."""
    fleet.tick()
    names = sorted(n.name for n in slurm.nodes() if n.name.startswith("c1-od2g-"))
    key = offering(ZONE_A, CapacityType.ON_DEMAND, "a3-highgpu-2g")
    for i, name in enumerate(names):
        cloud.nodes_[name] = CloudNode(name, "od-2g", key, CloudNodeStatus.RUNNING, clock() - 60, f"i-{i}")
        slurm.set(name, "allocated")
    slurm.jobs_ = [_gang(9, nodes=len(names) - 1)]
    clock.advance(1)
    fleet.tick()
    excluded = [names_ for job, names_ in slurm.exclusion_updates if job == 9]
    assert excluded, slurm.exclusion_updates
    assert len(set(names) - set(excluded[-1])) >= len(names) - 1, (names, excluded)


def test_a_gang_slurm_has_not_tried_is_not_kept_off_the_up_nodes_before_its_first_pass(
    fleet: Daemon, slurm: FakeSlurm, cloud: FakeCloud, clock: Clock
) -> None:
    """The submit wake-up's tick can come before slurmctld's first pass over a new gang; two idle nodes could hold
    it whole.  The daemon sets no ExcNodeList then (it did, and with the gang unplanned until tried the exclusion
    kept it off the warm nodes until they were scaled down: tests/e2e/test_late_binding.py shows the gang starting on
    them at once on slurmctld)."""
    fleet.tick()
    key = offering(ZONE_A, CapacityType.ON_DEMAND, "a3-highgpu-2g")
    for i in (0, 1):
        name = f"c1-od2g-{i}"
        cloud.nodes_[name] = CloudNode(name, "od-2g", key, CloudNodeStatus.RUNNING, clock() - 60, f"i-{i}")
        slurm.set(name, "idle")
    slurm.jobs_ = [replace(_gang(9), reason="None")]  # submitted, not tried yet
    clock.advance(1)
    res = fleet.tick()
    assert slurm.exclusion_updates == [] and _commands(res, "scontrol-excnodes") == []
    assert _commands(res, "scontrol-undrain") == [] and _commands(res, "launch") == []


def test_a_requeued_gang_keeps_the_exclusion_the_daemon_set_as_its_own(
    fleet: Daemon, slurm: FakeSlurm, cloud: FakeCloud, clock: Clock
) -> None:
    """Slurm keeps a job's ExcNodeList when it requeues it (a spot preemption, ResumeTimeout).  The daemon keeps the
    record while squeue lists the job, running or not, so the requeued gang's exclusion is still its own and follows
    the nodes that are up (a user's would be left as it is, and an outdated one would keep the gang off names the
    daemon boots or releases for it: the replay of a held-out run with spot preemptions never ended)."""
    _gang_next_to_a_warm_node(fleet, slurm, cloud, clock)
    assert slurm.exclusion_updates == [(9, ("c1-od2g-0",))]
    running = replace(slurm.jobs_[0], state="RUNNING", reason="None", nodes=("c1-od2g-1", "c1-od2g-2"))
    slurm.jobs_ = [running]
    clock.advance(1)
    fleet.tick()
    assert fleet.store.gang_exclusions() == {9: frozenset({"c1-od2g-0"})}  # kept while the job runs
    cloud.nodes_.pop("c1-od2g-0")
    slurm.set("c1-od2g-0", "idle", "POWERED_DOWN")  # the warm node went; requeued, the gang keeps its exclusion
    slurm.jobs_ = [replace(running, state="PENDING", reason="Resources", nodes=())]
    clock.advance(1)
    fleet.tick()
    # still the daemon's: it follows what is up or coming up, the names booted for the gang (the warm node went)
    assert slurm.exclusion_updates[-1] == (9, ("c1-od2g-1", "c1-od2g-2"))
    assert fleet.store.gang_exclusions() == {9: frozenset({"c1-od2g-1", "c1-od2g-2"})}
    slurm.jobs_ = []
    clock.advance(1)
    fleet.tick()
    assert fleet.store.gang_exclusions() == {}


def test_a_gang_slurm_held_for_the_daemons_own_exclusion_is_still_placed_and_its_exclusion_cleared(
    fleet: Daemon, slurm: FakeSlurm, cloud: FakeCloud, clock: Clock
) -> None:
    """The gang's exclusion covers every node of its partition while they boot for it; a scheduler pass of slurmctld
    in that window holds the job (Reason=BadConstraints, priority 0: "Requested node configuration is not
    available").  The daemon still places it: once ready nodes hold it, the exclusion is cleared, which lifts the
    hold (slurmctld re-evaluates a BadConstraints job on any update).  Before, the job read as one capacity could
    not serve, its exclusion never changed and it stayed held (seen on slurmctld 23.11 under load).  A user's own
    exclusion that left the job BadConstraints is still not the daemon's."""
    key = _gang_next_to_a_warm_node(fleet, slurm, cloud, clock)
    clock.advance(1)
    fleet.tick()
    # this daemon leaves the gang's drained boots outside (`leave_schedulable`); the whole pool was excluded by an
    # older one, whose record the store still holds
    assert slurm.exclusion_updates[-1] == (9, ("c1-od2g-0",))
    mine = ("c1-od2g-0", "c1-od2g-1", "c1-od2g-2")
    fleet.store.set_gang_exclusion(9, list(mine), clock())
    for i in (1, 2):  # the gang's boots registered and were undrained; slurmctld's pass came first
        name = f"c1-od2g-{i}"
        cloud.nodes_[name] = CloudNode(name, "od-2g", key, CloudNodeStatus.RUNNING, clock() - 5, f"i-{i + 1}")
        slurm.set(name, "idle")
    held = replace(_gang(9), reason="BadConstraints", priority=0, excluded_nodes=mine)
    users = replace(_gang(10), reason="BadConstraints", priority=0, excluded_nodes=("c1-od2g-0",))
    slurm.jobs_ = [held, users]
    clock.advance(1)
    res = fleet.tick()
    assert slurm.exclusion_updates[-1] == (9, ())  # cleared: the update lifts the hold, ready nodes take it
    assert all(job_id != 10 for job_id, _ in slurm.exclusion_updates)  # the user's, never touched
    assert _commands(res, "launch") == []


class _Stopped(BaseException):
    """The daemon's process ending (a kill, a crash) in the middle of a tick."""


def test_a_daemon_stopped_between_slurms_answer_and_its_record_still_owns_the_exclusion(
    fleet: Daemon, make_daemon: Callable[..., Daemon], slurm: FakeSlurm, cloud: FakeCloud, clock: Clock
) -> None:
    """The daemon records an ExcNodeList it is about to set before the ``scontrol update`` (write-ahead).  Stopped
    after Slurm took the exclusion and before the record of it, the restarted daemon read it as the user's
    `--exclude` (thirty-third round's known limit): never changed again, and the gang kept off those nodes for
    good.  Now the restarted daemon still follows the nodes that are up with it."""
    fleet.tick()
    key = offering(ZONE_A, CapacityType.ON_DEMAND, "a3-highgpu-2g")
    cloud.nodes_["c1-od2g-0"] = CloudNode("c1-od2g-0", "od-2g", key, CloudNodeStatus.RUNNING, clock() - 60, "i-0")
    slurm.set("c1-od2g-0", "idle")
    slurm.jobs_ = [_gang(9)]
    update = slurm.update_job_excluded_nodes

    def update_then_stop(job_id: int, names: Sequence[str]) -> None:
        update(job_id, names)  # slurmctld took it ...
        raise _Stopped  # ... and the daemon is gone before it wrote anything more

    slurm.update_job_excluded_nodes = update_then_stop  # type: ignore[method-assign]
    clock.advance(1)
    with pytest.raises(_Stopped):
        fleet.tick()
    assert slurm.jobs_[0].excluded_nodes == ("c1-od2g-0",)
    slurm.update_job_excluded_nodes = update  # type: ignore[method-assign]
    fleet.lock.release()
    restarted = make_daemon(pools=POOLS, policy=POLICY)
    cloud.nodes_["c1-od2g-1"] = CloudNode("c1-od2g-1", "od-2g", key, CloudNodeStatus.RUNNING, clock() - 60, "i-1")
    slurm.set("c1-od2g-1", "idle")  # a second warm node: the two hold the gang whole, so Slurm must be free to use them
    clock.advance(1)
    restarted.tick()
    assert slurm.jobs_[0].excluded_nodes == ()  # cleared: the daemon's own exclusion, not a user's
    assert restarted.store.gang_exclusions() == {}
