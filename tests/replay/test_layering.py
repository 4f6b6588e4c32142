"""The simulated cloud and the replay stay free of Pulumi and cloud SDKs (DESIGN.md, layering)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "autoscaler"
FORBIDDEN = ("pulumi", "pulumi_gcp", "pulumi_kubernetes", "google", "googleapiclient", "boto3")


def imported(path: Path) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module.split(".")[0])
    return out


def test_sim_and_replay_import_no_pulumi_or_cloud_sdk() -> None:
    files = [*(ROOT / "sim").rglob("*.py"), *(ROOT / "replay").rglob("*.py")]
    assert len(files) > 10
    for f in files:
        bad = imported(f) & set(FORBIDDEN)
        assert not bad, f"{f.relative_to(ROOT.parent)} imports {sorted(bad)}"


def _modules(path: Path) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
    return out


def test_decision_core_imports_no_source_actuator_or_sdk() -> None:
    """The decision core sits between queue sources and actuators: it may not import either, nor an SDK."""
    files = list((ROOT / "core").rglob("*.py"))
    assert files
    banned = ("autoscaler.daemon", "autoscaler.replay", "autoscaler.slurm", "autoscaler.gce", "autoscaler.sim")
    for f in files:
        mods = _modules(f)
        bad = {m for m in mods if m.split(".")[0] in FORBIDDEN or m.startswith(banned)}
        assert not bad, f"{f.relative_to(ROOT.parent)} imports {sorted(bad)}"
