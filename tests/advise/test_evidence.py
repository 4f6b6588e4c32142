"""What the advisor's figures are evidence of: regret in a quiet fold, estimated rates, seeds, the commitment's total,
the test window's end, the pre-grid spot check, the choice window's waits and the caveats on overflow."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from autoscaler.replay.trace import TraceJob
from fleet.advise import commitments
from fleet.advise.commitments import Request, advise, assemble, reserved_machine, windows
from fleet.advise.grid import TERM_DAYS, TermPrices, catalog_prices
from fleet.advise.replay import Outcome, Slice, Task, evaluate
from fleet.advise.window import DAY_S, Window, folds, split
from fleet.catalog import load_catalog
from fleet.cli.main import app
from tests.advise.test_advise import SMALL, request, small_jobs

runner = CliRunner()


def eight_gpu_jobs(days: list[int]) -> tuple[TraceJob, ...]:
    """Two 11-hour 8-GPU jobs a day (at 00:00 and 12:00) on each of `days`: one node's worth of demand."""
    return tuple(TraceJob(f"j{d}-{h}", d * DAY_S + h * 3600.0, 11 * 3600.0, 8) for d in days for h in (0, 12))


def trace_request(jobs: tuple[TraceJob, ...], **kw: object) -> Request:
    base = Request(trace="synthetic", jobs=jobs, sizes=(0, 1), terms=("none", "1y"), seeds=1, workers=1,
                   allow_short_history=True)  # fmt: skip
    req = Request(**{**base.__dict__, **kw})
    return Request(**{**req.__dict__, "prices": catalog_prices(reserved_machine(req), req.region, req.terms)})


def test_a_commitment_idle_in_a_quiet_fold_has_unbounded_regret_and_is_not_recommended() -> None:
    """Days 0-5 and 14-27 busy, days 7-14 (fold all-2) without a job: there all on demand costs $0 and the 1y node
    its full price.  Measured as 0 % regret, that fold let the rule recommend a node that costs more than all on
    demand on the very history it was chosen from."""
    res = advise(trace_request(eight_gpu_jobs([*range(6), *range(14, 28)])))
    quiet = {(p["term"], p["reserved_nodes"]): p for p in res["points"] if p["window"] == "all-2"}
    assert quiet[("none", 0)]["cost_usd_mean"] == 0 and quiet[("1y", 1)]["cost_usd_mean"] > 0
    rec = res["recommended"]
    assert rec["reserved_nodes"] == 0 and rec["saving_vs_on_demand_pct"] >= 0
    one_year = next(p for p in res["points"] if p["window"] == "all" and p["term"] == "1y")
    assert one_year["regret_unbounded"] and one_year["max_fold_regret_pct"] is None


def test_steady_demand_still_earns_a_commitment_and_its_total_for_the_whole_term() -> None:
    """The same demand without the gap: one node on 1y is recommended, and the output says what it commits to:
    nodes x the 1y $/h x every hour of the year."""
    req = trace_request(eight_gpu_jobs(list(range(28))))
    res = advise(req)
    rec = res["recommended"]
    assert (rec["reserved_nodes"], rec["term"]) == (1, "1y") and rec["saving_vs_on_demand_pct"] > 0
    assert req.prices is not None
    assert rec["commitment_total_usd"] == pytest.approx(req.prices.rate("1y") * 365 * 24, abs=0.01)
    assert rec["commitment_term_days"] == TERM_DAYS["1y"] == 365


def test_estimated_commitment_rates_are_labelled_estimated_and_name_the_machine_type() -> None:
    """The zone-derived catalog rows carry the 8-GPU H100 list rows' median 1y/3y discount, not list prices."""
    cat = load_catalog()
    assert cat.machine("a4-highgpu-8g").price("us-central1").commit_estimated  # type: ignore[union-attr]
    assert cat.machine("a3-megagpu-8g").price("us-central1").commit_estimated  # type: ignore[union-attr]
    assert not cat.machine("a3-highgpu-8g").price("us-central1").commit_estimated  # type: ignore[union-attr]
    est = catalog_prices("a4-highgpu-8g", "us-central1", ("none", "1y", "3y"))
    assert "estimated" in est.source
    (caveat,) = est.caveats
    assert "a4-highgpu-8g" in caveat and "estimated" in caveat and "--price-file" in caveat
    listed = catalog_prices("a3-highgpu-8g", "us-central1", ("none", "1y", "3y"))
    assert "estimated" not in listed.source and not listed.caveats
    assert not catalog_prices("a4-highgpu-8g", "us-central1", ("none",)).caveats  # no commitment rate used


