"""Cluster API MachineDeployments for the GPU pools of an existing cluster (pure: spec in, manifests out).

One MachineDeployment per pool (`cluster.x-k8s.io/v1beta2`), cloning the pool's infrastructure template
(AWSMachineTemplate, GCPMachineTemplate, Metal3MachineTemplate, a neocloud's ...) and bootstrap template.
Its size belongs to the gpu-fleet daemon alone: `replicas` starts at min_nodes (the stack declares it with
`ignore_changes` on it), the pool's max is in the daemon's inventory, and scale-down goes through the Machine of
an idle node marked `cluster.x-k8s.io/delete-machine`, so the deletion order is `Oldest` only for machines nobody
marked.  The MachineDeployments do NOT carry the Cluster Autoscaler's node-group annotations
(`cluster.x-k8s.io/cluster-api-autoscaler-node-group-{min,max}-size`): those are what opt a MachineDeployment into
a Cluster Autoscaler's clusterapi provider ("Enabling Autoscaling" in its README, reproduced in the Cluster API
book), and a Cluster Autoscaler already running on the cluster for other node groups would then resize the GPU
pools too, against the daemon (the daemon warns when it finds them: `autoscaler/kube/capi.py`).
Nodes get the pool label (CAPI syncs `node.cluster.x-k8s.io/*` labels from Machine to Node) and taints.  A template
change rolls out one machine at a time, the old one removed before its replacement is created.
"""

from __future__ import annotations

from typing import Any

from fleet.spec.kube import CAPI_POOL_LABEL, node_labels, node_taints
from fleet.spec.model import ClusterSpec, NodePoolSpec

API = "cluster.x-k8s.io/v1beta2"
DELETE_MACHINE = "cluster.x-k8s.io/delete-machine"
CLUSTER_NAME_LABEL = "cluster.x-k8s.io/cluster-name"
REPLICAS_FIELD = "spec.replicas"


def machine_deployment_name(cluster: ClusterSpec, pool: NodePoolSpec) -> str:
    return f"{cluster.name}-{pool.name}"


def _ref(ref: Any) -> dict[str, str]:
    return {"apiGroup": ref.api_group, "kind": ref.kind, "name": ref.name}


def machine_deployment(cluster: ClusterSpec, pool: NodePoolSpec) -> dict[str, Any]:
    k8s = cluster.kubernetes
    capi = pool.cluster_api
    assert k8s is not None and capi is not None  # the spec rules guarantee both
    bootstrap = capi.bootstrap_template or k8s.bootstrap_template
    assert bootstrap is not None
    name = machine_deployment_name(cluster, pool)
    selector = {CLUSTER_NAME_LABEL: k8s.cluster_name, CAPI_POOL_LABEL: pool.name}
    template_spec: dict[str, Any] = {
        "clusterName": k8s.cluster_name,
        "version": k8s.version,
        "bootstrap": {"configRef": _ref(bootstrap)},
        "infrastructureRef": _ref(capi.infrastructure_template),
    }
    if k8s.taint_propagation == "cluster-api":  # else the pool's bootstrap template registers nodes with them
        template_spec["taints"] = [{**t, "propagation": "Always"} for t in node_taints(cluster, pool)]
    if capi.failure_domain:
        template_spec["failureDomain"] = capi.failure_domain
    return {
        "apiVersion": API,
        "kind": "MachineDeployment",
        "metadata": {
            "name": name,
            "namespace": k8s.namespace,
            "labels": {"app.kubernetes.io/managed-by": "gpu-fleet", CLUSTER_NAME_LABEL: k8s.cluster_name},
        },
        "spec": {
            "clusterName": k8s.cluster_name,
            "replicas": pool.min_nodes,
            "selector": {"matchLabels": selector},
            "template": {
                "metadata": {"labels": {**pool.labels, **selector, **node_labels(cluster, pool)}},  # selector keys win
                "spec": template_spec,
            },
            # Machines marked with the delete-machine annotation go first (the autoscaler's named scale-down).
            "deletion": {"order": "Oldest"},
            # A template change replaces one machine at a time and never asks for an extra one, as the GKE pools
            # upgrade (components/gke/node_pool.py): Cluster API's default (maxSurge 1, maxUnavailable 0) first
            # creates a machine above the pool's size, which bare metal with every host in use cannot give: stalled.
            "rollout": {"strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}}},
        },
    }
