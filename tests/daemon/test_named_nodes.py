"""A job that names its nodes (``-w``/``--nodelist``, `SlurmJob.required_nodes`) runs on them or not at all, in the
daemon's tick under late binding, over the in-memory Slurm.

The plan used to have a unit for it like any job: it booted the lowest held name, which the job cannot use (pending
for good), or kept a gang that names an up node off that node.  Now no unit is planned for it, and the held
powered-down names it names are released, as slurmctld would have allocated them at submission without a hold
(tests/e2e/test_late_binding.py shows it on a real slurmctld)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest

from autoscaler.daemon.tick import FIXED_NODES_RELEASE_REASON, Daemon
from tests.daemon.conftest import Clock
from tests.daemon.fakes import FakeCloud, FakeSlurm
from tests.daemon.test_late_binding import POLICY, POOLS, _commands, _gang, _job, held_daemon, node_up

RELEASED = FIXED_NODES_RELEASE_REASON


@pytest.fixture
def fleet(make_daemon: Callable[..., Daemon], slurm: FakeSlurm, cloud: FakeCloud) -> Daemon:
    return held_daemon(make_daemon, slurm, cloud)


def test_the_held_name_a_job_names_is_released_and_nothing_is_booted(
    fleet: Daemon, slurm: FakeSlurm, clock: Clock
) -> None:
    fleet.tick()  # the hold
    slurm.jobs_ = [replace(_job(7), reason="None", required_nodes=("c1-od1g-2",))]
    clock.advance(1)
    res = fleet.tick()  # slurmctld has not tried it yet: its first pass may start it
    assert _commands(res, "scontrol-undrain") == [] and res.pending_units == 0
    slurm.jobs_ = [replace(_job(7), reason="ReqNodeNotAvail", required_nodes=("c1-od1g-2",))]
    clock.advance(1)
    res = fleet.tick()
    assert [(c["names"], c["reason"]) for c in _commands(res, "scontrol-undrain")] == [(["c1-od1g-2"], RELEASED)]
    assert _commands(res, "scontrol-power_up") == [] and res.pending_units == 0


def test_a_job_that_names_a_busy_node_waits_for_it_and_boots_nothing(
    fleet: Daemon, slurm: FakeSlurm, cloud: FakeCloud, clock: Clock
) -> None:
    fleet.tick()
    node_up(cloud, slurm, clock, 1, 0, "allocated")
    slurm.jobs_ = [replace(_job(7), required_nodes=("c1-od1g-0",))]
    clock.advance(1)
    res = fleet.tick()
    assert _commands(res, "scontrol-power_up") == [] and _commands(res, "scontrol-undrain") == []


def test_a_gang_that_names_an_up_node_is_not_kept_off_it(
    fleet: Daemon, slurm: FakeSlurm, cloud: FakeCloud, clock: Clock
) -> None:
    fleet.tick()
    node_up(cloud, slurm, clock, 2, 0, "idle")
    slurm.jobs_ = [replace(_gang(9), required_nodes=("c1-od2g-0", "c1-od2g-1"))]
    clock.advance(1)
    res = fleet.tick()
    assert slurm.exclusion_updates == []
    assert [c["names"] for c in _commands(res, "scontrol-undrain") if c["reason"] == RELEASED] == [["c1-od2g-1"]]
    assert _commands(res, "scontrol-power_up") == []


def test_a_job_of_a_reservation_gets_as_many_of_its_held_names_as_it_needs(
    fleet: Daemon, slurm: FakeSlurm, clock: Clock
) -> None:
    """``--reservation=team`` over c1-od1g-[1-2], a 1-node job: one of the reservation's names is released (not the
    pool's lowest, c1-od1g-0, which the job may not use), once."""
    fleet.tick()
    slurm.reservations_ = {"team": ("c1-od1g-1", "c1-od1g-2")}
    slurm.jobs_ = [replace(_job(7), reason="Resources", reservation="team")]
    clock.advance(1)
    res = fleet.tick()
    assert [(c["names"], c["reason"]) for c in _commands(res, "scontrol-undrain")] == [(["c1-od1g-1"], RELEASED)]
    assert _commands(res, "scontrol-power_up") == [] and res.pending_units == 0
    clock.advance(1)  # slurmctld has not allocated it yet: released already, not released twice
    assert _commands(fleet.tick(), "scontrol-undrain") == []


