"""clusters[].slurm.autoscaler.ref: only a pinned release (40-hex commit or tag@commit) is accepted."""

from __future__ import annotations

import copy

import pytest
import yaml

from fleet.spec.load import SpecError, load_spec
from tests.stacks.conftest import REPO

SHA = "8c0eeb8229cfef2fdf8412660f68b6092404c7c7"


def _spec(**autoscaler):
    raw = yaml.safe_load((REPO / "Pulumi.gcp-a3mega-slurm.yaml").read_text())["config"]["gpu-fleet:fleet"]
    raw = copy.deepcopy(raw)
    raw["clusters"][0]["slurm"]["autoscaler"] = {"source": "https://example.com/gpu-fleet.git", **autoscaler}
    return raw


@pytest.mark.parametrize("ref", [SHA, f"v1.4.0@{SHA}", f"release/2026.12@{SHA}"])
def test_pinned_refs_are_accepted(ref) -> None:
    assert load_spec(_spec(ref=ref)).clusters[0].slurm.autoscaler.ref == ref


@pytest.mark.parametrize("ref", ["main", "v1.4.0", SHA[:12], SHA.upper(), f"-c@{SHA}", f"{SHA}\n", f"v1@{SHA}x"])
def test_moving_or_malformed_refs_are_refused_with_the_field_path(ref) -> None:
    with pytest.raises(SpecError) as exc:
        load_spec(_spec(ref=ref))
    assert any(path.startswith("clusters[0].slurm.autoscaler.ref") for path, _ in exc.value.errors), exc.value.errors


def test_a_source_needs_a_ref() -> None:
    with pytest.raises(SpecError) as exc:
        load_spec(_spec())
    assert any("clusters[0].slurm.autoscaler" in path for path, _ in exc.value.errors), exc.value.errors
    assert "40-hex" in str(exc.value.errors)
