"""`fleet advise commitments`: how many reserved nodes to buy, on which committed-use term, from the team's
own job history replayed through the gpu-fleet policy.  See docs/advise.md.

Every option is checked before the grid runs: `--report` (its directory must exist; an existing file is replaced
only with `--force`; written atomically), `--price-file` through the input gate (fleet/input), and the bounds that
keep the grid finite (`--sizes` at most one zonal MIG, `--stockout-rate` below 1, `--workers` at most the cores,
`--spot-fraction` no higher than lets every replay end: `fleet.advise.commitments.check_replayable`)."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Annotated

import typer

from fleet.input.scenario_bounds import reserved_nodes_problem, stockout_rate_problem

advise_app = typer.Typer(help="Budget advice from replaying real demand.", no_args_is_help=True)


def _fail(message: str) -> typer.Exit:
    """Print every line of `message` as an error; exit 2 (bad input, nothing written)."""
    for line in message.splitlines() or [message]:
        typer.echo(f"error: {line}", err=True)
    return typer.Exit(2)


@advise_app.command("commitments")
def commitments(
    trace: Annotated[
        str,
        typer.Option("--trace", help="job trace CSV (submission_time,duration,num_gpu), or synth:REGIME[:SEED]"),
    ],
    machine_family: str = typer.Option("a3-highgpu", "--machine-family", help="catalog family to reserve and buy"),
    region: str = typer.Option("us-central1", "--region", help="region (the reservation sits in its first zone)"),
    spot_fraction: float = typer.Option(0.0, "--spot-fraction", help="share of jobs (seeded) that tolerate spot"),
    stockout_rate: float = typer.Option(0.0, "--stockout-rate", help="probability a launch stocks out"),
    terms: str = typer.Option("none,1y,3y", "--terms", help="comma-separated: none, 1y, 3y"),
    sizes: str = typer.Option("0:200:10", "--sizes", help="reserved-node counts: START:STOP:STEP or a list"),
    seeds: int = typer.Option(
        3, "--seeds", help="seeds per point (stockouts, spot preemption, spot choice); one when nothing is random"
    ),
    train: float | None = typer.Option(None, "--train", help="choose on the first DAYS of the trace ..."),
    test: float | None = typer.Option(None, "--test", help="... and score the choice on the next DAYS"),
    price_file: Annotated[Path | None, typer.Option("--price-file", help="YAML of negotiated rates")] = None,
    ray_address: str | None = typer.Option(None, "--ray-address", help="run on this Ray cluster (or 'local')"),
    workers: int | None = typer.Option(None, "--workers", help="local processes (default: every core)"),
    folds: int = typer.Option(4, "--folds", help="cut the choice window into N consecutive folds (robust choice)"),
    rule: str = typer.Option("minimax-regret", "--rule", help="minimax-regret (robust to drift) or mean"),
    allow_short_history: bool = typer.Option(
        False, "--allow-short-history", help="recommend terms longer than the history can justify"
    ),
    as_json: bool = typer.Option(False, "--json", help="print the result as JSON"),
    report: Annotated[Path | None, typer.Option("--report", help="write an HTML report (PNG if .png)")] = None,
    force: bool = typer.Option(False, "--force", help="replace an existing --report file"),
) -> None:
    """Replay the trace for every reservation size x term (x seed) and recommend the cheapest mix."""
    from autoscaler.replay.synth import SynthError, load_source
    from autoscaler.replay.trace import TraceError
    from fleet.advise.commitments import Request, advise, check_replayable, reserved_machine
    from fleet.advise.grid import GridError, catalog_prices, load_price_file, parse_sizes, parse_terms
    from fleet.advise.runner import RunnerError
    from fleet.input import InputError, check_output_file

    try:
        if report is not None:
            check_output_file(report, option="--report", force=force)
        term_list = parse_terms(terms)
        size_list = parse_sizes(sizes)
        _check_bounds(size_list, stockout_rate, workers)
        if not 1 <= seeds <= 100:
            raise GridError("--seeds: 1 to 100")
        if not 1 <= folds <= 52:
            raise GridError("--folds: 1 to 52")
        if rule not in ("minimax-regret", "mean"):
            raise GridError(f"--rule: unknown {rule!r} (choose from minimax-regret, mean)")
        if workers is not None and workers < 1:
            raise GridError("--workers: at least 1")
        for flag, v in (("--train", train), ("--test", test)):
            if v is not None and (not math.isfinite(v) or v <= 0):
                raise GridError(f"{flag}: a positive number of days")
        if (train is None) != (test is None):
            raise GridError("--train/--test: give both or neither")
        source, loaded = load_source(trace)
        req = Request(
            trace=source,
            jobs=tuple(loaded),
            machine_family=machine_family,
            region=region,
            spot_fraction=spot_fraction,
            stockout_rate=stockout_rate,
            terms=term_list,
            sizes=size_list,
            seeds=seeds,
            train_days=train,
            test_days=test,
            allow_short_history=allow_short_history,
            workers=workers,
            ray_address=ray_address,
            folds=folds,
            rule=rule,
        )
        machine = reserved_machine(req)
        prices = (
            load_price_file(price_file, machine, region, term_list)
            if price_file
            else catalog_prices(machine, region, term_list)
        )
        req = Request(**{**req.__dict__, "prices": prices})
        check_replayable(req)
    except InputError as exc:
        raise _fail("\n".join(exc.lines())) from None
    except (GridError, TraceError, SynthError) as exc:
        raise _fail(str(exc) if str(exc).startswith("--") else f"--trace: {exc}") from None
    except ValueError as exc:  # scenario validation (family, region, spot price) and window checks
        raise _fail(_scenario_message(exc)) from None

    progress = _progress_bar() if not as_json else None
    try:
        result = advise(req, progress)
    except RunnerError as exc:
        raise _fail(str(exc)) from None
    except ValueError as exc:
        raise _fail(_scenario_message(exc)) from None
    if report is not None:
        _write_report(result, report, force)
    if as_json:
        typer.echo(json.dumps(result, indent=2))
        return
    _print_human(result)


def _check_bounds(sizes: tuple[int, ...], stockout_rate: float, workers: int | None) -> None:
    """Refuse (GridError naming the option) the values the grid never finishes with or cannot run."""
    from fleet.advise.grid import GridError

    for problem in (reserved_nodes_problem("--sizes", max(sizes)), stockout_rate_problem(stockout_rate)):
        if problem:
            raise GridError(problem)
    cores = os.cpu_count() or 1
    if workers is not None and workers > cores:
        raise GridError(f"--workers: at most {cores} (the cores of this machine; more processes only cost memory)")


def _write_report(result: dict, report: Path, force: bool) -> None:
    """The HTML page (PNG when `report` ends in .png), written atomically; exit 2 naming --report on failure."""
    from fleet.advise.report import render_report
    from fleet.input import InputError, write_atomic

    try:
        write_atomic(report, render_report(result, png=report.suffix.lower() == ".png"), option="--report", force=force)
    except InputError as exc:
        raise _fail("\n".join(exc.lines())) from None


def _scenario_message(exc: ValueError) -> str:
    from pydantic import ValidationError

    if isinstance(exc, ValidationError):
        flags = {"machine_family": "--machine-family", "region": "--region", "spot_fraction": "--spot-fraction",
                 "stockout_rate": "--stockout-rate"}  # fmt: skip
        parts = []
        for e in exc.errors():
            loc = str(e["loc"][0]) if e["loc"] else ""
            msg = e["msg"].removeprefix("Value error, ")
            if ":" in msg and not loc:
                loc, msg = msg.split(":", 1)
            parts.append(f"{flags.get(loc.strip(), loc.strip())}: {msg.strip()}")
        return "; ".join(parts)
    return str(exc)


def _progress_bar():  # type: ignore[no-untyped-def]
    import sys

    if not sys.stderr.isatty():
        return None
    from rich.progress import Progress

    bar = Progress(transient=True)
    task = bar.add_task("replaying the grid", total=None)
    bar.start()

    def update(done: int, total: int) -> None:
        bar.update(task, completed=done, total=total)
        if done == total:
            bar.stop()

    return update


def _print_human(result: dict) -> None:
    """The result as a table of the choice window's points, the recommendation, the test verdict and the caveats."""
    from fleet.cli.tables import print_table

    sc = result["scenario"]
    rec = result["recommended"]
    seeds = f"{sc['seeds']} seed(s)" if sc["random"] else "deterministic: one replay per point"
    typer.echo(
        f"{sc['trace']}: {sc['jobs']} jobs, {sc['history_days']:.0f} days of history; {sc['reserved_machine_type']} "
        f"in {sc['region']}; {seeds}; prices: {sc['prices_source']}"
    )
    window = result["choice_window"]
    eligible = set(result["eligible_terms"])
    cells = []
    for p in result["points"]:
        if p["window"] != window:
            continue
        row = [p["term"], str(p["reserved_nodes"]), f"{p['cost_usd_mean']:,.0f}"]
        if sc["random"]:
            row.append(f"{p['cost_usd_min']:,.0f}..{p['cost_usd_max']:,.0f}")
        row += [
            f"{p['lower_bound_usd']:,.0f}",
            f"{p['overflow_usd_mean']:,.0f}",
            "-" if p["reservation_fill"] is None else f"{100 * p['reservation_fill']:.0f} %",
            f"{p['wait_p50_s']:.0f}",
            f"{p['wait_p95_s']:.0f}",
            _regret_cell(p, eligible),
        ]
        cells.append(row)
    headers = ["term", "reserved", "cost $", *(["range $"] if sc["random"] else []), "bound $", "overflow $", "fill",
               "p50 s", "p95 s", "worst fold"]  # fmt: skip
    print_table(headers, cells, title=f"{window} window")
    saving = rec.get("saving_vs_on_demand_pct")
    commitment = (
        f"; commits ${rec['commitment_total_usd']:,.0f} over the {rec['term']} term (billed for every hour of it, "
        f"used or not; a commitment cannot be cancelled)"
        if rec["commitment_total_usd"]
        else ""
    )
    beating = (
        f" (cheaper in {rec['seeds_cheaper_than_on_demand']} of {sc['seeds']} seeds)"
        if rec["seeds_cheaper_than_on_demand"] is not None
        else ""
    )
    typer.echo(
        f"recommended: {rec['reserved_nodes']} reserved nodes, term {rec['term']}: ${rec['cost_usd']:,.0f}"
        + (f", {saving:.1f} % less than all on demand" if saving is not None else "")
        + beating
        + commitment
    )
    test = result.get("test")
    if test:
        typer.echo(
            f"on the unseen test window: ${test['recommended']['cost_usd']:,.0f} vs all on demand "
            f"${test['on_demand_cost_usd']:,.0f}; hindsight best {test['hindsight_best']['reserved_nodes']} nodes "
            f"{test['hindsight_best']['term']} ${test['hindsight_best']['cost_usd']:,.0f} "
            f"(regret {test['regret_pct']:.2f} %)"
        )
    for c in result["caveats"]:
        typer.echo(f"note: {c}")


def _regret_cell(p: dict, eligible: set[str]) -> str:
    """A choice-window point's worst fold regret: `n/a` for a term the history does not allow, `inf` where it costs
    money in a fold whose cheapest candidate costs nothing."""
    if p["reserved_nodes"] and p["term"] not in eligible:
        return "n/a"
    if p.get("regret_unbounded"):
        return "inf"
    return "-" if p.get("max_fold_regret_pct") is None else f"{p['max_fold_regret_pct']:.1f} %"


def register(app: typer.Typer) -> None:
    app.add_typer(advise_app, name="advise")
