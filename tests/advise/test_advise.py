"""The compute-budget advisor: grid parsing, pricing per term, the recommendation and its judgement."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from autoscaler.replay.run import run_scenario
from autoscaler.replay.scenario import Scenario
from autoscaler.replay.trace import TraceJob, load_trace
from fleet.advise.commitments import Request, advise, reserved_machine
from fleet.advise.grid import GridError, catalog_prices, load_price_file, parse_sizes, parse_terms
from fleet.advise.window import split
from fleet.cli.main import app

DATA = Path(__file__).resolve().parents[1] / "data"
SMALL = DATA / "itp_cluster10_first150.csv"
runner = CliRunner()


def small_jobs() -> tuple[TraceJob, ...]:
    return tuple(load_trace(SMALL))


def request(**kw) -> Request:
    jobs = small_jobs()
    base = Request(trace=str(SMALL), jobs=jobs, sizes=(0, 1, 2, 4), seeds=1, workers=1, terms=("none", "1y", "3y"))
    req = Request(**{**base.__dict__, **kw})
    prices = catalog_prices(reserved_machine(req), req.region, req.terms)
    return Request(**{**req.__dict__, "prices": prices})


def test_sizes_and_terms_parse_and_refuse_nonsense() -> None:
    assert parse_sizes("0:200:10") == tuple(range(0, 201, 10))
    assert parse_sizes("8,0,8,16") == (0, 8, 16)
    assert parse_terms("1y,3y,1y") == ("1y", "3y")
    for bad in ("0:10", "10:0:5", "0:10:0", "a:b:c", "-1,2", ""):
        with pytest.raises(GridError, match="--sizes"):
            parse_sizes(bad)
    with pytest.raises(GridError, match="--terms: unknown 5y"):
        parse_terms("1y,5y")


def test_the_term_only_prices_the_reservation_replays_do_not_depend_on_it() -> None:
    """One replay per (size, seed) serves every term: the overflow and the waits must not move with the rate."""
    jobs = list(small_jobs())
    out = {}
    for rate in ("commit-1y", "on-demand"):
        sc = Scenario(trace="t", reserved_nodes=2, reservation_rate=rate, spot_fraction=0.3, stockout_rate=0.2, seed=1)
        res = run_scenario(jobs, sc, ["gpu-fleet"])
        eng = res.engines["gpu-fleet"]
        m = res.metrics["gpu-fleet"]
        out[rate] = (round(eng.cloud.ledger.cost(eng.t_end), 6), m["wait_p50_s"], m["wait_p95_s"], m["nodes_launched"])
    assert out["commit-1y"] == out["on-demand"]


def test_each_point_costs_its_overflow_plus_the_reservation_for_the_whole_window() -> None:
    req = request()
    res = advise(req)
    prices = req.prices
    assert prices is not None
    window_h = res["scenario"]["windows"]["all"]["days"] * 24
    for p in (p for p in res["points"] if p["window"] == "all"):
        expected_res = p["reserved_nodes"] * (prices.rate(p["term"]) if p["reserved_nodes"] else 0) * window_h
        # a window of a continuous replay: the reservation is billed for its calendar hours
        assert p["reservation_usd"] == pytest.approx(expected_res, abs=0.05)
        if p["reservation_fill"] is not None:
            assert 0 <= p["reservation_fill"] <= 1
        # three figures each rounded to cents (two of them means over seeds): they agree to a few cents
        assert p["cost_usd_mean"] == pytest.approx(p["overflow_usd_mean"] + p["reservation_usd"], abs=0.03)
        assert p["lower_bound_usd"] <= p["cost_usd_mean"] + 0.01
    # the recommendation: the smallest worst-fold regret among the terms the history allows
    allowed = set(res["eligible_terms"])
    cands = [p for p in res["points"] if p["window"] == "all" and (p["reserved_nodes"] == 0 or p["term"] in allowed)]
    assert res["recommended"]["max_fold_regret_pct"] == min(p["max_fold_regret_pct"] for p in cands)
    # the whole window's cost is the sum of its folds'
    for p in cands:
        folds = [q for q in res["points"] if q["window"].startswith("all-") and q["term"] == p["term"]
                 and q["reserved_nodes"] == p["reserved_nodes"]]  # fmt: skip
        assert len(folds) == 4 and p["cost_usd_mean"] == pytest.approx(sum(q["cost_usd_mean"] for q in folds), abs=0.1)


def test_the_mean_rule_picks_the_cheapest_over_the_window() -> None:
    res = advise(request(rule="mean"))
    allowed = set(res["eligible_terms"])
    cands = [p for p in res["points"] if p["window"] == "all" and (p["reserved_nodes"] == 0 or p["term"] in allowed)]
    assert res["recommended"]["cost_usd"] == min(p["cost_usd_mean"] for p in cands)


def test_short_history_says_plainly_that_a_3_year_term_is_not_recommended() -> None:
    res = advise(request())
    assert "3y" not in res["eligible_terms"]
    assert any("too short to recommend a 3y commitment" in c for c in res["caveats"])
    forced = advise(request(allow_short_history=True))
    assert "3y" in forced["eligible_terms"] and not any("3y" in c for c in forced["caveats"])


def test_train_test_scores_the_choice_on_the_days_it_did_not_see() -> None:
    jobs = small_jobs()
    train, test = split(jobs, 14, 13)
    assert max(j.submit for j in train.jobs) < min(j.submit for j in test.jobs)
    res = advise(request(train_days=14, test_days=13))
    t = res["test"]
    assert res["choice_window"] == "train"
    assert t["regret_pct"] >= -1e-9  # the hindsight best is the best of the same candidates on the same days
    assert t["hindsight_best"]["cost_usd"] <= t["recommended"]["cost_usd"]


def test_price_file_rates_replace_the_catalog(tmp_path: Path) -> None:
    f = tmp_path / "rates.yaml"
    f.write_text("reservation: {none: 90.0, 1y: 10.0, 3y: 5.0}\noverflow_discount: 0.1\nsource: contract\n")
    tp = load_price_file(f, "a3-highgpu-8g", "us-central1", ("none", "1y", "3y"))
    assert tp.rate("1y") == 10.0 and tp.overflow_discount == 0.1 and "contract" in tp.source
    for body, msg in [
        ("reservation: {none: 90.0}\n", "reservation.1y"),
        ("reservation: {none: .nan, 1y: 1, 3y: 1}\n", "1:21: '.nan' is not a finite number"),  # the input gate
        ("reservation: {none: 1, 1y: 1, 3y: 1, 5y: 1}\n", "unknown term 5y"),
        ("reservation: {none: 1, 1y: 1, 3y: 1}\noverflow_discount: 1.5\n", "overflow_discount"),
        ("prices: 1\n", "expected the keys"),
    ]:
        f.write_text(body)
        with pytest.raises(GridError, match=msg):
            load_price_file(f, "a3-highgpu-8g", "us-central1", ("none", "1y", "3y"))


def test_cli_json_and_report(tmp_path: Path) -> None:
    out = tmp_path / "advice.html"
    res = runner.invoke(
        app,
        ["advise", "commitments", "--trace", str(SMALL), "--sizes", "0,2", "--seeds", "1", "--workers", "1",
         "--json", "--report", str(out)],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert {"scenario", "recommended", "points", "caveats"} <= set(doc)
    page = out.read_text()
    assert "Recommended:" in page and "data:image/png;base64," in page


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--sizes", "0:10"], "--sizes"),
        (["--terms", "2y"], "--terms: unknown 2y"),
        (["--seeds", "0"], "--seeds"),
        (["--train", "10"], "--train/--test: give both or neither"),
        (["--train", "20", "--test", "20"], "--train/--test: 20 + 20 days exceed"),
        (["--train", "100", "--test", "100"], "--test: no job is submitted"),
        (["--region", "mars-north1"], "--region"),
        (["--price-file", "/nonexistent.yaml"], "--price-file"),
    ],
)
def test_cli_bad_input_exits_2_naming_the_option(args: list[str], message: str) -> None:
    res = runner.invoke(app, ["advise", "commitments", "--trace", str(SMALL), "--sizes", "0,1", "--seeds", "1", *args])
    assert res.exit_code == 2, res.output
    assert message in res.output and "Traceback" not in res.output


def test_cli_takes_a_generated_trace_as_fleet_simulate_does() -> None:
    """`--trace synth:REGIME[:SEED]` is the same grammar as `fleet simulate`'s (autoscaler.replay.synth
    `load_source`): the scenario names the canonical source, and a bad one is exit 2 naming --trace."""
    res = runner.invoke(app, ["advise", "commitments", "--trace", "synth:steady:3", "--sizes", "0,2", "--seeds", "1",
                              "--terms", "none", "--workers", "1", "--json"])  # fmt: skip
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["scenario"]["trace"] == "synth:steady:3"
    bad = runner.invoke(app, ["advise", "commitments", "--trace", "synth:nope", "--sizes", "0"])
    assert bad.exit_code == 2 and "--trace: 'synth:nope': unknown regime 'nope'" in bad.output, bad.output


def test_ray_address_without_ray_installed_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError, as without the [ray] extra
    res = runner.invoke(app, ["advise", "commitments", "--trace", str(SMALL), "--sizes", "0", "--ray-address", "auto"])
    assert res.exit_code == 2
    assert "--ray-address: Ray is not installed" in res.output
