"""The Kubernetes daemon as the stacks deploy it, run: the Deployment's own arguments, the ConfigMap's files where
the Deployment mounts them, bound to the ClusterRole and Role the stack creates, against the stack's own node
groups: the MachineDeployments of `k8s-neocloud-kueue` in the fake API server, the GKE node pools' MIGs of
`gke-a3ultra-kueue` in the fake Compute server.  A Kueue workload's ProvisioningRequest gets a node in one of them.

What differs from a pod, and only that: the ConfigMap's mount point is a temporary directory (the paths in its
files are rewritten to it); the API server is the fake, reached through a kubeconfig instead of the pod's
service-account token; on GKE the Compute API is the fake, reached anonymously instead of through Workload
Identity.  `--once` is added so the test ends after one tick."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from typer.testing import CliRunner

from autoscaler.kube.source import BOOKING
from fleet.cli.main import app
from fleet.inventory import parse_inventory
from fleet.provisioning_class import CLUSTER_AUTOSCALER_CLASSES
from fleet.synth.run import synth_file
from tests.fakes.compute_api import FakeCompute
from tests.fakes.kube_api import FakeKube
from tests.kube.cluster import bound_rules, pod_template, provisioning_request, ready_node, reconcile_capi
from tests.stacks.test_kube_stacks import (
    gke_file,
    manifests,
    neo_file,
    neo_with_a_shared_h100_flavor,
    of_kind,
    synthesized,
)


class Deployed:
    """The daemon's Deployment and ConfigMap of a synthesized stack, with the ConfigMap's files written under
    `tmp_path` (its mount point, the paths in the files rewritten to it)."""

    def __init__(self, stack: str | Path, tmp_path: Path) -> None:
        """`stack`: a shipped stack's name, or a stack file."""
        self.syn = syn = synthesized(stack) if isinstance(stack, str) else synth_file(stack)
        (deployment,) = of_kind(syn, "Deployment")
        (configmap,) = of_kind(syn, "ConfigMap")
        self.pod = pod = deployment["spec"]["template"]["spec"]
        (self.container,) = pod["containers"]
        volume = next(
            v["name"] for v in pod["volumes"] if (v.get("configMap") or {}).get("name") == configmap["metadata"]["name"]
        )
        self.mount = next(m["mountPath"] for m in self.container["volumeMounts"] if m["name"] == volume)
        self.etc = tmp_path / "etc-gpu-fleet"
        self.etc.mkdir()
        for key, text in configmap["data"].items():
            (self.etc / key).write_text(text.replace(self.mount, str(self.etc)))
        self.config = yaml.safe_load((self.etc / "autoscaler.yaml").read_text())
        self.tmp = tmp_path

    def rbac(self) -> list[dict[str, Any]]:
        """The RBAC rules the stack binds the Deployment's ServiceAccount to (the fake API server's `rbac`)."""
        return bound_rules(manifests(self.syn), self.pod["serviceAccountName"])

    def fake_kube(self) -> FakeKube:
        """The fake API server, bound to the RBAC the stack gives the Deployment's ServiceAccount, and the config
        pointed at it."""
        fake = FakeKube(rbac=self.rbac())
        fake.start()
        (self.tmp / "kubeconfig").write_text(yaml.safe_dump(fake.kubeconfig()))
        self.config["kubernetes"].update(in_cluster=False, kubeconfig=str(self.tmp / "kubeconfig"))
        return fake

    def pools(self) -> list[Any]:
        """The inventory the ConfigMap gives the daemon."""
        return parse_inventory(yaml.safe_load((self.etc / "inventory.json").read_text()))

    def fake_compute(self, on_boot: Any = None) -> FakeCompute:
        """The fake Compute server holding the stack's node pools' MIGs and the reservations its pools consume
        (bought beforehand, not created by the stack), the config pointed at it."""
        pools = self.pools()
        compute = FakeCompute(pools[0].project, on_boot=on_boot).start()
        compute.add_inventory(pools)
        for p in pools:
            if p.reservation:
                compute.add_reservation(p.zones[0], p.reservation, p.machine_type, count=4)
        self.config["provider"].update(endpoint=compute.url, anonymous=True)
        return compute

    def run_once(self) -> Any:
        (self.etc / "autoscaler.yaml").write_text(yaml.safe_dump(self.config))
        args = [a.replace(self.mount, str(self.etc)) for a in self.container["args"]]
        env = {e["name"]: "gpu-fleet-autoscaler-0" for e in self.container["env"] if e["name"] == "POD_NAME"}
        return CliRunner().invoke(app, [*args, "--once"], env=env)

    def namespaces(self) -> list[str]:
        return [n["metadata"]["name"] for n in of_kind(self.syn, "Namespace")]

    def request(self, name: str, namespace: str, template: str, count: int) -> dict[str, Any]:
        """A workload's ProvisioningRequest as Kueue creates it: of the class the stack's ProvisioningRequestConfig
        names."""
        (config,) = of_kind(self.syn, "ProvisioningRequestConfig")
        return provisioning_request(name, namespace, template, count, cls=config["spec"]["provisioningClassName"])


