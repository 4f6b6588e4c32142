"""Fixtures for the bootstrap tests: a stacks directory, the CLI runner, the fake Compute server."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.fakes.fixtures import fake_compute, fake_compute_factory  # noqa: F401

REPO = Path(__file__).resolve().parents[2]
#: the labels the policy pack requires on billable resources (fleet.policy.rules): a stack without them is refused
LABELS = ("--label", "team=ml-platform", "--label", "cost-center=cc-gpu")


@pytest.fixture
def stacks_dir(tmp_path: Path) -> Path:
    (tmp_path / "Pulumi.yaml").write_text((REPO / "Pulumi.yaml").read_text())
    return tmp_path


@pytest.fixture
def bootstrap(stacks_dir: Path) -> Callable[..., tuple[int, dict | str]]:
    """Run `fleet bootstrap-region ARGS --stacks-dir <tmp> --json`; returns (exit code, parsed JSON or text)."""
    from fleet.cli.main import app

    runner = CliRunner()

    def run(*args: str, as_json: bool = True) -> tuple[int, dict | str]:
        argv = ["bootstrap-region", *args, "--stacks-dir", str(stacks_dir)] + (["--json"] if as_json else [])
        result = runner.invoke(app, argv)
        if result.exception and not isinstance(result.exception, SystemExit):
            raise result.exception
        text = result.stdout
        try:
            return result.exit_code, json.loads(text)
        except json.JSONDecodeError:
            return result.exit_code, text + result.stderr

    return run
