"""Generated stack files synth cleanly (`fleet synth`: the stack program under Pulumi mocks), as hand-written do."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.bootstrap.test_cli import HAND_WRITTEN

pytestmark = pytest.mark.slow
FLEET = Path(sys.executable).with_name("fleet")


def synth(path: Path) -> dict:
    proc = subprocess.run(
        [str(FLEET), "synth", "--config", str(path), "--json"], capture_output=True, text=True, timeout=240
    )
    assert proc.returncode == 0, f"fleet synth {path.name} failed:\n{proc.stderr[-3000:]}"
    return json.loads(proc.stdout)


def test_two_bootstrapped_regions_and_a_hand_written_stack_synth(bootstrap: Callable, stacks_dir: Path) -> None:
    legacy = stacks_dir / "Pulumi.legacy.yaml"
    legacy.write_text(HAND_WRITTEN)
    # RDMA (A3 Ultra, zonal RoCE VPC) with flex-start, then GPUDirect-TCPXO (A3 Mega) on spot
    code, first = bootstrap(
        "--project", "my-gpu-project", "--region", "europe-west4", "--gpu", "h200", "--gpus", "32",
        "--capacity", "flex-start",
    )  # fmt: skip
    assert code == 0, first
    code, second = bootstrap(
        "--project", "my-gpu-project", "--region", "us-central1", "--gpu", "h100", "--gpus", "128",
        "--capacity", "spot",
    )  # fmt: skip
    assert code == 0, second
    for out in (first, second):
        result = synth(Path(out["stack_file"]))
        # nothing to pin or to explain: the cluster's zone is written, and both fabrics are set up by the stack
        assert out["warnings"] == [] and result["warnings"] == [], (out["warnings"], result["warnings"])
        (pool,) = result["outputs"]["autoscaler_inventory"]
        assert pool["machine_type"] == out["machine_type"] and pool["max_nodes"] == out["nodes"]
        assert set(pool["zones"]) <= set(out["zones"])
        # the price bootstrap printed is the price synth computes for the same spec
        assert result["cost"]["hourly_usd_at_max"] == out["price_per_hour"]["at_max"]
        assert result["cost"]["hourly_usd_at_min"] == out["price_per_hour"]["at_min"]
    assert synth(legacy)["outputs"]["autoscaler_inventory"]
