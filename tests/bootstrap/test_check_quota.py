"""`--check-quota`: the region's quota read with the real google-cloud-compute RegionsClient from the fake server."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from fleet.bootstrap.errors import ComputeReadError
from fleet.bootstrap.gce import read_region_quotas
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
    with pytest.raises(ComputeReadError):
        read_region_quotas("test-project", "us-central1", fake_compute.url)


def test_reservation_is_found_in_its_zone_and_fits(bootstrap: Callable, fake_compute: FakeCompute) -> None:
    fake_compute.add_region("us-central1", ["us-central1-a", "us-central1-b", "us-central1-c"], quotas=ENOUGH)
    fake_compute.add_reservation("us-central1-c", "h100-resv", "a3-megagpu-8g", count=10, in_use=2)
    code, out = bootstrap(*ARGS, "--capacity", "reservation:h100-resv", "--compute-endpoint", fake_compute.url)
    assert code == 0, out
    assert out["reservation"] == {
        "name": "h100-resv", "zone": "us-central1-c", "machine_type": "a3-megagpu-8g", "count": 10, "in_use": 2
    }  # fmt: skip
    assert out["spec"]["clusters"][0]["pools"][0]["zones"] == ["us-central1-c"]
    gpu = next(q for q in out["quotas"] if q["metric"] == "NVIDIA_H100_MEGA_GPUS")
    assert gpu["checked"] is False  # drawn when the reservation was created


def test_reservation_of_another_h100_shape_switches_the_machine(bootstrap: Callable, fake_compute: FakeCompute) -> None:
    fake_compute.add_region("us-central1", ["us-central1-a", "us-central1-b"], quotas=ENOUGH)
    fake_compute.add_reservation("us-central1-b", "high", "a3-highgpu-8g", count=8)
    code, out = bootstrap(*ARGS, "--capacity", "reservation:high", "--compute-endpoint", fake_compute.url)
    assert code == 0, out
    assert out["machine_type"] == "a3-highgpu-8g" and out["zones"] == ["us-central1-b"]


def test_reservation_too_small_or_missing_fails(
    bootstrap: Callable, fake_compute: FakeCompute, stacks_dir: Path
) -> None:
    fake_compute.add_region("us-central1", ["us-central1-a", "us-central1-b"], quotas=ENOUGH)
    fake_compute.add_reservation("us-central1-a", "small", "a3-megagpu-8g", count=8, in_use=4)
    code, out = bootstrap(*ARGS, "--capacity", "reservation:small", "--compute-endpoint", fake_compute.url)
    assert code == 4
    assert out["shortfalls"] == [
        {"metric": "reservation small (us-central1-a)", "needed": 8, "available": 4, "limit": 8, "usage": 4}
    ]
    code, out = bootstrap(*ARGS, "--capacity", "reservation:nope", "--compute-endpoint", fake_compute.url)
    assert code == 2 and out["argument"] == "--capacity" and "reservation nope not found" in out["message"]
    assert list(stacks_dir.glob("Pulumi.*.yaml")) == []


def test_a_kueue_region_checks_the_gke_system_pool_instead_of_a_controller(
    bootstrap: Callable, fake_compute: FakeCompute
) -> None:
    """With `--scheduler kueue` the region needs the GPU nodes and GKE's system pool (e2-standard-8, one in the
    reservation's zone), no n2 controller or login VM: a region without E2 quota is refused naming E2_CPUS."""
    from tests.bootstrap.test_cli import KUEUE

    fake_compute.add_region("us-central1", ["us-central1-a", "us-central1-b"], quotas=ENOUGH)
    fake_compute.add_reservation("us-central1-b", "h100-resv", "a3-megagpu-8g", count=10)
    args = (*ARGS, *KUEUE, "--capacity", "reservation:h100-resv", "--compute-endpoint", fake_compute.url)
    code, out = bootstrap(*args)
    assert code == 4
    assert [s["metric"] for s in out["shortfalls"]] == ["E2_CPUS"]
    fake_compute.set_quota("us-central1", "E2_CPUS", 8)
    code, out = bootstrap(*args)
    assert code == 0, out
    needed = {q["metric"]: q["needed"] for q in out["quotas"]}
    assert needed["E2_CPUS"] == 8 and "N2_CPUS" not in needed
    assert out["spec"]["clusters"][0]["pools"][0]["zones"] == ["us-central1-b"]
