"""`fleet policy check`: run the guardrails (fleet.policy.rules) over a stack synthesized under Pulumi's mocks.

The resources are exactly what `fleet synth` records (type, name, URN, the inputs as the engine receives
them), so the offline check and the CrossGuard pack in `policies/` judge the same properties with the same code.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fleet.policy.rules import DEFAULT_SETTINGS, MANDATORY, Resource, Settings, Violation, check_all


@dataclass(frozen=True)
class Report:
    stack: str
    resources: int
    violations: tuple[Violation, ...]

    @property
    def mandatory(self) -> list[Violation]:
        return [v for v in self.violations if v.level == MANDATORY]

    @property
    def ok(self) -> bool:
        return not self.mandatory

    def to_json(self) -> dict[str, Any]:
        return {
            "stack": self.stack,
            "resources": self.resources,
            "ok": self.ok,
            "violations": [v.__dict__ for v in self.violations],
        }


def resources_of(recorded: list[dict[str, Any]]) -> list[Resource]:
    """Custom resources of a `fleet synth --json` resource list (components declare nothing billable)."""
    return [
        Resource(r["urn"], r["type"], str(r.get("name") or ""), r.get("inputs") or {})
        for r in recorded
        if r.get("custom", True)
    ]


class ResourcesError(ValueError):
    """A `--resources` file that is not a `fleet synth --json` output."""


def check_synth_json(path: Path, settings: Settings = DEFAULT_SETTINGS) -> Report:
    """Check the resources of a `fleet synth --json` output file."""
    import json

    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise ResourcesError(f"{path}: cannot read: {exc}") from None
    except ValueError as exc:
        raise ResourcesError(f"{path}: not JSON: {exc}") from None
    recorded = doc.get("resources") if isinstance(doc, dict) else None
    if not isinstance(recorded, list) or not all(
        isinstance(r, dict) and isinstance(r.get("urn"), str) and isinstance(r.get("type"), str) for r in recorded
    ):
        raise ResourcesError(f"{path}: resources: expected the list `fleet synth --json` prints (urn, type, inputs)")
    resources = resources_of(recorded)
    return Report(str(doc.get("stack") or ""), len(resources), tuple(check_all(resources, settings)))


def check_stack_file(path: Path, stack: str | None = None, settings: Settings = DEFAULT_SETTINGS) -> Report:
    """Synthesize the stack file and check it.  Raises SpecError on an invalid spec (nothing declared)."""
    from fleet.synth.run import synth_file

    syn = synth_file(path, stack=stack)
    resources = resources_of([r.to_json() for r in syn.result.resources])
    return Report(syn.stack, len(resources), tuple(check_all(resources, settings)))
