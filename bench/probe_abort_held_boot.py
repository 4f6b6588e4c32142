"""Probe, on a real slurmctld 22.05 (tests/harness, the e2e environment without the daemon): can a late-binding held
boot be aborted before its instance registers?  A name booted drained (`scontrol update state=power_up` on a
drained powered-down CLOUD node: POWERING_UP + DRAIN, no job) whose job took another node is surplus; the
what-if `bench/reserve_whatif.py --what cancel-surplus-boots` sizes deleting it at once.

    timeout 900 nice -n 10 .venv/bin/pytest -n 0 -s -q -p no:cacheprovider bench/probe_abort_held_boot.py

For `power_down` and `power_down_force`: drain `e2e-od-0` with the hold's reason, power it up, wait 3 s, send the
power-down, then print every change of its state, flags and reason for 40 s, and whether SuspendProgram ran.
Not part of the suite (CI does not collect bench/)."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.conftest import slurm_factory  # noqa: F401  (the harness fixture)
from tests.e2e.env import e2e_env, pool
from tests.harness.cloud_nodes import Nodeset
from tests.harness.slurm import SlurmHarness

pytestmark = [pytest.mark.slurm, pytest.mark.gce, pytest.mark.slow]


@pytest.mark.parametrize("how", ["power_down_force", "power_down"])
def test_abort_held_boot(slurm_factory: Callable[..., SlurmHarness], how: str) -> None:  # noqa: F811
    with e2e_env(
        slurm_factory,
        suspend_time=600,
        pools=[pool("od", "on-demand", "gpu", False, max_nodes=2)],
        nodesets=[Nodeset("e2e-od", 2)],
        partitions={"gpu": ["e2e-od"]},
    ) as env:

        def run(*args: str) -> None:
            p = env.slurm.run("scontrol", *args)
            print(f"scontrol {' '.join(args)} -> rc {p.returncode} {p.stdout.strip()} {p.stderr.strip()}")

        def state() -> str:
            n = env.sinfo()["e2e-od-0"]
            return f"{n.get('state')} {sorted(n.get('state_flags') or n.get('flags') or [])} {n.get('reason', '')!r}"

        run("update", "nodename=e2e-od-[0-1]", "state=drain", "reason=gpu-fleet: held")
        run("update", "nodename=e2e-od-0", "state=power_up")
        time.sleep(3)
        print(how, "before:", state())
        run("update", "nodename=e2e-od-0", f"state={how}")
        t0, last = time.monotonic(), ""
        while time.monotonic() - t0 < 40:
            now = state()
            if now != last:
                print(f"{how} t+{time.monotonic() - t0:4.1f}s {now}")
                last = now
            time.sleep(1)
        print("state dir:", sorted(p.name for p in env.root.rglob("*") if "suspend" in p.name.lower())[:10])


@pytest.mark.parametrize(
    "order", ["drain-then-resume", "resume-then-drain", "drain-then-power_down_force", "drain-then-power_down"]
)
def test_return_a_timed_out_boot_to_service_held(slurm_factory: Callable[..., SlurmHarness], order: str) -> None:  # noqa: F811
    """A held boot that never registers: at ResumeTimeout slurmctld marks it DOWN+POWERED_DOWN and clears its DRAIN.
    The daemon returns it to service (`state=resume`) and holds it again (`state=drain`).  In which order is the
    name never allocatable (POWERED_DOWN, no DRAIN, not DOWN) in between?"""
    with e2e_env(
        slurm_factory,
        suspend_time=600,
        resume_timeout=10,
        pools=[pool("od", "on-demand", "gpu", False, max_nodes=2)],
        nodesets=[Nodeset("e2e-od", 2)],
        partitions={"gpu": ["e2e-od"]},
    ) as env:

        def run(*args: str) -> None:
            p = env.slurm.run("scontrol", *args)
            print(f"scontrol {' '.join(args)} -> rc {p.returncode} {p.stdout.strip()} {p.stderr.strip()}")

        def state() -> str:
            n = env.sinfo()["e2e-od-0"]
            return f"{n.get('state')} {sorted(n.get('state_flags') or [])} {n.get('reason', '')!r}"

        run("update", "nodename=e2e-od-[0-1]", "state=drain", "reason=gpu-fleet: held")
        run("update", "nodename=e2e-od-0", "state=power_up")
        t0 = time.monotonic()
        while "down" not in state() and time.monotonic() - t0 < 60:
            time.sleep(1)
        print(order, "timed out:", state())
        first, _, then = order.partition("-then-")
        steps = [("state=drain", "reason=gpu-fleet: held") if s == "drain" else (f"state={s}",) for s in (first, then)]
        for step in steps:
            run("update", "nodename=e2e-od-0", *step)
            print(order, "after", step[0], ":", state())
        time.sleep(3)
        print(order, "3 s later:", state())
