"""`fleet trace generate`: write a seeded synthetic GPU job trace (a workload regime the ITP clusters lack).

The CSV is in the ITP format `fleet simulate --trace` reads (`job_id,submission_time,duration,num_gpu`),
its header comment names the regime, the seed and every parameter (autoscaler/replay/synth.py,
docs/simulate.md).  The same regime, seed and job count always write the same file.  `--out` is checked before
anything is generated (its directory must exist; an existing file is replaced only with `--force`) and written
atomically; `--jobs` is at most `MAX_GENERATED_JOBS` (the trace limit `fleet simulate` reads back)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from fleet.input.limits import MAX_GENERATED_JOBS

trace_app = typer.Typer(help="GPU job traces for `fleet simulate`.", no_args_is_help=True)


def _fail(message: str) -> typer.Exit:
    """Print every line of `message` as an error; exit 2 (bad input, nothing written)."""
    for line in message.splitlines():
        typer.echo(f"error: {line}", err=True)
    return typer.Exit(2)


def _check_jobs(jobs: int | None) -> None:
    """`--jobs` above the trace limit would write a file `fleet simulate` refuses (and take minutes and GiBs)."""
    if jobs is not None and jobs > MAX_GENERATED_JOBS:
        raise _fail(
            f"--jobs: at most {MAX_GENERATED_JOBS:,} (the trace limit `fleet simulate --trace` reads), got {jobs:,}"
        )


@trace_app.command("generate")
def generate(
    out: Annotated[Path, typer.Option("--out", help="CSV file to write ('-': standard output)")],
    regime: str = typer.Option(..., "--regime", help="short, long-tail, bursty-gangs, diurnal or steady"),
    seed: int = typer.Option(0, "--seed", help="seed of the generator"),
    jobs: Annotated[
        int | None,
        typer.Option("--jobs", help=f"number of jobs, at most {MAX_GENERATED_JOBS:,} (default: the regime's)"),
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="replace an existing --out file")] = False,
) -> None:
    """Write a synthetic trace of one workload regime."""
    from autoscaler.replay.synth import SynthError, to_csv
    from autoscaler.replay.synth import generate as synth_generate
    from fleet.input import InputError, check_output_file, write_atomic

    to_stdout = str(out) == "-"
    try:
        _check_jobs(jobs)
        if not to_stdout:
            check_output_file(out, option="--out", force=force)
        generated = synth_generate(regime, seed, jobs)
        text = to_csv(regime, seed, generated)
        if to_stdout:
            typer.echo(text, nl=False)
            return
        write_atomic(out, text, option="--out", force=force)
    except (SynthError, InputError) as exc:
        raise _fail(str(exc)) from None
    typer.echo(f"wrote {out}: {len(generated):,} jobs, regime {regime}, seed {seed}")


def register(app: typer.Typer) -> None:
    app.add_typer(trace_app, name="trace")
