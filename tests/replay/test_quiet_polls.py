"""The replay answers the daemon's repeated polls without planning again (`GpuFleetPolicy._quiet`), and that
answer is the one the full tick gives: with `verify_quiet` every such poll runs the full tick too and the replay
fails if it ran a command or woke otherwise, and the run's figures are the same to the cent either way.  (Polls
are answered quietly under late binding, while jobs wait for their boots; with a reservation nearly every tick
sets Weights, and bench/autoscaler_claims.py with FLEET_REPLAY_VERIFY_QUIET=1 checks those runs whole.)

The simulated Slurm counts every change it did not get from the driver's tick, and every command
(`SimSlurm.version`); a public method that changes Slurm and is not marked a command would let a poll be answered
from a stale view, so every public method is either a command or on the read-only list here."""

from __future__ import annotations

import inspect

import pytest

from autoscaler.replay.run import PolicyOptions, run_scenario
from autoscaler.replay.scenario import Scenario
from autoscaler.replay.simslurm import SimSlurm
from autoscaler.replay.synth import generate
from autoscaler.replay.trace import TraceJob, load_trace
from tests.replay.conftest import SMALL_TRACE

#: SimSlurm's public methods that change nothing a driver reads (or are the driver protocol and the loop itself)
READ_ONLY = {
    "allowed",
    "exclusive",
    "driver_idle_wake",
    "driver_poll",
    "free_indices",
    "gated_jobs",
    "job_pools",
    "names_up",
    "held_boots",
    "held_indices",
    "offerings",
    "partly_used",
    "pending_jobs",
    "registered",
    "run",
    "schedule",  # Slurm's own pass, run by events and commands (each counted there)
    "victim_order",
    "wake",
    "weights",
}

FIGURES = ("cost_usd", "wait_p50_s", "wait_p95_s", "wait_mean_s", "nodes_launched", "planner_calls")


def _figures(jobs: list[TraceJob], scenario: Scenario, options: PolicyOptions, verify: bool, monkeypatch) -> tuple:
    monkeypatch.setenv("FLEET_REPLAY_VERIFY_QUIET", "1" if verify else "0")
    result = run_scenario(jobs, scenario, ["gpu-fleet"], options=options)
    driver = result.engines["gpu-fleet"].driver
    m = result.metrics["gpu-fleet"]
    return tuple(m.get(k) for k in FIGURES), driver.ticks, driver.launch_log, driver.quiet_ticks


CASES = [
    ("short", lambda: generate("short", seed=0, jobs=400), Scenario(), PolicyOptions()),
    (
        "ITP head, spot, stockouts",
        lambda: load_trace(SMALL_TRACE),
        Scenario(spot_fraction=0.3, stockout_rate=0.2),
        PolicyOptions(),
    ),
    (
        "long tail with an idle keep",
        lambda: generate("long-tail", seed=2, jobs=300),
        Scenario(stockout_rate=0.2),
        PolicyOptions(wait_value_usd_per_gpu_hour=11.06),
    ),
]


@pytest.mark.parametrize("name,jobs,scenario,options", CASES, ids=[c[0] for c in CASES])
def test_quiet_polls_give_the_full_tick_s_answer_and_the_same_figures(
    name: str, jobs, scenario: Scenario, options: PolicyOptions, monkeypatch
) -> None:
    trace = jobs()
    fast = _figures(trace, scenario, options, False, monkeypatch)
    checked = _figures(trace, scenario, options, True, monkeypatch)  # raises ReplayError on a wrong answer
    assert fast[:3] == checked[:3], name
    assert fast[3] > 0, f"{name}: no poll was answered quietly, so this case tests nothing"
    assert fast[3] == checked[3]


def test_every_public_method_of_the_simulated_slurm_is_a_command_or_read_only() -> None:
    public = {n for n, f in inspect.getmembers(SimSlurm, inspect.isfunction) if not n.startswith("_")}
    commands = {n for n in public if getattr(getattr(SimSlurm, n), "is_command", False)}
    protocol = {"resume", "suspend", "resume_fail", "tick", "pools", "slurm_settings"}  # the driver's, not Slurm's
    unknown = public - commands - READ_ONLY - protocol
    assert not unknown, f"mark these @command (they change Slurm) or list them as read-only: {sorted(unknown)}"
    assert {"launch", "delete", "drain", "release", "hold", "boot_held", "undrain_held"} <= commands
