"""The gang gate in the daemon's tick (`autoscaler.slurm.gang_gate`, `core.gate_exclusion`), over the in-memory
Slurm: a gang the stack's job_submit.lua held back by a BeginTime is released at the next tick, kept off the nodes
that are up unless nodes ready now hold it whole.  The real slurmctld in tests/e2e/test_gang_gate.py."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest

from autoscaler.cloud import CloudNode, CloudNodeStatus, Offering
from autoscaler.core import UpNode, gate_exclusion
from autoscaler.daemon.tick import Daemon
from autoscaler.model import Policy, Pool
from autoscaler.slurm.gang_gate import GANG_GATE_MARK, GANG_GATE_S
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


def test_squeue_shows_the_gate_as_slurmctld_22_05_prints_it() -> None:
    raw = {
        "job_id": 5, "job_state": "PENDING", "state_reason": "BeginTime", "node_count": 2, "submit_time": 1000,
        "eligible_time": 1030, "admin_comment": GANG_GATE_MARK, "tres_per_node": "gres:gpu:8", "partition": "gpu",
    }  # fmt: skip
    job = parse_job(raw)
    assert job.gated and not job.tried and job.eligible_time == 1030.0
    assert not parse_job({**raw, "eligible_time": 1200}).gated  # a requeue hold
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
