"""The files commands write (`fleet simulate --report`, `fleet trace generate --out`, `fleet advise commitments
--report`, `fleet render slurm-conf --out`): the path is checked before any work, an existing file is replaced
only with --force, a missing directory is not created, and a write is atomic (fleet/input/outputs.py).  A
refusal exits 2 naming the option, the path and the reason, and leaves the directory exactly as it was."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fleet.input import InputError, write_atomic
from tests.inputs.cli import assert_refused, fleet

DATA = Path(__file__).resolve().parents[1] / "data"
TRACE = DATA / "itp_cluster10_first150.csv"
REPO = Path(__file__).resolve().parents[2]
STACK = REPO / "Pulumi.gcp-l4-dev.yaml"
PRECIOUS = b"config:\n  gcp:project: mine\n"  # a stack file someone would not want replaced by a report


def listing(directory: Path) -> dict[str, bytes | None]:
    """Every entry under `directory` with its bytes (None for a directory): the "nothing changed" witness."""
    return {
        str(p.relative_to(directory)): (p.read_bytes() if p.is_file() else None) for p in sorted(directory.rglob("*"))
    }


@pytest.fixture
def no_work(monkeypatch: pytest.MonkeyPatch) -> None:
    """The work of each command fails the test if it starts: a refused output path is refused before it."""

    def never(*args: object, **kwargs: object) -> None:
        raise AssertionError("the command did its work before checking its output path")

    import autoscaler.replay.run as replay_run
    import autoscaler.replay.synth as synth
    import fleet.advise.commitments as commitments

    monkeypatch.setattr(replay_run, "run_scenario", never)
    monkeypatch.setattr(synth, "generate", never)
    monkeypatch.setattr(commitments, "advise", never)


def command(name: str, target: Path, *extra: str) -> list[str]:
    """The command line of one writing command with `target` as its output path."""
    return {
        "simulate": ["simulate", "--trace", str(TRACE), "--policy", "gpu-fleet", "--report", str(target)],
        "trace": ["trace", "generate", "--regime", "short", "--jobs", "50", "--out", str(target)],
        "advise": ["advise", "commitments", "--trace", str(TRACE), "--sizes", "0,1", "--seeds", "1", "--workers",
                   "1", "--terms", "none", "--report", str(target)],
    }[name] + list(extra)  # fmt: skip


OPTION = {"simulate": "--report", "trace": "--out", "advise": "--report"}
COMMANDS = sorted(OPTION)


@pytest.mark.parametrize("name", COMMANDS)
def test_an_existing_file_is_refused_before_the_work_and_kept(tmp_path: Path, name: str, no_work: None) -> None:
    target = tmp_path / "Pulumi.prod.yaml"
    target.write_bytes(PRECIOUS)
    before = listing(tmp_path)
    out = fleet(*command(name, target))
    assert_refused(out, f"{OPTION[name]}: {target}", "", "exists; pass --force to replace it")
    assert listing(tmp_path) == before  # byte-identical, no temporary file left


@pytest.mark.parametrize("name", COMMANDS)
def test_a_directory_is_refused_before_the_work(tmp_path: Path, name: str, no_work: None) -> None:
    (tmp_path / "keep").write_text("x")
    before = listing(tmp_path)
    out = fleet(*command(name, tmp_path))
    assert_refused(out, f"{OPTION[name]}: {tmp_path}", "", "is a directory")
    assert listing(tmp_path) == before


@pytest.mark.parametrize("name", COMMANDS)
def test_a_missing_directory_is_refused_and_not_created(tmp_path: Path, name: str, no_work: None) -> None:
    target = tmp_path / "no" / "such" / "report.html"
    out = fleet(*command(name, target))
    assert_refused(out, f"{OPTION[name]}: {target}", "", f"the directory {target.parent} does not exist")
    assert listing(tmp_path) == {}


@pytest.mark.parametrize("name", COMMANDS)
def test_a_parent_that_is_a_file_is_refused(tmp_path: Path, name: str, no_work: None) -> None:
    parent = tmp_path / "afile"
    parent.write_bytes(PRECIOUS)
    out = fleet(*command(name, parent / "r.html"))
    assert_refused(out, f"{OPTION[name]}: {parent / 'r.html'}", "", f"{parent} is not a directory")
    assert parent.read_bytes() == PRECIOUS


def test_trace_generate_replaces_a_file_only_with_force(tmp_path: Path) -> None:
    target = tmp_path / "t.csv"
    target.write_bytes(PRECIOUS)
    out = fleet(*command("trace", target, "--force"))
    assert out.code == 0, out.stderr
    assert target.read_bytes().startswith(b"# synthetic GPU job trace") and sorted(os.listdir(tmp_path)) == ["t.csv"]


def test_simulate_replaces_a_report_only_with_force(tmp_path: Path) -> None:
    target = tmp_path / "r.html"
    target.write_bytes(PRECIOUS)
    out = fleet(*command("simulate", target, "--force"))
    assert out.code == 0, out.stderr
    assert b"<html" in target.read_bytes().lower() and sorted(os.listdir(tmp_path)) == ["r.html"]


def test_render_refuses_a_missing_parent_instead_of_creating_it(tmp_path: Path) -> None:
    target = tmp_path / "no" / "such" / "dir"
    out = fleet("render", "slurm-conf", "--config", STACK, "--out", target)
    assert_refused(out, f"--out: {target}", "", f"the directory {target.parent} does not exist")
    assert listing(tmp_path) == {}


def test_render_creates_the_out_directory_itself(tmp_path: Path) -> None:
    out = fleet("render", "slurm-conf", "--config", STACK, "--out", tmp_path / "etc-slurm")
    assert out.code == 0, out.stderr
    assert (tmp_path / "etc-slurm" / "slurm.conf").is_file()
    assert (tmp_path / "etc-slurm" / "slurmdbd.conf").stat().st_mode & 0o777 == 0o600


def test_render_refuses_to_replace_a_conf_without_force(tmp_path: Path) -> None:
    (tmp_path / "slurm.conf").write_bytes(PRECIOUS)
    before = listing(tmp_path)
    out = fleet("render", "slurm-conf", "--config", STACK, "--out", tmp_path)
    assert_refused(out, f"--out: {tmp_path / 'slurm.conf'}", "", "exists; pass --force to replace it")
    assert listing(tmp_path) == before  # not one of the other files written either
    forced = fleet("render", "slurm-conf", "--config", STACK, "--out", tmp_path, "--force")
    assert forced.code == 0, forced.stderr
    assert b"ClusterName=" in (tmp_path / "slurm.conf").read_bytes()
    assert (tmp_path / "slurmdbd.conf").stat().st_mode & 0o777 == 0o600


# --- the helper itself -------------------------------------------------------------------------------------------
def test_write_atomic_writes_new_files_and_refuses_existing_ones(tmp_path: Path) -> None:
    target = tmp_path / "out.txt"
    write_atomic(target, "één\n", option="--out")
    assert target.read_text(encoding="utf-8") == "één\n"
    with pytest.raises(InputError, match="exists; pass --force"):
        write_atomic(target, b"other", option="--out")
    assert target.read_text(encoding="utf-8") == "één\n"
    write_atomic(target, b"other", option="--out", force=True)
    assert target.read_bytes() == b"other" and os.listdir(tmp_path) == ["out.txt"]


def test_write_atomic_refuses_a_dangling_symlink_and_a_device(tmp_path: Path) -> None:
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "nowhere")
    with pytest.raises(InputError, match="dangling symbolic link"):
        write_atomic(link, "x", option="--out", force=True)
    with pytest.raises(InputError, match="not a regular file"):
        write_atomic("/dev/null", "x", option="--out", force=True)
    assert not (tmp_path / "nowhere").exists()


@pytest.mark.parametrize("force", [False, True])
def test_a_failed_write_leaves_neither_a_partial_file_nor_a_temporary_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, force: bool
) -> None:
    target = tmp_path / "report.html"
    if force:
        target.write_bytes(PRECIOUS)

    def disk_full(*args: object, **kwargs: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", disk_full)
    monkeypatch.setattr(os, "link", disk_full)
    with pytest.raises(InputError) as info:
        write_atomic(target, "x" * 100_000, option="--report", force=force)
    assert str(info.value) == f"--report: {target}: cannot write it: No space left on device"
    assert os.listdir(tmp_path) == (["report.html"] if force else [])
    if force:
        assert target.read_bytes() == PRECIOUS


def test_write_atomic_keeps_the_mode_it_is_asked_for(tmp_path: Path) -> None:
    secret = write_atomic(tmp_path / "slurmdbd.conf", "StoragePass=x\n", option="--out", mode=0o600)
    assert secret.stat().st_mode & 0o777 == 0o600
