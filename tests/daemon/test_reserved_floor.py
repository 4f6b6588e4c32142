"""Reserved capacity launched up front (`Policy.launch_reserved_nodes`), and a pool's floor in general, through the
daemon's tick against the fake Slurm and cloud: the daemon powers the names up (`scontrol update state=power_up`),
slurmctld calls the ResumeProgram with them, and the resume path creates exactly those instances; names already
powering up are not powered up twice, and a floor never takes the room a job's resumed names need."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest

from autoscaler.cloud import Offering
from autoscaler.daemon.tick import Daemon
from autoscaler.model import Policy
from tests.daemon.conftest import spot_pool
from tests.daemon.fakes import FakeCloud, FakeSlurm
from tests.daemon.test_reserved_weights import RESV, RESV_KEY, resv_pool
from tests.daemon.test_tick import launches, resume

POLICY = Policy(idle_timeout_s=600, backoff_s=300, late_bind=False)


@pytest.fixture
def resv(slurm: FakeSlurm, cloud: FakeCloud) -> FakeSlurm:
    """Four powered-down reserved names; the reservation has three free slots (one is used outside this cluster)."""
    cloud.offers.append(Offering(RESV_KEY, 0.0, "nvidia-h100-80gb", 8, available_nodes=3))
    slurm.add_cloud_nodes(RESV)
    return slurm


def power_ups(res) -> list[tuple[list[str], str]]:  # type: ignore[no-untyped-def]
    return [(c["names"], c["reason"]) for c in res.commands if c["command"] == "scontrol-power_up"]


def test_the_daemon_powers_up_every_free_reserved_slot_once_and_launches_what_slurm_resumes(
    make_daemon: Callable[..., Daemon], resv: FakeSlurm, cloud: FakeCloud
) -> None:
    d = make_daemon(pools=[spot_pool(), resv_pool()], policy=POLICY)
    res = d.tick()
    ((names, reason),) = power_ups(res)
    assert names == RESV[:3]  # the reservation's free slots, lowest names first
    assert reason.startswith("gpu-fleet reserved capacity launched up front: 3 new nodes")
    assert launches(res) == [] and not cloud.nodes_  # nothing is created that Slurm did not resume
    # slurmctld has not called the ResumeProgram yet: the names are POWERING_UP and unlisted, not powered up again
    assert power_ups(d.tick()) == []
    # the ResumeProgram's call: the resume path creates exactly those instances, on the reservation
    resume(d, RESV[:3])
    for n in RESV[:3]:
        resv.set(n, "idle", "POWERING_UP", "NOT_RESPONDING")
    res = d.tick()
    (launch,) = launches(res)
    assert launch["names"] == RESV[:3] and launch["offering"] == str(RESV_KEY)
    assert power_ups(res) == []
    # the reservation now reports its slots in use (Compute's inUseCount): the floor is met
    cloud.offers[-1] = Offering(RESV_KEY, 0.0, "nvidia-h100-80gb", 8, available_nodes=0)
    assert power_ups(d.tick()) == []


def test_names_asked_to_power_up_that_slurmctld_has_not_taken_yet_are_not_powered_up_again(
    make_daemon: Callable[..., Daemon], resv: FakeSlurm
) -> None:
    """Between `scontrol update state=power_up` and its power thread's ResumeProgram call, slurmctld shows a name
    POWERED_DOWN with POWER_UP (measured on 22.05 and 23.11: bench/probe_power_up_flag.py).  A tick in that window
    counted it powered down and sent the power-up again (the reserved-up-front e2e test on 23.11, in CI)."""
    d = make_daemon(pools=[spot_pool(), resv_pool()], policy=POLICY)
    ((names, _),) = power_ups(d.tick())
    for n in names:
        resv.set(n, "idle", "POWERED_DOWN", "POWER_UP")
    assert power_ups(d.tick()) == []


def test_off_the_reserved_names_wait_for_work(make_daemon: Callable[..., Daemon], resv: FakeSlurm) -> None:
    d = make_daemon(pools=[spot_pool(), resv_pool()], policy=replace(POLICY, launch_reserved_nodes=False))
    assert power_ups(d.tick()) == []


def test_a_floor_never_takes_the_slots_a_jobs_resumed_names_need(
    make_daemon: Callable[..., Daemon], resv: FakeSlurm, cloud: FakeCloud
) -> None:
    """The resume plan sees the pool empty: before, its own floor pass booked the free reserved slots (and a pool's
    min_nodes its max) ahead of the job's names, and the job's launch was refused as exhausted."""
    d = make_daemon(pools=[spot_pool(), replace(resv_pool(), min_nodes=2)], policy=POLICY)
    resume(d, RESV[:3], job=7)  # a 3-node gang Slurm bound to three reserved names
    res = d.tick()
    (launch,) = launches(res)
    assert launch["names"] == RESV[:3] and launch["offering"] == str(RESV_KEY)
    assert sorted(cloud.nodes_) == RESV[:3]


def test_a_floor_skips_names_in_a_slurm_reservation(
    make_daemon: Callable[..., Daemon], resv: FakeSlurm, cloud: FakeCloud
) -> None:
    """A Slurm advanced reservation over the first reserved name (a team's, or maintenance): only its jobs could run
    there, so the floor powers up the next free names instead; Slurm's reservations are read for it, the pools
    being unheld."""
    resv.reservations_ = {"team": (RESV[0],)}
    d = make_daemon(pools=[spot_pool(), resv_pool()], policy=POLICY)
    ((names, _),) = power_ups(d.tick())
    assert names == RESV[1:4] and resv.reservation_reads == 1
