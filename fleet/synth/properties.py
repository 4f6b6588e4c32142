"""Input properties a provider does not know, found in a synthesized stack before `pulumi up` finds them.

Pulumi's mocks accept any input: a misspelt nested key (`gpuDirectStrategy` for `gpudirectStrategy`) synthesizes
cleanly and only the provider's check at `pulumi up` sees it, or it is dropped without a word.  The provider SDKs
installed here describe every input: each resource's `<Resource>Args` and each nested object's `...Args` class is a
Pulumi input type whose property names and types the SDK exposes (`pulumi._types.input_type_py_to_pulumi_names`,
`input_type_types`).  `unknown_properties` walks a recorded resource's inputs (camelCase, as the engine receives
them) down through those classes and names every key that is not a property at its place.  Maps (labels,
metadata) are not walked.

Kubernetes objects of the built-in kinds (Deployment, DaemonSet, ConfigMap, RBAC, ...) are walked the same way
through the Kubernetes client's models (`kubernetes.client.models.V1DaemonSet`: `attribute_map` and
`openapi_types`), which the API server's strict field validation would apply.  Custom resources are
`fleet.schemas`' (validated against the real CRDs before they are declared); a kind neither knows is skipped."""

from __future__ import annotations

import importlib
import typing
from collections.abc import Iterable
from functools import cache
from typing import Any

from pulumi import _types as pulumi_types

#: type token package -> the Python package of its SDK, and how a token's module maps to an SDK module
_PACKAGES = {"gcp": "pulumi_gcp", "random": "pulumi_random"}
_KUBERNETES_MODULES = {"helm.sh/v3": "pulumi_kubernetes.helm.v3"}


@cache
def args_class(type_token: str) -> type | None:
    """The `<Resource>Args` input type of a resource type token (`gcp:container/nodePool:NodePool`), or None when
    its SDK is not one this check reads."""
    try:
        pkg, mod, name = type_token.split(":")
    except ValueError:
        return None
    if pkg in _PACKAGES:
        module = f"{_PACKAGES[pkg]}.{mod.split('/')[0]}" if mod != "index" else _PACKAGES[pkg]
    elif pkg == "kubernetes" and mod in _KUBERNETES_MODULES:
        module = _KUBERNETES_MODULES[mod]
    else:
        return None
    try:
        return getattr(importlib.import_module(module), f"{name}Args", None)
    except ImportError:
        return None


def _input_types(hint: Any) -> tuple[list[type], bool]:
    """The input-type classes a type hint reaches (through Optional, Input, Union, Sequence), and whether it is a
    map (whose keys are the user's, not properties)."""
    origin = typing.get_origin(hint)
    if origin is None:
        return ([hint] if isinstance(hint, type) and pulumi_types.is_input_type(hint) else []), False
    found: list[type] = []
    is_map = getattr(origin, "__name__", "") in ("Mapping", "dict")
    for arg in typing.get_args(hint):
        classes, arg_map = _input_types(arg)
        found += classes
        is_map = is_map or arg_map
    return found, is_map


def _walk(value: dict[str, Any], cls: type, path: str, out: list[str]) -> None:
    known = set(pulumi_types.input_type_py_to_pulumi_names(cls).values())
    hints = pulumi_types.input_type_types(cls)
    for key, item in value.items():
        if key not in known:
            out.append(f"{path}.{key}: not a property of {cls.__name__}")
            continue
        classes, is_map = _input_types(hints.get(key))
        if not classes or is_map:
            continue
        for i, element in enumerate(item if isinstance(item, list) else [item]):
            if isinstance(element, dict):
                _walk(element, classes[0], f"{path}.{key}" + (f"[{i}]" if isinstance(item, list) else ""), out)


@cache
def kube_model(type_token: str) -> type | None:
    """The Kubernetes client's model of a built-in kind's type token (`kubernetes:apps/v1:DaemonSet` ->
    `V1DaemonSet`), or None (a custom resource, a Helm release)."""
    from kubernetes.client import models

    parts = type_token.split(":")
    if len(parts) != 3 or parts[0] != "kubernetes":
        return None
    version = parts[1].rpartition("/")[2]
    cls = getattr(models, f"{version[:1].upper()}{version[1:]}{parts[2]}", None)
    return cls if cls is not None and "kind" in getattr(cls, "attribute_map", {}) else None


_LIST = "List["
_PRIMITIVES = {"str", "int", "float", "bool", "object", "datetime", "date", "bytearray"}


def _walk_model(value: dict[str, Any], cls: type, path: str, out: list[str]) -> None:
    from kubernetes.client import models

    json_to_py = {v: k for k, v in cls.attribute_map.items()}  # type: ignore[attr-defined]
    for key, item in value.items():
        if key not in json_to_py:
            out.append(f"{path}.{key}: not a field of {cls.__name__}")
            continue
        kind = cls.openapi_types[json_to_py[key]]  # type: ignore[attr-defined]
        is_list = kind.startswith(_LIST)
        kind = kind[len(_LIST) : -1] if is_list else kind
        if kind.startswith("Dict[") or kind in _PRIMITIVES:
            continue
        sub = getattr(models, kind, None)
        if sub is None:
            continue
        for i, element in enumerate(item if is_list and isinstance(item, list) else [item]):
            if isinstance(element, dict):
                _walk_model(element, sub, f"{path}.{key}" + (f"[{i}]" if is_list else ""), out)


def unknown_properties(resources: Iterable[Any]) -> list[str]:
    """`<type>::<resource name>.<path>: not a property of <Args class>` (or `not a field of <model>`) for every
    input key nothing at its place matches, over recorded resources (`fleet.synth.engine.RecordedResource`)."""
    out: list[str] = []
    for r in resources:
        if not r.custom:
            continue
        cls = args_class(r.type)
        if cls is not None:
            _walk(r.inputs, cls, f"{r.type}::{r.name}", out)
        elif (model := kube_model(r.type)) is not None:
            _walk_model(r.inputs, model, f"{r.type}::{r.name}", out)
    return out
