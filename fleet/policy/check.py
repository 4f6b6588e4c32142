"""`fleet policy check`: run the guardrails (fleet.policy.rules) over a stack synthesized under Pulumi's mocks.

The resources are exactly what `fleet synth` records (type, name, URN, the inputs as the engine receives
them), so the offline check and the CrossGuard pack in `policies/` judge the same properties with the same code.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fleet.policy.rules import (
    DEFAULT_SETTINGS,
    MANDATORY,
    PropertyError,
    Resource,
    Settings,
    Violation,
    check_all,
)


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


def _check_recorded(path: Path, recorded: object) -> list[dict[str, Any]]:
    """The `resources` list of a `fleet synth --json` output: objects with a string urn and type and, when given,
    a string name, a boolean custom and an object of inputs; ResourcesError naming the resource and field."""
    if not isinstance(recorded, list):
        raise ResourcesError(f"{path}: resources: expected the list `fleet synth --json` prints (urn, type, inputs)")
    for i, r in enumerate(recorded):
        if not isinstance(r, dict):
            raise ResourcesError(f"{path}: resources[{i}]: expected an object (urn, type, inputs)")
        for key, kind, required in (("urn", str, True), ("type", str, True), ("name", str, False),
                                    ("custom", bool, False), ("inputs", dict, False)):  # fmt: skip
            value = r.get(key)
            if (value is None and not required) or isinstance(value, kind):
                continue
            what = {str: "a string", bool: "true or false", dict: "an object of the resource's inputs"}[kind]
            name = f" ({r['urn']})" if isinstance(r.get("urn"), str) else ""
            raise ResourcesError(f"{path}: resources[{i}]{name}: {key}: expected {what}, got {type(value).__name__}")
    return recorded


def check_synth_json(path: Path, settings: Settings = DEFAULT_SETTINGS) -> Report:
    """Check the resources of a `fleet synth --json` output file (read through the input gate: a regular file
    within the inventory size limit, no duplicate key, no NaN)."""
    from fleet.input import InputError, load_json
    from fleet.input.limits import MAX_INVENTORY_BYTES

    try:
        doc = load_json(path, what="`fleet synth --json` output", max_bytes=MAX_INVENTORY_BYTES)
    except InputError as exc:
        raise ResourcesError("; ".join(exc.lines())) from None
    recorded = _check_recorded(path, doc.get("resources") if isinstance(doc, dict) else None)
    resources = resources_of(recorded)
    try:
        violations = check_all(resources, settings)
    except PropertyError as exc:
        raise ResourcesError(f"{path}: {exc}") from None
    return Report(str(doc.get("stack") or ""), len(resources), tuple(violations))


def check_stack_file(path: Path, stack: str | None = None, settings: Settings = DEFAULT_SETTINGS) -> Report:
    """Synthesize the stack file and check it.  Raises SpecError on an invalid spec (nothing declared)."""
    from fleet.synth.run import synth_file

    syn = synth_file(path, stack=stack)
    resources = resources_of([r.to_json() for r in syn.result.resources])
    return Report(syn.stack, len(resources), tuple(check_all(resources, settings)))
