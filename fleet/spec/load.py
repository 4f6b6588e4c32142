"""Read a fleet spec out of a Pulumi stack file and validate it, with one readable error per problem.

Field paths are index-based and follow the raw spec: `clusters[0].pools[1].max_nodes`,
`network.gpu_cidr`, `zones[2]`.  Indexes are stable even when names are missing or duplicated,
which is exactly when a path is needed; reasons name the pool/cluster where that helps.
Paths of keys outside the spec value (stack file keys) are spelled as in the file: `gcp:project`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from fleet.catalog import Catalog
from fleet.input import InputError, format_loc, load_yaml
from fleet.input.limits import MAX_SPEC_BYTES
from fleet.spec.model import FleetSpec
from fleet.spec.rules import check

CONFIG_KEY = "gpu-fleet:fleet"
ROOT_PATH = CONFIG_KEY  # path printed for an error about the spec value as a whole

_NAME_HINT = "must be a lower-case RFC 1035 name of at most 20 characters (a-z, 0-9, '-'; starts with a letter)"


class SpecError(ValueError):
    """A spec that must not be deployed: `.errors` lists (field path, reason), in spec order.

    `source` is the stack file when known; `lines()` then reads `FILE: field.path: reason` (or
    `FILE:LINE:COL: reason` for a position), the form every CLI command prints."""

    def __init__(self, errors: Sequence[tuple[str, str]], source: str | None = None) -> None:
        self.errors: list[tuple[str, str]] = list(errors)
        self.source = source
        super().__init__(str(self))

    def lines(self) -> list[str]:
        if self.source is None:
            return [f"{path}: {reason}" if path else reason for path, reason in self.errors]
        return InputError(self.source, self.errors).lines()

    def __str__(self) -> str:
        return "\n".join(self.lines())

    def with_source(self, source: Path | str) -> SpecError:
        return self if self.source is not None else SpecError(self.errors, str(source))


def format_path(loc: Iterable[str | int]) -> str:
    """`("clusters", 0, "pools", 1, "max_nodes")` -> `clusters[0].pools[1].max_nodes`."""
    return format_loc(loc) or ROOT_PATH


def _pydantic_errors(exc: ValidationError) -> list[tuple[str, str]]:
    errors = []
    for err in exc.errors(include_url=False):
        loc = err["loc"]
        reason = str(err["msg"]).removeprefix("Value error, ")
        if err["type"] == "string_pattern_mismatch" and loc and loc[-1] == "name":
            reason = f"{_NAME_HINT}, got {err['input']!r}"
        elif err["type"] == "string_pattern_mismatch" and loc == ("project",):
            reason = f"not a valid GCP project id (6-30 chars, lower-case letters, digits, '-'), got {err['input']!r}"
        elif err["type"] == "extra_forbidden" and "policy" in loc[:-1]:
            reason = "unknown policy field (see docs/planner.md)"
        elif err["type"] == "extra_forbidden":
            reason = "unknown field (check the spelling; see docs/spec.md)"
        elif err["type"] == "missing":
            reason = "required field is missing"
        errors.append((format_path(loc), reason))
    return errors


def spec_kind(data: object) -> str:
    """The stack kind of a raw spec value: its `kind` key, `fleet` when absent."""
    if isinstance(data, dict):
        kind = data.get("kind", "fleet")
        return kind if isinstance(kind, str) else repr(kind)
    return "fleet"


def load_spec(data: dict[str, Any], catalog: Catalog | None = None) -> FleetSpec:
    """Validate a raw fleet spec: schema first, then every catalog / cross-field rule.

    Raises SpecError listing every problem found (schema errors stop before the rules run, since
    rules need a well-typed spec).
    """
    if not isinstance(data, dict):
        raise SpecError([(ROOT_PATH, f"must be a mapping (the fleet spec), got {type(data).__name__}")])
    kind = spec_kind(data)
    if kind != "fleet":
        raise SpecError([("kind", f"stack kind {kind!r} is not a fleet spec (load_spec handles kind: fleet)")])
    try:
        spec = FleetSpec.model_validate(data)
    except ValidationError as exc:
        raise SpecError(_pydantic_errors(exc)) from None
    errors = check(spec, catalog)
    if errors:
        raise SpecError(errors)
    return spec


def read_stack_file(path: Path) -> dict[str, Any]:
    """The parsed YAML of a `Pulumi.<stack>.yaml`, through the input gate (size, UTF-8, duplicate keys, aliases)."""
    path = Path(path)
    try:
        doc = load_yaml(path, what="stack file", max_bytes=MAX_SPEC_BYTES)
    except InputError as exc:
        raise SpecError(exc.errors, source=exc.source) from None
    if not isinstance(doc, dict):
        raise SpecError([("", "not a Pulumi stack file (expected a mapping with a `config:` key)")], source=str(path))
    return doc


def _config(path: Path) -> dict[str, Any]:
    config = read_stack_file(path).get("config")
    if not isinstance(config, dict):
        raise SpecError([("config", "missing: a stack file holds its settings under `config:`")], source=str(path))
    return config


def read_stack_config(path: Path) -> dict[str, Any]:
    """The raw `gpu-fleet:fleet` value of a stack file (any kind: see `spec_kind`)."""
    config = _config(path)
    if CONFIG_KEY not in config:
        raise SpecError(
            [(f"config.{CONFIG_KEY}", f"missing in {path}: the fleet spec lives under this key")], str(path)
        )
    value = config[CONFIG_KEY]
    if not isinstance(value, dict):
        raise SpecError([(f"config.{CONFIG_KEY}", f"must be a mapping, got {type(value).__name__}")], str(path))
    return value


def check_provider_config(spec: FleetSpec, config: dict[str, Any]) -> list[tuple[str, str]]:
    """`gcp:project` / `gcp:region` (the provider's own config) must agree with the spec."""
    errors = []
    for key, want in (("gcp:project", spec.project), ("gcp:region", spec.region)):
        got = config.get(key)
        if got is not None and got != want:
            field = key.split(":", 1)[1]
            errors.append((key, f"is {got!r} but the fleet spec says {field}: {want!r}; they must agree"))
    return errors


def load_stack_file(path: Path, catalog: Catalog | None = None) -> FleetSpec:
    """Read, validate and cross-check the fleet spec of one stack file."""
    try:
        spec = load_spec(read_stack_config(path), catalog)
    except SpecError as exc:
        raise exc.with_source(path) from None
    errors = check_provider_config(spec, _config(path))
    if errors:
        raise SpecError(errors, source=str(path))
    return spec


def repo_root() -> Path:
    """The checkout this package runs from (holds `Pulumi.yaml`)."""
    return Path(__file__).resolve().parents[2]


def stack_file(stack: str, root: Path | None = None) -> Path:
    """`Pulumi.<stack>.yaml` in `root`, else the current directory, else the repo root."""
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}", stack):
        raise SpecError([("--stack", f"{stack!r} is not a stack name (letters, digits, '.', '_', '-')")])
    candidates = [Path(root)] if root is not None else [Path.cwd(), repo_root()]
    for directory in candidates:
        path = directory / f"Pulumi.{stack}.yaml"
        if path.is_file():
            return path
    known = sorted({p.name[len("Pulumi.") : -len(".yaml")] for d in candidates for p in d.glob("Pulumi.*.yaml")})
    where = ", ".join(str(d) for d in dict.fromkeys(candidates))
    hint = f" (known stacks: {', '.join(known)})" if known else ""
    raise SpecError([("--stack", f"no Pulumi.{stack}.yaml in {where}{hint}")])
