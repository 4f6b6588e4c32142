"""Synthesize one stack file: validate its spec, run `stacks.program` under mocks, price the fleet.

This is what `fleet synth` and the stack tests call.  The spec is validated (and a SpecError raised)
before Pulumi or pulumi_gcp is imported, so a bad spec fails fast and declares nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fleet.spec.load import SpecError, load_stack_file, read_stack_config, read_stack_file, spec_kind
from fleet.synth.cost import FleetCost, fleet_cost


@dataclass
class Synthesis:
    stack: str
    result: Any  # fleet.synth.engine.SynthResult (imported lazily: it pulls in pulumi)
    cost: FleetCost | None

    def to_json(self) -> dict[str, Any]:
        cost: dict[str, Any] = (
            self.cost.to_json() if self.cost else {"hourly_usd_at_min": 0.0, "hourly_usd_at_max": 0.0, "by_pool": []}
        )
        return {
            "stack": self.stack,
            "resources": [r.to_json() for r in self.result.resources],
            "outputs": self.result.outputs,
            "cost": cost,
            "warnings": list(self.result.warnings),
        }


def stack_name_of(path: Path) -> str:
    """`Pulumi.gcp-l4-dev.yaml` -> `gcp-l4-dev` (other file names: their stem)."""
    name = Path(path).name
    if name.startswith("Pulumi.") and name.endswith((".yaml", ".yml")):
        return name[len("Pulumi.") :].rsplit(".", 1)[0]
    return Path(path).stem


def synth_file(path: Path, stack: str | None = None) -> Synthesis:
    """Validate and synthesize a stack file.  Raises SpecError (nothing declared) on a bad spec."""
    path = Path(path)
    stack = stack or stack_name_of(path)
    raw = read_stack_config(path)
    config = dict(read_stack_file(path).get("config") or {})
    spec = load_stack_file(path) if spec_kind(raw) == "fleet" else None
    if spec_kind(raw) == "project-bootstrap":  # validated here too, so a bad one fails before Pulumi is imported
        from fleet.spec.project import ProjectSpecError, load_project_spec

        try:
            load_project_spec(raw)
        except ProjectSpecError as exc:
            raise SpecError(exc.errors, source=str(path)) from None

    from fleet.synth.engine import run_program
    from fleet.synth.properties import unknown_properties
    from stacks.program import main

    default_project = spec.project if spec else str(config.get("gcp:project", "mock-project"))
    result = run_program(main, stack=stack, config=config, default_gcp_project=default_project)
    # what the provider's check would refuse at `pulumi up`, said now (tests keep the shipped stacks free of it)
    result.warnings += unknown_properties(result.resources)
    return Synthesis(stack=stack, result=result, cost=fleet_cost(spec) if spec else None)
