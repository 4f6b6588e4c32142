"""`fleet bench planner`: time one plan() on a seeded synthetic mix of jobs, offerings and nodes."""

from __future__ import annotations

import json

import typer

#: bounds that keep one benchmark to minutes and its mix in memory: 100x the documented 10k-job mix, more nodes
#: than 64 pools of 2,000 (a cluster's limit), far more offerings than the catalog has
MAX_JOBS, MAX_OFFERINGS, MAX_NODES, MAX_RUNS = 1_000_000, 100_000, 200_000, 100

bench_app = typer.Typer(help="Benchmarks of the autoscaler.", no_args_is_help=True)


@bench_app.command("planner")
def planner(
    jobs: int = typer.Option(
        10_000, "--jobs", min=0, max=MAX_JOBS, help="pending work units (1 to 64 GPUs, some gangs)"
    ),
    offerings: int = typer.Option(
        500, "--offerings", min=1, max=MAX_OFFERINGS, help="offerings (machine type x zone x capacity)"
    ),
    nodes: int = typer.Option(2_000, "--nodes", min=0, max=MAX_NODES, help="existing nodes in every state"),
    runs: int = typer.Option(
        5, "--runs", min=1, max=MAX_RUNS, help="timed runs (after one warm-up); the median is reported"
    ),
    seed: int = typer.Option(0, "--seed", help="seed of the synthetic mix"),
    spot_share: float = typer.Option(0.3, "--spot-share", min=0.0, max=1.0, help="share of spot-tolerant units"),
    as_json: bool = typer.Option(False, "--json", help="print one JSON object"),
) -> None:
    """Time plan() on a seeded synthetic mix; prints jobs, offerings, nodes, seconds_median, runs."""
    from autoscaler.bench.planner import synthetic_mix, time_plan

    mix = synthetic_mix(jobs, offerings, nodes, seed=seed, spot_share=spot_share)
    result = {"jobs": jobs, "offerings": offerings, "nodes": nodes, **time_plan(mix, runs), "runs": runs, "seed": seed}
    if as_json:
        typer.echo(json.dumps(result))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table("metric", "value", title="fleet bench planner")
    for k, v in result.items():
        table.add_row(k, str(v))
    Console().print(table)


def register(app: typer.Typer) -> None:
    app.add_typer(bench_app, name="bench")
