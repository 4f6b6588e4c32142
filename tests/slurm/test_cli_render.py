"""`fleet render slurm-conf` / `fleet render spec` as a user runs them."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from typer.testing import CliRunner

from fleet.cli.main import app

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()


def test_renders_an_example_stack_by_name(tmp_path: Path) -> None:
    result = runner.invoke(app, ["render", "slurm-conf", "--stack", "gcp-a3mega-slurm", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    conf = (tmp_path / "slurm.conf").read_text()
    assert "NodeSet=resv Nodes=a3mega-resv-[0-15]" in conf
    assert "Name=gpu File=/dev/nvidia[0-7]" in (tmp_path / "gres.conf").read_text()
    assert (tmp_path / "cgroup.conf").exists()
    # the controller's slurmdbd.conf, which slurmdbd reads only if no one else can
    dbd = tmp_path / "slurmdbd.conf"
    assert "StorageType=accounting_storage/mysql" in dbd.read_text() and dbd.stat().st_mode & 0o777 == 0o600
    assert "AuthAltTypes=auth/jwt" in dbd.read_text()  # the JWTs slurm.conf takes: slurmrestd's reach slurmdbd
    assert "slurmdbd.conf" in result.output


def test_a_cluster_with_a_choice_of_machine_types_gets_its_job_submit_lua(tmp_path: Path) -> None:
    result = runner.invoke(app, ["render", "slurm-conf", "--stack", "gcp-l4-dev", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "JobSubmitPlugins=lua" in (tmp_path / "slurm.conf").read_text().splitlines()
    assert "function slurm_job_submit" in (tmp_path / "job_submit.lua").read_text()  # next to slurm.conf
    assert "job_submit.lua" in result.output
    one = tmp_path / "a3mega"
    assert runner.invoke(app, ["render", "slurm-conf", "--stack", "gcp-a3mega-slurm", "--out", str(one)]).exit_code == 0
    wake_only = (one / "job_submit.lua").read_text()  # one machine type: nothing to prefer, but its spot pool may be
    assert "pcall(wake_daemon)" in wake_only and "job_desc.prefer" not in wake_only  # held: submissions wake the daemon


def test_invalid_spec_exits_2_with_the_field_path_and_writes_nothing(tmp_path: Path) -> None:
    doc = yaml.safe_load((ROOT / "Pulumi.gcp-a3mega-slurm.yaml").read_text())
    doc["config"]["gpu-fleet:fleet"]["clusters"][0]["pools"][1]["min_nodes"] = 99
    stack = tmp_path / "Pulumi.bad.yaml"
    stack.write_text(yaml.safe_dump(doc))
    out = tmp_path / "out"
    result = runner.invoke(app, ["render", "slurm-conf", "--config", str(stack), "--out", str(out)])
    assert result.exit_code == 2
    assert "clusters[0].pools[1].min_nodes: min_nodes 99 is greater than max_nodes 32" in result.stderr
    assert not out.exists()


def test_several_clusters_get_one_directory_each(tmp_path: Path) -> None:
    doc = yaml.safe_load((ROOT / "Pulumi.gcp-l4-dev.yaml").read_text())
    fleet = doc["config"]["gpu-fleet:fleet"]
    second = json.loads(json.dumps(fleet["clusters"][0]))
    second["name"] = "l4dev2"
    fleet["clusters"].append(second)
    stack = tmp_path / "Pulumi.two.yaml"
    stack.write_text(yaml.safe_dump(doc))
    result = runner.invoke(app, ["render", "slurm-conf", "--config", str(stack), "--out", str(tmp_path / "o")])
    assert result.exit_code == 0, result.output
    assert "ClusterName=l4dev2" in (tmp_path / "o" / "l4dev2" / "slurm.conf").read_text()
    assert "ClusterName=l4dev\n" in (tmp_path / "o" / "l4dev" / "slurm.conf").read_text()
    only = runner.invoke(
        app, ["render", "slurm-conf", "--config", str(stack), "--cluster", "l4dev2", "--out", str(tmp_path / "p")]
    )
    assert only.exit_code == 0 and (tmp_path / "p" / "slurm.conf").exists()


def test_unknown_cluster_and_stack_are_usage_errors(tmp_path: Path) -> None:
    r = runner.invoke(app, ["render", "slurm-conf", "--stack", "gcp-l4-dev", "--cluster", "x", "--out", str(tmp_path)])
    assert r.exit_code == 2 and "--cluster: no Slurm cluster 'x'" in r.stderr
    r = runner.invoke(app, ["render", "slurm-conf", "--stack", "nope", "--out", str(tmp_path)])
    assert r.exit_code == 2 and "Pulumi.nope.yaml" in r.stderr and "gcp-l4-dev" in r.stderr
    r = runner.invoke(app, ["render", "slurm-conf", "--out", str(tmp_path)])
    assert r.exit_code == 2 and "exactly one of --stack NAME or --config PATH" in r.stderr


def test_set_overrides_a_key(tmp_path: Path) -> None:
    r = runner.invoke(
        app, ["render", "slurm-conf", "--stack", "gcp-l4-dev", "--out", str(tmp_path), "--set", "SlurmctldPort=7777"]
    )
    assert r.exit_code == 0, r.output
    assert "SlurmctldPort=7777" in (tmp_path / "slurm.conf").read_text().splitlines()


def test_render_spec_prints_the_validated_spec_with_defaults() -> None:
    r = runner.invoke(app, ["render", "spec", "--stack", "gcp-l4-dev"])
    assert r.exit_code == 0, r.output
    spec = json.loads(r.stdout)
    assert spec["clusters"][0]["pools"][0]["boot_disk_gb"] == 200  # a default, filled in
    assert spec["clusters"][0]["slurm"]["partitions"][0]["name"] == "dev"
