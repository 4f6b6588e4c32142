"""The stack program: read the one config value, dispatch on the stack kind, declare, export.

All config reading happens here.  A fleet spec is validated (`load_spec`, SpecError with field
paths) before the first resource is declared.
"""

from __future__ import annotations

import pulumi
from pulumi.runtime.config import is_config_secret

from fleet.spec.load import SpecError, load_spec, spec_kind
from fleet.spec.model import FleetSpec

CONFIG_NAMESPACE = "gpu-fleet"
CONFIG_KEY = "fleet"


def main() -> None:
    raw = pulumi.Config(CONFIG_NAMESPACE).require_object(CONFIG_KEY)
    if spec_kind(raw) == "project-bootstrap":
        from stacks.project_bootstrap import build

        build(raw)
        return
    spec = load_spec(raw)
    kubeconfigs = read_kubeconfigs(spec)
    from stacks.fleet import build_fleet  # imports pulumi_gcp (slow): only once the spec is valid

    for key, value in build_fleet(spec, pulumi.get_stack(), kubeconfigs=kubeconfigs).items():
        pulumi.export(key, value)


def read_kubeconfigs(spec: FleetSpec) -> dict[str, pulumi.Output[str]]:
    """The kubeconfig of each `platform: kubernetes` cluster: a secret stack config value (never plain text)."""
    config = pulumi.Config(CONFIG_NAMESPACE)
    out: dict[str, pulumi.Output[str]] = {}
    errors = []
    for cluster in spec.clusters:
        if cluster.platform != "kubernetes" or cluster.kubernetes is None:
            continue
        key = cluster.kubernetes.kubeconfig
        full = f"{CONFIG_NAMESPACE}:{key}"
        hint = f"pulumi config set --secret {full} < ~/.kube/<cluster>.yaml"
        if config.get(key) is None:
            errors.append((full, f"missing: the kubeconfig of cluster {cluster.name!r} ({hint})"))
        elif not is_config_secret(full):
            errors.append((full, f"must be a Pulumi secret, not plain text in the stack file ({hint})"))
        else:
            out[cluster.name] = config.require_secret(key)
    if errors:
        raise SpecError(errors)
    return out