def accepted(fake: FakeKube, name: str, namespace: str) -> bool:
    pr = fake.get("provisioningrequests", name, namespace)
    return any(
        c["type"] == "Accepted" and c["status"] == "True" for c in (pr.get("status") or {}).get("conditions", [])
    )


def admitted_pod_selector(
    flavor_labels: dict[str, str], config: dict[str, Any], details: dict[str, str]
) -> dict[str, str]:
    """The node selector Kueue gives an admitted workload's pods: its flavor's nodeLabels, plus the
    ProvisioningRequestConfig's `podSetUpdates.nodeSelector` entries whose `valueFromProvisioningClassDetail` the
    Provisioned request's `provisioningClassDetails` holds (Kueue's provisioning controller skips a missing one)."""
    out = dict(flavor_labels)
    for update in (config["spec"].get("podSetUpdates") or {}).get("nodeSelector", []):
        if update["valueFromProvisioningClassDetail"] in details:
            out[update["key"]] = details[update["valueFromProvisioningClassDetail"]]
    return out


def provisioned_details(d: Deployed, fake: FakeKube, name: str, namespace: str) -> dict[str, str]:
    """Bring the MachineDeployments' Machines and Nodes up (`reconcile_capi`), tick once more, and return the
    request's `provisioningClassDetails`, which must be Provisioned by then."""
    for ns in {md["metadata"]["namespace"] for md in fake.list("machinedeployments")}:
        reconcile_capi(fake, ns)
    res = d.run_once()
    assert res.exit_code == 0, res.output
    status = fake.get("provisioningrequests", name, namespace).get("status") or {}
    assert any(c["type"] == "Provisioned" and c["status"] == "True" for c in status.get("conditions", [])), status
    return dict(status.get("provisioningClassDetails") or {})


def test_the_deployed_daemon_serves_a_request_on_the_stack_s_machine_deployments(tmp_path: Path) -> None:
    d = Deployed("k8s-neocloud-kueue", tmp_path)
    fake = d.fake_kube()
    try:
        for md in of_kind(d.syn, "MachineDeployment"):
            fake.create(md)
        assert "training" in d.namespaces()  # a workload Kueue admitted there: its request and template
        fake.create(pod_template("train", "training", 8))
        fake.create(d.request("wl-1", "training", "train", 1))
        res = d.run_once()
        assert res.exit_code == 0, res.output
        replicas = {m["metadata"]["name"]: int(m["spec"].get("replicas") or 0) for m in fake.list("machinedeployments")}
        assert sum(replicas.values()) == 1, replicas  # one 8-GPU node in one of the stack's pools
        assert accepted(fake, "wl-1", "training")
        lease = d.config["kubernetes"]["lease"]["name"]
        assert fake.get("leases", lease, d.config["kubernetes"]["namespace"])
    finally:
        fake.stop()
    assert not fake.forbidden, f"calls the deployed ServiceAccount may not make: {fake.forbidden}"


def test_the_deployed_gke_daemon_creates_a_node_in_one_of_the_stack_s_node_pool_migs(tmp_path: Path) -> None:
    d = Deployed("gke-a3ultra-kueue", tmp_path)
    pools = d.pools()
    compute = d.fake_compute()
    fake = d.fake_kube()
    try:
        namespace = next(n for n in d.namespaces() if n != "gpu-fleet-system")
        fake.create(pod_template("train", namespace, 8))
        fake.create(d.request("wl-1", namespace, "train", 1))
        res = d.run_once()
        assert res.exit_code == 0, res.output
        created = compute.create_counts()
        # every reserved slot is launched up front (Policy.launch_reserved_nodes), each node created once, and the
        # workload that does not tolerate spot is booked on one of them: nothing else is created for it
        assert len(created) == 4 and set(created.values()) == {1}, created
        (mig,) = [m for m in compute.state.migs.values() if m.target_size]  # in a MIG of the stack's node pools
        assert mig.name in {g for p in pools for g in p.instance_groups.values()}
        assert mig.reservation and mig.target_size == 4  # the reserved pool, paid for already
        assert accepted(fake, "wl-1", namespace)
        assert d.run_once().exit_code == 0 and compute.create_counts() == created  # the floor is met: nothing twice
    finally:
        fake.stop()
        compute.stop()
    assert not fake.forbidden, f"calls the deployed ServiceAccount may not make: {fake.forbidden}"


