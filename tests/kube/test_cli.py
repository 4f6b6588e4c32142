"""`fleet autoscaler run --config FILE` with a `kubernetes:` section runs the Kubernetes daemon: one tick
against the fake API server serves a ProvisioningRequest, /metrics carries the leader gauge."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from typer.testing import CliRunner

from fleet.cli.main import app
from tests.fakes.kube_api import FakeKube
from tests.kube.cluster import LEASE, deployed_rbac, machine_deployment, pod_template, provisioning_request
from tests.kube.test_capi_e2e import NS, capi_pool

runner = CliRunner()


def write_config(tmp_path: Path, fake: FakeKube, seen_at: Path | None = None, **extra: object) -> None:
    """autoscaler.yaml (+ its kubeconfig and inventory) for a daemon on `fake`'s Cluster API pool; `seen_at`: where
    the daemon sees tmp_path (a container's mount of it), tmp_path itself by default."""
    (tmp_path / "kubeconfig").write_text(yaml.safe_dump(fake.kubeconfig()))
    (tmp_path / "inventory.json").write_text(json.dumps([capi_pool().model_dump(mode="json")]))
    cfg = {
        "inventory": "inventory.json",
        "kubernetes": {"in_cluster": False, "kubeconfig": str((seen_at or tmp_path) / "kubeconfig"),
                       "namespace": "gpu-fleet-system", "lease": {"name": LEASE}},
        "metrics": {"enabled": False},
        **extra,
    }  # fmt: skip
    (tmp_path / "autoscaler.yaml").write_text(yaml.safe_dump(cfg))


def seed_one_request(fake: FakeKube) -> None:
    """The Cluster API pool `write_config` names, and one workload's ProvisioningRequest for one 8-GPU node."""
    fake.create(machine_deployment("neo-h100", NS, "h100"))
    fake.create(pod_template("train", "team-a", 8))
    fake.create(provisioning_request("wl-1", "team-a", "train", 1))


def assert_served_the_request(output: str, fake: FakeKube) -> None:
    """A `--once --log-json` tick over `seed_one_request`: its last line says it led and launched for the request,
    and the pool's MachineDeployment grew to one replica."""
    tick = json.loads(output.strip().splitlines()[-1])
    assert tick["leader"] and tick["ok"] and tick["launched"][0]["request"] == "pr/team-a/wl-1", tick
    assert fake.get("machinedeployments", "neo-h100", NS)["spec"]["replicas"] == 1


def test_one_tick_through_the_cli_serves_a_request(tmp_path: Path) -> None:
    fake = FakeKube(rbac=deployed_rbac(cluster_api=True))
    fake.start()
    try:
        seed_one_request(fake)
        write_config(tmp_path, fake)
        res = runner.invoke(app, ["autoscaler", "run", "--config", str(tmp_path / "autoscaler.yaml"), "--once",
                                  "--log-json"])  # fmt: skip
        assert res.exit_code == 0, res.output
        assert_served_the_request(res.output, fake)
    finally:
        fake.stop()
    assert not fake.forbidden, fake.forbidden


def test_a_bad_kubernetes_config_names_the_field(tmp_path: Path) -> None:
    (tmp_path / "autoscaler.yaml").write_text(yaml.safe_dump({"inventory": "x.json", "kubernetes": {"lease": {}}}))
    res = runner.invoke(app, ["autoscaler", "run", "--config", str(tmp_path / "autoscaler.yaml"), "--once"])
    assert res.exit_code == 2
    assert "kubernetes.namespace" in res.output and "Traceback" not in res.output


def test_a_provisioning_class_the_cluster_autoscaler_serves_is_refused_before_any_call(tmp_path: Path) -> None:
    """Two autoscalers answering the same requests is refused at start, naming the file and the field: nothing
    is read or written on the cluster."""
    fake = FakeKube(rbac=deployed_rbac(cluster_api=True))
    fake.start()
    try:
        fake.create(machine_deployment("neo-h100", NS, "h100"))
        fake.create(pod_template("train", "team-a", 8))
        upstream = "best-effort-atomic-scale-up.autoscaling.x-k8s.io"
        fake.create(provisioning_request("wl-1", "team-a", "train", 1, cls=upstream))
        write_config(tmp_path, fake)
        cfg = yaml.safe_load((tmp_path / "autoscaler.yaml").read_text())
        cfg["kubernetes"]["provisioning_class"] = upstream
        (tmp_path / "autoscaler.yaml").write_text(yaml.safe_dump(cfg))
        res = runner.invoke(app, ["autoscaler", "run", "--config", str(tmp_path / "autoscaler.yaml"), "--once"])
        assert res.exit_code == 2, res.output
        assert "autoscaler.yaml" in res.output and "kubernetes.provisioning_class" in res.output
        assert "Cluster Autoscaler" in res.output and "Traceback" not in res.output
        assert fake.served == []  # not even a read
        assert fake.get("machinedeployments", "neo-h100", NS)["spec"].get("replicas", 0) == 0
    finally:
        fake.stop()


def test_shared_nodes_are_refused_by_the_kubernetes_daemon_before_any_call(tmp_path: Path) -> None:
    """`policy.share_nodes` is the Slurm daemon's setting; the Kubernetes daemon says so at start, naming the file and
    the field, and reads nothing."""
    fake = FakeKube(rbac=deployed_rbac(cluster_api=True))
    fake.start()
    try:
        write_config(tmp_path, fake)
        cfg = yaml.safe_load((tmp_path / "autoscaler.yaml").read_text())
        cfg.setdefault("policy", {})["share_nodes"] = True
        (tmp_path / "autoscaler.yaml").write_text(yaml.safe_dump(cfg))
        res = runner.invoke(app, ["autoscaler", "run", "--config", str(tmp_path / "autoscaler.yaml"), "--once"])
        assert res.exit_code == 2, res.output
        assert "autoscaler.yaml" in res.output and "policy.share_nodes" in res.output
        assert "Traceback" not in res.output and fake.served == []
    finally:
        fake.stop()


def test_a_cluster_without_the_provisioning_request_api_is_named_as_such_and_nothing_is_touched(
    tmp_path: Path,
) -> None:
    """A cluster where nothing installed the ProvisioningRequest CRD (an existing cluster with the stack's
    `provisioning_request_crd: present` but no Cluster Autoscaler): the tick fails saying which API is missing and
    what serves it, and changes nothing."""
    fake = FakeKube(rbac=deployed_rbac(cluster_api=True), unserved={"provisioningrequests"})
    fake.start()
    try:
        fake.create(machine_deployment("neo-h100", NS, "h100"))
        write_config(tmp_path, fake)
        before = len(fake.writes)
        res = runner.invoke(app, ["autoscaler", "run", "--config", str(tmp_path / "autoscaler.yaml"), "--once"])
        assert res.exit_code == 1
        assert "does not serve autoscaling.x-k8s.io/v1 provisioningrequests" in res.output
        assert "provisioning_request_crd" in res.output and "Traceback" not in res.output
        assert fake.get("machinedeployments", "neo-h100", NS)["spec"].get("replicas", 0) == 0
        assert [w for w in fake.writes[before:] if w[1] != "leases"] == []
    finally:
        fake.stop()


def test_the_config_the_stack_writes_is_the_one_the_daemon_reads(tmp_path: Path) -> None:
    """The in-cluster ConfigMap (stacks/kube_plan.py) parses as the Kubernetes daemon's config."""
    from autoscaler.kube.run import is_kube_config, parse
    from fleet.spec import load_spec
    from stacks.kube_plan import autoscaler_config

    root = Path(__file__).resolve().parents[2]
    doc = yaml.safe_load((root / "Pulumi.k8s-neocloud-kueue.yaml").read_text())
    spec = load_spec(doc["config"]["gpu-fleet:fleet"])
    for cluster in spec.clusters:
        if cluster.kueue is None:
            continue
        data = yaml.safe_load(autoscaler_config(cluster))
        assert is_kube_config(data)
        cfg = parse(data, "configmap", tmp_path)
        assert cfg.kubernetes.lease.name and cfg.provider.kind == "cluster-api"


def test_the_daemon_as_run_serves_a_request_between_polls_through_its_watches_and_stops_on_sigterm(
    tmp_path: Path,
) -> None:
    """`fleet autoscaler run` (no --once) in its own process, with a poll of an hour: a request created after it
    started is launched for (only a watch event can have woken it), reading the pods from its watch's copy rather
    than listing them, and SIGTERM ends it with status 0."""
    import os
    import signal
    import subprocess
    import sys
    import time

    fake = FakeKube(rbac=deployed_rbac(cluster_api=True))
    fake.start()
    proc = None
    try:
        fake.create(machine_deployment("neo-h100", NS, "h100"))
        write_config(tmp_path, fake, loop={"interval_s": 3600, "watch": True})
        cmd = [sys.executable, "-c", "from fleet.cli.main import app; app()", "autoscaler", "run", "--config",
               str(tmp_path / "autoscaler.yaml")]  # fmt: skip
        root = Path(__file__).resolve().parents[2]
        proc = subprocess.Popen(cmd, cwd=root, env={**os.environ, "PYTHONPATH": str(root)},
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)  # fmt: skip

        def until(pred, what: str, timeout: float = 60.0) -> None:  # type: ignore[no-untyped-def]
            end = time.monotonic() + timeout
            while not pred():
                assert proc.poll() is None, proc.stderr.read().decode()[-2000:]  # type: ignore[union-attr]
                assert time.monotonic() < end, what
                time.sleep(0.1)

        until(lambda: fake.get("leases", LEASE, "gpu-fleet-system") is not None, "the first tick")
        until(lambda: all(fake.watches.get(r) for r in ("provisioningrequests", "nodes", "pods")), "the watches")
        pod_lists = fake.lists.get("pods", 0)
        fake.create(pod_template("train", "team-a", 8))
        fake.create(provisioning_request("wl-1", "team-a", "train", 1))
        until(lambda: fake.get("machinedeployments", "neo-h100", NS)["spec"]["replicas"] == 1, "the launch")
        assert fake.lists.get("pods", 0) == pod_lists  # `loop.watch_cache` is on by default
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
        fake.stop()
    assert not fake.forbidden, fake.forbidden
