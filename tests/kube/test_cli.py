"""`fleet autoscaler run --config FILE` with a `kubernetes:` section runs the Kubernetes daemon: one tick
against the fake API server serves a ProvisioningRequest, /metrics carries the leader gauge."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from typer.testing import CliRunner

from fleet.cli.main import app
from tests.fakes.kube_api import FakeKube
from tests.kube.cluster import machine_deployment, pod_template, provisioning_request
from tests.kube.test_capi_e2e import NS, capi_pool

runner = CliRunner()


def test_one_tick_through_the_cli_serves_a_request(tmp_path: Path) -> None:
    fake = FakeKube()
    fake.start()
    try:
        fake.create(machine_deployment("neo-h100", NS, "h100"))
        fake.create(pod_template("train", "team-a", 8))
        fake.create(provisioning_request("wl-1", "team-a", "train", 1))
        (tmp_path / "kubeconfig").write_text(yaml.safe_dump(fake.kubeconfig()))
        (tmp_path / "inventory.json").write_text(json.dumps([capi_pool().model_dump(mode="json")]))
        cfg = {
            "inventory": "inventory.json",
            "kubernetes": {"in_cluster": False, "kubeconfig": str(tmp_path / "kubeconfig"),
                           "namespace": "gpu-fleet-system", "lease": {"name": "gpu-fleet"}},
            "metrics": {"enabled": False},
        }  # fmt: skip
        (tmp_path / "autoscaler.yaml").write_text(yaml.safe_dump(cfg))
        res = runner.invoke(app, ["autoscaler", "run", "--config", str(tmp_path / "autoscaler.yaml"), "--once",
                                  "--log-json"])  # fmt: skip
        assert res.exit_code == 0, res.output
        tick = json.loads(res.output.strip().splitlines()[-1])
        assert tick["leader"] and tick["ok"] and tick["launched"][0]["request"] == "pr/team-a/wl-1"
        assert fake.get("machinedeployments", "neo-h100", NS)["spec"]["replicas"] == 1
    finally:
        fake.stop()


def test_a_bad_kubernetes_config_names_the_field(tmp_path: Path) -> None:
    (tmp_path / "autoscaler.yaml").write_text(yaml.safe_dump({"inventory": "x.json", "kubernetes": {"lease": {}}}))
    res = runner.invoke(app, ["autoscaler", "run", "--config", str(tmp_path / "autoscaler.yaml"), "--once"])
    assert res.exit_code == 2
    assert "kubernetes.namespace" in res.output and "Traceback" not in res.output


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
