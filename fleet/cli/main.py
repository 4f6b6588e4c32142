"""Entry point of the `fleet` command.

Each command group lives in its own module and registers itself through `register(app)`.
Modules keep heavy imports (Pulumi, google-cloud) inside their command functions, so fast
paths such as `fleet slurm resume` (run by slurmctld) start quickly.
"""

from __future__ import annotations

import importlib

import typer

app = typer.Typer(
    name="fleet",
    help="GPU clusters from one typed spec, and the autoscaler that keeps them right-sized.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)

# Command-group modules under fleet.cli; each defines register(app: typer.Typer) -> None.
COMMAND_MODULES = (
    "catalog",  # fleet catalog                    (machine catalog look-ups)
    "synth",  # fleet synth                          (infrastructure core)
    "render",  # fleet render slurm-conf             (infrastructure core)
    "simulate",  # fleet simulate                    (trace replay)
    "trace",  # fleet trace generate                 (synthetic job traces)
    "bench",  # fleet bench planner                  (planner benchmark)
    "daemon",  # fleet autoscaler, fleet slurm        (the autoscaler daemon)
    "bootstrap",  # fleet bootstrap-region            (new-region bootstrap)
    "advise",  # fleet advise commitments             (compute-budget advisor)
    "policy",  # fleet policy check                  (guardrails, same rules as policies/)
)

for _module in COMMAND_MODULES:
    try:
        importlib.import_module(f"fleet.cli.{_module}").register(app)
    except ModuleNotFoundError as exc:  # a group not built yet must not break the others
        if exc.name != f"fleet.cli.{_module}":
            raise


if __name__ == "__main__":
    app()
