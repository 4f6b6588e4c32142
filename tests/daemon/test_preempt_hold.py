"""The tick's hold for `Policy.preempt_spot`, against the fake Slurm: with a reservation pool and a spot pool the
on-demand overflow's powered-down nodes are kept drained, so slurmctld preempts spot-tolerant work off the
reservation for a job that may not use spot; the daemon releases an on-demand name only for a job slurmctld has
already tried (pending reason no longer `None`) and not while a reserved node is still completing a job."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest

from autoscaler.cloud import CloudNode, CloudNodeStatus, Offering, OfferingKey
from autoscaler.core.hold import PREEMPT_GRACE_S
from autoscaler.daemon.tick import HOLD_REASON, Daemon
from autoscaler.model import Policy, Pool
from autoscaler.slurm.readers import SlurmJob
from autoscaler.slurm.wake import submit_wake_path
from fleet.catalog import CapacityType
from tests.daemon.conftest import ZONE_A, Clock, spot_pool
from tests.daemon.fakes import FakeCloud, FakeSlurm, offering

MT = "a3-highgpu-8g"
RESV_KEY = OfferingKey("gcp", ZONE_A, MT, CapacityType.RESERVATION, "r1")
OD = [f"c1-od-{i}" for i in range(2)]


def _pool(name: str, ct: CapacityType, queues: set[str], **kw: object) -> Pool:
    return Pool(
        name=name,
        machine_type=MT,
        gpu_type="nvidia-h100-80gb",
        gpus_per_node=8,
        zones=(ZONE_A,),
        capacity_type=ct,
        max_nodes=2,
        node_name_prefix=f"c1-{name}",
        queues=frozenset(queues),
        **kw,  # type: ignore[arg-type]
    )


POOLS = [
    _pool("resv", CapacityType.RESERVATION, {"gpu", "spotq"}, reservation="r1"),
    replace(spot_pool(), queues=frozenset({"spotq"})),  # spot-tolerant work only
    _pool("od", CapacityType.ON_DEMAND, {"gpu"}),
]


def _job(job_id: int, reason: str, submit_time: float = 1.0) -> SlurmJob:
    return SlurmJob(job_id, "j", "PENDING", reason, "gpu", 1, 8, None, (), 100, None, submit_time)


def _running(job_id: int, partition: str, node: str, state: str = "RUNNING") -> SlurmJob:
    return SlurmJob(job_id, "r", state, "None", partition, 1, 8, None, (), 100, None, 1.0, nodes=(node,))


#: what squeue lists on the fixture's full reserved nodes: on-demand work (nothing to preempt)
ON_DEMAND_WORK = [_running(1, "gpu", "c1-resv-0"), _running(2, "gpu", "c1-resv-1")]
#: ... or spot-tolerant work, which slurmctld requeues for a job that may not use spot
SPOT_WORK = [_running(1, "spotq", "c1-resv-0"), _running(2, "spotq", "c1-resv-1")]


def _held(fleet: FakeSlurm) -> None:
    for n in OD:
        fleet.set(n, "idle", "POWERED_DOWN", "DRAIN")
        fleet.nodes_[n] = replace(fleet.nodes_[n], reason=HOLD_REASON)


@pytest.fixture
def fleet(slurm: FakeSlurm, cloud: FakeCloud) -> FakeSlurm:
    """The reserved node up and full of spot-tolerant work; the on-demand pool powered down."""
    cloud.offers += [
        Offering(RESV_KEY, 0.0, "nvidia-h100-80gb", 8, available_nodes=0),
        Offering(offering(ZONE_A, CapacityType.ON_DEMAND), 88.0, "nvidia-h100-80gb", 8),
    ]
    slurm.add_cloud_nodes(["c1-resv-0", "c1-resv-1"], partition="gpu")
    slurm.add_cloud_nodes(OD, partition="gpu")
    for n in ("c1-resv-0", "c1-resv-1"):
        cloud.nodes_[n] = CloudNode(n, "resv", RESV_KEY, CloudNodeStatus.RUNNING, 0.0, f"r-{n}")
        slurm.set(n, "allocated", gpus_used=8)
    return slurm


def _undrained(slurm: FakeSlurm) -> list[str]:
    return [n for names, state, *_ in slurm.updates if state == "undrain" for n in names]


def test_the_overflow_is_held_and_released_only_after_slurm_tried_the_job(
    make_daemon: Callable[..., Daemon], fleet: FakeSlurm
) -> None:
    d = make_daemon(pools=POOLS, policy=Policy(idle_timeout_s=600, backoff_s=300))
    assert d.policy.batch_window_s == 0 and d.policy.preempt_spot
    # the run loop watches the rendered lua's submit wake-up while a pool is held, as under late binding
    assert d.submit_wake == submit_wake_path(d.store.path)
    d.tick()
    drained = [names for names, state, *rest in fleet.updates if state == "drain"]
    assert sorted(n for names in drained for n in names) == OD  # the on-demand pool only: spot is not held
    _held(fleet)
    fleet.updates.clear()
    now = d.clock()
    fleet.jobs_ = [*ON_DEMAND_WORK, _job(7, "None", now)]  # submitted, slurmctld's first pass has not run
    d.tick()
    assert _undrained(fleet) == []
    fleet.jobs_ = [*ON_DEMAND_WORK, _job(7, "Resources", now)]  # tried: nothing to preempt, no reserved GPU free
    d.tick()
    assert _undrained(fleet) == ["c1-od-0"]


def test_a_job_slurm_has_not_tried_yet_is_looked_at_again_once_it_has_not_at_the_next_poll(
    make_daemon: Callable[..., Daemon], fleet: FakeSlurm
) -> None:
    """The submit wake-up's tick can read the queue before slurmctld's first pass over the job (reason None, measured
    on slurmctld 22.05: tests/e2e/test_preempt.py): the tick leaves it, and the run loop's 1 s look
    (`awaiting_hold_change`, `hold_change_due`) starts the next tick as soon as squeue shows it tried."""
    d = make_daemon(pools=POOLS, policy=Policy(idle_timeout_s=600, backoff_s=300))
    _held(fleet)
    now = d.clock()
    fleet.jobs_ = [*ON_DEMAND_WORK, _job(7, "None", now)]
    d.tick()
    assert _undrained(fleet) == [] and d.awaiting_hold_change
    assert not d.hold_change_due()  # still untried: nothing to do yet
    fleet.jobs_ = [*ON_DEMAND_WORK, _job(7, "Resources", now)]
    assert d.hold_change_due()  # tried and still pending: tick now
    d.tick()
    assert _undrained(fleet) == ["c1-od-0"] and not d.awaiting_hold_change


def test_no_release_for_a_job_slurm_places_by_preempting_spot_work(
    make_daemon: Callable[..., Daemon], fleet: FakeSlurm, clock: Clock
) -> None:
    """slurmctld tried the job and requeues spot-tolerant work off a reserved node for it; a read falling before
    that node shows the requeue must not hand the job an on-demand node.  A job Slurm has not placed that way
    within `PREEMPT_GRACE_S` of its submission is served by the plan."""
    d = make_daemon(pools=POOLS, policy=Policy(idle_timeout_s=600, backoff_s=300))
    _held(fleet)
    fleet.jobs_ = [*SPOT_WORK, _job(7, "Resources", clock())]
    d.tick()
    assert _undrained(fleet) == []
    clock.advance(PREEMPT_GRACE_S)  # still pending, the spot work still running: Slurm is not preempting for it
    d.tick()
    assert _undrained(fleet) == ["c1-od-0"]


def test_a_job_squeue_no_longer_lists_running_frees_its_reserved_gpus(
    make_daemon: Callable[..., Daemon], fleet: FakeSlurm, clock: Clock
) -> None:
    """sinfo (read first) still shows both reserved nodes allocated; squeue (read after) shows the job on
    c1-resv-1 requeued (pending, no nodes): its GPUs are the new job's, nothing is released for it."""
    d = make_daemon(pools=POOLS, policy=Policy(idle_timeout_s=600, backoff_s=300))
    _held(fleet)
    requeued = replace(SPOT_WORK[1], state="PENDING", reason="BeginTime", nodes=())
    fleet.jobs_ = [ON_DEMAND_WORK[0], requeued, _job(7, "Resources", clock())]
    d.tick()
    assert _undrained(fleet) == []
    # a second job finds no room left: the one requeued node serves the first (highest priority, then oldest)
    fleet.jobs_ = [ON_DEMAND_WORK[0], requeued, _job(7, "Resources", clock()), _job(8, "Resources", clock())]
    d.tick()
    assert _undrained(fleet) == ["c1-od-0"]


