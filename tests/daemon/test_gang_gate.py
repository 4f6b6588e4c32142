"""The gang gate in the daemon's tick (`autoscaler.slurm.gang_gate`, `core.gate_exclusion`), over the in-memory
Slurm: a gang the stack's job_submit.lua held back by a BeginTime is released at the next tick, kept off the nodes
that are up unless nodes ready now hold it whole.  The real slurmctld in tests/e2e/test_gang_gate.py."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace

import pytest

from autoscaler.cloud import CloudNode, CloudNodeStatus, Offering
from autoscaler.core import UpNode, gate_exclusion
from autoscaler.daemon.tick import Daemon
from autoscaler.model import Policy, Pool
from autoscaler.slurm.client import SlurmUnavailable
from autoscaler.slurm.gang_gate import GANG_GATE_MARK, GANG_GATE_S, gate_time, lease_due, lease_mark, lease_s
from autoscaler.slurm.readers import SlurmJob, parse_job
from fleet.catalog import CapacityType
from fleet.slurm.job_submit import render_job_submit
from tests.daemon.conftest import ZONE_A, Clock
from tests.daemon.fakes import FakeCloud, FakeSlurm, offering

POOL = Pool(
    name="od-8g",
    machine_type="a3-highgpu-8g",
    gpu_type="nvidia-h100-80gb",
    gpus_per_node=8,
    zones=(ZONE_A,),
    capacity_type=CapacityType.ON_DEMAND,
    max_nodes=4,
    node_name_prefix="c1-od",
    queues=frozenset({"gpu"}),
)
#: late binding off: nothing is held, slurmctld may allocate powered-down names at submission
POLICY = Policy(idle_timeout_s=600, backoff_s=300, late_bind=False)


def _gated(job_id: int, submit: float, nodes: int = 2, **kw: object) -> SlurmJob:
    """A gang as the gate leaves it: pending on its BeginTime, `GANG_GATE_S` after its submission, with the mark."""
    fields = {"admin_comment": GANG_GATE_MARK, "eligible_time": submit + GANG_GATE_S, **kw}
    return SlurmJob(job_id, f"j{job_id}", "PENDING", "BeginTime", "gpu", nodes, 8, None, (), 0, None, submit,
                    **fields)  # type: ignore[arg-type]  # fmt: skip


@pytest.fixture
def fleet(make_daemon: Callable[..., Daemon], slurm: FakeSlurm, cloud: FakeCloud, clock: Clock) -> Daemon:
    slurm.nodes_.clear()
    slurm.add_cloud_nodes([POOL.node_name(i) for i in range(POOL.max_nodes)], gpus=8)
    cloud.offers = [Offering(offering(ZONE_A, CapacityType.ON_DEMAND, POOL.machine_type), 88.0, POOL.gpu_type, 8)]
    return make_daemon(pools=[POOL], policy=POLICY)


def _up(slurm: FakeSlurm, cloud: FakeCloud, clock: Clock, *names: str, busy: tuple[str, ...] = ()) -> None:
    key = offering(ZONE_A, CapacityType.ON_DEMAND, POOL.machine_type)
    for name in (*names, *busy):
        cloud.nodes_[name] = CloudNode(name, POOL.name, key, CloudNodeStatus.RUNNING, clock() - 60, f"i-{name}")
        slurm.set(name, "allocated" if name in busy else "idle", gpus_used=8 if name in busy else 0)


def _gate_commands(res) -> list[dict]:  # type: ignore[no-untyped-def]
    return [c for c in res.commands if c["command"] == "scontrol-gang-gate" and c["outcome"] == "ok"]


def _leases(res) -> list[dict]:  # type: ignore[no-untyped-def]
    return [c for c in res.commands if c["command"] == "scontrol-gang-lease"]


def _blocked(job_id: int, submit: float, how: str = "dependency", **kw: object) -> SlurmJob:
    """A gang the lua gated that slurmctld cannot try yet: a dependency not met (reason Dependency, as squeue shows
    it from the submission) or the user's hold (`sbatch -H`: JobHeldUser, priority 0)."""
    if how == "dependency":
        fields = {"reason": "Dependency", "dependency": "afterok:8(unfulfilled)"}
    else:
        fields = {"reason": "JobHeldUser", "priority": 0}
    return replace(_gated(job_id, submit), **{**fields, **kw})  # type: ignore[arg-type]