def test_cli_advise_on_a4_says_its_commitment_rates_are_estimated() -> None:
    args = ["advise", "commitments", "--trace", str(SMALL), "--sizes", "0", "--terms", "none,1y", "--workers", "1",
            "--json"]  # fmt: skip
    a4 = json.loads(runner.invoke(app, [*args, "--machine-family", "a4-highgpu"]).output)
    assert "estimated" in a4["scenario"]["prices_source"]
    assert any("a4-highgpu-8g" in c and "estimated" in c for c in a4["caveats"])
    a3 = json.loads(runner.invoke(app, args).output)
    assert "estimated" not in a3["scenario"]["prices_source"]
    assert not any("estimated" in c for c in a3["caveats"])


def test_without_randomness_one_seed_is_replayed_and_said_so() -> None:
    res = advise(request(sizes=(0, 2), seeds=3))
    assert res["runner"]["tasks"] == 2  # one replay per size, not three identical ones
    assert (res["scenario"]["seeds"], res["scenario"]["seeds_requested"], res["scenario"]["random"]) == (1, 3, False)
    assert res["recommended"]["seeds_cheaper_than_on_demand"] is None
    assert any("nothing in this scenario is random" in c for c in res["caveats"])


def _outcome(window: str, seed: int, overflow: float, size: int = 0) -> Outcome:
    """What one replay of `size` reserved nodes billed for overflow in a one-day `window`."""
    return Outcome(window, size, seed, overflow, 0.0, 8 * size, 0.0, 0.0, 0.0, 0.0, 1, 0.0, 24.0)


def _synthetic(req: Request, outcomes: list[Outcome]) -> dict:
    """`assemble` over hand-made outcomes of size 0 only: a two-day choice window in two one-day folds."""
    choice = Window("all", 0.0, 2.0, req.jobs, 0.0)
    return assemble(req, choice, folds(choice, 2), None, outcomes, {"kind": "test"})


def _random_request(**kw: object) -> Request:
    prices = TermPrices("a3-highgpu-8g", "us-central1", {"none": 1.0}, **kw)  # type: ignore[arg-type]
    return Request(trace="t", jobs=small_jobs(), terms=("none",), sizes=(0,), seeds=2, spot_fraction=0.3,
                   prices=prices)  # fmt: skip


def test_the_choice_windows_range_is_each_seeds_own_total_over_the_folds() -> None:
    """Seed 0 is dear in fold 1 and cheap in fold 2, seed 1 the reverse: both total $300, so the window's range
    is 300..300 with no spread (adding each fold's own min and max gave 200..400)."""
    outs = [_outcome("all-1", 0, 100), _outcome("all-1", 1, 200), _outcome("all-2", 0, 200), _outcome("all-2", 1, 100),
            _outcome("all", 0, 300), _outcome("all", 1, 300)]  # fmt: skip
    res = _synthetic(_random_request(), outs)
    p = next(p for p in res["points"] if p["window"] == "all")
    assert (p["cost_usd_min"], p["cost_usd_max"], p["cost_usd_std"]) == (300, 300, 0)
    assert res["recommended"]["cost_usd_range"] == [300, 300]


def test_the_rule_never_recommends_a_point_dearer_than_all_on_demand_over_the_window() -> None:
    """One reserved node on 1y ($1/h, $24 a fold) is the cheaper in fold 1 ($50 against $100) and dearer in fold 2
    ($1,500 against $1,000): its worst regret (50 %) is below all on demand's (100 %), yet over the window it costs
    $1,550 against $1,100.  Minimax regret alone would buy it."""
    prices = TermPrices("a3-highgpu-8g", "us-central1", {"1y": 1.0})
    req = Request(trace="t", jobs=small_jobs(), terms=("1y",), sizes=(0, 1), seeds=1, allow_short_history=True,
                  prices=prices)  # fmt: skip
    od = {"all-1": 100, "all-2": 1000, "all": 1100}
    one = {"all-1": 26, "all-2": 1476, "all": 1502}
    res = _synthetic(
        req, [*(_outcome(w, 0, c) for w, c in od.items()), *(_outcome(w, 0, c, 1) for w, c in one.items())]
    )
    node = next(p for p in res["points"] if p["window"] == "all" and p["reserved_nodes"] == 1)
    assert (node["cost_usd_mean"], node["max_fold_regret_pct"]) == (1550, 50)
    assert res["recommended"]["reserved_nodes"] == 0 and res["recommended"]["saving_vs_on_demand_pct"] == 0


