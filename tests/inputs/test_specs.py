"""Malformed stack files through `fleet synth --config`, `fleet render spec --config` and
`fleet render slurm-conf --config --out`: exit 2, the file, the field path (or line) and the reason, no
traceback, nothing written.  The shipped example stacks still pass."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.inputs.cli import assert_refused, fleet
from tests.inputs.specs import BOOTSTRAP_CASES, FLEET_CASES, VALID, SpecCase

REPO = Path(__file__).resolve().parents[2]


def write(tmp_path: Path, case: SpecCase) -> Path:
    path = tmp_path / "Pulumi.bad.yaml"
    if isinstance(case.text, bytes):
        path.write_bytes(case.text)
    else:
        path.write_text(case.text)
    return path


def test_the_base_spec_of_the_corpus_is_valid(tmp_path: Path) -> None:
    path = tmp_path / "Pulumi.ok.yaml"
    path.write_text(VALID)
    out = fleet("render", "spec", "--config", path)
    assert out.code == 0, out.stderr


@pytest.mark.parametrize("case", FLEET_CASES, ids=str)
def test_render_spec_refuses(tmp_path: Path, case: SpecCase) -> None:
    path = write(tmp_path, case)
    assert_refused(fleet("render", "spec", "--config", path), path, case.where, case.reason)


@pytest.mark.parametrize("case", FLEET_CASES, ids=str)
def test_render_slurm_conf_refuses_and_writes_nothing(tmp_path: Path, case: SpecCase) -> None:
    path = write(tmp_path, case)
    out_dir = tmp_path / "out"
    assert_refused(fleet("render", "slurm-conf", "--config", path, "--out", out_dir), path, case.where, case.reason)
    assert not out_dir.exists()


@pytest.mark.parametrize("case", FLEET_CASES + BOOTSTRAP_CASES, ids=str)
def test_synth_refuses(tmp_path: Path, case: SpecCase) -> None:
    path = write(tmp_path, case)
    assert_refused(fleet("synth", "--config", path, "--json"), path, case.where, case.reason)


def test_a_50_mb_spec_is_refused_by_its_size_before_it_is_read(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "Pulumi.big.yaml"
    with path.open("w") as fh:
        fh.write(VALID)
        fh.write("# padding\n" * 5_000_000)  # 50 MB of valid YAML (comments)
    assert path.stat().st_size > 50_000_000
    import fleet.input.yamlsafe as yamlsafe

    def never(*a, **k):
        raise AssertionError("the YAML parser ran on an oversized file")

    import fleet.input.files as files

    monkeypatch.setattr(yamlsafe, "parse_yaml", never)
    monkeypatch.setattr(files, "open", never, raising=False)  # not a byte of it is read
    for args in (("synth", "--config", path), ("render", "spec", "--config", path)):
        assert_refused(fleet(*args), path, "", "larger than the 1.0 MiB limit of a stack file")


def test_a_directory_as_config_is_refused(tmp_path: Path) -> None:
    for args in (("synth", "--config", tmp_path), ("render", "spec", "--config", tmp_path)):
        assert_refused(fleet(*args), tmp_path, "", "is a directory, not a stack file")


def test_a_missing_config_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "Pulumi.none.yaml"
    assert_refused(fleet("synth", "--config", path), path, "", "no such stack file")


def test_render_out_onto_an_existing_file_is_refused_and_the_file_kept(tmp_path: Path) -> None:
    target = tmp_path / "slurm.conf"
    target.write_text("mine\n")
    out = fleet("render", "slurm-conf", "--config", REPO / "Pulumi.gcp-l4-dev.yaml", "--out", target)
    assert out.code == 2 and "Traceback" not in out.stderr
    assert f"--out: {target} exists and is not a directory" in out.stderr
    assert target.read_text() == "mine\n"


@pytest.mark.parametrize(
    ("setting", "reason"),
    [("PriorityType=a\nNodeName=x", "one non-empty line"), ("Bad Key=1", "not a slurm.conf key"),
     ("PriorityType=a#b", "one non-empty line"), ("novalue", "expected KEY=VALUE"),
     # the keys the generator owns, as under slurm.extra_config
     ("NodeName=evil", "cannot be set here: nodes are generated"), ("Include=/etc/passwd", "self-contained"),
     ("ResumeProgram=/bin/sh", "the autoscaler's hook"), ("suspendtime=-1", "use slurm.suspend_time"),
     ("SlurmctldHost=other", "--controller-host")],
)  # fmt: skip
def test_render_set_values_obey_the_slurm_conf_rules(tmp_path: Path, setting: str, reason: str) -> None:
    out_dir = tmp_path / "out"
    out = fleet("render", "slurm-conf", "--config", REPO / "Pulumi.gcp-l4-dev.yaml", "--out", out_dir, "--set", setting)
    assert out.code == 2 and "--set" in out.stderr and reason in out.stderr, out.stderr
    assert not out_dir.exists()


@pytest.mark.parametrize("stack", sorted(p.name for p in REPO.glob("Pulumi.*.yaml") if p.name != "Pulumi.yaml"))
def test_shipped_stacks_pass_the_gate(stack: str) -> None:
    from fleet.spec.load import read_stack_config, spec_kind

    raw = read_stack_config(REPO / stack)
    if spec_kind(raw) == "fleet":
        out = fleet("render", "spec", "--config", REPO / stack)
        assert out.code == 0, out.stderr


@pytest.mark.parametrize("name", ["../../etc/passwd", "a/b", "-x", "x\ny"])
def test_stack_names_cannot_leave_the_stacks_directory(name: str) -> None:
    for args in (("synth", "--stack", name), ("render", "spec", "--stack", name)):
        out = fleet(*args)
        assert out.code == 2 and "Traceback" not in out.stderr
        assert "--stack: " in out.stderr and "is not a stack name" in out.stderr, out.stderr