def test_which_held_names_are_released_for_jobs_whose_nodes_are_fixed() -> None:
    from autoscaler.daemon.named_nodes import fixed_node_releases

    held = ["a-0", "a-1", "a-2", "a-3", "b-0"]
    named = replace(_job(1), required_nodes=("a-3", "b-0", "x-9"))
    team = replace(_job(2), reservation="team", reservation_nodes=("a-1", "a-2", "a-3"), node_count=2)
    untried = replace(_job(3, reason="None"), required_nodes=("a-0",))
    blocked = replace(_job(4, reason="Dependency"), dependency="afterok:1(unfulfilled)", required_nodes=("a-0",))
    unknown = replace(_job(5), reservation="gone")  # a reservation the read did not find: nothing to release
    assert fixed_node_releases([named, team, untried, blocked, unknown], held) == ["a-1", "a-2", "a-3", "b-0"]
    # a-1 released already, not allocated yet (undrained: no candidate any more): one more for the 2-node job
    assert fixed_node_releases([team], [n for n in held if n != "a-1"], outstanding=["a-1"]) == ["a-2"]
    assert fixed_node_releases([team], ["a-0", "a-2", "b-0"], outstanding=["a-1", "a-3"]) == []


def test_names_in_a_reservation_are_no_capacity_for_other_jobs(
    fleet: Daemon, slurm: FakeSlurm, cloud: FakeCloud, clock: Clock
) -> None:
    """A reservation over c1-od1g-[0-1], c1-od1g-0 up and idle in it, and a job of no reservation: slurmctld would
    never start it there, so the plan does not count on c1-od1g-0, and the boot is c1-od1g-2 (the pool's lowest
    held name outside the reservation, not c1-od1g-1)."""
    slurm.reservations_ = {"team": ("c1-od1g-0", "c1-od1g-1")}
    fleet.tick()
    node_up(cloud, slurm, clock, 1, 0, "idle")
    slurm.jobs_ = [_job(7)]
    clock.advance(1)
    res = fleet.tick()
    assert [c["names"] for c in _commands(res, "scontrol-power_up")] == [["c1-od1g-2"]]
    slurm.reservations_ = {}  # the reservation ended: the idle node is the job's capacity again, nothing more boots
    clock.advance(1)
    assert _commands(fleet.tick(), "scontrol-power_up") == []


def test_reservations_are_read_only_where_the_daemon_picks_names_or_for_a_job_that_names_one(
    make_daemon: Callable[..., Daemon], slurm: FakeSlurm, cloud: FakeCloud, clock: Clock
) -> None:
    slurm.add_cloud_nodes(["c1-od1g-0"], gpus=1)
    unheld = make_daemon(pools=[replace(POOLS[0], max_nodes=1)], policy=replace(POLICY, late_bind=False))
    unheld.tick()
    # no hold, floor or standby: Slurm allocates every name itself, and the reservations are its business
    assert slurm.reservation_reads == 0
    slurm.jobs_ = [replace(_job(7), reservation="team")]
    clock.advance(1)
    unheld.tick()
    assert slurm.reservation_reads == 1


def test_a_jobs_own_exclude_is_avoided(fleet: Daemon, slurm: FakeSlurm, clock: Clock) -> None:
    """``--exclude=c1-od1g-0``: the plan boots the next held name for the job, not the pool's lowest, which it could
    never use."""
    fleet.tick()
    slurm.jobs_ = [replace(_job(7), excluded_nodes=("c1-od1g-0",))]
    clock.advance(1)
    assert [c["names"] for c in _commands(fleet.tick(), "scontrol-power_up")] == [["c1-od1g-1"]]


@pytest.mark.parametrize(("own", "boots"), [(False, [["c1-od1g-0"]]), (True, [])])
def test_an_idle_node_a_job_excludes_is_no_capacity_for_it_unless_the_daemon_set_it(
    fleet: Daemon, slurm: FakeSlurm, cloud: FakeCloud, clock: Clock, own: bool, boots: list[list[str]]
) -> None:
    """c1-od1g-2 up and idle, a job whose ExcNodeList names it: its own ``--exclude`` (a node boots for it), or one
    this daemon set, recorded in its store (a gang's: `core.gang_exclusion`), which the plan may overrule."""
    fleet.tick()
    node_up(cloud, slurm, clock, 1, 2, "idle")
    if own:
        fleet.store.set_gang_exclusion(8, ["c1-od1g-2"], clock())
    slurm.jobs_ = [replace(_job(8), excluded_nodes=("c1-od1g-2",))]
    clock.advance(1)
    assert [c["names"] for c in _commands(fleet.tick(), "scontrol-power_up")] == boots
