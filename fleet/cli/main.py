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

#: this project's own top-level packages: a module of theirs that is missing is a defect, not an install choice
PROJECT_PACKAGES = frozenset({"fleet", "autoscaler", "components", "stacks"})


def main() -> None:
    """The `fleet` command: `app`, with a third-party package the command needs and this environment lacks named
    (the Slurm controller's venv holds the autoscaler's dependencies only, deploy/controller.in: `fleet synth`
    there needs Pulumi) instead of a traceback; exit 1."""
    try:
        app(prog_name="fleet")  # also when run as `python -m fleet.cli.main` (the controller's and image's wrapper)
    except ModuleNotFoundError as exc:
        top = (exc.name or "").split(".")[0]
        if not top or top in PROJECT_PACKAGES:
            raise
        typer.echo(
            f"fleet: this command needs the Python package {top!r}, which this environment does not have (the Slurm"
            " controller's venv holds the autoscaler's dependencies only: deploy/controller.in); run it where"
            " gpu-fleet is installed whole (scripts/setup.sh)",
            err=True,
        )
        raise SystemExit(1) from None


if __name__ == "__main__":
    main()
