"""The CrossGuard policies: each one wraps a rule of fleet/policy/rules.py (the only place rule logic lives).

`build_policies()` returns the `pulumi_policy` policy objects; `__main__.py` hands them to `PolicyPack`, which
serves them to the Pulumi engine.  Tests drive the same objects through pulumi_policy's own analyzer (the code
the engine talks to), so what they check is what `pulumi preview --policy-pack policies` runs.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # the pack runs from policies/ in its own virtualenv: find fleet.policy.rules
    sys.path.insert(0, str(REPO))

from pulumi_policy import (  # noqa: E402
    EnforcementLevel,
    ReportViolation,
    ResourceValidationArgs,
    ResourceValidationPolicy,
    StackValidationArgs,
    StackValidationPolicy,
)

from fleet.policy.rules import (  # noqa: E402
    DEFAULT_SETTINGS,
    MANDATORY,
    RESOURCE_POLICIES,
    STACK_POLICIES,
    Resource,
    Rule,
    Settings,
    check_resource,
    stack_of,
)

PACK_NAME = "gpu-fleet-guardrails"


def _plain(value: Any) -> Any:
    """CrossGuard hands over proxies of the properties: plain dicts and lists for the rules."""
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, Sequence) and not isinstance(value, str | bytes):  # pulumi_policy's _ListProxy
        return [_plain(v) for v in value]
    return value


def _level(rule: Rule) -> EnforcementLevel:
    return EnforcementLevel.MANDATORY if rule.level == MANDATORY else EnforcementLevel.ADVISORY


def _resource_policy(rule: Rule, settings: Settings) -> ResourceValidationPolicy:
    def validate(args: ResourceValidationArgs, report_violation: ReportViolation) -> None:
        r = Resource(args.urn, args.resource_type, args.name, _plain(args.props))
        for v in check_resource(rule, r, settings):
            report_violation(v.message, None)

    return ResourceValidationPolicy(
        name=rule.name, description=rule.description, enforcement_level=_level(rule), validate=validate
    )


def _stack_policy(rule: Rule, settings: Settings) -> StackValidationPolicy:
    def validate(args: StackValidationArgs, report_violation: ReportViolation) -> None:
        resources = [Resource(r.urn, r.resource_type, r.name, _plain(r.props)) for r in args.resources]
        stack = next((stack_of(r.urn) for r in resources if r.urn), "")
        for message in rule.check(resources, settings, stack):
            report_violation(message, None)

    return StackValidationPolicy(
        name=rule.name, description=rule.description, enforcement_level=_level(rule), validate=validate
    )


def build_policies(settings: Settings = DEFAULT_SETTINGS) -> list[ResourceValidationPolicy | StackValidationPolicy]:
    return [_resource_policy(r, settings) for r in RESOURCE_POLICIES] + [
        _stack_policy(r, settings) for r in STACK_POLICIES
    ]
