"""The side files of `fleet advise commitments --price-file`, `fleet simulate --kueue-queues` and
`fleet policy check --resources` come in through the input gate like stack files do: a regular file within its
size limit (a FIFO or /dev/zero is refused at once, not read for ever), a symlink loop named, no duplicate key.
FIFOs and devices are tried in separate processes with a timeout and a memory cap, so a regression fails instead
of hanging the suite or filling the machine's memory."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from tests.inputs.cli import assert_refused, fleet

DATA = Path(__file__).resolve().parents[1] / "data"
TRACE = DATA / "itp_cluster10_first150.csv"
FLEET = Path(sys.executable).with_name("fleet")


def side_input(name: str, path: Path | str) -> list[str]:
    """The command line reading `path` as the side file of command `name`."""
    return {
        "price-file": ["advise", "commitments", "--trace", str(TRACE), "--sizes", "0,1", "--seeds", "1",
                       "--price-file", str(path)],
        "kueue-queues": ["simulate", "--trace", str(TRACE), "--scheduler", "kueue", "--policy", "gpu-fleet",
                         "--kueue-queues", str(path)],
        "resources": ["policy", "check", "--resources", str(path)],
    }[name]  # fmt: skip


NAMES = ["price-file", "kueue-queues", "resources"]
WHAT = {"price-file": "price file", "kueue-queues": "stack output file", "resources": "`fleet synth --json` output"}


def _bounded() -> None:
    """In the child: at most 2 GiB of address space, so a regression reading /dev/zero fails instead of eating RAM."""
    resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("device", ["fifo", "/dev/zero"])
def test_a_fifo_or_a_device_is_refused_without_reading_it(tmp_path: Path, name: str, device: str) -> None:
    path = tmp_path / "in.fifo" if device == "fifo" else Path(device)
    if device == "fifo":
        os.mkfifo(path)
    args = [str(FLEET), *side_input(name, path)]
    cp = subprocess.run(args, capture_output=True, text=True, timeout=60, preexec_fn=_bounded)
    assert cp.returncode == 2 and "Traceback" not in cp.stderr, cp.stderr
    assert f"--{name}: {path}: not a regular file (a {WHAT[name]} must be one)" in cp.stderr


@pytest.mark.parametrize("name", NAMES)
def test_a_symlink_loop_a_directory_and_a_missing_file_are_refused(tmp_path: Path, name: str) -> None:
    loop = tmp_path / "loop.yaml"
    loop.symlink_to(loop)
    cases = [
        (loop, "cannot read the"),
        (tmp_path, "is a directory"),
        (tmp_path / "none.yaml", "no such"),
    ]
    for path, reason in cases:
        assert_refused(fleet(*side_input(name, path)), f"--{name}: {path}", "", reason)


def test_a_price_file_with_a_duplicate_key_is_refused_with_its_line(tmp_path: Path) -> None:
    rates = tmp_path / "rates.yaml"
    rates.write_text("reservation: {none: 88.49}\nreservation: {none: 1.0}\n")
    out = fleet(*side_input("price-file", rates))
    assert_refused(out, f"--price-file: {rates}", "2:1", "duplicate key 'reservation' (first given on line 1)")


def test_an_oversized_price_file_is_refused_by_its_size(tmp_path: Path) -> None:
    rates = tmp_path / "rates.yaml"
    rates.write_text("reservation: {none: 1, 1y: 1, 3y: 1}\n" + "# pad\n" * 200_000)
    assert_refused(fleet(*side_input("price-file", rates)), f"--price-file: {rates}", "", "limit of a price file")


def test_kueue_queues_with_a_duplicate_key_is_refused(tmp_path: Path) -> None:
    queues = tmp_path / "queues.json"
    queues.write_text('{"kueue_queues": [], "kueue_queues": [{"team": "a"}]}')
    out = fleet(*side_input("kueue-queues", queues))
    assert_refused(out, f"--kueue-queues: {queues}", "1:", "duplicate key 'kueue_queues'")


def test_resources_with_a_duplicate_key_is_refused(tmp_path: Path) -> None:
    doc = tmp_path / "synth.json"
    doc.write_text('{"stack": "a", "resources": [], "resources": []}')
    assert_refused(fleet(*side_input("resources", doc)), f"--resources: {doc}", "1:", "duplicate key 'resources'")
