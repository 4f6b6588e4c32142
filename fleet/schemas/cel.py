"""The CEL rules (`x-kubernetes-validations`) of the shipped CRDs, re-implemented in Python.

The API server evaluates these after the OpenAPI schema; a CEL interpreter is not a dependency we
want, and the shipped CRDs carry few rules, so each is written out here keyed by its exact text.
Transition rules (they read `oldSelf`) only apply to updates and are skipped: the stacks create.
`unimplemented(crd_rules)` lists any rule of a CRD without a Python version (a test keeps it empty,
so a CRD update that adds a rule fails loudly instead of being silently ignored).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

Check = Callable[[Any], bool]

_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
_HOST = "kubernetes.io/hostname"


def _no_borrowing_without(cohort_field: str) -> Check:
    def check(spec: dict[str, Any]) -> bool:
        if cohort_field in spec or "resourceGroups" not in spec:
            return True
        return all(
            "borrowingLimit" not in r
            for rg in spec["resourceGroups"]
            for f in rg.get("flavors", [])
            for r in f["resources"]
        )

    return check


RULES: dict[str, Check] = {
    "!(self.reclaimWithinCohort == 'Never' && has(self.borrowWithinCohort) &&  self.borrowWithinCohort.policy != 'Never')": (  # noqa: E501 (the rule text, verbatim)
        lambda s: (
            not (
                s.get("reclaimWithinCohort") == "Never"
                and "borrowWithinCohort" in s
                and s["borrowWithinCohort"].get("policy") != "Never"
            )
        )
    ),
    "!has(self.cohort) && has(self.resourceGroups) ? self.resourceGroups.all(rg, rg.flavors.all(f, f.resources.all(r, !has(r.borrowingLimit)))) : true": (  # noqa: E501 (the rule text, verbatim)
        _no_borrowing_without("cohort")
    ),
    "!has(self.cohortName) && has(self.resourceGroups) ? self.resourceGroups.all(rg, rg.flavors.all(f, f.resources.all(r, !has(r.borrowingLimit)))) : true": (  # noqa: E501 (the rule text, verbatim)
        _no_borrowing_without("cohortName")
    ),
    "!has(self.preference) || (self.whenCanBorrow == 'TryNextFlavor' && self.whenCanPreempt == 'TryNextFlavor')": (
        lambda s: (
            "preference" not in s
            or (s.get("whenCanBorrow") == "TryNextFlavor" and s.get("whenCanPreempt") == "TryNextFlavor")
        )
    ),
    "self.flavors.all(x, size(x.resources) == size(self.coveredResources))": (
        lambda rg: all(
            len(f.get("resources", [])) == len(rg.get("coveredResources", [])) for f in rg.get("flavors", [])
        )
    ),
    "!has(self.topologyName) || self.nodeLabels.size() >= 1": (
        lambda s: "topologyName" not in s or len(s.get("nodeLabels") or {}) >= 1
    ),
    "self.all(x, !has(x.effect) || x.effect in ['NoSchedule', 'PreferNoSchedule', 'NoExecute'])": (
        lambda xs: all("effect" not in x or x["effect"] in _EFFECTS for x in xs)
    ),
    "self.all(x, !has(x.key) ? x.operator == 'Exists' : true)": (
        lambda xs: all("key" in x or x.get("operator") == "Exists" for x in xs)
    ),
    "self.all(x, !has(x.operator) || x.operator in ['Equal', 'Exists'])": (
        lambda xs: all("operator" not in x or x["operator"] in ("Equal", "Exists") for x in xs)
    ),
    "self.all(x, has(x.operator) && x.operator == 'Exists' ? !has(x.value) : true)": (
        lambda xs: all(not (x.get("operator") == "Exists" and "value" in x) for x in xs)
    ),
    "self.all(x, has(x.tolerationSeconds) ? x.effect == 'NoExecute' : true)": (
        lambda xs: all("tolerationSeconds" not in x or x.get("effect") == "NoExecute" for x in xs)
    ),
    "self.all(x, x.effect in ['NoSchedule', 'PreferNoSchedule', 'NoExecute'])": (
        lambda xs: all(x.get("effect") in _EFFECTS for x in xs)
    ),
    "size(self.filter(i, i.nodeLabel == 'kubernetes.io/hostname')) == 0 || self[size(self) - 1].nodeLabel == 'kubernetes.io/hostname'": (  # noqa: E501 (the rule text, verbatim)
        lambda levels: not any(lv.get("nodeLabel") == _HOST for lv in levels) or levels[-1].get("nodeLabel") == _HOST
    ),
    "size(self.filter(i, size(self.filter(j, j == i)) > 1)) == 0": (
        lambda xs: all(sum(1 for y in xs if y == x) == 1 for x in xs)
    ),
}


def is_transition(rule: str) -> bool:
    """A rule comparing with the stored object: meaningful only on update."""
    return "oldSelf" in rule


def unimplemented(rules: Iterable[str]) -> list[str]:
    return sorted({r for r in rules if not is_transition(r) and r not in RULES})
