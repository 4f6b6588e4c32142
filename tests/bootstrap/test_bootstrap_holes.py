"""Holes an audit found in `fleet bootstrap-region` / `bootstrap-project` arguments and the specs they write, closed:
each is refused early (exit 2) naming the flag or field with the real limit, and nothing is written."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.bootstrap.conftest import LABELS
from tests.inputs.cli import assert_refused, fleet
from tests.inputs.specs import BOOTSTRAP, stack_text
from tests.spec.test_kube_rules import GKE

IMAGE = "us-docker.pkg.dev/my-gpu-project/gpu-fleet/autoscaler@sha256:" + "ab" * 32
KUEUE = ("--scheduler", "kueue", "--autoscaler-image", IMAGE)
H100 = ("--project", "my-gpu-project", "--region", "us-central1", "--gpu", "h100", *LABELS)
BAD_INSTANT = "2026-13-45T00:00:00Z"


def _files(stacks_dir: Path) -> list[str]:
    return sorted(p.name for p in stacks_dir.iterdir())


def _refused(code: int, out: dict | str, argument: str, reason: str) -> None:
    assert code == 2, out
    assert isinstance(out, dict) and out["argument"] == argument, out
    assert reason in out["message"], out["message"]


@pytest.mark.parametrize(
    ("gpus", "reason"),
    [
        ("16008", "16,008 GPUs need 2,001 nodes of a3-megagpu-8g; a pool holds at most 2,000 nodes"),
        ("10000000", "so at most 16,000 GPUs of a3-megagpu-8g"),
    ],
)
def test_gpus_beyond_one_pool_are_refused_naming_the_limit(
    bootstrap: Callable, stacks_dir: Path, gpus: str, reason: str
) -> None:
    _refused(*bootstrap(*H100, "--gpus", gpus), "--gpus", reason)
    assert _files(stacks_dir) == ["Pulumi.yaml"]


def test_the_largest_pool_is_planned(bootstrap: Callable, stacks_dir: Path) -> None:
    code, out = bootstrap(*H100, "--gpus", "16000", "--dry-run")
    assert code == 0 and out["nodes"] == 2000, out


def test_a_reserve_that_fills_the_plan_is_blamed_not_the_stacks_dir(bootstrap: Callable, stacks_dir: Path) -> None:
    _refused(*bootstrap(*H100, "--gpus", "16", "--reserve", "10.0.0.0/8"), "--reserve", "10.0.0.0/8 leave(s) no room")
    _refused(*bootstrap(*H100, *KUEUE, "--gpus", "16", "--reserve", "10.64.0.0/10"), "--reserve", "GKE's ranges")
    assert _files(stacks_dir) == ["Pulumi.yaml"]


def test_an_upgrade_exclusion_start_that_is_no_date_is_refused(bootstrap: Callable, stacks_dir: Path) -> None:
    code, out = bootstrap(*H100, *KUEUE, "--gpus", "16", "--upgrade-exclusion-start", BAD_INSTANT)
    _refused(code, out, "--upgrade-exclusion-start", "is not a real date and time (month must be in 1..12)")
    assert _files(stacks_dir) == ["Pulumi.yaml"]


def test_a_spec_whose_upgrade_exclusion_start_is_no_date_is_refused(tmp_path: Path) -> None:
    spec = copy.deepcopy(GKE)
    spec["clusters"][0]["gke"]["upgrade_exclusion_start"] = "2026-04-31T00:00:00Z"
    path = tmp_path / "Pulumi.bad.yaml"
    path.write_text(stack_text(spec))
    out = fleet("render", "spec", "--config", path)
    assert_refused(out, path, "clusters[0].gke.upgrade_exclusion_start", "day is out of range for month")


def _project(stacks_dir: Path, *args: str) -> tuple[int, dict | str]:
    base = ("bootstrap-project", "--project", "my-gpu-project", "--region", "us-east4", "--json")
    out = fleet(*base, "--stacks-dir", stacks_dir, *args)
    try:
        return out.code, json.loads(out.stdout)
    except json.JSONDecodeError:
        return out.code, out.stdout + out.stderr


@pytest.mark.parametrize(
    ("args", "argument", "reason"),
    [
        (("--name", "a b"), "--name", "'a b': a Pulumi stack name has 1-100 letters, digits, '-', '_', '.'"),
        (("--name", "../x"), "--name", "'../x': a Pulumi stack name"),
        (("--name", ".."), "--name", "'..': a Pulumi stack name"),
        (("--region", "mars-central1"), "--region", "unknown region 'mars-central1'"),
        (("--bucket-location", "MARS"), "--bucket-location", "'MARS' is not a Cloud Storage location"),
        (("--bucket-location", "us-central9"), "--bucket-location", "did you mean"),
    ],
)
def test_bootstrap_project_refuses_bad_arguments_writing_nothing(
    stacks_dir: Path, args: tuple[str, ...], argument: str, reason: str
) -> None:
    _refused(*_project(stacks_dir, *args), argument, reason)
    assert _files(stacks_dir) == ["Pulumi.yaml"] and not (stacks_dir.parent / "Pulumi.x.yaml").exists()


@pytest.mark.parametrize("location", ["US", "eur5", "us-east4", "NAM4"])
def test_bootstrap_project_takes_cloud_storage_locations(stacks_dir: Path, location: str) -> None:
    code, out = _project(stacks_dir, "--bucket-location", location, *LABELS)
    assert code == 0, out


def test_a_project_bootstrap_file_with_an_unknown_bucket_location_is_refused(tmp_path: Path) -> None:
    spec = copy.deepcopy(BOOTSTRAP) | {"state_bucket": {"location": "MARS"}}
    path = tmp_path / "Pulumi.bad.yaml"
    path.write_text(stack_text(spec))
    out = fleet("synth", "--config", path, "--json")
    assert_refused(out, path, "state_bucket.location", "'MARS' is not a Cloud Storage location")
