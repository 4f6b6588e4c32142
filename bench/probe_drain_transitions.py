"""Probe slurmctld 22.05 on the two transitions the hold depends on (figures only, no policy).

    .venv/bin/python bench/probe_drain_transitions.py [--what power-down,undrain,release] [--rounds 6]

The e2e harness (tests/e2e/env.py: real slurmctld, one real slurmd per CLOUD node) with no daemon; the probe runs
scontrol itself.

- **power-down**: which DRAIN survives a power-down. Three registered nodes: drained just after `scontrol update
  state=power_down`, drained once sinfo shows POWERING_DOWN, drained just before the power-down. Prints each
  node's flags as they change until the power-downs complete (SuspendTimeout 10 s). 22.05.8: only the drain set
  while POWERING_DOWN is still there at POWERED_DOWN (what `autoscaler.daemon.tick.power_down_taken` relies on).
- **undrain**: a registered, drained node and a pending batch job only it can run; `state=undrain` -> the job
  RUNNING, per SchedulerParameters (Slurm's default, then `batch_sched_delay=0`, what fleet/slurm/policy.py
  renders under late binding).  22.05.8, 6 rounds each: ~1.9 s either way (1.2-2.0 s).  The option's effect shows
  in the late-binding flow, where the undrain follows the boot's registration (bench/late_bind_latency.py: 2.2 s
  mean at the default, 1.0 s with it), not here.
- **release**: the same with a drained *powered-down* node: `state=undrain` -> the job allocated (no longer
  PENDING), as when the daemon releases held names for a gang.  22.05.8: ~1 s either way (0.9-1.95 s; again on
  2026-12-05, 6 rounds: 0.88-1.9 s at the default, 0.88-1.0 s with `batch_sched_delay=0`), which the replay models
  as `SlurmSettings.release_allocation_s` (docs/simulate.md, "Known limits").

Needs root and Slurm (scripts/setup.sh); exits 0 with a note otherwise.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fleet.slurm.policy import HOLD_SCHEDULER_OPTIONS
from tests.e2e.env import E2E, pool, standalone_e2e, standalone_unavailable_reason
from tests.harness.cloud_nodes import Nodeset

SETTINGS = ("", HOLD_SCHEDULER_OPTIONS)  # Slurm's default SchedulerParameters, then the late-binding render


@contextmanager
def harness(nodes: int, scheduler: str = "") -> Iterator[tuple[E2E, Callable[..., None]]]:
    """`nodes` CLOUD nodes in partition `gpu`, no daemon, with `scheduler` as SchedulerParameters (none: Slurm's
    defaults); yields the environment and `scontrol update`."""
    lines = (lambda h, s: [f"SchedulerParameters={scheduler}"]) if scheduler else None
    with standalone_e2e(
        suspend_time=600,
        resume_timeout=600,
        pools=[pool("od", "on-demand", "gpu", False, max_nodes=nodes)],
        nodesets=[Nodeset("e2e-od", nodes)],
        partitions={"gpu": ["e2e-od"]},
        slurm_lines=lines,
    ) as env:

        def update(*args: str) -> None:
            env.slurm.run("scontrol", "update", *args, check=True)

        yield env, update


def _until(pred: Callable[[], Any], timeout: float) -> float:
    t0 = time.time()
    while not pred() and time.time() - t0 < timeout:
        time.sleep(0.05)
    return round(time.time() - t0, 2)


def _register(env: E2E, update: Callable[..., None], names: list[str]) -> None:
    """Power the nodes up and start their slurmd (no daemon, no VM): registered and idle."""
    for n in names:
        update(f"nodename={n}", "state=power_up")
    time.sleep(3)  # the power thread takes the power-ups first
    for n in names:
        env.nodes.boot(n)
    _until(lambda: not any(set(env.sinfo()[n]["state_flags"]) & {"POWERING_UP", "NOT_RESPONDING"} for n in names), 60)


def power_down() -> None:
    names = ["e2e-od-0", "e2e-od-1", "e2e-od-2"]
    with harness(3) as (env, update):
        _register(env, update, names)
        update("nodename=e2e-od-0", "state=power_down", "reason=probe")
        update("nodename=e2e-od-0", "state=drain", "reason=after")
        update("nodename=e2e-od-1", "state=power_down", "reason=probe")
        update("nodename=e2e-od-2", "state=drain", "reason=before")
        update("nodename=e2e-od-2", "state=power_down", "reason=probe")
        t0, last, drained = time.time(), {}, False
        while time.time() - t0 < 20:
            cur = {n: "+".join(env.sinfo()[n]["state_flags"]) for n in names}
            if cur != last:
                print(f"  {time.time() - t0:5.2f} s  {cur}")
                last = cur
            if not drained and "POWERING_DOWN" in cur["e2e-od-1"]:
                update("nodename=e2e-od-1", "state=drain", "reason=once-powering-down")
                drained = True
            time.sleep(0.1)
    print("  e2e-od-0: drained just after power_down; e2e-od-1: once POWERING_DOWN; e2e-od-2: just before")


def undrain(rounds: int, powered_down: bool) -> None:
    for scheduler in SETTINGS:
        out = []
        with harness(max(rounds, 1) if powered_down else 1, scheduler) as (env, update):
            if not powered_down:
                _register(env, update, ["e2e-od-0"])
            update(f"nodename=e2e-od-[0-{max(rounds, 1) - 1 if powered_down else 0}]", "state=drain", "reason=held")
            for r in range(rounds):
                name = f"e2e-od-{r if powered_down else 0}"
                job = env.gpu_job(1)
                time.sleep(4)  # PENDING, looked at by the scheduler
                update(f"nodename={name}", "state=undrain")
                if powered_down:
                    out.append(_until(lambda j=job: env.job_state(j) != "PENDING", 30))
                    env.slurm.run("scancel", str(job))
                    update(f"nodename={name}", "state=drain", "reason=used")
                else:
                    out.append(_until(lambda j=job: env.job_state(j) == "RUNNING", 30))
                    _until(lambda j=job: env.job_state(j) == "GONE", 30)
                    update(f"nodename={name}", "state=drain", "reason=held")
                time.sleep(1)
        what = "undrain -> allocated" if powered_down else "undrain -> RUNNING"
        print(f"  SchedulerParameters={scheduler or '(default)'}: {what} {out} s")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--what", default="power-down,undrain,release")
    ap.add_argument("--rounds", type=int, default=6)
    a = ap.parse_args()
    reason = standalone_unavailable_reason()
    if reason:
        print(f"skip: {reason}")
        return 0
    for what in (w.strip() for w in a.what.split(",") if w.strip()):
        print(what)
        if what == "power-down":
            power_down()
        elif what in ("undrain", "release"):
            undrain(a.rounds, powered_down=what == "release")
        else:
            raise SystemExit(f"--what: unknown {what!r} (power-down, undrain, release)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
