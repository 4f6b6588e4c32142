"""Cluster API MachineDeployments (stacks/cluster_api.py), the autoscaler Deployment manifests
(components/kubernetes/autoscaler.py) and KubeObject, which declares any manifest unchanged."""

from __future__ import annotations

import copy

from autoscaler.kube.capi import CA_NODE_GROUP_SIZE
from components.kubernetes.autoscaler import AutoscalerDeployment, capi_rbac_rules, manifests, rbac_rules
from components.kubernetes.objects import KubeObject, type_token
from fleet.schemas import validate
from fleet.spec import load_spec
from stacks.cluster_api import DELETE_MACHINE, machine_deployment
from tests.spec.test_kube_rules import CAPI


def neo(mutate=None):
    raw = copy.deepcopy(CAPI)
    if mutate:
        mutate(raw["clusters"][0])
    return load_spec(raw).clusters[0]


def test_machine_deployment_is_valid_and_not_opted_into_the_cluster_autoscaler():
    c = neo(lambda c: c["pools"][0].update(min_nodes=1, labels={"node.cluster.x-k8s.io/team": "ml"}))
    md = machine_deployment(c, c.pools[0])
    assert validate(md) == []
    assert not set(md["metadata"].get("annotations") or {}) & set(CA_NODE_GROUP_SIZE)
    assert md["spec"]["replicas"] == 1
    labels = md["spec"]["template"]["metadata"]["labels"]
    assert labels["node.cluster.x-k8s.io/gpu-fleet-pool"] == "h100" and labels["node.cluster.x-k8s.io/team"] == "ml"
    assert md["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert DELETE_MACHINE == "cluster.x-k8s.io/delete-machine"


def test_a_template_change_replaces_machines_without_asking_for_an_extra_one():
    """Cluster API's default rollout (maxSurge 1, maxUnavailable 0) needs one GPU machine more than the pool has,
    which bare metal with every host in use cannot give: the rollout stalls.  One old machine goes first instead, as
    the GKE pools upgrade (surge 0, unavailable 1); the field path is the served v1beta2 schema's."""
    c = neo(lambda c: c["pools"][0].update(min_nodes=2))
    md = machine_deployment(c, c.pools[0])
    assert md["spec"]["rollout"]["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1},
    }
    assert validate(md) == []


def test_pool_bootstrap_template_overrides_the_clusters():
    ref = {"api_group": "bootstrap.cluster.x-k8s.io", "kind": "KubeadmConfigTemplate", "name": "gpu-special"}
    c = neo(lambda c: c["pools"][0]["cluster_api"].update(bootstrap_template=ref, failure_domain="dc-2"))
    spec = machine_deployment(c, c.pools[0])["spec"]["template"]["spec"]
    assert spec["bootstrap"]["configRef"]["name"] == "gpu-special" and spec["failureDomain"] == "dc-2"


def test_spot_pool_nodes_are_tainted():
    c = neo(lambda c: c["pools"][0].update(capacity="spot"))
    taints = machine_deployment(c, c.pools[0])["spec"]["template"]["spec"]["taints"]
    assert {"key": "gpu-fleet/spot", "value": "true", "effect": "NoSchedule", "propagation": "Always"} in taints


def _deployment(**kw) -> AutoscalerDeployment:
    base = dict(cluster="c", namespace="gpu-fleet-system", image="r/a@sha256:" + "1" * 64, replicas=2,
                metrics_port=9464, config="x: 1\n", inventory="[]")  # fmt: skip
    base.update(kw)
    return AutoscalerDeployment(**base)


def test_cluster_api_access_is_a_role_in_the_pools_namespace_only():
    """The daemon scales MachineDeployments and marks Machines in its cluster's Cluster API namespace alone: a Role
    there, bound to its ServiceAccount; the ClusterRole grants nothing of Cluster API (until the thirty-fifth round
    it granted patch on every namespace's MachineDeployments and Machines)."""
    assert not {g for rule in rbac_rules() for g in rule["apiGroups"]} & {"cluster.x-k8s.io"}
    assert "secrets" not in str(rbac_rules()) and "configmaps" not in str(rbac_rules())
    objs = manifests(_deployment(cluster_api_namespace="capi-neo"))
    (role,) = [o for o in objs if o["kind"] == "Role" and o["rules"] == capi_rbac_rules()]
    assert role["metadata"]["namespace"] == "capi-neo"
    (binding,) = [o for o in objs if o["kind"] == "RoleBinding" and o["roleRef"]["name"] == role["metadata"]["name"]]
    assert binding["metadata"]["namespace"] == "capi-neo"
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "gpu-fleet-autoscaler", "namespace": "gpu-fleet-system"}
    ]
    assert not [o for o in manifests(_deployment()) if o["kind"] == "Role" and o["rules"] == capi_rbac_rules()]


