"""Kueue objects from the spec (stacks/kueue_objects.py), the CRD validator (fleet/schemas) and the KueueQueues
component that refuses to declare anything the API server would reject."""

from __future__ import annotations

import copy
import filecmp
from pathlib import Path

import pytest

from components.kueue.queues import KueueQueues, KueueQueuesArgs
from fleet.catalog import load_catalog
from fleet.provisioning_class import GPU_FLEET_CLASS
from fleet.schemas import SchemaError, all_cel_rules, cel, validate
from fleet.spec import load_spec
from stacks.kueue_objects import namespaces, queue_objects
from tests.spec.test_kube_rules import CAPI, GKE

REPO = Path(__file__).resolve().parents[2]
SHARED = REPO.parent / "shared" / "data" / "schemas"


def cluster(base, mutate=None):
    raw = copy.deepcopy(base)
    if mutate:
        mutate(raw["clusters"][0])
    return load_spec(raw).clusters[0]


def kinds(objs, kind):
    return [o for o in objs if o["kind"] == kind]


def test_shipped_crds_are_the_upstream_files():
    for ours in sorted((REPO / "fleet" / "schemas" / "crds").glob("*.yaml")):
        upstream = next(SHARED.glob(f"*/{ours.name}"))
        assert filecmp.cmp(ours, upstream, shallow=False), ours.name


def test_every_cel_rule_of_the_shipped_crds_is_implemented():
    rules = all_cel_rules()
    assert len([r for r in rules if not cel.is_transition(r)]) >= 10
    assert cel.unimplemented(rules) == []


def test_validator_refuses_what_the_api_server_refuses():
    flavor = {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ResourceFlavor", "metadata": {"name": "Bad_Name"},
              "spec": {"nodeLabel": {"a": "b"}}}  # fmt: skip
    problems = dict(validate(flavor))
    assert "metadata.name" in problems and "spec" in problems and "nodeLabel" in problems["spec"]
    flavor = {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ResourceFlavor",
              "metadata": {"name": "f", "namespace": "x"},
              "spec": {"tolerations": [{"operator": "Equal", "value": "v"}]}}  # fmt: skip
    problems = validate(flavor)
    assert ("metadata.namespace", "ResourceFlavor is cluster-scoped: no namespace") in problems
    flavor["metadata"].pop("namespace")
    problems = validate(flavor)  # schema-valid: the CEL rule on tolerations answers
    assert (
        problems
        == [
            (
                "spec.tolerations",
                "operator must be Exists when 'key' is empty, which means 'match all values and all keys'",
            )
        ]
        or problems
    )
    assert problems and problems[0][0] == "spec.tolerations"
    assert (
        validate({"apiVersion": "kueue.x-k8s.io/v9", "kind": "ClusterQueue", "metadata": {"name": "q"}})[0][0]
        == "apiVersion"
    )


def test_objects_of_both_example_shapes_validate():
    cat = load_catalog()
    for base in (GKE, CAPI):
        c = cluster(base)
        for obj in queue_objects(c, cat):
            assert validate(obj) == [], obj


def test_without_provisioning_fair_sharing_or_cohort():
    def plain(c):
        c["kueue"].update(provisioning=False, fair_sharing=False)
        for t in c["kueue"]["teams"]:
            for key in ("cohort", "borrowing_limit", "lending_limit"):
                t.pop(key, None)

    objs = queue_objects(cluster(GKE, plain), load_catalog())
    assert not kinds(objs, "AdmissionCheck") and not kinds(objs, "ProvisioningRequestConfig")
    assert not kinds(objs, "Cohort")
    for cq in kinds(objs, "ClusterQueue"):
        assert not {"admissionChecksStrategy", "fairSharing", "cohort"} & set(cq["spec"])
        for f in cq["spec"]["resourceGroups"][0]["flavors"]:
            assert all(set(r) == {"name", "nominalQuota"} for r in f["resources"])
        assert validate(cq) == []


def test_topology_only_where_gke_labels_it():
    def to_g2(c):
        g2 = {"machine_type": "g2-standard-48", "capacity": "spot", "max_nodes": 4}
        c["pools"] = [{"name": "resv", **g2}, {"name": "spot", **g2}]

    objs = queue_objects(cluster(GKE, to_g2), load_catalog())
    assert not kinds(objs, "Topology")
    assert all("topologyName" not in f["spec"] for f in kinds(objs, "ResourceFlavor"))
    capi = queue_objects(cluster(CAPI), load_catalog())
    assert not kinds(capi, "Topology")  # no GKE topology labels on an existing cluster's nodes


def test_provisioning_check_uses_the_atomic_scale_up_class():
    objs = queue_objects(cluster(CAPI), load_catalog())
    (prc,) = kinds(objs, "ProvisioningRequestConfig")
    (check,) = kinds(objs, "AdmissionCheck")
    assert prc["spec"]["provisioningClassName"] == GPU_FLEET_CLASS
    assert check["spec"]["controllerName"] == "kueue.x-k8s.io/provisioning-request"
    assert check["spec"]["parameters"]["name"] == prc["metadata"]["name"]


def test_queues_component_declares_namespaces_then_objects(declare):
    c = cluster(CAPI)
    objs = queue_objects(c, load_catalog())
    found = declare(lambda: KueueQueues("q", KueueQueuesArgs(namespaces(c), objs), install=None))
    kube = [r for r in found.resources if r.type.startswith("kubernetes:")]
    assert len(kube) == len(objs) + 1
    (ns,) = found.of_type("core/v1:Namespace")
    assert ns.inputs["metadata"]["name"] == "ml"
    (lq,) = found.of_type("kueue.x-k8s.io/v1beta1:LocalQueue")
    assert lq.inputs["metadata"]["namespace"] == "ml" and lq.parent == found.one("gpufleet:kueue:Queues").urn


def test_queues_component_refuses_an_invalid_object_before_declaring_anything(declare):
    c = cluster(CAPI)
    objs = queue_objects(c, load_catalog())
    broken = copy.deepcopy(objs)
    next(o for o in broken if o["kind"] == "ClusterQueue")["spec"]["queueingStrategy"] = "LIFO"
    caught: list[SchemaError] = []

    def program():
        try:
            KueueQueues("q", KueueQueuesArgs(namespaces(c), broken), install=None)
        except SchemaError as exc:
            caught.append(exc)

    found = declare(program)
    assert caught and "ClusterQueue/neo-ml: spec.queueingStrategy" in str(caught[0])
    assert not [r for r in found.resources if r.type.startswith("kubernetes:")]


@pytest.mark.parametrize("share,gpus", [(1.0, 32), (0.5, 16), (0.26, 8)])
def test_nominal_gpus_are_the_share_of_max_nodes_rounded_down(share, gpus):
    c = cluster(CAPI, lambda c: c["kueue"]["teams"][0].update(quotas={"h100": share}))
    (cq,) = kinds(queue_objects(c, load_catalog()), "ClusterQueue")
    res = {r["name"]: r["nominalQuota"] for r in cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"]}
    assert res["nvidia.com/gpu"] == str(gpus)  # 4 nodes x 8 GPUs x share
