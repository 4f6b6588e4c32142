"""The stack program: read the one config value, dispatch on the stack kind, declare, export.

All config reading happens here.  A fleet spec is validated (`load_spec`, SpecError with field
paths) before the first resource is declared.
"""

from __future__ import annotations

import pulumi

from fleet.spec.load import load_spec, spec_kind

CONFIG_NAMESPACE = "gpu-fleet"
CONFIG_KEY = "fleet"


def main() -> None:
    raw = pulumi.Config(CONFIG_NAMESPACE).require_object(CONFIG_KEY)
    if spec_kind(raw) == "project-bootstrap":
        from stacks.project_bootstrap import build

        build(raw)
        return
    spec = load_spec(raw)
    from stacks.fleet import build_fleet  # imports pulumi_gcp (slow): only once the spec is valid

    for key, value in build_fleet(spec, pulumi.get_stack()).items():
        pulumi.export(key, value)
