"""Which pools a pod may land on, from its nodeSelector and required node affinity against each pool's node labels
(`autoscaler.kube.source.pools_for`): the planner grows only those (`WorkUnit.pools`)."""

from __future__ import annotations

from typing import Any

import pytest

from autoscaler.kube.source import pools_for

LABELS = {
    "h100": {"gpu-fleet/pool": "h100", "cloud.google.com/gke-accelerator": "nvidia-h100-80gb", "gpu-fleet/gen": "3"},
    "h200": {"gpu-fleet/pool": "h200", "cloud.google.com/gke-accelerator": "nvidia-h200-141gb", "gpu-fleet/gen": "4"},
    "l4": {"gpu-fleet/pool": "l4", "cloud.google.com/gke-accelerator": "nvidia-l4"},
}


def _affinity(*terms: list[dict[str, Any]]) -> dict[str, Any]:
    return {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": t} for t in terms]}}}}  # fmt: skip


def _e(key: str, op: str, *values: str) -> dict[str, Any]:
    return {"key": key, "operator": op, **({"values": list(values)} if values else {})}


ACC = "cloud.google.com/gke-accelerator"


@pytest.mark.parametrize(
    ("spec", "pools"),
    [
        ({}, None),
        ({"nodeSelector": {"gpu-fleet/pool": "h200"}}, {"h200"}),
        ({"nodeSelector": {"gpu-fleet/pool": "a100"}}, set()),
        (_affinity([_e(ACC, "In", "nvidia-h100-80gb", "nvidia-h200-141gb")]), {"h100", "h200"}),
        (_affinity([_e(ACC, "NotIn", "nvidia-l4")]), {"h100", "h200"}),
        (_affinity([_e("gpu-fleet/gen", "Exists")]), {"h100", "h200"}),
        (_affinity([_e("gpu-fleet/gen", "DoesNotExist")]), {"l4"}),
        (_affinity([_e("gpu-fleet/gen", "Gt", "3")]), {"h200"}),
        (_affinity([_e(ACC, "In", "nvidia-l4")], [_e("gpu-fleet/gen", "Lt", "4")]), {"l4", "h100"}),  # terms: OR
        (_affinity([_e(ACC, "NotIn", "nvidia-l4"), _e("gpu-fleet/gen", "In", "3")]), {"h100"}),  # in one: AND
        ({"nodeSelector": {"gpu-fleet/pool": "h100"}, **_affinity([_e("gpu-fleet/gen", "In", "4")])}, set()),
        (_affinity([]), set()),  # an empty term matches no node
    ],
)
def test_a_pods_selector_and_required_affinity_pick_the_pools(spec: dict[str, Any], pools: set[str] | None) -> None:
    got = pools_for(spec, LABELS)
    assert (None if got is None else set(got)) == pools


def test_an_affinity_on_node_fields_restricts_nothing_it_can_tell() -> None:
    spec = {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]}}}}  # fmt: skip
    assert pools_for(spec, LABELS) is None


def test_a_nodes_work_pools_are_what_every_selecting_pod_on_it_allows() -> None:
    """What the cordon of an oversized node reads (`Node.work_pools`): a pod selecting h100 or h200 and one
    selecting gen 3 leave only h100; a pod selecting nothing restricts nothing."""
    from autoscaler.kube.source import node_facts

    node = {"metadata": {"name": "n1", "labels": LABELS["h100"]}, "status": {"allocatable": {}}}

    def pod(name: str, spec: dict[str, Any]) -> dict[str, Any]:
        return {"metadata": {"name": name, "namespace": "a"}, "spec": {"nodeName": "n1", **spec}, "status": {}}

    both = pod("p1", _affinity([_e(ACC, "In", "nvidia-h100-80gb", "nvidia-h200-141gb")]))
    gen3 = pod("p2", {"nodeSelector": {"gpu-fleet/gen": "3"}})
    assert node_facts([node], [both, gen3, pod("p3", {})], LABELS)["n1"].work_pools == {"h100"}
    assert node_facts([node], [pod("p3", {})], LABELS)["n1"].work_pools is None
