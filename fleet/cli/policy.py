"""`fleet policy check --stack NAME | --config PATH | --resources FILE [--json]`: the guardrails, offline.

`--stack` / `--config` synthesize the stack file under Pulumi's mocks first; `--resources` reads what
`fleet synth --json` printed (e.g. a synthesized stack someone edited, or one from another checkout).

Exit 0 when no mandatory policy is violated (advisories are printed), 1 with every violation named (policy,
resource type and name, the offending field and why), 2 on bad input (no such stack file, an invalid spec).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

policy_app = typer.Typer(help="Guardrails every stack must pass (the same rules as the CrossGuard pack in policies/).")


@policy_app.command("check")
def check(
    stack: Annotated[
        str | None, typer.Option("--stack", help="stack name: reads Pulumi.NAME.yaml from cwd or the repo root")
    ] = None,
    config: Annotated[
        Path | None, typer.Option("--config", help="path of a stack file (Pulumi.<stack>.yaml format)")
    ] = None,
    resources: Annotated[
        Path | None, typer.Option("--resources", help="a `fleet synth --json` output to check instead")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object")] = False,
) -> None:
    """Synthesize the stack under Pulumi's mocks and check every resource against the policy pack's rules."""
    from fleet.policy.check import ResourcesError, check_stack_file, check_synth_json
    from fleet.spec.load import SpecError, stack_file

    if sum(x is not None for x in (stack, config, resources)) != 1:
        typer.echo("error: --stack / --config / --resources: give exactly one of them", err=True)
        raise typer.Exit(2)
    try:
        if resources is not None:
            report = check_synth_json(resources)
        else:
            path = config if config is not None else stack_file(stack or "")
            report = check_stack_file(path, stack=stack)
    except SpecError as exc:
        for line in exc.lines():  # FILE: field.path: reason, as every command prints it
            typer.echo(f"error: {line}", err=True)
        raise typer.Exit(2) from None
    except ResourcesError as exc:  # the file itself (read through the input gate) or a resource in it
        typer.echo(f"error: --resources: {exc}", err=True)
        raise typer.Exit(2) from None
    except (ValueError, RuntimeError) as exc:  # component argument checks, duplicate URNs
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    if as_json:
        typer.echo(json.dumps(report.to_json(), indent=2))
    else:
        for v in report.violations:
            typer.echo(v.line())
        n = len(report.mandatory)
        typer.echo(
            f"{report.stack}: {report.resources} resources, "
            + (f"{n} violation(s)" if n else "all policies pass")
            + (f", {len(report.violations) - n} advisory" if len(report.violations) > n else ""),
            err=not report.ok,
        )
    raise typer.Exit(0 if report.ok else 1)


def register(app: typer.Typer) -> None:
    app.add_typer(policy_app, name="policy")