def test_a_gated_gang_is_released_at_once_off_the_warm_node_and_boots_whole(
    fleet: Daemon, slurm: FakeSlurm, cloud: FakeCloud, clock: Clock
) -> None:
    """One warm node and a gated 2-node gang: released in the first tick, with the warm node (and the busy one: it
    could end before Slurm's pass) excluded; the exclusion is recorded as the daemon's, so the hold's rule may
    change it later, and the gang is no unit to plan while gated."""
    _up(slurm, cloud, clock, "c1-od-0", busy=("c1-od-1",))
    slurm.jobs_ = [_gated(9, clock() - 1)]
    res = fleet.tick()
    assert slurm.gate_releases == [(9, ("c1-od-0", "c1-od-1"))]
    assert [c["names"] for c in _gate_commands(res)] == [["c1-od-0", "c1-od-1"]]
    assert fleet.store.gang_exclusions() == {9: frozenset({"c1-od-0", "c1-od-1"})}
    assert res.pending_units == 0  # BeginTime: not capacity demand while gated
    assert not slurm.jobs_[0].gated and not slurm.jobs_[0].tried  # released, slurmctld's pass still to come
    assert _gate_commands(fleet.tick()) == []  # released once


def test_a_gated_gang_warm_nodes_hold_is_released_with_no_exclusion(
    fleet: Daemon, slurm: FakeSlurm, cloud: FakeCloud, clock: Clock
) -> None:
    _up(slurm, cloud, clock, "c1-od-0", "c1-od-2")
    slurm.jobs_ = [_gated(9, clock() - 1)]
    fleet.tick()
    assert slurm.gate_releases == [(9, ())] and fleet.store.gang_exclusions() == {}


def test_what_is_not_a_gated_gang_is_left_alone(
    fleet: Daemon, slurm: FakeSlurm, cloud: FakeCloud, clock: Clock
) -> None:
    """A user's own `--begin` (no mark), a requeued gang's hold (its BeginTime past the gate's), a user's own
    exclusion (the gate opens, the exclusion stays theirs) and a gate that already failed open."""
    _up(slurm, cloud, clock, "c1-od-0")
    now = clock()
    slurm.jobs_ = [
        _gated(1, now - 1, admin_comment=""),  # the user's --begin
        _gated(2, now - 5000, eligible_time=now + 60),  # slurmctld's requeue hold, long after the gate's
        _gated(3, now - 1, excluded_nodes=("c1-od-3",)),  # the user's --exclude
        replace(_gated(4, now - 40), reason="Resources"),  # past the gate: slurmctld tried it
    ]
    fleet.tick()
    assert slurm.gate_releases == [(3, ())]
    assert fleet.store.gang_exclusions() == {}


def test_a_gate_slurmctld_refuses_is_tried_again_and_a_gang_that_moved_on_is_no_failure(
    fleet: Daemon, slurm: FakeSlurm, clock: Clock
) -> None:
    slurm.jobs_ = [_gated(9, clock() - 1)]
    slurm.down = True
    fleet.tick()
    slurm.down = False
    fleet.tick()
    assert [j for j, _ in slurm.gate_releases] == [9]


def test_the_daemon_watches_the_submit_wake_up_wherever_it_gates_gangs(make_daemon: Callable[..., Daemon]) -> None:
    assert make_daemon(pools=[POOL], policy=POLICY).submit_wake is not None
    assert make_daemon(pools=[POOL], policy=replace(POLICY, gang_gate=False)).submit_wake is None
    # strict late binding holds every pool: no gate, the hold's wake-up
    assert not replace(POLICY, late_bind=True).gates_gangs([CapacityType.ON_DEMAND])
    # a fleet of reservation pools launched up front has no powered-down name a gang could get: no gate
    assert not POLICY.gates_gangs([CapacityType.RESERVATION])
    assert replace(POLICY, launch_reserved_nodes=False).gates_gangs([CapacityType.RESERVATION])
    assert POLICY.gates_gangs([CapacityType.RESERVATION, CapacityType.SPOT])


