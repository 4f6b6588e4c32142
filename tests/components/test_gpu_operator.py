"""NVIDIA's GPU Operator release (components/kubernetes/gpu_operator.py): the chart values it sets, each a key of the
chart's values.yaml at the pinned release, and the namespace the operands may run in."""

from __future__ import annotations

from typing import Any

from components.kubernetes.gpu_operator import (
    CHART,
    NAMESPACE,
    REPOSITORY,
    GpuOperator,
    GpuOperatorArgs,
    chart_values,
)

GPU = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
SPOT = {"key": "gpu-fleet/spot", "operator": "Exists", "effect": "NoSchedule"}
# Keys of NVIDIA/gpu-operator deployments/gpu-operator/values.yaml at v26.7.0 (module docstring); a key added to
# chart_values must be checked against that file and listed here.
CHART_KEYS = {
    "driver.enabled",
    "toolkit.enabled",
    "nfd.enabled",
    "daemonsets.tolerations",
    "node-feature-discovery.worker.tolerations",
}


def leaf_keys(values: dict[str, Any], prefix: str = "") -> set[str]:
    out: set[str] = set()
    for key, value in values.items():
        path = f"{prefix}{key}"
        out |= leaf_keys(value, f"{path}.") if isinstance(value, dict) else {path}
    return out


def test_values_set_only_keys_of_the_chart():
    assert leaf_keys(chart_values(GpuOperatorArgs("v26.7.0", [GPU, SPOT]))) == CHART_KEYS


def test_with_the_cluster_s_own_node_feature_discovery_the_chart_s_stays_off():
    values = chart_values(GpuOperatorArgs("v26.7.0", [GPU, SPOT], nfd=False))
    assert values["nfd"] == {"enabled": False} and "node-feature-discovery" not in values
    assert values["daemonsets"]["tolerations"] == [GPU, SPOT]


def test_release_is_the_official_chart_in_a_privileged_namespace(declare):
    found = declare(lambda: GpuOperator("op", GpuOperatorArgs("v26.7.0", [GPU], toolkit=False)))
    release = found.one("helm.sh/v3:Release")
    assert (release.inputs["chart"], release.inputs["repositoryOpts"]["repo"]) == (CHART, REPOSITORY)
    assert release.inputs["namespace"] == NAMESPACE and release.inputs["values"]["toolkit"] == {"enabled": False}
    assert release.inputs["disableOpenapiValidation"] is True  # upgrades through the chart's CRD hook
    ns = found.one("core/v1:Namespace")
    assert ns.inputs["metadata"]["name"] == NAMESPACE and ns.urn in release.dependencies
    assert {
        ns.inputs["metadata"]["labels"][f"pod-security.kubernetes.io/{m}"] for m in ("enforce", "audit", "warn")
    } == {"privileged"}
