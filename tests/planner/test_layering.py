"""Layering: the model and the planner import only the stdlib, fleet.catalog, autoscaler.cloud,
autoscaler.node_names (the one parser of node names, stdlib only) and each other — never Pulumi, Google clients,
sqlite, apscheduler, loguru or the daemon."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("autoscaler/model", "autoscaler/planner")
ALLOWED_PREFIXES = (
    "fleet.catalog",
    "autoscaler.cloud",
    "autoscaler.model",
    "autoscaler.planner",
    "autoscaler.node_names",
)
FORBIDDEN = ("pulumi", "pulumi_gcp", "google", "sqlite3", "apscheduler", "loguru", "httpx", "typer")


def _imports(path: Path) -> list[str]:
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.append(node.module)
    return out


@pytest.mark.parametrize("pkg", PACKAGES)
def test_static_imports_are_stdlib_or_allowed(pkg: str) -> None:
    files = sorted((ROOT / pkg).glob("*.py"))
    assert files
    bad = []
    for f in files:
        for mod in _imports(f):
            top = mod.split(".")[0]
            if top in sys.stdlib_module_names or top == "__future__":
                continue
            if not mod.startswith(ALLOWED_PREFIXES):
                bad.append(f"{f.relative_to(ROOT)}: {mod}")
    assert not bad, bad


def test_importing_the_planner_loads_nothing_forbidden() -> None:
    code = (
        "import sys, autoscaler.planner, autoscaler.model\n"
        f"bad = sorted(m for m in sys.modules if m.split('.')[0] in {FORBIDDEN!r})\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == ""