def test_which_nodes_a_gated_gang_is_kept_off() -> None:
    """`core.gate_exclusion`, the rule the daemon and the replay share."""
    idle = [UpNode("a-0", "a", 8, 8, True), UpNode("a-1", "a", 8, 8, True)]
    booting = UpNode("a-2", "a", 8, 0, False)
    other = UpNode("b-0", "b", 8, 8, True)
    bootable = {"a": 2, "b": 3}
    assert gate_exclusion(2, 8, None, idle, bootable) == frozenset()  # ready nodes hold it whole
    assert gate_exclusion(3, 8, None, [*idle, booting, other], bootable) == {"a-0", "a-1", "a-2", "b-0"}
    assert gate_exclusion(2, 8, frozenset({"a"}), [idle[0], other], bootable) == {"a-0"}  # its own pools only
    # two ready nodes in two pools do not hold a gang that stays in one pool
    assert gate_exclusion(2, 8, None, [idle[0], other], bootable) == {"a-0", "b-0"}
    # no pool can boot it whole: what Slurm gives is all there is
    assert gate_exclusion(4, 8, None, idle, bootable) == frozenset()
    # a reserved node is paid for: never excluded (it would push the gang onto paid capacity)
    reserved = UpNode("r-0", "r", 8, 8, True, reserved=True)
    assert gate_exclusion(2, 8, None, [reserved, idle[0]], {"a": 2}) == {"a-0"}
    # a node too small for a member is no candidate
    assert gate_exclusion(2, 8, None, [UpNode("s-0", "s", 4, 4, True)], bootable) == frozenset()
    # a gang that takes its nodes whole (`--exclusive`): a ready node with a GPU in use holds no member of it
    partly = [UpNode("a-0", "a", 8, 7, True), UpNode("a-1", "a", 8, 8, True)]
    assert gate_exclusion(2, 1, None, partly, bootable) == frozenset()
    assert gate_exclusion(2, 1, None, partly, bootable, whole=True) == {"a-0", "a-1"}


def test_squeue_shows_the_gate_as_slurmctld_22_05_prints_it() -> None:
    raw = {
        "job_id": 5, "job_state": "PENDING", "state_reason": "BeginTime", "node_count": 2, "submit_time": 1000,
        "eligible_time": 1030, "admin_comment": GANG_GATE_MARK, "tres_per_node": "gres:gpu:8", "partition": "gpu",
    }  # fmt: skip
    job = parse_job(raw)
    assert job.gated and not job.tried and job.eligible_time == 1030.0
    assert not parse_job({**raw, "eligible_time": 1200}).gated  # a requeue hold
    # a requeue stamps a new submission and holds the job cred_expire after it: 30 s, the gate's own, with the test
    # harness's cred_expire=30 (bench/probe_gang_lease.py); the lua ran at the first submission only
    assert not parse_job({**raw, "submit_time": 1500, "eligible_time": 1530, "restart_cnt": 1}).gated
    assert not parse_job({**raw, "admin_comment": ""}).gated  # the user's --begin
    # before slurmctld's first pass over it the reason is "None" (the submit wake-up's tick can read it then)
    assert parse_job({**raw, "state_reason": "None"}).gated
    released = parse_job({**raw, "state_reason": "None", "eligible_time": 1002})  # StartTime=now, 2 s in
    assert not released.gated and not released.tried


def test_the_lua_gates_only_with_the_wake_up() -> None:
    from fleet.slurm.weights import PoolShape

    shapes = [PoolShape("p", CapacityType.ON_DEMAND, "m-8g", 8, 1.0)]
    lua = render_job_submit({"gpu": shapes}, "gpu", wake=True, gate_gangs=True)
    assert f"local gang_gate_s = {GANG_GATE_S}" in lua and f'local gang_gate_mark = "{GANG_GATE_MARK}"' in lua
    assert "pcall(gate_gang, job_desc)" in lua
    assert "gate_gang" not in render_job_submit({"gpu": shapes}, "gpu", wake=True)
    with pytest.raises(ValueError, match="gate_gangs: the gang gate needs the submit wake-up"):
        render_job_submit({"gpu": shapes}, "gpu", gate_gangs=True)


