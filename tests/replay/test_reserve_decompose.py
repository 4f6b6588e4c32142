"""bench/reserve_decompose.py accounts for a run's cost above the bound piece by piece (its figures on the ITP
traces are measured by running it; here its accounting on a hand-made trace whose fragmentation is known)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from autoscaler.replay.scenario import Scenario
from tests.replay.conftest import job

BENCH = Path(__file__).resolve().parents[2] / "bench" / "reserve_decompose.py"
spec = importlib.util.spec_from_file_location("reserve_decompose", BENCH)
assert spec and spec.loader
rd = importlib.util.module_from_spec(spec)
spec.loader.exec_module(rd)


def test_an_8_gpu_job_that_finds_reserved_gpus_free_but_no_whole_node_is_counted_as_fragmentation() -> None:
    # two reserved nodes: j0 and j1 (4 GPUs each) fill node 0, j2 (1 GPU) takes node 1; j0 ends at 2000, leaving
    # 4 + 7 reserved GPUs free but no whole node, so j3 (8 GPUs, 2 h) must overflow while 11 reserved GPUs idle
    trace = [job(0, 0, 2000, 4), job(1, 10, 20000, 4), job(2, 20, 20000, 1), job(3, 3000, 7200, 8)]
    out = rd.decompose(trace, Scenario(reserved_nodes=2), "gpu-fleet")
    assert out["overflow_starts_gpu_h"] == {"8g/room_but_fragmented": pytest.approx(16.0)}
    # j3 ran 2 h on overflow while at least its 8 GPUs' worth of reserved GPUs sat idle
    assert out["fragmentation_gpu_h"] == pytest.approx(16.0, abs=0.5)
    assert out["overflow_work_gpu_h"] == {"on_demand": pytest.approx(16.0), "spot": 0}
    assert out["bound_overflow_gpu_h"] == {"on_demand": 0, "spot": 0}  # the fluid bound never overflows here
    # the pieces add up to the excess: volume + mix (none: no spot) + the overflow node's boot and idle time; the
    # reservation is the bound's, although j3 started a boot late and the policy's last job ends after the bound's
    over = out["overflow_by_capacity_shape"]
    assert list(over) == ["on-demand/a3-highgpu-8g"] and over["on-demand/a3-highgpu-8g"]["nodes"] == 1
    assert out["excess_mix_usd"] == 0
    assert out["excess_boot_idle_usd"] > 0
    parts = ("excess_volume_usd", "excess_mix_usd", "excess_boot_idle_usd")
    assert out["excess_usd"] == pytest.approx(sum(out[k] for k in parts), abs=2.0)
