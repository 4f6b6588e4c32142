"""Layering: only autoscaler/gce talks to google.cloud, and importing it stays cheap."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _imports(path: Path) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
    return out


def test_nothing_else_in_the_autoscaler_imports_google_cloud() -> None:
    offenders = {
        str(path.relative_to(ROOT)): sorted(m for m in _imports(path) if m.startswith("google.cloud"))
        for path in (ROOT / "autoscaler").rglob("*.py")
        if "gce" not in path.relative_to(ROOT / "autoscaler").parts
    }
    assert {k: v for k, v in offenders.items() if v} == {}


def test_the_provider_protocol_and_planner_side_never_import_the_actuator() -> None:
    for path in (ROOT / "autoscaler").rglob("*.py"):
        rel = path.relative_to(ROOT / "autoscaler").parts
        if rel[0] in ("model", "planner") or path.name == "cloud.py":
            assert not any(m.startswith("autoscaler.gce") for m in _imports(path)), path


def test_importing_the_package_does_not_load_compute_v1() -> None:
    code = "import sys, autoscaler.gce; print('google.cloud.compute_v1' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
