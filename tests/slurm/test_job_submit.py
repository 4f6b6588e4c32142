"""The generated job_submit.lua (fleet/slurm/job_submit.py): --prefer the right-sized machine type where a
partition has a choice, nothing where it has none (real slurmctld runs it: tests/e2e/test_weights.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleet.catalog import CapacityType
from fleet.slurm import render_slurm_conf
from fleet.slurm.job_submit import Prefer, preferences, render_job_submit
from fleet.slurm.weights import PoolShape
from fleet.spec import load_spec, load_stack_file, read_stack_config

ROOT = Path(__file__).resolve().parents[2]
OD = CapacityType.ON_DEMAND


def shape(pool: str, machine: str, gpus: int, usd: float) -> PoolShape:
    return PoolShape(pool, OD, machine, gpus, usd)


def test_the_right_sized_machine_per_gpu_count_where_there_is_a_choice() -> None:
    shapes = [shape("h8", "m-8g", 8, 10.0), shape("h2", "m-2g", 2, 10.0), shape("h1", "m-1g", 1, 10.0)]
    cheap = [shape("big", "c-8g", 8, 5.0), shape("small", "m-1g", 1, 10.0)]  # the 8g is cheaper per GPU
    assert preferences({"gpu": shapes, "cheap": cheap, "one": shapes[:1]}) == {
        "gpu": {1: Prefer("m-1g"), 2: Prefer("m-2g")},  # 3..8 GPUs: only m-8g fits, nothing to prefer
        "cheap": {1: Prefer("c-8g")},
    }


def test_reserved_nodes_are_preferred_too_where_the_job_fits_them() -> None:
    """Paid-for reserved GPUs cost nothing more: a small job takes a free reserved node before it powers up a
    right-sized on-demand one (`reservation|<machine>`); the right-sized type once the reservation is full."""
    shapes = [shape("resv", "m-8g", 8, 10.0), shape("h1", "m-1g", 1, 10.0)]
    prefs = preferences({"gpu": shapes}, {"gpu": 8})
    assert prefs == {"gpu": {1: Prefer("m-1g", reservation=True)}}
    assert prefs["gpu"][1].expression == "reservation|m-1g"
    assert prefs["gpu"][1].allows("m-8g", CapacityType.RESERVATION) and not prefs["gpu"][1].allows("m-8g", OD)
    lua = render_job_submit({"gpu": shapes}, "gpu", {"gpu": 8})
    assert '["gpu"] = { [1] = "reservation|m-1g" },' in lua
    # a reservation of small nodes does not make a large job prefer them
    assert preferences({"gpu": [*shapes, shape("h2", "m-2g", 2, 10.0)]}, {"gpu": 1})["gpu"][2] == Prefer("m-2g")


def test_no_lua_without_a_choice_and_names_are_checked() -> None:
    assert render_job_submit({"gpu": [shape("h8", "m-8g", 8, 10.0)]}, "gpu") == ""
    lua = render_job_submit({"gpu": [shape("h8", "m-8g", 8, 1.0), shape("h1", "m-1g", 1, 1.0)]}, "gpu")
    assert '["gpu"] = { [1] = "m-1g" },' in lua and 'local default_partition = "gpu"' in lua
    assert "job_desc.prefer ~= nil or job_desc.features ~= nil" in lua  # a user's own constraint wins
    with pytest.raises(ValueError, match="not a Slurm partition or feature name"):
        render_job_submit({'gpu"; os.exit() --': [shape("a", "m-8g", 8, 1.0), shape("b", "m-1g", 1, 1.0)]}, None)


def test_the_rendered_cluster_names_the_plugin_only_with_a_lua() -> None:
    one_type = load_stack_file(ROOT / "Pulumi.gcp-a3mega-slurm.yaml")
    conf = render_slurm_conf(one_type, one_type.clusters[0])
    assert conf.job_submit_lua == "" and "JobSubmitPlugins" not in conf.slurm_conf
    two_types = load_spec(read_stack_config(ROOT / "Pulumi.gcp-l4-dev.yaml"))  # g2-standard-8 and -48 in `dev`
    conf = render_slurm_conf(two_types, two_types.clusters[0])
    assert "JobSubmitPlugins=lua" in conf.slurm_conf.splitlines()
    assert '["dev"] = { [1] = "g2-standard-8" },' in conf.job_submit_lua