@pytest.mark.parametrize("how", ["dependency", "hold"])
def test_a_blocked_gang_stays_behind_the_gate_until_it_can_run(
    fleet: Daemon, slurm: FakeSlurm, cloud: FakeCloud, clock: Clock, how: str
) -> None:
    """A gang the lua gated that waits on a dependency or a hold would outlive the lua's 30 s and then be tried by
    slurmctld at once, onto the warm node plus a powered-down name.  The daemon keeps it behind the gate with a
    lease renewed at half its length (one call, nothing planned or booted for it meanwhile), and once it can run it
    shows reason BeginTime behind the lease and is released like a fresh gang: off the warm node, booting whole."""
    _up(slurm, cloud, clock, "c1-od-0")
    length = lease_s(fleet.loop.interval_s)
    slurm.jobs_ = [_blocked(9, clock() - 20, how)]  # the lua's BeginTime lapses in 10 s: less than half a lease
    res = fleet.tick()
    until = math.ceil(clock() + length)
    assert slurm.deferrals == [((9,), until, lease_mark(until))]
    assert [c["outcome"] for c in _leases(res)] == ["ok"] and res.pending_units == 0
    assert slurm.jobs_[0].eligible_time == until and not slurm.jobs_[0].gated  # still blocked: no release
    clock.advance(length / 2 - 1)  # half a lease and a second left: nothing to renew
    fleet.tick()
    assert len(slurm.deferrals) == 1 and slurm.gate_releases == [] and not cloud.creates
    clock.advance(2)
    fleet.tick()
    assert len(slurm.deferrals) == 2 and slurm.gate_releases == []
    # the dependency is met (or the user releases the hold): slurmctld shows BeginTime behind the lease
    slurm.jobs_[0] = replace(slurm.jobs_[0], reason="BeginTime", dependency="", priority=1)
    assert slurm.jobs_[0].gated
    res = fleet.tick()
    assert slurm.gate_releases == [(9, ("c1-od-0",))] and [c["names"] for c in _gate_commands(res)] == [["c1-od-0"]]
    assert len(slurm.deferrals) == 2  # released, not leased again


def test_what_the_lease_leaves_alone(fleet: Daemon, slurm: FakeSlurm, clock: Clock) -> None:
    """A blocked job the lua did not gate (a single job, a gang with the user's own --begin), a lease with more than
    half its length left, a gang that can run (the gate's business, not the lease's) and one no managed pool
    serves."""
    now = clock()
    slurm.jobs_ = [
        _blocked(1, now - 20, nodes=1, admin_comment=""),  # a single job: the lua marks gangs only
        _blocked(2, now - 20, admin_comment=""),  # the user's --begin
        _blocked(3, now - 20, admin_comment=lease_mark(int(now) + 20), eligible_time=float(int(now) + 20)),
        _gated(4, now - 1),
        _blocked(5, now - 20, partition="cpu"),  # a partition no managed pool serves: another daemon's
    ]
    fleet.tick()
    assert slurm.deferrals == [] and [j for j, _ in slurm.gate_releases] == [4]


