"""Every input of every shipped stack is a property its provider knows (pulumi-gcp, pulumi-kubernetes' Helm
Release, pulumi-random: the installed SDKs' own input types; built-in Kubernetes kinds: the Kubernetes client's
models), and a misspelt nested key is named with its path: what the mocks accept and `pulumi up` would not."""

from __future__ import annotations

import copy

import pytest

from fleet.synth.engine import RecordedResource
from fleet.synth.properties import args_class, unknown_properties
from fleet.synth.run import synth_file
from tests.stacks.conftest import REPO

STACKS = sorted(p.name for p in REPO.glob("Pulumi.*.yaml"))


@pytest.mark.parametrize("stack", STACKS)
def test_every_input_of_a_shipped_stack_is_a_provider_property(stack: str) -> None:
    syn = synth_file(REPO / stack)
    checked = [r for r in syn.result.resources if r.custom and args_class(r.type) is not None]
    assert checked, "nothing checked: the SDK lookup is broken"
    assert unknown_properties(syn.result.resources) == []


def test_a_misspelt_nested_input_is_named_with_its_path() -> None:
    syn = synth_file(REPO / "Pulumi.gke-a3ultra-kueue.yaml")
    (pool,) = [r for r in syn.result.by_type("gcp:container/nodePool:NodePool") if r.inputs.get("name") == "resv"]
    bad = copy.deepcopy(pool.inputs)
    bad["nodeConfig"]["gpuDirectStrategy"] = bad["nodeConfig"].pop("gpudirectStrategy")  # a capital D
    bad["nodeConfig"]["guestAccelerators"][0]["gpuDriverInstallConfig"] = bad["nodeConfig"]["guestAccelerators"][0].pop(
        "gpuDriverInstallationConfig"
    )
    bad["nodeConfig"]["labels"] = {"anyKey": "fine"}  # a map: its keys are the user's
    found = unknown_properties([RecordedResource(pool.urn, pool.type, pool.name, None, bad, True)])
    where = "gcp:container/nodePool:NodePool::a3u-resv.nodeConfig"
    assert sorted(found) == [
        f"{where}.gpuDirectStrategy: not a property of NodePoolNodeConfigArgs",
        f"{where}.guestAccelerators[0].gpuDriverInstallConfig: not a property of "
        "NodePoolNodeConfigGuestAcceleratorArgs",
    ]


def test_a_resource_of_a_package_not_installed_here_is_skipped_not_flagged() -> None:
    odd = RecordedResource("urn:x", "kubernetes:kueue.x-k8s.io/v1beta1:ClusterQueue", "cq", None, {"spec": {}}, True)
    assert args_class(odd.type) is None and unknown_properties([odd]) == []


def test_a_misspelt_field_of_a_built_in_kubernetes_kind_is_named_with_its_path() -> None:
    """The Deployment, DaemonSet, RBAC and other built-in objects are walked through the Kubernetes client's
    models, as the API server's strict field validation would."""
    syn = synth_file(REPO / "Pulumi.gke-a3ultra-kueue.yaml")
    (ds,) = syn.result.by_type("kubernetes:apps/v1:DaemonSet")
    bad = copy.deepcopy(ds.inputs)
    pod = bad["spec"]["template"]["spec"]
    pod["initContainer"] = pod.pop("initContainers")  # singular
    pod["containers"][0]["resources"]["request"] = pod["containers"][0]["resources"].pop("requests")
    pod["nodeSelector"] = {"any/label": "fine"}  # a map
    found = unknown_properties([RecordedResource(ds.urn, ds.type, ds.name, None, bad, True)])
    where = f"kubernetes:apps/v1:DaemonSet::{ds.name}.spec.template.spec"
    assert sorted(found) == [
        f"{where}.containers[0].resources.request: not a field of V1ResourceRequirements",
        f"{where}.initContainer: not a field of V1PodSpec",
    ]
