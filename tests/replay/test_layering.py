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
