"""Test helpers playing the rest of a Kubernetes cluster around the autoscaler: Kueue (it creates
ProvisioningRequests and their PodTemplates), the Cluster API controllers (Machines and Nodes for a
MachineDeployment's replicas, deleting marked Machines first), the kubelet (Ready Nodes with GPUs)."""

from __future__ import annotations

from typing import Any

from fleet.provisioning_class import GPU_FLEET_CLASS
from tests.fakes.kube_api import FakeKube

CAPI = "cluster.x-k8s.io/v1beta2"
POOL_LABEL = "node.cluster.x-k8s.io/gpu-fleet-pool"
DELETE_MACHINE = "cluster.x-k8s.io/delete-machine"
NOW = "2026-12-01T10:00:00Z"


def machine_deployment(name: str, namespace: str, pool: str, replicas: int = 0) -> dict[str, Any]:
    sel = {"cluster.x-k8s.io/cluster-name": "neo", POOL_LABEL: pool}
    return {
        "apiVersion": CAPI,
        "kind": "MachineDeployment",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "clusterName": "neo",
            "replicas": replicas,
            "selector": {"matchLabels": sel},
            "template": {
                "metadata": {"labels": sel},
                "spec": {
                    "clusterName": "neo",
                    "version": "v1.31.2",
                    "bootstrap": {
                        "configRef": {
                            "apiGroup": "bootstrap.cluster.x-k8s.io",
                            "kind": "KubeadmConfigTemplate",
                            "name": "gpu",
                        }
                    },
                    "infrastructureRef": {
                        "apiGroup": "infrastructure.cluster.x-k8s.io",
                        "kind": "NeoMachineTemplate",
                        "name": pool,
                    },
                },
            },
        },
    }


def pod_template(name: str, namespace: str, gpus: int, *, spot: bool = False, selector: dict | None = None) -> dict:
    spec: dict[str, Any] = {
        "containers": [
            {
                "name": "train",
                "image": "trainer@sha256:" + "a" * 64,
                "resources": {"limits": {"nvidia.com/gpu": str(gpus)}},
            }
        ],
        "restartPolicy": "Never",
    }
    if spot:
        spec["tolerations"] = [{"key": "gpu-fleet/spot", "operator": "Exists", "effect": "NoSchedule"}]
    if selector:
        spec["nodeSelector"] = selector
    return {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": name, "namespace": namespace},
            "template": {"spec": spec}}  # fmt: skip


def provisioning_request(
    name: str, namespace: str, template: str, count: int, *, cls: str = GPU_FLEET_CLASS, **params: str
) -> dict:
    spec: dict[str, Any] = {
        "provisioningClassName": cls,
        "podSets": [{"podTemplateRef": {"name": template}, "count": count}],
    }
    if params:
        spec["parameters"] = params
    return {"apiVersion": "autoscaling.x-k8s.io/v1", "kind": "ProvisioningRequest",
            "metadata": {"name": name, "namespace": namespace}, "spec": spec}  # fmt: skip


def ready_node(name: str, labels: dict[str, str], gpus: int = 8, zone: str = "dc-1") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {**labels, "topology.kubernetes.io/zone": zone}},
        "spec": {},
        "status": {
            "allocatable": {"nvidia.com/gpu": str(gpus), "cpu": "200"},
            "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": NOW}],
        },
    }


#: the Lease the deployed Role lets the daemon get and update (the stack's config names it so)
LEASE = "gpu-fleet-autoscaler"


def deployed_rbac(cluster_api: bool, namespace: str = "gpu-fleet-system") -> list[dict[str, Any]]:
    """The RBAC rules the stack binds the daemon's ServiceAccount to (components/kubernetes/autoscaler.py): its
    ClusterRole, and its Lease Role's rules limited to the Role's namespace; the fake API server's `rbac`."""
    from components.kubernetes.autoscaler import AutoscalerDeployment, manifests

    deployment = AutoscalerDeployment(
        cluster="test", namespace=namespace, image="gpu-fleet@sha256:" + "0" * 64, replicas=2, metrics_port=9464,
        config="", inventory="", cluster_api_namespace="capi-system" if cluster_api else None,
    )  # fmt: skip
    return bound_rules(manifests(deployment), "gpu-fleet-autoscaler")