def test_autoscaler_rbac_grants_exactly_the_calls_the_daemon_makes():
    """Least privilege, pinned: each (group, resource) and its verbs, for the calls `KubeApi` makes.  The e2e tests
    (against a fake API server enforcing these rules) fail on a grant missing here; this fails on one added."""
    rules = [*rbac_rules(), *capi_rbac_rules()]
    grants = {(g, r): sorted(rule["verbs"]) for rule in rules for g in rule["apiGroups"] for r in rule["resources"]}
    assert grants == {
        ("", "nodes"): ["list", "patch", "watch"],  # the watch and its list; cordon / uncordon
        ("", "pods"): ["list", "watch"],  # the watch; a node's pods before it is deleted (fieldSelector)
        ("", "podtemplates"): ["get"],  # the templates requests name
        ("", "pods/eviction"): ["create"],  # DaemonSet pods of an empty node
        ("apps", "daemonsets"): ["list", "watch"],  # what they take of a pool's first node
        ("autoscaling.x-k8s.io", "provisioningrequests"): ["list", "patch", "watch"],  # the booking annotation
        ("autoscaling.x-k8s.io", "provisioningrequests/status"): ["patch"],  # Accepted / Provisioned / Failed
        ("cluster.x-k8s.io", "machinedeployments"): ["get", "patch"],  # replicas and the launch records
        ("cluster.x-k8s.io", "machines"): ["list", "patch", "watch"],  # the watch; the delete-machine mark
    }


def test_autoscaler_rbac_lets_the_daemon_list_and_watch_every_resource_it_watches():
    """The daemon's watches (`autoscaler.kube.wake.WATCHED`) need list and watch; without them they fail and the
    daemon acts on its poll alone."""
    from autoscaler.kube.api import CAPI_GROUP, PR_GROUP
    from autoscaler.kube.wake import WATCHED, WATCHED_CAPI

    group = {"provisioningrequests": PR_GROUP, "nodes": "", "pods": "", "machines": CAPI_GROUP, "daemonsets": "apps"}
    for cluster_api in (False, True):
        rules = [*rbac_rules(), *(capi_rbac_rules() if cluster_api else [])]
        for resource in WATCHED_CAPI if cluster_api else WATCHED:
            verbs = {
                v
                for rule in rules
                if resource in rule["resources"] and group[resource] in rule["apiGroups"]
                for v in rule["verbs"]
            }
            assert {"list", "watch"} <= verbs, resource


def test_autoscaler_manifests_workload_identity_and_node_selector():
    objs = {m["kind"]: m for m in manifests(_deployment(gcp_service_account="a@p.iam.gserviceaccount.com",
                                                         node_selector={"gpu-fleet/role": "system"}))}  # fmt: skip
    assert objs["ServiceAccount"]["metadata"]["annotations"] == {
        "iam.gke.io/gcp-service-account": "a@p.iam.gserviceaccount.com"
    }
    pod = objs["Deployment"]["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"gpu-fleet/role": "system"} and pod["serviceAccountName"] == "gpu-fleet-autoscaler"
    assert objs["PodDisruptionBudget"]["spec"]["minAvailable"] == 1
    # replicas spread over nodes where there are several, and all run on a one-node system pool (GKE's default in
    # one zone: a required anti-affinity left the second Pending for good)
    anti = pod["affinity"]["podAntiAffinity"]
    assert "requiredDuringSchedulingIgnoredDuringExecution" not in anti
    [term] = anti["preferredDuringSchedulingIgnoredDuringExecution"]
    assert term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    assert objs["ConfigMap"]["data"] == {"autoscaler.yaml": "x: 1\n", "inventory.json": "[]"}
    plain = {m["kind"]: m for m in manifests(_deployment())}
    assert "annotations" not in plain["ServiceAccount"]["metadata"]


def test_kube_object_registers_the_manifest_unchanged(declare):
    manifest = {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "WorkloadPriorityClass",
                "metadata": {"name": "high"}, "value": 10000, "description": "d"}  # fmt: skip
    found = declare(lambda: KubeObject("wpc", manifest))
    (r,) = found.resources
    assert r.type == "kubernetes:kueue.x-k8s.io/v1beta1:WorkloadPriorityClass"
    assert r.inputs == manifest
    assert type_token("v1", "Namespace") == "kubernetes:core/v1:Namespace"
