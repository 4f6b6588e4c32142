"""Command-line numbers and names the commands refuse up front, naming the flag: the bounds that keep a replay or
a generator finite (fleet/input/limits.py), Slurm's job id range, catalog names `list` and `compare` both know,
and the Kueue flag actually at fault.  Each refusal exits 2 before any work, with no traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from fleet.input.limits import MAX_GENERATED_JOBS, MAX_RESERVED_NODES, MAX_SLURM_JOB_ID
from tests.inputs.cli import Outcome, fleet

DATA = Path(__file__).resolve().parents[1] / "data"
TRACE = DATA / "itp_cluster10_first150.csv"


@pytest.fixture
def no_work(monkeypatch: pytest.MonkeyPatch) -> None:
    """A replay, a grid or a generator that starts fails the test: the bound is checked before."""

    def never(*args: object, **kwargs: object) -> None:
        raise AssertionError("the work started before the flag was checked")

    import autoscaler.replay.run as replay_run
    import autoscaler.replay.synth as synth
    import fleet.advise.commitments as commitments

    monkeypatch.setattr(replay_run, "run_scenario", never)
    monkeypatch.setattr(synth, "generate", never)
    monkeypatch.setattr(commitments, "advise", never)


def refused(out: Outcome, flag: str, reason: str) -> None:
    """Exit 2, no traceback, the first error line starts with the flag and says why."""
    assert out.code == 2, (out.code, out.stdout, out.stderr)
    assert out.exception is None or isinstance(out.exception, SystemExit), repr(out.exception)
    assert "Traceback" not in out.stderr + out.stdout
    first = next(line for line in out.stderr.splitlines() if line.strip())
    assert first.removeprefix("error: ").startswith(f"{flag}:"), out.stderr
    assert reason in out.stderr, (reason, out.stderr)


@pytest.mark.parametrize(
    ("args", "flag", "reason"),
    [
        (["--reserved-nodes", str(MAX_RESERVED_NODES + 1)], "--reserved-nodes", "a zonal managed instance group"),
        (["--reserved-nodes", "100000000"], "--reserved-nodes", f"at most {MAX_RESERVED_NODES:,}"),
        (["--boot-seconds", "1e15"], "--boot-seconds", "ResumeTimeout"),
        (["--boot-seconds", "1770"], "--boot-seconds", "must be below 1770 s"),
        (["--stockout-rate", "1"], "--stockout-rate", "no launch ever succeeds"),
    ],
)
def test_simulate_refuses_values_a_replay_never_finishes_with(
    args: list[str], flag: str, reason: str, no_work: None
) -> None:
    refused(fleet("simulate", "--trace", TRACE, "--policy", "gpu-fleet", *args), flag, reason)


def test_kueue_teams_beyond_the_default_quota_name_the_teams_flag(no_work: None) -> None:
    kueue = ("--scheduler", "kueue", "--policy", "gpu-fleet")
    out = fleet("simulate", "--trace", TRACE, *kueue, "--kueue-teams", "100000")
    refused(out, "--kueue-teams", "100,000 teams cannot each get a nominal GPU quota")
    assert "--kueue-quota-gpus:" not in out.stderr


def test_trace_generate_refuses_more_jobs_than_simulate_reads(tmp_path: Path, no_work: None) -> None:
    out = fleet("trace", "generate", "--regime", "short", "--jobs", "1000000000", "--out", tmp_path / "t.csv")
    refused(out, "--jobs", f"at most {MAX_GENERATED_JOBS:,}")
    assert not (tmp_path / "t.csv").exists()


@pytest.mark.parametrize(
    ("args", "flag", "reason"),
    [
        (["--sizes", "0:100000000:10000000"], "--sizes", f"at most {MAX_RESERVED_NODES:,} reserved nodes"),
        (["--sizes", f"0,{MAX_RESERVED_NODES + 1}"], "--sizes", "zonal managed instance group"),
        (["--stockout-rate", "1"], "--stockout-rate", "no launch ever succeeds"),
        (["--workers", str((os.cpu_count() or 1) + 1)], "--workers", "the cores of this machine"),
    ],
)
def test_advise_refuses_a_grid_that_never_finishes(args: list[str], flag: str, reason: str, no_work: None) -> None:
    refused(fleet("advise", "commitments", "--trace", TRACE, "--seeds", "1", *args), flag, reason)


def test_slurm_job_ids_are_uint32(tmp_path: Path) -> None:
    state = tmp_path / "autoscaler.db"
    for job_id in ("99999999999999999999", str(MAX_SLURM_JOB_ID + 1)):
        out = fleet("slurm", "job-end", "a3-spot-0", "--job-id", job_id, "--state", state)
        assert out.code == 2 and "--job-id" in out.stderr and "Traceback" not in out.stderr, out.stderr
        assert str(MAX_SLURM_JOB_ID) in out.stderr
    largest = fleet("slurm", "job-end", "a3-spot-0", "--job-id", str(MAX_SLURM_JOB_ID), "--state", state)
    assert "--job-id" not in largest.stderr  # accepted; the missing store is the next thing said
    # the hook slurm.conf runs (python -m autoscaler.slurm.hook) takes the same ids
    for job_id in ("99999999999999999999", str(MAX_SLURM_JOB_ID + 1), "0"):
        hook = subprocess.run([sys.executable, "-m", "autoscaler.slurm.hook", "job-end", "a3-spot-0", "--job-id",
                               job_id, "--state", str(state)], capture_output=True, text=True, check=False)  # fmt: skip
        assert hook.returncode == 2 and "--job-id" in hook.stderr and "Traceback" not in hook.stderr, hook.stderr
    assert not state.exists()


@pytest.mark.parametrize("hostlist", ["", " ", ","])
def test_an_empty_hostlist_is_named_once(tmp_path: Path, hostlist: str) -> None:
    state = tmp_path / "autoscaler.db"
    for action in ("suspend", "resume", "job-end"):
        out = fleet("slurm", action, hostlist, "--state", state)
        assert out.code == 2 and out.stderr.count("HOSTLIST:") == 1, out.stderr
        assert "empty hostlist" in out.stderr
        hook = subprocess.run([sys.executable, "-m", "autoscaler.slurm.hook", action, hostlist, "--state", str(state)],
                              capture_output=True, text=True, check=False)  # fmt: skip
        assert hook.returncode == 2 and hook.stderr.count("HOSTLIST:") == 1, hook.stderr
    assert not state.exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--region", "mars-central1"], "--region: no machine type of the catalog is offered in mars-central1"),
        (["--gpu", "h1000"], "--gpu: unknown h1000 (choose from"),
        (["--gpu", ","], "--gpu: give at least one value"),
    ],
)
def test_catalog_list_refuses_what_compare_refuses(args: list[str], message: str) -> None:
    for sub in ("list", "compare"):
        out = fleet("catalog", sub, *args)
        assert out.code == 2 and message in out.stderr and "Traceback" not in out.stderr, (sub, out.stderr)
        assert out.stdout == ""  # no empty table


def test_catalog_list_takes_gpu_names_as_compare_does() -> None:
    import json

    listed = json.loads(fleet("catalog", "list", "--gpu", "H100", "--json").stdout)
    compared = json.loads(fleet("catalog", "compare", "--gpu", "H100", "--json").stdout)["rows"]
    assert listed and {r["machine_type"] for r in listed} == {r["machine_type"] for r in compared}
    assert any(r["machine_type"].startswith("a3-mega") for r in listed)  # h100 takes h100-mega too
    one = json.loads(fleet("catalog", "list", "--region", "US-Central1", "--gpu", "l4", "--json").stdout)
    assert one and all(z.startswith("us-central1-") for r in one for z in r["zones"])
    out = fleet("catalog", "list", "--region", "us-central1,us-east4")
    assert out.code == 2 and "--region: one region" in out.stderr


def test_a_preemption_load_no_replay_would_finish_is_refused_before_it_runs() -> None:
    """At 3 preemptions per node-hour and a checkpoint every 30 minutes, the demo trace's 4-node, 47-hour job
    expects tens of thousands of preemptions (the replay ran for minutes without ending): refused at once, naming
    both flags and the job.  The same trace at the default rate runs."""
    out = fleet("simulate", "--spot-fraction", "1", "--preemption-rate", "3", "--policy", "gpu-fleet")
    assert out.code == 2 and "Traceback" not in out.stderr, out.stderr
    assert "--preemption-rate / --checkpoint-interval: spot-tolerant job" in out.stderr
    assert "would be preempted about 3.78e+04 times" in out.stderr


def test_expected_preemptions_follow_the_memoryless_law() -> None:
    """A stretch of t hours at rate r survives with probability exp(-r t): exp(r t) - 1 preemptions before it does;
    a job's rate is the node rate times its nodes; checkpoints split its run into such stretches."""
    import math

    from autoscaler.replay.trace import TraceJob, expected_preemptions

    one = TraceJob("a", 0.0, 7200.0, 8, True)  # one 8-GPU node, two hours
    assert expected_preemptions(one, 0.5, 0) == pytest.approx(math.e - 1)  # r t = 1
    assert expected_preemptions(one, 0.5, 3600) == pytest.approx(2 * (math.exp(0.5) - 1))
    four = TraceJob("b", 0.0, 7200.0, 32, True)  # four nodes: four times the rate
    assert expected_preemptions(four, 0.125, 0) == pytest.approx(math.e - 1)
    assert expected_preemptions(one, 0.0, 0) == 0.0
