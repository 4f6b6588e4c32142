"""Probe, on a real slurmctld 22.05 (tests/harness, the e2e environment without the daemon): can a Slurm
reservation give a gang the held names the daemon releases for it, so that an older single-node job of the same
shape (waiting for its own drained boot) cannot take one (the gang-release race, docs/simulate.md "Known limits")?

    timeout 900 nice -n 10 .venv/bin/pytest -n 0 -s -q -p no:cacheprovider bench/probe_gang_reservation.py

Three 8-GPU CLOUD names `e2e-od-[0-2]`, powered down and drained with the hold's reason (what the daemon's hold
leaves).  An 8-GPU single-node job is submitted first, then a 2-node 8-GPU gang; both stay PENDING.  Then:
- `race`: the two names the plan launches for the gang are undrained (today's release);
- `reserved`: `scontrol create reservation` on those two names for the gang's user, `scontrol update job=<gang>
  reservation=...`, then the undrain.
It prints who was allocated what, and whether each scontrol step was accepted; in `reserved` it then tries to
delete the reservation.  Not part of the suite (CI does not collect bench/).

Measured on this machine (Slurm 22.05.8, 2026-12-03, two runs):
- `race`: the single-node job takes `e2e-od-0` (CONFIGURING) and the gang stays PENDING (Resources): the race
  the replay models, on real slurmctld.
- `reserved`: slurmctld accepts the reservation on two drained, powered-down CLOUD names (with or without
  `flags=ignore_jobs`) and the job update; after the undrain the gang is CONFIGURING on `e2e-od-[0-1]` and the
  single-node job stays PENDING (ReqNodeNotAvail).  Deleting the reservation while the gang holds its nodes is
  refused ("Requested reservation is in use"), so a daemon using this must let it lapse (its Duration, or
  `flags=purge_comp`, not probed) rather than delete it at the allocation.

`test_b_reservation_lapse` (2026-12-03, one run each): created with `duration=unlimited users=root
flags=purge_comp=1,no_hold_jobs_after` (slurmctld shows `PURGE_COMP=00:01:00,NO_HOLD_JOBS_AFTER_END`, EndTime a year
on).
- `used`: the gang was CONFIGURING on `e2e-od-[0-1]` 4 s after the undrain; with no daemon nothing created the
  instances, so at ResumeTimeout (about 65 s) slurmctld requeued it (PENDING, BeginTime, then Resources).  The
  reservation outlived the requeue and was still there 200 s on, the gang pending in it.
- `unused` (names never undrained): the reservation was still there 200 s on, the gang PENDING in it.
So a *pending* job counts as associated: PURGE_COMP does not purge a reservation whose job waits, and a gang that
never gets its names keeps them reserved until it runs or goes.  A daemon using this would have to re-point
(`scontrol update reservation nodes=`) or delete such a reservation itself, and keep its names out of every other
release; the purge only cleans up after the job has ended or been cancelled (not observed here: the 15 s gang never
ran).  Not built: see docs/simulate.md "Known limits"."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.conftest import slurm_factory  # noqa: F401  (the harness fixture)
from tests.e2e.env import E2E, e2e_env, pool
from tests.harness.cloud_nodes import Nodeset
from tests.harness.slurm import SlurmHarness

pytestmark = [pytest.mark.slurm, pytest.mark.gce, pytest.mark.slow]


def _jobs(env: E2E) -> dict[int, tuple[str, str, str]]:
    return {
        j["job_id"]: (j["job_state"], j.get("nodes") or "", j.get("state_reason") or "")
        for j in env.slurm.squeue_json()["jobs"]
    }


def _run(env: E2E, *args: str) -> str:
    p = env.slurm.run("scontrol", *args)
    out = f"scontrol {' '.join(args)} -> rc {p.returncode} {p.stdout.strip()} {p.stderr.strip()}"
    print(out)
    return out


@contextmanager
def _three_held(slurm_factory: Callable[..., SlurmHarness]) -> Iterator[E2E]:  # noqa: F811
    """The e2e environment without the daemon: `e2e-od-[0-2]` (8 GPUs each, partition `gpu`), powered down and
    drained with the hold's reason."""
    with e2e_env(
        slurm_factory,
        suspend_time=600,
        pools=[pool("od", "on-demand", "gpu", False, max_nodes=3)],
        nodesets=[Nodeset("e2e-od", 3)],
        partitions={"gpu": ["e2e-od"]},
    ) as env:
        _run(env, "update", "nodename=e2e-od-[0-2]", "state=drain", "reason=gpu-fleet: held")
        yield env