def test_a_lease_for_a_gang_that_moved_on_is_no_failure_and_one_slurm_refused_is_asked_again(
    fleet: Daemon, slurm: FakeSlurm, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = clock()
    slurm.jobs_ = [_blocked(1, now - 20), _blocked(2, now - 20, "hold")]
    defer = slurm.defer_jobs

    def refused(*args: object) -> None:
        raise SlurmUnavailable("scontrol update exited 1: Access/permission denied")

    monkeypatch.setattr(slurm, "defer_jobs", refused)
    assert [c["outcome"] for c in _leases(fleet.tick())] == ["failed"]
    monkeypatch.setattr(slurm, "defer_jobs", defer)
    read = list(slurm.jobs_)
    slurm.jobs_ = [slurm.jobs_[1]]  # job 1 is cancelled between the tick's squeue and its lease
    monkeypatch.setattr(slurm, "jobs", lambda: read)
    assert [c["outcome"] for c in _leases(fleet.tick())] == ["ok"]  # slurmctld leased job 2 and named job 1
    assert slurm.deferrals[-1][0] == (1, 2) and slurm.jobs_[0].admin_comment == slurm.deferrals[-1][2]


def test_squeue_shows_a_blocked_gang_and_its_lease_as_slurmctld_22_05_prints_them() -> None:
    """bench/probe_gang_lease.py: a dependent gang shows its dependency ``afterok:N(unfulfilled)`` and reason
    Dependency; right after a lease update the reason is None (the dependency still says it is blocked); once met
    the dependency is empty and the reason BeginTime."""
    raw = {
        "job_id": 7, "job_state": "PENDING", "state_reason": "Dependency", "node_count": 2, "submit_time": 1000,
        "eligible_time": 1030, "admin_comment": GANG_GATE_MARK, "tres_per_node": "gres:gpu:8", "partition": "gpu",
        "dependency": "afterok:6(unfulfilled)", "priority": 4294901757,
    }  # fmt: skip
    job = parse_job(raw)
    assert job.blocked and not job.gated and job.dependency == "afterok:6(unfulfilled)"
    leased = {**raw, "state_reason": "None", "eligible_time": 1100, "admin_comment": lease_mark(1100)}
    assert parse_job(leased).blocked and not parse_job(leased).gated  # blocked still: not released
    met = parse_job({**leased, "state_reason": "BeginTime", "dependency": ""})
    assert met.gated and not met.blocked
    assert not parse_job({**leased, "state_reason": "BeginTime", "dependency": "", "eligible_time": 1160}).gated
    held = parse_job({**raw, "state_reason": "JobHeldUser", "dependency": "", "priority": 0})
    assert held.blocked and not held.gated
    # a dependency that can never be met is not waited on with a lease (slurmctld shows DependencyNeverSatisfied)
    assert not parse_job({**raw, "state_reason": "DependencyNeverSatisfied", "dependency": "afterok:6(failed)"}).blocked


def test_the_lease_rule() -> None:
    assert gate_time(GANG_GATE_MARK, 1000.0) == 1000.0 + GANG_GATE_S
    assert gate_time(lease_mark(1234), 1000.0) == 1234.0
    for other in ("", "gpu-fleet:right-sized", f"{GANG_GATE_MARK}@", f"{GANG_GATE_MARK}@soon"):
        assert gate_time(other, 1000.0) is None
    assert lease_s(10.0) == GANG_GATE_S and lease_s(20.0) == 60.0  # three polls where the daemon polls slowly
    assert gate_time(GANG_GATE_MARK, 1000.0, restarts=1) is None  # requeued: the lua's gate was the first run's
    assert lease_due(GANG_GATE_MARK, 1030.0, 1016.0, 30.0)  # 14 s left: under half a lease
    assert not lease_due(GANG_GATE_MARK, 1030.0, 1014.0, 30.0)
    assert lease_due(GANG_GATE_MARK, 1030.0, 1100.0, 30.0)  # lapsed (a daemon that was down)
    assert lease_due(lease_mark(1030), 1030.0, 1016.0, 30.0)  # a lease is renewed as the lua's gate is
    assert not lease_due("", 1030.0, 1100.0, 30.0)  # not gated by the lua


def test_one_lease_command_for_every_gang_due() -> None:
    """`CliSlurm.defer_jobs`: one ``scontrol update`` for a list of jobs, the BeginTime in this host's local time (as
    scontrol reads it); what slurmctld could not take is refused before any call."""
    import subprocess
    import time

    from autoscaler.slurm.client import CliSlurm

    calls: list[list[str]] = []

    def run(argv: list[str], **kw: object) -> subprocess.CompletedProcess:
        calls.append(argv)
        return subprocess.CompletedProcess(argv, 0, "", "")

    cli = CliSlurm(runner=run)
    cli.defer_jobs([12, 7], 1_796_533_874, lease_mark(1_796_533_874))
    cli.defer_jobs([], 1_796_533_874, lease_mark(1_796_533_874))  # nothing due: no call
    begin = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(1_796_533_874))
    assert calls == [
        ["scontrol", "update", "jobid=12,7", f"StartTime={begin}", f"AdminComment={GANG_GATE_MARK}@1796533874"]
    ]
    for args, field in [
        (([0], 1, "x"), "job_id"),
        (([1], 0, "x"), "until"),
        (([1], 1.5, "x"), "until"),
        (([1], 1, "two words"), "admin_comment"),
        (([1], 1, "a=b"), "admin_comment"),
    ]:
        with pytest.raises(ValueError, match=field):
            cli.defer_jobs(*args)  # type: ignore[arg-type]
    assert len(calls) == 1


def test_a_node_whose_memory_is_all_held_is_no_ready_room_for_a_gang() -> None:
    """A MIXED node with free GPUs whose memory a ``--mem=0`` job holds: slurmctld starts no member there, so the gate
    does not count it as ready room (it would release the gang with no exclusion, to wait on boots)."""
    from autoscaler.daemon.snapshot import gated_gangs
    from autoscaler.slurm.readers import SlurmNode

    def node(name: str, **kw: int) -> SlurmNode:
        return SlurmNode(name, "mixed", frozenset({"CLOUD"}), 8, 1, ("gpu",), (), cpus=208, real_memory_mib=1000,
                         alloc_cpus=1, **kw)  # fmt: skip

    nodes = {"c1-od-0": node("c1-od-0", alloc_memory_mib=1000), "c1-od-1": node("c1-od-1", alloc_memory_mib=100)}
    gangs, up, _ = gated_gangs([POOL], nodes, [_gated(9, 1000.0)])
    assert len(gangs) == 1
    assert {u.name: u.free_gpus for u in up} == {"c1-od-0": 0, "c1-od-1": 7}
