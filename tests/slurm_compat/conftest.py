"""The noble root with Ubuntu's Slurm 23.11 (tests/slurm_compat/noble.py), once per session, and a harness
factory that starts noble's programs through the wrappers."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.harness.slurm import SlurmHarness, harnesses
from tests.slurm_compat.noble import NobleUnavailable, usable_root, wrappers


@pytest.fixture(scope="session")
def noble(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The baked noble root (skips, saying why, where it cannot be built)."""
    try:
        return usable_root(tmp_path_factory.mktemp("noble") / "build.log")
    except NobleUnavailable as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="session")
def noble_bin(noble: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return wrappers(noble, tmp_path_factory.mktemp("noble-bin"))


@pytest.fixture
def noble_slurm(noble_bin: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., SlurmHarness]]:
    """`noble_slurm(**SlurmHarness kwargs)` -> a harness whose programs are noble's (stopped after the test)."""
    monkeypatch.setenv("PATH", f"{noble_bin}:{os.environ['PATH']}")
    with harnesses() as make:
        yield make


@pytest.fixture
def slurm_factory(noble_slurm: Callable[..., SlurmHarness]) -> Callable[..., SlurmHarness]:
    """The suite's `slurm_factory` here is noble's: the e2e tests this directory re-runs (`test_daemon_*.py`) start
    Ubuntu's Slurm 23.11 with no change of their own."""
    return noble_slurm