def test_each_kueue_flavor_of_the_stack_gets_nodes_from_its_own_machine_deployment(tmp_path: Path) -> None:
    """Kueue puts a flavor's `nodeLabels` (and tolerations) on the pods it admits under that flavor, and so on the
    PodTemplates of their ProvisioningRequest: the daemon must read the stack's ResourceFlavors and its own
    inventory's pool labels alike, or a flavor's workloads would get another pool's nodes, or none."""
    d = Deployed("k8s-neocloud-kueue", tmp_path)
    fake = d.fake_kube()
    try:
        mds = of_kind(d.syn, "MachineDeployment")
        for md in mds:
            fake.create(md)
        flavors = of_kind(d.syn, "ResourceFlavor")
        assert len(flavors) == len(mds) >= 2
        for i, flavor in enumerate(flavors):
            template = pod_template(f"t{i}", "training", 1, selector=dict(flavor["spec"]["nodeLabels"]))
            template["template"]["spec"]["tolerations"] = flavor["spec"].get("tolerations", [])
            fake.create(template)
            fake.create(d.request(f"wl-{i}", "training", f"t{i}", 1))
        res = d.run_once()
        assert res.exit_code == 0, res.output
        for flavor in flavors:
            (md,) = [
                m
                for m in fake.list("machinedeployments")
                if flavor["spec"]["nodeLabels"].items() <= m["spec"]["template"]["metadata"]["labels"].items()
            ]
            assert int(md["spec"].get("replicas") or 0) == 1, (flavor["metadata"]["name"], md["metadata"]["name"])
    finally:
        fake.stop()
    assert not fake.forbidden, fake.forbidden


def test_a_shared_flavor_s_workloads_get_nodes_of_the_pool_that_fits_them(tmp_path: Path) -> None:
    """`kueue.flavors`: Kueue admits both workloads under the one H100 flavor and gives their pods (and their
    requests' templates) its node selector; the daemon picks the pool per request within the flavor: a 1 x H100
    node for the 1-GPU pod, an 8 x H100 node for the 8-GPU pod, nothing from the L40S pool."""
    d = Deployed(neo_file(tmp_path, neo_with_a_shared_h100_flavor), tmp_path)
    fake = d.fake_kube()
    try:
        for md in of_kind(d.syn, "MachineDeployment"):
            fake.create(md)
        (flavor,) = [f for f in of_kind(d.syn, "ResourceFlavor") if f["metadata"]["name"] == "neo-h100"]
        selector = dict(flavor["spec"]["nodeLabels"])
        for name, gpus in (("small", 1), ("big", 8)):
            fake.create(pod_template(name, "training", gpus, selector=selector))
            fake.create(d.request(f"wl-{name}", "training", name, 1))
        res = d.run_once()
        assert res.exit_code == 0, res.output
        replicas = {
            m["spec"]["template"]["metadata"]["labels"]["node.cluster.x-k8s.io/gpu-fleet-pool"]: int(
                m["spec"].get("replicas") or 0
            )
            for m in fake.list("machinedeployments")
        }
        assert replicas == {"h100": 1, "h100-1x": 1, "l40s": 0}, replicas
        assert accepted(fake, "wl-small", "training") and accepted(fake, "wl-big", "training")
        (config,) = of_kind(d.syn, "ProvisioningRequestConfig")
        mds = {
            md["metadata"]["name"]: md["spec"]["template"]["metadata"]["labels"]
            for md in fake.list("machinedeployments")
        }
        for name, pool in (("small", "h100-1x"), ("big", "h100")):
            booked = provisioned_details(d, fake, f"wl-{name}", "training")
            pods = admitted_pod_selector(selector, config, booked)
            (md,) = [md for md, labels in mds.items() if pods.items() <= labels.items()]
            assert mds[md]["node.cluster.x-k8s.io/gpu-fleet-pool"] == pool, (name, pods)
    finally:
        fake.stop()
    assert not fake.forbidden, fake.forbidden