def test_a_random_scenario_with_fewer_than_three_seeds_is_caveated() -> None:
    outs = [_outcome(w, s, 100) for w in ("all-1", "all-2", "all") for s in (0, 1)]
    two = _synthetic(_random_request(), outs)
    assert any("only 2 seed(s) of a random scenario" in c for c in two["caveats"])
    three = _synthetic(Request(**{**_random_request().__dict__, "seeds": 3}), outs)
    assert not any("seed(s) of a random scenario" in c for c in three["caveats"])


def test_savings_are_said_to_be_against_on_demand_overflow_not_flex_start() -> None:
    outs = [_outcome(w, s, 100) for w in ("all-1", "all-2", "all") for s in (0, 1)]
    plain = _synthetic(_random_request(), outs)
    assert any("against overflow billed at on-demand rates" in c and "flex-start" in c for c in plain["caveats"])
    discounted = _synthetic(_random_request(overflow_discount=0.1), outs)
    assert any("overflow_discount of 10 %" in c and "flex-start" in c for c in discounted["caveats"])


def test_the_choice_windows_waits_are_over_its_own_jobs() -> None:
    """p50/p95 of the whole choice window are those of the jobs submitted in it (one replay, one slice), not the
    mean of its folds' medians and the largest of their p95s."""
    req = request(sizes=(0,))
    res = advise(req)
    choice = windows(req)[0]
    span = Slice("all", choice.start_s, choice.start_s + choice.hours * 3600.0)
    (whole,) = evaluate(Task(req.jobs, (span,), 0, 0, req.machine_family, req.region, 0.0, 0.0))
    p = next(p for p in res["points"] if p["window"] == "all")
    assert (p["wait_p50_s"], p["wait_p95_s"]) == (round(whole.wait_p50_s, 1), round(whole.wait_p95_s, 1))


def test_terms_the_history_does_not_allow_have_no_regret() -> None:
    """29 days of history: 1y and 3y are priced and shown but not candidates; their regret is N/A, not a figure
    measured against another term's best."""
    res = advise(request(sizes=(0, 1)))
    assert set(res["eligible_terms"]) == {"none"}
    shown = [p for p in res["points"] if p["window"] == "all" and p["term"] in ("1y", "3y")]
    assert shown and all(p["max_fold_regret_pct"] is None and not p["regret_unbounded"] for p in shown)
    out = runner.invoke(app, ["advise", "commitments", "--trace", str(SMALL), "--sizes", "0,1", "--workers", "1"])
    assert out.exit_code == 0, out.output
    rows = [line.split() for line in out.output.splitlines() if line.startswith(("1y ", "3y "))]
    assert rows and all(r[-1] == "n/a" for r in rows)


def test_the_test_window_ends_at_the_last_submission() -> None:
    """--train 14 --test 14 on a trace whose submissions span 27.7 days: the test window stops at the last
    submission, not 0.3 days later with the reservation billed and no demand recorded."""
    jobs = small_jobs()
    last = max(j.submit for j in jobs)
    _, test = split(jobs, 14, 14)
    assert test.start_s + test.hours * 3600.0 <= last + 1.0 + 1e-6
    assert test.days < 14


def test_a_spot_load_the_replay_cannot_end_is_refused_before_the_grid_naming_advises_option(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    trace = tmp_path / "huge.csv"
    trace.write_text("job_id,submission_time,duration,num_gpu\nbig,0,360000,4096\n")

    def no_grid(*args: object, **kw: object) -> None:
        raise AssertionError("the grid ran")

    monkeypatch.setattr(commitments, "run_local", no_grid)
    res = runner.invoke(app, ["advise", "commitments", "--trace", str(trace), "--spot-fraction", "1", "--sizes", "0",
                              "--seeds", "1", "--workers", "1"])  # fmt: skip
    assert res.exit_code == 2, res.output
    assert "error: --spot-fraction:" in res.output and "would not end" in res.output
    assert "--preemption-rate" not in res.output and "--checkpoint-interval" not in res.output
