"""Layering: components and stacks never import the autoscaler; components never read the fleet spec or config."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.components.imports import imported_names

REPO = Path(__file__).resolve().parents[2]
# Project bootstrap (components/gcp/project_bootstrap.py, stacks/project_bootstrap.py) has its own owner and tests.
OURS = [
    p
    for p in sorted((REPO / "components").rglob("*.py")) + sorted((REPO / "stacks").rglob("*.py"))
    if p.name != "project_bootstrap.py"
]


@pytest.mark.parametrize("path", OURS, ids=lambda p: str(p.relative_to(REPO)))
def test_no_autoscaler_imports(path):
    assert not [m for m in imported_names(path) if m.split(".")[0] == "autoscaler"], path


@pytest.mark.parametrize("path", [p for p in OURS if "components" in p.parts], ids=lambda p: p.name)
def test_components_take_args_not_the_spec(path):
    mods = imported_names(path)
    assert not [m for m in mods if m.startswith(("fleet.spec", "fleet.slurm", "stacks"))], path
    assert "pulumi.Config" not in path.read_text(), f"{path}: config is read in stacks/ only"