def test_on_gke_the_pods_of_a_shared_flavor_are_pinned_to_the_node_pool_booked_for_them(tmp_path: Path) -> None:
    """`gke-a3ultra-kueue` with its reservation and spot node pools in one flavor: the workload is booked on a
    reserved node (paid for already), the nodes register with the labels the stack gives the node pools, and the
    request is answered Provisioned with details from which the stack's `podSetUpdates` pin the pods to the
    reserved node pool: the node selector Kueue gives them selects that pool's nodes and no spot node."""

    def shared(config: dict[str, Any]) -> None:
        config["gpu-fleet:fleet"]["clusters"][0]["kueue"]["flavors"] = {"h200": ["resv", "spot"]}

    d = Deployed(gke_file(tmp_path, shared), tmp_path)
    pools = d.pools()
    fake = d.fake_kube()

    def kubelet(name: str, zone: str) -> None:  # a node registers with its node pool's labels
        (pool,) = [p for p in pools if name.startswith(p.node_name_prefix + "-")]
        fake.create(ready_node(name, dict(pool.node_labels), zone=zone))

    compute = d.fake_compute(on_boot=kubelet)
    try:
        namespace = next(n for n in d.namespaces() if n != "gpu-fleet-system")
        (flavor,) = of_kind(d.syn, "ResourceFlavor")
        selector = dict(flavor["spec"]["nodeLabels"])
        fake.create(pod_template("train", namespace, 8, spot=True, selector=selector))
        fake.create(d.request("wl-1", namespace, "train", 1))
        for _ in range(3):
            res = d.run_once()
            assert res.exit_code == 0, res.output
        status = fake.get("provisioningrequests", "wl-1", namespace).get("status") or {}
        assert any(c["type"] == "Provisioned" and c["status"] == "True" for c in status["conditions"]), status
        (config,) = of_kind(d.syn, "ProvisioningRequestConfig")
        pods = admitted_pod_selector(selector, config, status["provisioningClassDetails"])
        assert pods == {"gpu-fleet/kueue-flavor": "h200", "cloud.google.com/gke-nodepool": "resv"}
        fits = {n["metadata"]["name"] for n in fake.list("nodes") if pods.items() <= n["metadata"]["labels"].items()}
        assert fits and all(n.startswith("gke-a3u-resv-") for n in fits), fits
    finally:
        fake.stop()
        compute.stop()
    assert not fake.forbidden, fake.forbidden


def test_a_pod_kueue_put_on_a_flavor_too_small_fails_naming_the_pool_that_would_hold_it(tmp_path: Path) -> None:
    """Team `inference` of k8s-neocloud-kueue lists the 4 x L40S flavor before the 8 x H100 one, and Kueue assigns
    flavors by quota, not by fit: an 8-GPU pod with no node selector of its own is admitted under the L40S flavor
    and its request names the L40S pool only.  Nothing can serve it; the answer says why and what to change."""
    d = Deployed("k8s-neocloud-kueue", tmp_path)
    fake = d.fake_kube()
    try:
        for md in of_kind(d.syn, "MachineDeployment"):
            fake.create(md)
        (cq,) = [q for q in of_kind(d.syn, "ClusterQueue") if q["metadata"]["name"] == "neo-inference"]
        first = cq["spec"]["resourceGroups"][0]["flavors"][0]["name"]
        (flavor,) = [f for f in of_kind(d.syn, "ResourceFlavor") if f["metadata"]["name"] == first]
        assert flavor["metadata"]["labels"]["gpu-fleet/pool"] == "l40s"
        fake.create(pod_template("big", "inference", 8, selector=dict(flavor["spec"]["nodeLabels"])))
        fake.create(d.request("wl-big", "inference", "big", 1))
        res = d.run_once()
        assert res.exit_code == 0, res.output
        status = fake.get("provisioningrequests", "wl-big", "inference").get("status") or {}
        (failed,) = [c for c in status.get("conditions", []) if c["type"] == "Failed"]
        assert failed["status"] == "True", status
        assert "l40s (4 GPUs/node); h100 would hold it" in failed["message"], failed["message"]
        assert "(node.cluster.x-k8s.io/gpu-fleet-pool: h100) and Kueue assigns that flavor" in failed["message"]
        assert "kueue.flavors" not in failed["message"]  # two GPU models: no shared flavor to suggest
        assert all(int(m["spec"].get("replicas") or 0) == 0 for m in fake.list("machinedeployments"))
    finally:
        fake.stop()
    assert not fake.forbidden, fake.forbidden


