"""Malformed daemon configs and inventories (`fleet autoscaler run --config ... --once --dry-run`), traces
(`fleet simulate --trace`) and hostlists (`fleet slurm resume HOSTLIST`): exit 2, the file and the field path
or line, no traceback, no state file created."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.inputs.cli import assert_refused, fleet
from tests.inputs.daemon import (
    CONFIG_CASES,
    HOSTLIST_CASES,
    INVENTORY_CASES,
    TRACE_CASES,
    VALID_CONFIG,
    VALID_INVENTORY,
    FileCase,
)


def _write(path: Path, text: str | bytes) -> Path:
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    return path


def _run_daemon(cfg: Path) -> object:
    return fleet("autoscaler", "run", "--config", cfg, "--once", "--dry-run")


def test_the_base_config_and_inventory_pass_the_gate(tmp_path: Path) -> None:
    from autoscaler.daemon.build import load_pools
    from autoscaler.daemon.config import load_config

    _write(tmp_path / "inv.json", VALID_INVENTORY)
    cfg = load_config(_write(tmp_path / "autoscaler.yaml", VALID_CONFIG))
    inv, _ = load_pools(cfg)
    assert [p.name for p in inv] and not (tmp_path / "state").exists()


@pytest.mark.parametrize("case", CONFIG_CASES, ids=str)
def test_daemon_config_refused(tmp_path: Path, case: FileCase) -> None:
    _write(tmp_path / "inv.json", VALID_INVENTORY)
    cfg = _write(tmp_path / "autoscaler.yaml", case.text)
    assert_refused(_run_daemon(cfg), cfg, case.where, case.reason)
    assert not (tmp_path / "state").exists()


@pytest.mark.parametrize("case", INVENTORY_CASES, ids=str)
def test_inventory_refused(tmp_path: Path, case: FileCase) -> None:
    inv = _write(tmp_path / "inv.json", case.text)
    cfg = _write(tmp_path / "autoscaler.yaml", VALID_CONFIG)
    assert_refused(_run_daemon(cfg), inv, case.where, case.reason)
    assert not (tmp_path / "state").exists()


def test_state_path_that_is_a_directory_is_refused(tmp_path: Path) -> None:
    _write(tmp_path / "inv.json", VALID_INVENTORY)
    (tmp_path / "state" / "autoscaler.db").mkdir(parents=True)
    cfg = _write(tmp_path / "autoscaler.yaml", VALID_CONFIG)
    assert_refused(_run_daemon(cfg), cfg, "state_path", "is a directory")


def test_state_path_under_a_file_is_refused(tmp_path: Path) -> None:
    _write(tmp_path / "inv.json", VALID_INVENTORY)
    (tmp_path / "state").write_text("not a directory")
    cfg = _write(tmp_path / "autoscaler.yaml", VALID_CONFIG)
    assert_refused(_run_daemon(cfg), cfg, "state_path", "is not a directory")


def test_a_directory_as_config_and_a_missing_config_are_refused(tmp_path: Path) -> None:
    assert_refused(_run_daemon(tmp_path), tmp_path, "", "is a directory, not a autoscaler config")
    assert_refused(_run_daemon(tmp_path / "none.yaml"), tmp_path / "none.yaml", "", "no such autoscaler config")


def test_metrics_beyond_loopback_need_the_explicit_opt_in(tmp_path: Path) -> None:
    from autoscaler.daemon.config import parse_config

    cfg = parse_config({"inventory": "x", "metrics": {"host": "0.0.0.0", "allow_remote": True}})
    assert cfg.metrics.host == "0.0.0.0"
    assert parse_config({"inventory": "x", "metrics": {"host": "::1"}}).metrics.host == "::1"
    assert parse_config({"inventory": "x", "metrics": {"host": "0.0.0.0", "enabled": False}}).metrics.enabled is False


@pytest.mark.parametrize("case", TRACE_CASES, ids=str)
def test_trace_refused(tmp_path: Path, case: FileCase) -> None:
    trace = _write(tmp_path / "t.csv", case.text)
    assert_refused(fleet("simulate", "--trace", trace, "--policy", "gpu-fleet"), trace, case.where, case.reason)


def test_a_directory_as_trace_is_refused(tmp_path: Path) -> None:
    assert_refused(fleet("simulate", "--trace", tmp_path), tmp_path, "", "is a directory")


@pytest.mark.parametrize(("name", "hostlist", "reason"), HOSTLIST_CASES, ids=[c[0] for c in HOSTLIST_CASES])
def test_hostlist_refused_and_nothing_queued(tmp_path: Path, name: str, hostlist: str, reason: str) -> None:
    state = tmp_path / "s.db"
    for action in ("resume", "suspend", "resume-fail"):
        out = fleet("slurm", action, hostlist, "--state", state)
        assert out.code == 2 and "Traceback" not in out.stderr, out.stderr
        assert out.stderr.startswith("HOSTLIST: ") and reason in out.stderr, out.stderr
        assert len(out.stderr) < 400  # one short line, not the whole expression
    assert not state.exists()


@pytest.mark.parametrize(
    ("flag", "value"),
    [
        ("--boot-seconds", "inf"),
        ("--stockout-rate", "nan"),
        ("--checkpoint-interval", "-inf"),
        ("--slurm-launch-pass", "inf"),
    ],
)
def test_simulate_refuses_non_finite_flags(flag: str, value: str) -> None:
    out = fleet("simulate", flag, value, "--policy", "gpu-fleet")
    assert out.code == 2 and "Traceback" not in out.stderr
    assert f"{flag}: Input should be a finite number" in out.stderr, out.stderr


def test_simulate_refuses_a_negative_launch_pass_and_one_for_kueue() -> None:
    out = fleet("simulate", "--slurm-launch-pass", "-1", "--policy", "gpu-fleet")
    assert out.code == 2 and "Traceback" not in out.stderr
    assert "--slurm-launch-pass: Input should be greater than or equal to 0" in out.stderr, out.stderr
    out = fleet("simulate", "--slurm-launch-pass", "10", "--scheduler", "kueue", "--policy", "gpu-fleet")
    assert out.code == 2 and "--slurm-launch-pass: only with --scheduler slurm" in out.stderr, out.stderr


def test_an_unknown_log_level_is_refused_before_anything_runs(tmp_path: Path) -> None:
    _write(tmp_path / "inv.json", VALID_INVENTORY)
    cfg = _write(tmp_path / "autoscaler.yaml", VALID_CONFIG)
    out = fleet("autoscaler", "run", "--config", cfg, "--once", "--dry-run", "--log-level", "LOUD")
    assert out.code == 2 and "--log-level: 'LOUD' is not one of" in out.stderr and "Traceback" not in out.stderr
    assert not (tmp_path / "state").exists()


def test_status_of_a_missing_state_store_is_refused_and_not_created(tmp_path: Path) -> None:
    out = fleet("autoscaler", "status", "--state", tmp_path / "none.db")
    assert out.code == 2 and "no such state store" in out.stderr
    assert not (tmp_path / "none.db").exists()
    out = fleet("autoscaler", "status", "--state", tmp_path)
    assert out.code == 2 and "is a directory" in out.stderr
