"""`fleet trace generate`: write a seeded synthetic GPU job trace (a workload regime the ITP clusters lack).

The CSV is in the ITP format `fleet simulate --trace` reads (`job_id,submission_time,duration,num_gpu`),
its header comment names the regime, the seed and every parameter (autoscaler/replay/synth.py,
docs/simulate.md).  The same regime, seed and job count always write the same file."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

trace_app = typer.Typer(help="GPU job traces for `fleet simulate`.", no_args_is_help=True)


@trace_app.command("generate")
def generate(
    out: Annotated[Path, typer.Option("--out", help="CSV file to write ('-': standard output)")],
    regime: str = typer.Option(..., "--regime", help="short, long-tail, bursty-gangs, diurnal or steady"),
    seed: int = typer.Option(0, "--seed", help="seed of the generator"),
    jobs: Annotated[int | None, typer.Option("--jobs", help="number of jobs (default: the regime's)")] = None,
) -> None:
    """Write a synthetic trace of one workload regime."""
    from autoscaler.replay.synth import SynthError, to_csv
    from autoscaler.replay.synth import generate as synth_generate

    try:
        generated = synth_generate(regime, seed, jobs)
        text = to_csv(regime, seed, generated)
    except SynthError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    if str(out) == "-":
        typer.echo(text, nl=False)
        return
    if out.parent and not out.parent.is_dir():
        typer.echo(f"error: --out: directory {out.parent} does not exist", err=True)
        raise typer.Exit(2)
    out.write_text(text)
    typer.echo(f"wrote {out}: {len(generated):,} jobs, regime {regime}, seed {seed}")


def register(app: typer.Typer) -> None:
    app.add_typer(trace_app, name="trace")
