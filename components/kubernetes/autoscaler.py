"""The gpu-fleet autoscaler in a Kubernetes cluster, as manifests (pure: arguments in, dicts out).

A Deployment of `replicas` pods (2 by default) running `fleet autoscaler run` on pinned code (an image by
digest), one of which acts: leader election through the `coordination.k8s.io/v1` Lease named in the
config.  The ServiceAccount gets exactly the API access the daemon uses (`rbac_rules`): read Nodes, Pods,
DaemonSets and the PodTemplates requests name; book ProvisioningRequests (an annotation, patched) and answer
them (status); cordon Nodes and evict Pods (the Eviction API honours PDBs); on Cluster API pools scale
MachineDeployments and mark Machines for deletion, in their namespace only (`capi_rbac_rules`, a Role);
get/update its own Lease only.  The daemon's e2e tests run against a fake API server that enforces exactly
these rules (tests/kube/cluster.py `deployed_rbac`).  On GKE the
ServiceAccount maps to a Google service account through Workload Identity (MIG instance calls).
The config file and the inventory come from a ConfigMap; /metrics and /healthz listen on the pod port
(probes, a ClusterIP Service for scraping), and a NetworkPolicy admits only the named scrapers to it
(`network_policy`).  Shape of the config: `fleet.inventory.KubernetesSection`, docs/kubernetes.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

APP = "gpu-fleet-autoscaler"
CONFIG_DIR = "/etc/gpu-fleet"
CONFIG_FILE = f"{CONFIG_DIR}/autoscaler.yaml"
INVENTORY_FILE = f"{CONFIG_DIR}/inventory.json"
STATE_DIR = "/var/lib/gpu-fleet"
WORKLOAD_IDENTITY_ANNOTATION = "iam.gke.io/gcp-service-account"


WATCH = ["list", "watch"]  # read through the watches' copy (autoscaler/kube/cache.py), never one by name


@dataclass(frozen=True)
class AutoscalerDeployment:
    """Everything the manifests need.  `config` / `inventory` may be Pulumi Outputs (strings at deploy)."""

    cluster: str
    namespace: str
    image: str
    replicas: int
    metrics_port: int
    config: Any  # autoscaler.yaml text
    inventory: Any  # inventory.json text
    cluster_api_namespace: str | None = None  # Cluster API pools: where MachineDeployments / Machines live
    gcp_service_account: Any = None  # GKE: the Google service account (email) of Workload Identity
    node_selector: dict[str, str] = field(default_factory=dict)
    metrics_from_namespaces: tuple[str, ...] = ()  # who may scrape /metrics (`network_policy`)

    @property
    def lease_name(self) -> str:
        return APP


def rbac_rules() -> list[dict[str, Any]]:
    """Cluster-wide access: exactly the calls `autoscaler.kube.api.KubeApi` makes on cluster-wide objects, each rule
    for one thing the daemon does (the e2e tests run against a fake API server that enforces these rules, so a call
    missing here fails them; `tests/components/test_kube_manifests.py` pins the list, so a grant added here is
    deliberate).  Before the twentieth round the role also granted reads of PodDisruptionBudgets (the Eviction API
    checks them itself), of Kueue's objects and of single Nodes and Pods, events, the MachineDeployment scale
    subresource and status updates, none of which the daemon uses, and lacked two it needs (PodTemplates, the
    booking patch)."""
    pr = "autoscaling.x-k8s.io"
    return [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": [*WATCH, "patch"]},  # inventory; cordon
        {"apiGroups": [""], "resources": ["pods"], "verbs": WATCH},  # what runs where; unschedulable pods
        {"apiGroups": [""], "resources": ["podtemplates"], "verbs": ["get"]},  # what a request's pods ask for
        {"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"]},  # DaemonSet pods of an empty node
        {"apiGroups": ["apps"], "resources": ["daemonsets"], "verbs": WATCH},  # what they take of a new node
        # the requests; the booking is an annotation on the request, written (conditionally) before any launch
        {"apiGroups": [pr], "resources": ["provisioningrequests"], "verbs": [*WATCH, "patch"]},
        {"apiGroups": [pr], "resources": ["provisioningrequests/status"], "verbs": ["patch"]},  # the answer
    ]


def capi_rbac_rules() -> list[dict[str, Any]]:
    """Cluster API access, granted by a Role in the namespace of the cluster's MachineDeployments only: the daemon
    scales its own pools' MachineDeployments and marks their Machines, and reads Machines there alone (its watch is
    namespaced, `KubeApi.capi_namespace`).  Until the thirty-fifth round a ClusterRole granted these in every
    namespace: a compromised daemon could have re-pointed another cluster's MachineDeployments (an audit found
    it)."""
    capi = "cluster.x-k8s.io"
    return [
        {"apiGroups": [capi], "resources": ["machinedeployments"], "verbs": ["get", "patch"]},  # replicas
        {"apiGroups": [capi], "resources": ["machines"], "verbs": [*WATCH, "patch"]},  # the delete mark
    ]


#: the replicas' priority class: kube-scheduler preempts ordinary pods for them, and a node-pressure eviction takes
#: them last (Cluster Autoscaler and Karpenter run at it too)
CRITICAL = "system-cluster-critical"


def _meta(name: str, namespace: str | None, **extra: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "labels": {"app.kubernetes.io/name": APP, "app.kubernetes.io/managed-by": "gpu-fleet"},
    }
    if namespace:
        meta["namespace"] = namespace
    meta.update(extra)
    return meta


def _capi_role(a: AutoscalerDeployment) -> list[dict[str, Any]]:
    """The Role and RoleBinding of `capi_rbac_rules` in the Cluster API namespace (none without Cluster API pools)."""
    if a.cluster_api_namespace is None:
        return []
    name, ns = f"{APP}-capi", a.cluster_api_namespace
    return [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": _meta(name, ns),
         "rules": capi_rbac_rules()},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": _meta(name, ns),
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
         "subjects": [{"kind": "ServiceAccount", "name": APP, "namespace": a.namespace}]},
    ]  # fmt: skip


def network_policy(a: AutoscalerDeployment, pod_labels: dict[str, str]) -> dict[str, Any]:
    """Ingress to the autoscaler's pods: the metrics port only, from the pods of `metrics_from_namespaces` only
    (none: no rule, nothing in the cluster reaches them).  The pods listen on nothing else, so this closes the one
    open port to everything but the scrapers.  kubelet's probes pass whatever the rules say: "traffic to and from
    the node where a Pod is running is always allowed" (kubernetes.io, Network Policies).  Egress is left open:
    the API server's and Google APIs' addresses are not known at synth time.  Enforced only where the CNI
    enforces NetworkPolicy (Dataplane V2, which the GKE stacks turn on; Calico, Cilium)."""
    rules = []
    if a.metrics_from_namespaces:
        rules.append({
            "from": [{"namespaceSelector": {"matchExpressions": [
                {"key": "kubernetes.io/metadata.name", "operator": "In", "values": list(a.metrics_from_namespaces)}]}}],
            "ports": [{"protocol": "TCP", "port": "metrics"}],
        })  # fmt: skip
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": _meta(APP, a.namespace),
        "spec": {"podSelector": {"matchLabels": dict(pod_labels)}, "policyTypes": ["Ingress"], "ingress": rules},
    }


def manifests(a: AutoscalerDeployment) -> list[dict[str, Any]]:
    ns = a.namespace
    sa_meta = _meta(APP, ns)
    if a.gcp_service_account is not None:
        sa_meta["annotations"] = {WORKLOAD_IDENTITY_ANNOTATION: a.gcp_service_account}
    selector = {"app.kubernetes.io/name": APP}
    probe = {"httpGet": {"path": "/healthz", "port": "metrics"}, "periodSeconds": 10, "failureThreshold": 3}
    container = {
        "name": "autoscaler",
        "image": a.image,
        "args": ["autoscaler", "run", "--config", CONFIG_FILE, "--log-json"],
        "env": [
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        ],
        "ports": [{"name": "metrics", "containerPort": a.metrics_port}],
        "readinessProbe": probe,
        "livenessProbe": {**probe, "initialDelaySeconds": 30},
        "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"memory": "1Gi"}},
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "runAsNonRoot": True,
            "capabilities": {"drop": ["ALL"]},
        },
        "volumeMounts": [
            {"name": "config", "mountPath": CONFIG_DIR, "readOnly": True},
            {"name": "state", "mountPath": STATE_DIR},
        ],
    }
    pod_spec: dict[str, Any] = {
        "serviceAccountName": APP,
        "securityContext": {"runAsUser": 65532, "runAsGroup": 65532, "fsGroup": 65532, "seccompProfile": {"type": "RuntimeDefault"}},  # noqa: E501
        "containers": [container],
        "volumes": [{"name": "config", "configMap": {"name": APP}}, {"name": "state", "emptyDir": {}}],
        # Replicas on different nodes where there are several, so a node loss never takes both; preferred, not
        # required: on a one-node system pool (the GKE default in one zone) a required rule left the second
        # replica Pending for good.
        "affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 100, "podAffinityTerm": {"labelSelector": {"matchLabels": selector},
                                                "topologyKey": "kubernetes.io/hostname"}}]}},
        "priorityClassName": CRITICAL,
    }  # fmt: skip
    if a.node_selector:
        pod_spec["nodeSelector"] = dict(a.node_selector)
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": _meta(ns, None)},
        # GKE admits pods of the system-* priority classes only in a namespace whose ResourceQuota names the class
        # (kube-system's gcp-critical-pods); without this one the ReplicaSet could create no pod ("insufficient
        # quota to match these scopes").  Kubernetes docs: "Limit Priority Class consumption by default".
        {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": _meta(f"{APP}-critical-pods", ns),
         "spec": {"hard": {"pods": str(2 * a.replicas)},  # the replicas, and as many terminating during a rollout
                  "scopeSelector": {"matchExpressions": [
                      {"scopeName": "PriorityClass", "operator": "In", "values": [CRITICAL]}]}}},
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": sa_meta},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": _meta(f"{APP}-{a.cluster}", None),  # noqa: E501
         "rules": rbac_rules()},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": _meta(f"{APP}-{a.cluster}", None),  # noqa: E501
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": f"{APP}-{a.cluster}"},
         "subjects": [{"kind": "ServiceAccount", "name": APP, "namespace": ns}]},
        # The Lease: create (cannot be limited by name), then get/update only this one.
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": _meta(f"{APP}-lease", ns),
         "rules": [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
                   {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "update"],
                    "resourceNames": [a.lease_name]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": _meta(f"{APP}-lease", ns),
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": f"{APP}-lease"},
         "subjects": [{"kind": "ServiceAccount", "name": APP, "namespace": ns}]},
        *_capi_role(a),
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": _meta(APP, ns),
         "data": {"autoscaler.yaml": a.config, "inventory.json": a.inventory}},
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": _meta(APP, ns),
         "spec": {"replicas": a.replicas, "selector": {"matchLabels": selector},
                  "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}},
                  "template": {"metadata": {"labels": {**selector}}, "spec": pod_spec}}},
        {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": _meta(APP, ns),
         "spec": {"minAvailable": 1, "selector": {"matchLabels": selector}}},
        {"apiVersion": "v1", "kind": "Service", "metadata": _meta(APP, ns),
         "spec": {"selector": selector, "ports": [{"name": "metrics", "port": a.metrics_port, "targetPort": "metrics"}]}},  # noqa: E501
        network_policy(a, selector),
    ]  # fmt: skip