def bound_rules(objects: list[dict[str, Any]], service_account: str) -> list[dict[str, Any]]:
    """The RBAC rules `objects` (manifests) bind `service_account` to: the rules of the ClusterRoles its
    ClusterRoleBindings name, and those of the Roles its RoleBindings name, limited to the Role's namespace (the
    fake API server's `rbac`)."""
    roles = {(o["kind"], o["metadata"]["name"]): o for o in objects if o["kind"] in ("ClusterRole", "Role")}
    rules: list[dict[str, Any]] = []
    for binding in (o for o in objects if o["kind"] in ("ClusterRoleBinding", "RoleBinding")):
        if not any(s.get("name") == service_account for s in binding["subjects"]):
            continue
        role = roles[(binding["roleRef"]["kind"], binding["roleRef"]["name"])]
        ns = role["metadata"].get("namespace") if role["kind"] == "Role" else None
        rules += [{**r, "namespace": ns} if ns else dict(r) for r in role["rules"]]
    return rules


def bound_pod(name: str, namespace: str, node: str, phase: str = "Running", **annotations: str) -> dict[str, Any]:
    """A pod kube-scheduler bound to `node`, in `phase` (a Job's pod stays listed once Succeeded)."""
    md: dict[str, Any] = {"name": name, "namespace": namespace}
    if annotations:
        md["annotations"] = dict(annotations)
    spec = {"nodeName": node, "containers": [{"name": "c", "image": "x"}]}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": md, "spec": spec, "status": {"phase": phase}}


def reconcile_capi(fake: FakeKube, namespace: str) -> None:
    """One pass of the MachineSet controller and kubelets: Machines (and Ready Nodes) for spec.replicas;
    fewer replicas delete marked Machines first (then the oldest), with their Nodes."""
    for md in fake.list("machinedeployments", namespace):
        name = md["metadata"]["name"]
        labels = md["spec"]["template"]["metadata"]["labels"]
        mine = [
            m
            for m in fake.list("machines", namespace)
            if m["metadata"]["labels"].get("cluster.x-k8s.io/deployment-name") == name
        ]
        want = int(md["spec"].get("replicas") or 0)
        excess = len(mine) - want
        if excess > 0:
            marked = [m for m in mine if DELETE_MACHINE in (m["metadata"].get("annotations") or {})]
            rest = sorted((m for m in mine if m not in marked), key=lambda m: m["metadata"]["creationTimestamp"])
            for m in (marked + rest)[:excess]:
                fake.delete("machines", m["metadata"]["name"], namespace)
                node = (m.get("status") or {}).get("nodeRef", {}).get("name")
                if node:
                    fake.delete("nodes", node)
        i = 0
        while len(mine) < want:
            mname = f"{name}-m{fake.version}-{i}"
            i += 1
            create_machine(fake, md, mname)
            # Cluster API copies a Machine's labels of the node.cluster.x-k8s.io domain to its Node
            synced = {k: v for k, v in labels.items() if k.split("/")[0] == "node.cluster.x-k8s.io"}
            fake.create(ready_node(mname, {POOL_LABEL: labels[POOL_LABEL], **synced}))
            fake.update("machines", mname, namespace, lambda m, n=mname: _running(m, n))
            mine.append(fake.get("machines", mname, namespace))


def create_machine(fake: FakeKube, md: dict[str, Any], name: str) -> None:
    """The MachineSet controller's Machine `name` for the MachineDeployment `md`, as created (no status yet)."""
    deployment, namespace = md["metadata"]["name"], md["metadata"]["namespace"]
    labels = {**md["spec"]["template"]["metadata"]["labels"], "cluster.x-k8s.io/deployment-name": deployment}
    fake.create({"apiVersion": CAPI, "kind": "Machine",
                 "metadata": {"name": name, "namespace": namespace, "labels": labels},
                 "spec": dict(md["spec"]["template"]["spec"])})  # fmt: skip


def _running(machine: dict[str, Any], node: str) -> None:
    machine.setdefault("status", {}).update(phase="Running", nodeRef={"name": node})
