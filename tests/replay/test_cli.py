"""`fleet simulate`: the JSON contract, the report files, and errors that name the flag."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from fleet.cli.main import app
from tests.replay.conftest import SMALL_TRACE

runner = CliRunner()
KEYS = {
    "cost_usd",
    "lower_bound_usd",
    "cost_ratio",
    "gpu_hours_used",
    "gpu_hours_billed",
    "partial_gang_gpu_hours",
    "wait_p50_s",
    "wait_p95_s",
    "wait_max_s",
    "jobs",
}


def test_json_has_the_scenario_and_every_policy_with_the_contract_fields() -> None:
    res = runner.invoke(
        app,
        ["simulate", "--trace", str(SMALL_TRACE), "--policy", "gpu-fleet,ca-like", "--json", "--reserved-nodes", "1"],
    )
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert set(out) == {"scenario", "policies", "cost_vs_wait"}
    assert [p["policy"] for p in out["cost_vs_wait"]] == sorted(
        out["policies"], key=lambda n: out["policies"][n]["cost_usd"]
    )
    sc = out["scenario"]
    for key in ("trace", "machine_family", "region", "zones", "reserved_nodes", "spot_fraction", "boot_seconds"):
        assert key in sc
    assert sc["machine_family"] == "a3-highgpu" and sc["region"] == "us-central1" and sc["boot_seconds"] == 360
    assert sc["reserved_nodes"] == 1 and sc["reservation_rate"] == "commit-1y" and sc["reservation_hourly_usd"] > 0
    assert list(out["policies"]) == ["gpu-fleet", "ca-like"]
    for m in out["policies"].values():
        assert set(m) >= KEYS
        assert m["jobs"] == 150
        assert m["cost_ratio"] == round(m["cost_usd"] / m["lower_bound_usd"], 4)


def test_human_output_is_a_table_of_the_policies() -> None:
    res = runner.invoke(app, ["simulate", "--trace", str(SMALL_TRACE), "--policy", "gpu-fleet,karpenter-like"])
    assert res.exit_code == 0, res.output
    assert "gpu-fleet" in res.stdout and "karpenter-like" in res.stdout and "lower bound" in res.stdout
    bound = json.loads(
        runner.invoke(app, ["simulate", "--trace", str(SMALL_TRACE), "--policy", "gpu-fleet", "--json"]).stdout
    )
    assert f"${bound['scenario']['lower_bound_usd']:,.0f}" in res.stdout  # the header shows the denominator


def test_reports_are_html_with_inline_figures_or_png(tmp_path: Path) -> None:
    page, png = tmp_path / "r.html", tmp_path / "r.png"
    for path in (page, png):
        res = runner.invoke(app, ["simulate", "--trace", str(SMALL_TRACE), "--policy", "all", "--report", str(path)])
        assert res.exit_code == 0, res.output
    text = page.read_text()
    assert text.count("data:image/png;base64,") == 2
    assert "karpenter-like" in text and "lower bound" in text.lower()
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bad_options_exit_2_naming_the_flag_and_the_reason() -> None:
    cases = {
        ("--spot-fraction", "1.5"): "--spot-fraction",
        ("--stockout-rate", "-1"): "--stockout-rate",
        ("--machine-family", "a9-nope"): "--machine-family: unknown family",
        ("--policy", "nope"): "--policy: unknown policy 'nope'",
        ("--trace", "/nonexistent.csv"): "--trace: /nonexistent.csv: no such trace file",
    }
    for args, message in cases.items():
        res = runner.invoke(app, ["simulate", "--trace", str(SMALL_TRACE), *args])
        assert res.exit_code == 2, (args, res.output)
        assert message in res.output, (args, res.output)


def test_without_a_trace_the_shipped_demo_runs() -> None:
    res = runner.invoke(app, ["simulate", "--policy", "gpu-fleet", "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["scenario"]["trace"].endswith("demo.csv") and out["policies"]["gpu-fleet"]["jobs"] == 420
