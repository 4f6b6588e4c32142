"""Probe, on a real slurmctld 22.05 (tests/harness, the e2e environment without the daemon): can a late-binding held
boot be aborted before its instance registers?  A name booted drained (`scontrol update state=power_up` on a
drained powered-down CLOUD node: POWERING_UP + DRAIN, no job) whose job took another node is surplus
(`autoscaler.core.surplus_held_boots`, docs/simulate.md "Surplus held boots").

    timeout 900 nice -n 10 .venv/bin/pytest -n 0 -s -q -p no:cacheprovider bench/probe_abort_held_boot.py

`test_abort_held_boot`: drain `e2e-od-0` with the hold's reason, power it up, wait 3 s, send `power_down_force` or
`power_down`, then print every change of its state, flags and reason for 40 s.  `test_return_a_timed_out_boot_to_
service_held`: the same boot, never registered (ResumeTimeout 10 s), then two commands in the order given.

Measured on this machine (Slurm 22.05.8, 2026-12-03, one run each):
- `power_down_force` on the held boot: at once DRAIN+POWER_DOWN (POWERING_UP gone), 1.1 s later POWERING_DOWN with
  DRAIN cleared, POWERED_DOWN after SuspendTimeout: the abort the daemon uses (`core.surplus_held_boots`).
- `power_down`: stays POWERING_UP+POWER_DOWN for 40 s (pending until the node would register): useless here.
- After ResumeTimeout (DOWN+POWERED_DOWN, DRAIN cleared): `resume` then `drain` leaves the name idle~ with no
  DRAIN between the two commands (allocatable: the hole a CI run caught); `drain` then `resume` ends idle~ with
  no DRAIN (resume clears both); `drain` then `power_down` or `power_down_force` keeps the name unallocatable
  (DOWN+DRAIN, then POWERING_DOWN with DOWN and DRAIN cleared as the power thread takes it), so the daemon powers
  a held name down and drains it again once POWERING_DOWN (autoscaler/daemon/tick.py).
Not part of the suite (CI does not collect bench/)."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.conftest import slurm_factory  # noqa: F401  (the harness fixture)
from tests.e2e.env import E2E, e2e_env, pool
from tests.harness.cloud_nodes import Nodeset
from tests.harness.slurm import SlurmHarness

pytestmark = [pytest.mark.slurm, pytest.mark.gce, pytest.mark.slow]


def _held_pair(slurm_factory: Callable[..., SlurmHarness], **kwargs: Any) -> AbstractContextManager[E2E]:  # noqa: F811
    """The e2e environment without the daemon: one on-demand pool `e2e-od-[0-1]` for partition `gpu`."""
    return e2e_env(
        slurm_factory,
        suspend_time=600,
        pools=[pool("od", "on-demand", "gpu", False, max_nodes=2)],
        nodesets=[Nodeset("e2e-od", 2)],
        partitions={"gpu": ["e2e-od"]},
        **kwargs,
    )


def _run(env: E2E, *args: str) -> None:
    p = env.slurm.run("scontrol", *args)
    print(f"scontrol {' '.join(args)} -> rc {p.returncode} {p.stdout.strip()} {p.stderr.strip()}")


def _state(env: E2E, name: str = "e2e-od-0") -> str:
    n = env.sinfo()[name]
    return f"{n.get('state')} {sorted(n.get('state_flags') or [])} {n.get('reason', '')!r}"


def _boot_held(env: E2E) -> None:
    """Both names drained with the hold's reason, then `e2e-od-0` powered up (POWERING_UP+DRAIN, no job)."""
    _run(env, "update", "nodename=e2e-od-[0-1]", "state=drain", "reason=gpu-fleet: held")
    _run(env, "update", "nodename=e2e-od-0", "state=power_up")


@pytest.mark.parametrize("how", ["power_down_force", "power_down"])
def test_abort_held_boot(slurm_factory: Callable[..., SlurmHarness], how: str) -> None:  # noqa: F811
    with _held_pair(slurm_factory) as env:
        _boot_held(env)
        time.sleep(3)
        print(how, "before:", _state(env))
        _run(env, "update", "nodename=e2e-od-0", f"state={how}")
        t0, last = time.monotonic(), ""
        while time.monotonic() - t0 < 40:
            now = _state(env)
            if now != last:
                print(f"{how} t+{time.monotonic() - t0:4.1f}s {now}")
                last = now
            time.sleep(1)


@pytest.mark.parametrize(
    "order", ["drain-then-resume", "resume-then-drain", "drain-then-power_down_force", "drain-then-power_down"]
)
def test_return_a_timed_out_boot_to_service_held(slurm_factory: Callable[..., SlurmHarness], order: str) -> None:  # noqa: F811
    """A held boot that never registers: at ResumeTimeout slurmctld marks it DOWN+POWERED_DOWN and clears its DRAIN.
    The daemon returns it to service and holds it again.  Which commands leave the name never allocatable
    (POWERED_DOWN, no DRAIN, not DOWN) in between?"""
    with _held_pair(slurm_factory, resume_timeout=10) as env:
        _boot_held(env)
        t0 = time.monotonic()
        while "down" not in _state(env) and time.monotonic() - t0 < 60:
            time.sleep(1)
        print(order, "timed out:", _state(env))
        first, _, then = order.partition("-then-")
        steps = [("state=drain", "reason=gpu-fleet: held") if s == "drain" else (f"state={s}",) for s in (first, then)]
        for step in steps:
            _run(env, "update", "nodename=e2e-od-0", *step)
            print(order, "after", step[0], ":", _state(env))
        time.sleep(3)
        print(order, "3 s later:", _state(env))
