"""Run the real `fleet` CLI in-process (typer's CliRunner) and check what a refused input must look like."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from typer.testing import CliRunner

from fleet.cli.main import app


@dataclass
class Outcome:
    code: int
    stdout: str
    stderr: str
    exception: BaseException | None


def fleet(*args: str) -> Outcome:
    res = CliRunner().invoke(app, [str(a) for a in args])
    return Outcome(res.exit_code, res.stdout, res.stderr, res.exception)


def expected_prefix(path: Path | str, where: str) -> str:
    """`FILE: field.path: ` / `FILE:LINE:` / `FILE: ` as the gate prints them."""
    if not where:
        return f"{path}: "
    if re.fullmatch(r"\d+(:\d+)?:?", where):
        return f"{path}:{where}"
    return f"{path}: {where}: "


def assert_refused(out: Outcome, path: Path | str, where: str, reason: str) -> None:
    """Exit 2, no traceback, and one stderr line naming the file, the place and the reason."""
    assert out.code == 2, (out.code, out.stderr, out.stdout)
    assert out.exception is None or isinstance(out.exception, SystemExit), repr(out.exception)
    assert "Traceback" not in out.stderr + out.stdout
    prefix = expected_prefix(path, where)
    assert prefix in out.stderr, (prefix, out.stderr)
    line = out.stderr[out.stderr.index(prefix) :]
    assert reason in line, (reason, out.stderr)
