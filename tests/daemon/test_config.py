"""Config validation: errors name the field path and the reason; relative paths resolve beside the file."""

from __future__ import annotations

from pathlib import Path

import pytest

from autoscaler.daemon.build import build_policy, load_pools
from autoscaler.daemon.config import ConfigError, load_config, parse_config

EXAMPLE = Path(__file__).parents[2] / "deploy" / "autoscaler.example.yaml"


def errors(data: object) -> list[tuple[str, str]]:
    with pytest.raises(ConfigError) as ei:
        parse_config(data)
    return ei.value.errors


def test_minimal_config_defaults() -> None:
    cfg = parse_config({"inventory": "/x.json"})
    assert cfg.slurm.mode == "cli" and cfg.metrics.host == "127.0.0.1" and cfg.loop.interval_s == 10
    assert cfg.provider.kind == "gce"


@pytest.mark.parametrize(
    ("data", "path", "reason"),
    [
        ({}, "inventory", "Field required"),
        ({"inventory": "x", "slurm": {"mode": "ssh"}}, "slurm.mode", "'cli' or 'rest'"),
        ({"inventory": "x", "slurm": {"mode": "rest"}}, "slurm", "rest_url is required"),
        ({"inventory": "x", "metrics": {"port": 70000}}, "metrics.port", "less than or equal to 65535"),
        ({"inventory": "x", "loop": {"interval_s": 0}}, "loop.interval_s", "greater than 0"),
        ({"inventory": "x", "pools": []}, "pools", "at least one pool"),
        ({"inventory": "x", "typo": 1}, "typo", "Extra inputs"),
        ({"inventory": "x", "provider": {"anonymous": True}}, "provider", "local endpoint"),
    ],
)
def test_invalid_configs_name_the_field(data: dict, path: str, reason: str) -> None:
    errs = errors(data)
    assert any(p == path and reason in r for p, r in errs), errs


def test_policy_fields_are_checked_against_the_planner_policy() -> None:
    assert build_policy({"idle_timeout_s": 30, "spot_queues": ["gpu"]}).spot_queues == frozenset({"gpu"})
    with pytest.raises(ConfigError, match=r"policy\.idle_timout_s: unknown policy field"):
        build_policy({"idle_timout_s": 30})
    with pytest.raises(ConfigError, match=r"policy\.max_nodes"):
        build_policy({"max_nodes": -1})


def test_example_config_loads_and_resolves_relative_paths(tmp_path: Path) -> None:
    cfg = load_config(EXAMPLE)
    assert cfg.inventory.is_absolute()
    (tmp_path / "a.yaml").write_text("inventory: inv.json\nstate_path: state/s.db\n")
    cfg = load_config(tmp_path / "a.yaml")
    assert cfg.inventory == tmp_path / "inv.json" and cfg.state_path == tmp_path / "state" / "s.db"


def test_unreadable_files_are_config_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="No such file"):
        load_config(tmp_path / "missing.yaml")
    (tmp_path / "bad.yaml").write_text("inventory: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(tmp_path / "bad.yaml")
    cfg = parse_config({"inventory": str(tmp_path / "none.json")})
    with pytest.raises(ConfigError, match="no such autoscaler inventory"):
        load_pools(cfg)