def test_the_gke_stack_s_requests_are_of_a_class_gke_s_own_autoscaler_leaves_alone(tmp_path: Path) -> None:
    """GKE's managed Cluster Autoscaler runs on every GKE cluster and answers best-effort-atomic requests: it marks
    one Provisioned as soon as its pods fit on nodes already there, nodes the daemon booked for another workload
    included.  The stack's Kueue admission check and its daemon use the daemon's own class; a request of the
    Cluster Autoscaler's class (someone's own, outside the stack's queues) is not touched by the daemon."""
    d = Deployed("gke-a3ultra-kueue", tmp_path)
    (config,) = of_kind(d.syn, "ProvisioningRequestConfig")
    ours = config["spec"]["provisioningClassName"]
    assert ours == d.config["kubernetes"]["provisioning_class"]  # what Kueue creates is what the daemon serves
    assert ours not in CLUSTER_AUTOSCALER_CLASSES
    compute = d.fake_compute()
    fake = d.fake_kube()
    try:
        namespace = next(n for n in d.namespaces() if n != "gpu-fleet-system")
        fake.create(pod_template("train", namespace, 8))
        for cls in sorted(CLUSTER_AUTOSCALER_CLASSES):
            fake.create(provisioning_request(cls.split(".")[0], namespace, "train", 1, cls=cls))
        res = d.run_once()
        assert res.exit_code == 0, res.output
        # no node for a request another autoscaler answers: only the reserved slots, launched up front whatever the
        # queue (Policy.launch_reserved_nodes)
        reserved = compute.create_counts()
        assert len(reserved) == 4 and set(reserved.values()) == {1}, reserved
        assert all(m.reservation for m in compute.state.migs.values() if m.target_size)
        for pr in fake.list("provisioningrequests"):
            assert BOOKING not in (pr["metadata"].get("annotations") or {}), pr["metadata"]["name"]
            assert not (pr.get("status") or {}).get("conditions"), pr["metadata"]["name"]
        fake.create(d.request("wl-1", namespace, "train", 1))
        res = d.run_once()
        assert res.exit_code == 0, res.output
        assert compute.create_counts() == reserved and accepted(fake, "wl-1", namespace)  # booked on a reserved node
    finally:
        fake.stop()
        compute.stop()


def test_a_bootstrapped_gke_region_s_daemon_creates_a_node_in_its_pool_for_a_workload(tmp_path: Path) -> None:
    """`fleet bootstrap-region --scheduler kueue` writes a stack whose deployed daemon works as the shipped one's: a
    workload of its default team gets one on-demand node in the region's one pool, within the RBAC the stack binds."""
    import json

    image = "us-docker.pkg.dev/my-gpu-project/gpu-fleet/autoscaler@sha256:" + "ab" * 32
    (tmp_path / "stacks").mkdir()
    argv = ["bootstrap-region", "--project", "my-gpu-project", "--region", "europe-west4", "--gpu", "h200", "--gpus",
            "16", "--scheduler", "kueue", "--autoscaler-image", image, "--stacks-dir", str(tmp_path / "stacks"),
            "--json"]  # fmt: skip
    written = CliRunner().invoke(app, argv)
    assert written.exit_code == 0, written.output
    d = Deployed(Path(json.loads(written.stdout)["stack_file"]), tmp_path)
    assert d.container["image"] == image
    (pool,) = d.pools()
    compute = d.fake_compute()
    fake = d.fake_kube()
    try:
        assert "ml" in d.namespaces()  # the default team
        fake.create(pod_template("train", "ml", 8))
        fake.create(d.request("wl-1", "ml", "train", 1))
        res = d.run_once()
        assert res.exit_code == 0, res.output
        assert sum(compute.create_counts().values()) == 1
        (mig,) = [m for m in compute.state.migs.values() if m.target_size]
        assert mig.name in pool.instance_groups.values() and mig.target_size == 1
        assert accepted(fake, "wl-1", "ml")
    finally:
        fake.stop()
        compute.stop()
    assert not fake.forbidden, f"calls the deployed ServiceAccount may not make: {fake.forbidden}"
