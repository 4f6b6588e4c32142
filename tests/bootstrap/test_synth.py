"""Generated stack files synth cleanly (`fleet synth`: the stack program under Pulumi mocks), as hand-written do."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from fleet.conformance import check_stack
from tests.bootstrap.conftest import LABELS
from tests.bootstrap.test_cli import HAND_WRITTEN

pytestmark = pytest.mark.slow
FLEET = Path(sys.executable).with_name("fleet")


def synth(path: Path) -> dict:
    """`fleet synth --config PATH --json`, and `fleet policy check` of what it synthesized: every policy passes (the
    pack `pulumi up` runs with refuses a mandatory violation); and it conforms to Google's reference
    (`fleet/conformance/reference.yaml`: the blueprints' machine, fabric and Slurm facts, GKE's fabric manifests)."""
    proc = subprocess.run(
        [str(FLEET), "synth", "--config", str(path), "--json"], capture_output=True, text=True, timeout=240
    )
    assert proc.returncode == 0, f"fleet synth {path.name} failed:\n{proc.stderr[-3000:]}"
    resources = path.with_suffix(".synth.json")
    resources.write_text(proc.stdout)
    check = subprocess.run(
        [str(FLEET), "policy", "check", "--resources", str(resources), "--json"], capture_output=True, text=True
    )
    assert check.returncode == 0 and json.loads(check.stdout)["ok"], check.stdout[-3000:] + check.stderr[-3000:]
    document = json.loads(proc.stdout)
    assert check_stack(document) == []
    return document


def test_two_bootstrapped_regions_and_a_hand_written_stack_synth(bootstrap: Callable, stacks_dir: Path) -> None:
    legacy = stacks_dir / "Pulumi.legacy.yaml"
    legacy.write_text(HAND_WRITTEN)
    # RDMA (A3 Ultra, zonal RoCE VPC) with flex-start, then GPUDirect-TCPXO (A3 Mega) on spot
    code, first = bootstrap(
        "--project", "my-gpu-project", "--region", "europe-west4", "--gpu", "h200", "--gpus", "32",
        "--capacity", "flex-start", *LABELS,
    )  # fmt: skip
    assert code == 0, first
    code, second = bootstrap(
        "--project", "my-gpu-project", "--region", "us-central1", "--gpu", "h100", "--gpus", "128",
        "--capacity", "spot", *LABELS,
    )  # fmt: skip
    assert code == 0, second
    for out in (first, second):
        result = synth(Path(out["stack_file"]))
        # nothing to pin or to explain: the cluster's zone is written, and both fabrics are set up by the stack
        assert out["warnings"] == [] and result["warnings"] == [], (out["warnings"], result["warnings"])
        (pool,) = result["outputs"]["autoscaler_inventory"]
        assert pool["machine_type"] == out["machine_type"] and pool["max_nodes"] == out["nodes"]
        assert set(pool["zones"]) <= set(out["zones"])
        # the price bootstrap printed is the price synth computes for the same spec
        assert result["cost"]["hourly_usd_at_max"] == out["price_per_hour"]["at_max"]
        assert result["cost"]["hourly_usd_at_min"] == out["price_per_hour"]["at_min"]
    assert synth(legacy)["outputs"]["autoscaler_inventory"]


def test_a_bootstrapped_kueue_region_synths_as_a_gke_cluster_and_passes_every_policy(
    bootstrap: Callable, stacks_dir: Path
) -> None:
    """`--scheduler kueue`: the stack program deploys the file as a GKE cluster with Kueue, the gIB installer for its
    A3 Ultra pool and the autoscaler Deployment on the image given; no warning, every policy passes."""
    from tests.bootstrap.test_cli import IMAGE, KUEUE

    code, out = bootstrap(
        "--project", "my-gpu-project", "--region", "europe-west4", "--gpu", "h200", "--gpus", "32", *KUEUE,
        "--team", "research", "--team", "product", "--authorized-network", "203.0.113.7/32", *LABELS,
    )  # fmt: skip
    assert code == 0 and out["warnings"] == [], out
    result = synth(Path(out["stack_file"]))
    assert result["warnings"] == []
    cluster = result["outputs"]["clusters"][out["cluster"]]
    assert cluster["platform"] == "gke" and cluster["local_queues"] == {"research": "research/research",
                                                                        "product": "product/product"}  # fmt: skip
    types = {r["type"] for r in result["resources"]}
    assert {"gcp:container/cluster:Cluster", "kubernetes:apps/v1:DaemonSet", "kubernetes:apps/v1:Deployment"} <= types
    (deployment,) = [r for r in result["resources"] if r["type"] == "kubernetes:apps/v1:Deployment"]
    assert IMAGE in json.dumps(deployment), deployment
    assert result["cost"]["hourly_usd_at_max"] == out["price_per_hour"]["at_max"]


def test_a_bootstrapped_project_stack_passes_every_policy_with_the_labels_and_says_so_without(stacks_dir: Path) -> None:
    """`fleet bootstrap-project --label ...`: the state bucket carries the labels the policy pack requires, and every
    policy passes; without them the file is written with a warning naming the flags."""
    from typer.testing import CliRunner

    from fleet.cli.main import app

    argv = ["bootstrap-project", "--project", "my-gpu-project", "--region", "us-east4", "--stacks-dir", str(stacks_dir)]
    bare = CliRunner().invoke(app, [*argv, "--json"])
    assert bare.exit_code == 0, bare.output
    (warning,) = json.loads(bare.stdout)["warnings"]
    assert "--label team=<value> --label cost-center=<value>" in warning
    labelled = CliRunner().invoke(app, [*argv, *LABELS, "--force", "--json"])
    assert labelled.exit_code == 0, labelled.output
    out = json.loads(labelled.stdout)
    assert out["warnings"] == [] and any(s.startswith("fleet policy check") for s in out["next_steps"])
    synth(Path(out["stack_file"]))  # and every policy passes on it


@pytest.mark.parametrize(("pick", "machine", "installer"), [
    ((), "a3-megagpu-8g", "gpu-fleet-nccl-tcpxo-installer"),
    (("--machine-type", "a3-highgpu-8g"), "a3-highgpu-8g", "gpu-fleet-nccl-tcpx-installer"),
])  # fmt: skip
def test_a_bootstrapped_kueue_region_of_h100s_gets_its_gpudirect_software(
    bootstrap: Callable, stacks_dir: Path, pick: tuple[str, ...], machine: str, installer: str
) -> None:
    """H100s on GKE: A3 Mega by default, A3 High where only it is offered (here asked for: every region the policy
    pack approves offers both); either way the written stack sets the fabric up (its installer and the device
    injector, as Google's manifests do: `synth` checks conformance), with no warning from bootstrap or the stack."""
    from tests.bootstrap.test_cli import KUEUE

    code, out = bootstrap(
        "--project", "my-gpu-project", "--region", "us-central1", "--gpu", "h100", "--gpus", "32", *pick, *KUEUE,
        "--authorized-network", "203.0.113.7/32", *LABELS,
    )  # fmt: skip
    assert code == 0 and out["warnings"] == [] and out["machine_type"] == machine, out
    result = synth(Path(out["stack_file"]))
    assert result["warnings"] == []
    daemonsets = [r for r in result["resources"] if r["type"] == "kubernetes:apps/v1:DaemonSet"]
    assert {installer, "gpu-fleet-nri-device-injector"} <= {r["inputs"]["metadata"]["name"] for r in daemonsets}
    # the next step that gives a training job its pod template runs as printed (the image filled in)
    (step,) = [s for s in out["next_steps"] if s.startswith("fleet render gpudirect-pod")]
    command = shlex.split(step.split("   #")[0].replace("<your training image>", "registry.example/train:1"))
    ran = subprocess.run([str(FLEET), *command[1:]], capture_output=True, text=True, cwd=stacks_dir, check=False)
    assert ran.returncode == 0, ran.stderr
    (sidecar,) = yaml.safe_load(ran.stdout)["spec"]["initContainers"]
    assert sidecar["name"] == ("tcpxo-daemon" if machine == "a3-megagpu-8g" else "tcpx-daemon")