def test_no_release_while_a_reserved_node_is_completing_a_job(
    make_daemon: Callable[..., Daemon], fleet: FakeSlurm
) -> None:
    """A preempted (or ended) job winding down on a reserved node: the pending job is about to get the node."""
    d = make_daemon(pools=POOLS, policy=Policy(idle_timeout_s=600, backoff_s=300))
    _held(fleet)
    fleet.set("c1-resv-0", "allocated", "COMPLETING", gpus_used=8)
    fleet.jobs_ = [_running(1, "gpu", "c1-resv-0", "COMPLETING"), ON_DEMAND_WORK[1], _job(7, "Resources")]
    d.tick()
    assert _undrained(fleet) == []
    fleet.set("c1-resv-0", "allocated", gpus_used=8)  # the job took it... or it went elsewhere: next tick decides
    d.tick()
    assert _undrained(fleet) == ["c1-od-0"]


def test_without_preempt_spot_nothing_is_held(make_daemon: Callable[..., Daemon], fleet: FakeSlurm) -> None:
    # (no gang gate either: the gate alone has the daemon watch the submit wake-up, `test_gang_gate.py`)
    policy = Policy(idle_timeout_s=600, backoff_s=300, preempt_spot=False, gang_gate=False)
    d = make_daemon(pools=POOLS, policy=policy)
    d.tick()
    assert [u for u in fleet.updates if u[1] == "drain"] == []
    assert d.submit_wake is None  # nothing held: a submission that needs a node calls the ResumeProgram
    fleet.jobs_ = [*ON_DEMAND_WORK, _job(7, "None", d.clock())]
    d.tick()
    assert not d.awaiting_hold_change  # nothing held: an untried job needs no second look