@pytest.mark.parametrize("mode", ["race", "reserved"])
def test_a_gangs_released_names(slurm_factory: Callable[..., SlurmHarness], mode: str) -> None:  # noqa: F811
    with _three_held(slurm_factory) as env:
        out = env.root / "log"
        single = env.sbatch("-p", "gpu", "-N", "1", "--gres=gpu:8", "-o", f"{out}/%j.out", "--wrap", "sleep 600")
        gang = env.sbatch("-p", "gpu", "-N", "2", "--gres=gpu:8", "-o", f"{out}/%j.out", "--wrap", "sleep 600")
        time.sleep(4)
        print(mode, "before:", _jobs(env))
        release = "e2e-od-[0-1]"
        if mode == "reserved":
            _run(env, "create", "reservation", f"reservationname=gpu-fleet-gang-{gang}", f"nodes={release}",
                 "starttime=now", "duration=60", "users=root")  # fmt: skip
            _run(env, "update", f"jobid={gang}", f"reservationname=gpu-fleet-gang-{gang}")
        _run(env, "update", f"nodename={release}", "state=undrain")
        time.sleep(8)
        jobs = _jobs(env)
        print(mode, "after:", jobs)
        print(env.slurm.run("scontrol", "show", "reservation").stdout)
        print(env.slurm.run("sinfo", "-N", "-o", "%N %T %E").stdout)
        if mode == "reserved":  # once the gang has its nodes: can the reservation go, and the gang keep them?
            _run(env, "delete", f"reservationname=gpu-fleet-gang-{gang}")
            time.sleep(2)
            print(mode, "after delete:", _jobs(env))
            print(env.slurm.run("scontrol", "show", "reservation").stdout)
        assert single in jobs and gang in jobs


def _reservations(env: E2E) -> str:
    out = env.slurm.run("scontrol", "-o", "show", "reservation").stdout.strip()
    return (
        " | ".join(
            " ".join(f for f in line.split() if f.split("=")[0] in ("ReservationName", "Nodes", "Flags", "EndTime"))
            for line in out.splitlines()
            if line.startswith("ReservationName")
        )
        or "none"
    )


@pytest.mark.parametrize("mode", ["used", "unused"])
def test_b_reservation_lapse(slurm_factory: Callable[..., SlurmHarness], mode: str) -> None:  # noqa: F811
    """How a gang's reservation goes away by itself: `flags=purge_comp=1,no_hold_jobs_after`, no end time.
    `used`: the gang (a 15 s job) takes the reserved names; watch the reservation after the gang ends.
    `unused`: the names are never undrained (the gang cannot get them); watch the reservation and the gang."""
    with _three_held(slurm_factory) as env:
        out = env.root / "log"
        gang = env.sbatch("-p", "gpu", "-N", "2", "--gres=gpu:8", "-o", f"{out}/%j.out", "--wrap", "sleep 15")
        time.sleep(3)
        resv = f"gpu-fleet-gang-{gang}"
        _run(env, "create", "reservation", f"reservationname={resv}", "nodes=e2e-od-[0-1]", "starttime=now",
             "duration=unlimited", "users=root", "flags=purge_comp=1,no_hold_jobs_after")  # fmt: skip
        _run(env, "update", f"jobid={gang}", f"reservationname={resv}")
        if mode == "used":
            _run(env, "update", "nodename=e2e-od-[0-1]", "state=undrain")
        t0 = time.monotonic()
        last = ""
        while time.monotonic() - t0 < 200:
            now = f"{_jobs(env).get(gang)} resv: {_reservations(env)}"
            if now != last:
                print(f"{mode} t+{time.monotonic() - t0:5.1f}s gang {now}")
                last = now
            time.sleep(2)
        print(env.slurm.run("scontrol", "show", "job", str(gang)).stdout)
