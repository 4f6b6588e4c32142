"""`--check-quota`: the region's quota read with the real google-cloud-compute RegionsClient from the fake server."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from fleet.bootstrap.gce_quota import QuotaReadError, read_region_quotas
from tests.fakes.compute_api import FakeCompute

pytestmark = pytest.mark.gce

ARGS = ("--project", "test-project", "--region", "us-central1", "--gpu", "h100", "--gpus", "64", "--check-quota")
# 8 x a3-megagpu-8g (208 vCPUs each) + n2-standard-8 controller + n2-standard-4 login
ENOUGH = {"NVIDIA_H100_MEGA_GPUS": 128, "CPUS": 2400, "N2_CPUS": 48, "IN_USE_ADDRESSES": 8}


def test_enough_quota_passes_and_reports_available(
    bootstrap: Callable, fake_compute: FakeCompute, stacks_dir: Path
) -> None:
    fake_compute.add_region("us-central1", ["us-central1-a", "us-central1-b"], quotas=ENOUGH)
    fake_compute.set_quota("us-central1", "NVIDIA_H100_MEGA_GPUS", 128, usage=64)  # exactly 64 free: fits
    code, out = bootstrap(*ARGS, "--compute-endpoint", fake_compute.url)
    assert code == 0, out
    assert out["quota_checked"] is True
    gpu = next(q for q in out["quotas"] if q["metric"] == "NVIDIA_H100_MEGA_GPUS")
    assert (gpu["needed"], gpu["limit"], gpu["usage"], gpu["available"], gpu["ok"]) == (64, 128, 64, 64, True)
    assert Path(out["stack_file"]).exists()
    assert ("GET", "/compute/v1/projects/test-project/regions/us-central1", 200) in fake_compute.requests


def test_too_little_quota_fails_naming_metric_needed_and_available(
    bootstrap: Callable, fake_compute: FakeCompute, stacks_dir: Path
) -> None:
    fake_compute.add_region("us-central1", ["us-central1-a"], quotas=ENOUGH)
    fake_compute.set_quota("us-central1", "NVIDIA_H100_MEGA_GPUS", 64, usage=16)
    code, out = bootstrap(*ARGS, "--compute-endpoint", fake_compute.url)
    assert code == 4
    assert out["shortfalls"] == [
        {"metric": "NVIDIA_H100_MEGA_GPUS", "needed": 64, "available": 48.0, "limit": 64.0, "usage": 16.0}
    ]
    assert "NVIDIA_H100_MEGA_GPUS: needs 64, available 48" in out["message"]
    assert list(stacks_dir.glob("Pulumi.*.yaml")) == []  # nothing written
    code, text = bootstrap(*ARGS, "--compute-endpoint", fake_compute.url, as_json=False)
    assert code == 4 and "NVIDIA_H100_MEGA_GPUS" in text and "available 48" in text


def test_spot_checks_the_preemptible_metrics(bootstrap: Callable, fake_compute: FakeCompute) -> None:
    fake_compute.add_region("us-central1", ["us-central1-a"], quotas=ENOUGH)  # no PREEMPTIBLE_* quota at all
    code, out = bootstrap(*ARGS, "--capacity", "spot", "--compute-endpoint", fake_compute.url)
    assert code == 4
    assert {s["metric"] for s in out["shortfalls"]} == {"PREEMPTIBLE_NVIDIA_H100_MEGA_GPUS", "PREEMPTIBLE_CPUS"}


def test_unreadable_quota_is_an_error_not_a_pass(bootstrap: Callable, fake_compute: FakeCompute) -> None:
    code, text = bootstrap(*ARGS, "--compute-endpoint", fake_compute.url, as_json=False)  # region unknown: 404
    assert code == 1 and "reading quotas of test-project/us-central1" in text
    with pytest.raises(QuotaReadError):
        read_region_quotas("test-project", "us-central1", fake_compute.url)