def test_only_overflow_that_shares_a_non_spot_partition_with_the_reservation_is_held() -> None:
    from autoscaler.core.hold import held_pools

    flex = _pool("flex", CapacityType.FLEX_START, {"flexq"})  # its own partition: Slurm never preempts for it
    od_spotq = _pool("odspot", CapacityType.ON_DEMAND, {"spotq"})  # only with spot-tolerant (lower tier) work
    pools = [*POOLS, flex, od_spotq]
    assert held_pools(pools, Policy()) == {"od"}
    assert held_pools(pools, Policy(preempt_spot=False)) == frozenset()
    # spot work not on the reservation: nothing to take back, nothing held
    apart = [replace(POOLS[0], queues=frozenset({"gpu"})), *POOLS[1:]]
    assert held_pools(apart, Policy()) == frozenset()
    # a batch window (the reservation hold) holds every overflow pool, as before
    assert held_pools(pools, Policy(batch_window_s=60)) == {"spot", "od", "flex", "odspot"}


def test_preemption_places_the_units_slurm_can_preempt_for_and_no_more() -> None:
    from autoscaler.core.hold import ReservedRoom, preemption_places
    from autoscaler.model import WorkUnit

    now = 1000.0
    room = [ReservedRoom("c1-resv-0", "resv", 8), ReservedRoom("c1-resv-1", "resv", 4)]

    def unit(uid: str, gpus: int, **kw: object) -> WorkUnit:
        return WorkUnit(uid, kw.pop("submit_time", now - 5), gpus, queue=kw.pop("queue", "gpu"), **kw)  # type: ignore[arg-type]

    def places(*units: WorkUnit) -> set[str]:
        return set(preemption_places(units, room, POOLS, Policy(), now))

    assert places(unit("a", 8), unit("b", 4), unit("c", 4)) == {"a", "b"}  # room used up: c waits on the plan
    assert places(unit("lo", 8), unit("hi", 8, priority=5)) == {"hi"}  # highest priority first, as Slurm
    assert places(unit("old", 8, submit_time=now - 9), unit("new", 8)) == {"old"}  # then the oldest
    assert places(unit("gang", 4, nodes=2)) == {"gang"}  # 4 GPUs on each of two reserved nodes
    assert places(unit("gang", 8, nodes=2)) == set()  # only one node has room for 8
    assert places(unit("s", 8, spot_ok=True)) == set()  # spot-tolerant work preempts nothing
    assert places(unit("late", 8, submit_time=now - PREEMPT_GRACE_S)) == set()  # Slurm would have by now
    assert places(unit("q", 8, queue="flexq")) == set()  # the reservation does not serve its partition
    assert places(unit("c", 8, pools=frozenset({"od"}))) == set()  # its own constraint excludes the reservation
    assert places(unit("t", 8, gpu_types=frozenset({"nvidia-b200"}))) == set()
    # one that takes its node whole (`--exclusive`) needs a node all of whose 8 GPUs Slurm can free
    assert places(unit("x", 1, whole_node=True), unit("y", 1, whole_node=True)) == {"x"}
    assert places(unit("x", 1, whole_node=True, submit_time=now - 9), unit("b", 4)) == {"x", "b"}


def test_a_held_pools_floor_is_booted_drained_and_undrained_once_registered(
    make_daemon: Callable[..., Daemon], fleet: FakeSlurm, cloud: FakeCloud
) -> None:
    """A floor (`min_nodes`) in a pool the hold keeps drained has no job to take a released name: released, the name
    would sit undrained and powered down until the grace ran out and it was held again, every 30 s.  It is booted
    drained instead (`scontrol update state=power_up`) and undrained once it registered, as late binding's boots."""
    pools = [*POOLS[:2], replace(POOLS[2], min_nodes=1)]
    d = make_daemon(pools=pools, policy=Policy(idle_timeout_s=600, backoff_s=300))
    _held(fleet)
    d.tick()
    assert _undrained(fleet) == []
    assert [(names, state) for names, state in fleet.updates if state == "power_up"] == [(("c1-od-0",), "power_up")]
    assert "POWERING_UP" in fleet.nodes_["c1-od-0"].flags and fleet.nodes_["c1-od-0"].drain  # drained while it boots
    # the ResumeProgram's launch (the resume path), then it registers idle and drained (slurmctld cleared the
    # reason at the boot): the next tick undrains it
    od_key = offering(ZONE_A, CapacityType.ON_DEMAND)
    cloud.nodes_["c1-od-0"] = CloudNode("c1-od-0", "od", od_key, CloudNodeStatus.RUNNING, 0.0, "o-0")
    fleet.set("c1-od-0", "idle", "DRAIN")
    fleet.updates.clear()
    d.tick()
    assert _undrained(fleet) == ["c1-od-0"]
    assert [names for names, state in fleet.updates if state == "power_up"] == []  # the floor is met, once
