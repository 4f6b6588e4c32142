"""`fleet bench planner`: the JSON contract, the seeded mix, and a pytest-benchmark of one plan
(timings are reported by pytest-benchmark, never asserted)."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from autoscaler.bench.planner import synthetic_mix, time_plan
from autoscaler.planner import plan
from fleet.cli.main import app


def test_cli_json_contract() -> None:
    args = ["bench", "planner", "--jobs", "300", "--offerings", "60", "--nodes", "80", "--runs", "2", "--json"]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert {"jobs", "offerings", "nodes", "seconds_median", "runs"} <= set(out)
    assert (out["jobs"], out["offerings"], out["nodes"], out["runs"]) == (300, 60, 80, 2)
    assert out["seconds_median"] > 0 and out["units_placed"] + out["units_unserved"] == 300


def test_cli_rejects_bad_arguments() -> None:
    res = CliRunner().invoke(app, ["bench", "planner", "--runs", "0"])
    assert res.exit_code == 2 and "--runs" in res.output


def test_mix_is_seeded_and_has_the_advertised_shape() -> None:
    a, b = synthetic_mix(2000, 200, 300, seed=3), synthetic_mix(2000, 200, 300, seed=3)
    assert a == b and synthetic_mix(2000, 200, 300, seed=4) != a
    assert len(a.demand) == 2000 and len(a.offerings) == 200 and len(a.inventory.nodes) == 300
    assert len({o.key for o in a.offerings}) == 200
    gpus = [u.gpus for u in a.demand]
    assert min(gpus) == 1 and max(gpus) == 64
    assert any(u.is_gang for u in a.demand) and 0.2 < sum(u.spot_ok for u in a.demand) / 2000 < 0.4
    assert len({o.key.zone for o in a.offerings}) > 3
    assert {o.key.capacity_type for o in a.offerings} >= {"on-demand", "spot", "reservation"}


def test_time_plan_reports_the_plan() -> None:
    mix = synthetic_mix(200, 40, 30, seed=1)
    r = time_plan(mix, runs=1)
    p = plan(mix.demand, mix.inventory, mix.offerings, mix.policy, mix.now, mix.unavailable)
    assert r["units_placed"] == len(p.assignments) and r["units_unserved"] == len(p.unserved)


def test_benchmark_plan_2k(benchmark) -> None:
    mix = synthetic_mix(2000, 200, 400, seed=0)
    p = benchmark(plan, mix.demand, mix.inventory, mix.offerings, mix.policy, mix.now, mix.unavailable)
    assert len(p.assignments) + len(p.unserved) == 2000
