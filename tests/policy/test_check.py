"""`fleet policy check` on the shipped examples and on broken stacks, and the CrossGuard pack (policies/) run
through pulumi_policy's own analyzer over the same resources: both name the same violations."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.harness.requirements import missing

REPO = Path(__file__).resolve().parents[2]
FLEET = Path(sys.executable).with_name("fleet")
PACK_PYTHON = REPO / "policies" / ".venv" / "bin" / "python"
EXAMPLES = sorted(p.name[len("Pulumi.") : -len(".yaml")] for p in REPO.glob("Pulumi.*.yaml"))


def fleet(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(FLEET), *args], capture_output=True, text=True, timeout=300, cwd=REPO)


@pytest.fixture(scope="module")
def a3mega() -> dict[str, Any]:
    cp = fleet("synth", "--stack", "gcp-a3mega-slurm", "--json")
    assert cp.returncode == 0, cp.stderr
    return json.loads(cp.stdout)


def broken(synth: dict[str, Any]) -> dict[str, Any]:
    """A synthesized stack someone edited: a public IP on a GPU template, an SSH rule open to the internet,
    a bucket without labels."""
    doc = copy.deepcopy(synth)
    by_name = {r["name"]: r for r in doc["resources"]}
    by_name["a3mega-resv-template"]["inputs"]["networkInterfaces"][0]["accessConfigs"] = [{"networkTier": "PREMIUM"}]
    del by_name["a3mega-storage-checkpoints"]["inputs"]["labels"]
    fw = next(r for r in doc["resources"] if r["type"] == "gcp:compute/firewall:Firewall")
    open_fw = copy.deepcopy(fw)
    open_fw["name"] = "ssh-from-anywhere"
    open_fw["urn"] = fw["urn"].rsplit("::", 1)[0] + "::ssh-from-anywhere"
    open_fw["inputs"].update(direction="INGRESS", allows=[{"protocol": "tcp", "ports": ["22"]}],
                             sourceRanges=["0.0.0.0/0"])  # fmt: skip
    doc["resources"].append(open_fw)
    return doc


@pytest.mark.parametrize("stack", EXAMPLES)
def test_shipped_examples_pass(stack: str) -> None:
    cp = fleet("policy", "check", "--stack", stack)
    assert cp.returncode == 0, cp.stdout + cp.stderr
    assert "all policies pass" in cp.stdout


def test_public_ip_open_firewall_and_missing_labels_fail_naming_each(a3mega: dict, tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(broken(a3mega)))
    cp = fleet("policy", "check", "--resources", str(bad))
    assert cp.returncode == 1, cp.stdout + cp.stderr
    lines = cp.stdout.strip().splitlines()
    assert len(lines) == 3, lines
    assert any("gpu-no-external-ip" in x and "a3mega-resv-template" in x and "accessConfigs" in x for x in lines)
    assert any("no-open-ingress" in x and "ssh-from-anywhere" in x and "0.0.0.0/0" in x for x in lines)
    assert any("required-labels" in x and "a3mega-storage-checkpoints" in x and "team, cost-center" in x
               for x in lines)  # fmt: skip
    assert "3 violation(s)" in cp.stderr
    js = json.loads(fleet("policy", "check", "--resources", str(bad), "--json").stdout)
    assert not js["ok"] and sorted(v["policy"] for v in js["violations"]) == [
        "gpu-no-external-ip",
        "no-open-ingress",
        "required-labels",
    ]


def test_a_stack_file_without_labels_fails(tmp_path: Path) -> None:
    doc = yaml.safe_load((REPO / "Pulumi.gcp-l4-dev.yaml").read_text())
    doc["config"]["gpu-fleet:fleet"]["labels"] = {"env": "dev"}
    path = tmp_path / "Pulumi.nolabels-dev.yaml"
    path.write_text(yaml.safe_dump(doc))
    cp = fleet("policy", "check", "--config", str(path))
    assert cp.returncode == 1
    failing = [x for x in cp.stdout.splitlines() if x.startswith("MANDATORY required-labels")]
    # two templates, the controller and login VMs, the state disk, Filestore, bucket, secrets
    assert len(failing) == 9 and any("l4dev-slurm-controller-state" in x for x in failing)


@pytest.mark.parametrize(
    ("args", "why"),
    [
        (["--stack", "no-such-stack"], "no-such-stack"),
        (["--stack", "gcp-l4-dev", "--config", "x.yaml"], "exactly one"),
        ([], "exactly one"),
    ],
)
def test_bad_input_exits_2(args: list[str], why: str) -> None:
    cp = fleet("policy", "check", *args)
    assert cp.returncode == 2 and why in cp.stderr and "Traceback" not in cp.stderr


def test_bad_spec_or_resources_file_exits_2(tmp_path: Path) -> None:
    doc = yaml.safe_load((REPO / "Pulumi.gcp-l4-dev.yaml").read_text())
    doc["config"]["gpu-fleet:fleet"]["clusters"][0]["pools"][0]["max_nodes"] = -1
    (tmp_path / "Pulumi.bad.yaml").write_text(yaml.safe_dump(doc))
    cp = fleet("policy", "check", "--config", str(tmp_path / "Pulumi.bad.yaml"))
    assert cp.returncode == 2 and "max_nodes" in cp.stderr and "Traceback" not in cp.stderr
    # the file, then the field: as synth and every other command say it
    assert f"error: {tmp_path / 'Pulumi.bad.yaml'}: clusters[0].pools[0].max_nodes: " in cp.stderr, cp.stderr
    (tmp_path / "r.json").write_text('{"resources": 3}')
    cp = fleet("policy", "check", "--resources", str(tmp_path / "r.json"))
    assert cp.returncode == 2 and "resources" in cp.stderr and "Traceback" not in cp.stderr


def crossguard(synth: dict[str, Any], tmp_path: Path) -> list[dict[str, str]]:
    if not PACK_PYTHON.exists():
        missing(f"the policy pack's virtualenv {PACK_PYTHON.parent.parent} is missing (scripts/setup.sh makes it)")
    path = tmp_path / "synth.json"
    path.write_text(json.dumps(synth))
    cp = subprocess.run(
        [str(PACK_PYTHON), str(REPO / "policies" / "analyze.py"), str(path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert cp.returncode == 0, cp.stderr
    return json.loads(cp.stdout)


def test_crossguard_pack_reports_what_the_offline_check_reports(a3mega: dict, tmp_path: Path) -> None:
    assert crossguard(a3mega, tmp_path) == []  # the shipped example passes the pack too
    doc = broken(a3mega)
    pack = crossguard(doc, tmp_path)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    offline = json.loads(fleet("policy", "check", "--resources", str(bad), "--json").stdout)["violations"]
    key = lambda v: (v["policy"], v["level"], v["urn"], v["message"])  # noqa: E731
    assert sorted(map(key, pack)) == sorted(map(key, offline)) and len(pack) == 3


def test_crossguard_stack_policy_enforces_the_gpu_cap(a3mega: dict, tmp_path: Path) -> None:
    doc = copy.deepcopy(a3mega)
    ctl = next(r for r in doc["resources"] if r["name"] == "a3mega-slurm-controller")
    inv = json.loads(ctl["inputs"]["metadata"]["gpu-fleet-inventory"])
    inv[0]["max_nodes"] = 1000
    ctl["inputs"]["metadata"]["gpu-fleet-inventory"] = json.dumps(inv)
    (v,) = crossguard(doc, tmp_path)
    assert v["policy"] == "gpu-cap" and v["level"] == "mandatory" and "over its cap of 1024" in v["message"]


def test_pack_files_are_what_pulumi_expects() -> None:
    meta = yaml.safe_load((REPO / "policies" / "PulumiPolicy.yaml").read_text())
    assert meta["runtime"]["name"] == "python" and meta["version"]
    main = (REPO / "policies" / "__main__.py").read_text()
    assert "PolicyPack(" in main and "build_policies()" in main
    assert "pulumi-policy" in (REPO / "policies" / "requirements.txt").read_text()
