"""The Kubernetes daemon as the stack deploys it, run: the Deployment's own arguments, the ConfigMap's files where
the Deployment mounts them, bound to the ClusterRole and Role the stack creates, against the stack's own
MachineDeployments in the fake API server.  A Kueue workload's ProvisioningRequest gets a node in one of them.

Two things differ from a pod, and only those: the ConfigMap's mount point is a temporary directory (the paths in
its files are rewritten to it), and the API server is the fake, reached through a kubeconfig instead of the pod's
service-account token.  `--once` is added so the test ends after one tick."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from typer.testing import CliRunner

from fleet.cli.main import app
from tests.fakes.kube_api import FakeKube
from tests.kube.cluster import pod_template, provisioning_request
from tests.stacks.test_kube_stacks import of_kind, synthesized

STACK = "k8s-neocloud-kueue"


def bound_rules(syn: Any, service_account: str) -> list[dict[str, Any]]:
    """The RBAC rules the synthesized stack binds `service_account` to: its ClusterRoles' rules, and its Roles'
    limited to their namespace (the fake API server's `rbac`)."""
    roles = {(r["kind"], r["metadata"]["name"]): r for r in of_kind(syn, "ClusterRole") + of_kind(syn, "Role")}
    rules: list[dict[str, Any]] = []
    for binding in of_kind(syn, "ClusterRoleBinding") + of_kind(syn, "RoleBinding"):
        if not any(s.get("name") == service_account for s in binding["subjects"]):
            continue
        role = roles[(binding["roleRef"]["kind"], binding["roleRef"]["name"])]
        ns = role["metadata"].get("namespace") if role["kind"] == "Role" else None
        rules += [{**r, "namespace": ns} if ns else dict(r) for r in role["rules"]]
    return rules


def test_the_deployed_daemon_serves_a_request_on_the_stack_s_machine_deployments(tmp_path: Path) -> None:
    syn = synthesized(STACK)
    (deployment,) = of_kind(syn, "Deployment")
    (configmap,) = of_kind(syn, "ConfigMap")
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    volume = next(
        v["name"] for v in pod["volumes"] if (v.get("configMap") or {}).get("name") == configmap["metadata"]["name"]
    )
    mount = next(m["mountPath"] for m in container["volumeMounts"] if m["name"] == volume)

    etc = tmp_path / "etc-gpu-fleet"  # the ConfigMap, mounted
    etc.mkdir()
    for key, text in configmap["data"].items():
        (etc / key).write_text(text.replace(mount, str(etc)))

    fake = FakeKube(rbac=bound_rules(syn, pod["serviceAccountName"]))
    fake.start()
    try:
        for md in of_kind(syn, "MachineDeployment"):
            fake.create(md)
        (tmp_path / "kubeconfig").write_text(yaml.safe_dump(fake.kubeconfig()))
        config = yaml.safe_load((etc / "autoscaler.yaml").read_text())
        config["kubernetes"].update(in_cluster=False, kubeconfig=str(tmp_path / "kubeconfig"))
        (etc / "autoscaler.yaml").write_text(yaml.safe_dump(config))

        # a workload Kueue admitted in one of the stack's namespaces: its ProvisioningRequest and PodTemplate
        namespaces = [n["metadata"]["name"] for n in of_kind(syn, "Namespace")]
        assert "training" in namespaces
        fake.create(pod_template("train", "training", 8))
        fake.create(provisioning_request("wl-1", "training", "train", 1))

        args = [a.replace(mount, str(etc)) for a in container["args"]]
        env = {e["name"]: "gpu-fleet-autoscaler-0" for e in container["env"] if e["name"] == "POD_NAME"}
        res = CliRunner().invoke(app, [*args, "--once"], env=env)
        assert res.exit_code == 0, res.output
        replicas = {
            md["metadata"]["name"]: int(md["spec"].get("replicas") or 0) for md in fake.list("machinedeployments")
        }
        assert sum(replicas.values()) == 1, replicas  # one 8-GPU node in one of the stack's pools
        pr = fake.get("provisioningrequests", "wl-1", "training")
        assert any(c["type"] == "Accepted" and c["status"] == "True" for c in pr["status"]["conditions"])
        assert fake.get("leases", config["kubernetes"]["lease"]["name"], config["kubernetes"]["namespace"])
    finally:
        fake.stop()
    assert not fake.forbidden, f"calls the deployed ServiceAccount may not make: {fake.forbidden}"
