"""Validate Kubernetes objects against the real CRD schemas shipped in `fleet/schemas/crds/` (see SOURCE.md).

`validate(obj)` returns every problem as (field path, reason), like the fleet spec's errors; empty when the
API server would accept the object at create time.  What is checked, in the API server's order:

- `apiVersion`/`kind` name a served version of a shipped CRD; `metadata.name` is a DNS-1123 subdomain
  (and a label for namespaced objects' namespace); label keys/values are valid;
- the version's `openAPIV3Schema` (jsonschema, Draft 2020-12; RE2 `^(?i)` patterns moved to Python's
  spelling), made strict the way server-side field
  validation (`kubectl apply`'s default) is: an unknown field is an error unless the schema preserves
  unknown fields; `nullable` honoured;
- every non-transition `x-kubernetes-validations` (CEL) rule, from `fleet.schemas.cel`.

Pure (no I/O beyond reading the packaged CRD files, once).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

import jsonschema
import yaml

from fleet.schemas import cel

Problem = tuple[str, str]

DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_LABEL_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9]$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


class SchemaError(ValueError):
    """Objects the API server would refuse: `.errors` is a list of (object/field path, reason)."""

    def __init__(self, errors: list[Problem]) -> None:
        self.errors = errors
        super().__init__("\n".join(f"{p}: {r}" for p, r in errors))


@dataclass(frozen=True)
class CrdVersion:
    group: str
    version: str
    kind: str
    namespaced: bool
    schema: dict[str, Any]  # strict JSON schema derived from openAPIV3Schema
    cel: list[tuple[tuple[str | int, ...], str, str]]  # (schema path, rule, message)

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"


def _strict(node: Any) -> Any:
    """openAPIV3Schema -> JSON schema: unknown fields refused, `nullable` honoured."""
    if isinstance(node, list):
        return [_strict(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {k: _strict(v) for k, v in node.items() if k != "x-kubernetes-validations"}
    if isinstance(out.get("pattern"), str) and out["pattern"].startswith("^(?i)"):
        out["pattern"] = "(?i)^" + out["pattern"][5:]  # Go (RE2) takes flags anywhere, Python only first
    if out.pop("nullable", False) and "type" in out:
        out["type"] = [out["type"], "null"]
    preserve = out.get("x-kubernetes-preserve-unknown-fields")
    if out.get("type") == "object" and "properties" in out and "additionalProperties" not in out and not preserve:
        out["additionalProperties"] = False
    return out


def _cel_rules(node: Any, path: tuple[str | int, ...] = ()) -> Iterator[tuple[tuple[str | int, ...], str, str]]:
    """(path through the *object*, rule, message); `*` in a path means every list item / map value."""
    if not isinstance(node, dict):
        return
    for v in node.get("x-kubernetes-validations", []):
        yield path, v["rule"], v.get("message", v["rule"])
    for key, child in node.get("properties", {}).items():
        yield from _cel_rules(child, (*path, key))
    if isinstance(node.get("items"), dict):
        yield from _cel_rules(node["items"], (*path, "*"))
    if isinstance(node.get("additionalProperties"), dict):
        yield from _cel_rules(node["additionalProperties"], (*path, "*"))


Registry = dict[tuple[str, str], CrdVersion]


@cache
def _shipped_texts() -> tuple[str, ...]:
    """The YAML texts of the CRDs shipped in `fleet/schemas/crds/`, by file name."""
    folder = resources.files("fleet.schemas").joinpath("crds")
    return tuple(e.read_text() for e in sorted(folder.iterdir(), key=lambda e: e.name) if e.name.endswith(".yaml"))


@cache
def crds() -> Registry:
    """(apiVersion, kind) -> the served version of each shipped CRD."""
    return load_crds(_shipped_texts())


def load_crds(texts: Iterable[str]) -> Registry:
    """A registry from CRD YAML texts (e.g. the upstream files a test reads from ../shared/data/schemas)."""
    out: Registry = {}
    for text in texts:
        for doc in yaml.safe_load_all(text):
            if not doc or doc.get("kind") != "CustomResourceDefinition":
                continue
            spec = doc["spec"]
            for ver in spec["versions"]:
                if not ver.get("served"):
                    continue
                raw = ver["schema"]["openAPIV3Schema"]
                crd = CrdVersion(
                    group=spec["group"],
                    version=ver["name"],
                    kind=spec["names"]["kind"],
                    namespaced=spec["scope"] == "Namespaced",
                    schema=_strict(raw),
                    cel=list(_cel_rules(raw)),
                )
                out[(crd.api_version, crd.kind)] = crd
    return out


def crd_document(name: str) -> dict[str, Any]:
    """The shipped CustomResourceDefinition named `name` (`<plural>.<group>`), unchanged from its upstream (SOURCE.md),
    for a stack that installs it; KeyError when no shipped CRD has that name."""
    for text in _shipped_texts():
        for doc in yaml.safe_load_all(text):
            if doc and doc.get("kind") == "CustomResourceDefinition" and doc["metadata"]["name"] == name:
                return doc
    raise KeyError(f"no shipped CustomResourceDefinition {name!r} in fleet/schemas/crds/")


def known(api_version: str, kind: str, registry: Registry | None = None) -> bool:
    return (api_version, kind) in (registry if registry is not None else crds())


def _path(parts: Any) -> str:
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out


def _select(obj: Any, path: tuple[str | int, ...], at: tuple[str | int, ...] = ()) -> Iterator[tuple[Any, tuple]]:
    if not path:
        yield obj, at
        return
    head, rest = path[0], path[1:]
    if head == "*":
        items = enumerate(obj) if isinstance(obj, list) else (obj.items() if isinstance(obj, dict) else ())
        for key, child in items:
            yield from _select(child, rest, (*at, key))
    elif isinstance(obj, dict) and head in obj:
        yield from _select(obj[head], rest, (*at, head))


def _metadata(obj: dict[str, Any], crd: CrdVersion) -> Iterator[Problem]:
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        yield "metadata", "required (an object with a name)"
        return
    name = meta.get("name")
    if not isinstance(name, str) or len(name) > 253 or not DNS1123_SUBDOMAIN.fullmatch(name):
        yield "metadata.name", f"{name!r} is not a DNS-1123 subdomain (lower-case a-z, 0-9, '-', '.'; <= 253)"
    ns = meta.get("namespace")
    if crd.namespaced and ns is not None and not (isinstance(ns, str) and DNS1123_LABEL.fullmatch(ns)):
        yield "metadata.namespace", f"{ns!r} is not a DNS-1123 label"
    if not crd.namespaced and ns is not None:
        yield "metadata.namespace", f"{crd.kind} is cluster-scoped: no namespace"
    for field in ("labels", "annotations"):
        for key, value in (meta.get(field) or {}).items():
            prefix, _, base = key.rpartition("/")
            if not _LABEL_NAME.fullmatch(base) or (prefix and not DNS1123_SUBDOMAIN.fullmatch(prefix)):
                yield f"metadata.{field}.{key}", "not a valid key ([prefix/]name, name <= 63 chars)"
            elif not isinstance(value, str):
                yield f"metadata.{field}.{key}", f"values are strings, got {type(value).__name__}"
            elif field == "labels" and (len(value) > 63 or not _LABEL_VALUE.fullmatch(value)):
                yield f"metadata.{field}.{key}", f"{value!r} is not a valid label value"


def validate(obj: dict[str, Any], registry: Registry | None = None) -> list[Problem]:
    """Every reason the API server would refuse to create `obj` (paths relative to the object)."""
    if not isinstance(obj, dict):
        return [("", f"must be an object, got {type(obj).__name__}")]
    reg = registry if registry is not None else crds()
    api_version, kind = obj.get("apiVersion"), obj.get("kind")
    crd = reg.get((api_version, kind))  # type: ignore[arg-type]
    if crd is None:
        served = sorted(a for a, k in reg if k == kind)
        hint = f" (served: {', '.join(served)})" if served else " (not a shipped CRD)"
        return [("apiVersion", f"{api_version}/{kind} is not a served version{hint}")]
    problems = list(_metadata(obj, crd))
    validator = jsonschema.Draft202012Validator(crd.schema)
    for err in sorted(validator.iter_errors(obj), key=lambda e: list(map(str, e.absolute_path))):
        problems.append((_path(err.absolute_path) or "(object)", err.message))
    if problems:
        return problems  # CEL runs only on schema-valid objects, as in the API server
    for path, rule, message in crd.cel:
        if cel.is_transition(rule) or rule not in cel.RULES:
            continue
        for value, at in _select(obj, path):
            if not cel.RULES[rule](value):
                problems.append((_path(at) or "(object)", message))
    return problems


def check_objects(objects: list[dict[str, Any]]) -> None:
    """Raise SchemaError naming `Kind/name` and the field for every invalid object."""
    errors = []
    for obj in objects:
        where = f"{obj.get('kind')}/{(obj.get('metadata') or {}).get('name')}"
        errors += [(f"{where}: {path}", reason) for path, reason in validate(obj)]
    if errors:
        raise SchemaError(errors)


def all_cel_rules() -> list[str]:
    return sorted({rule for crd in crds().values() for _, rule, _ in crd.cel})


def schema_copy(api_version: str, kind: str) -> dict[str, Any]:
    """The strict JSON schema of one served version (a copy; e.g. for a fake API server)."""
    return copy.deepcopy(crds()[(api_version, kind)].schema)
