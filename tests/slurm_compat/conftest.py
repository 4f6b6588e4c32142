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


@pytest.fixture(scope="module")
def slurm_factory(noble_bin: Path) -> Iterator[Callable[..., SlurmHarness]]:
    """The suite's `slurm_factory` here is noble's, for a whole module (its module-scoped fixtures start one cluster
    for all its tests, as the suite's do): the tests this directory re-runs (`test_daemon_*.py`,
    `test_slurmrestd_23_11.py`) start Ubuntu's Slurm 23.11 with no change of their own."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PATH", f"{noble_bin}:{os.environ['PATH']}")
        with harnesses() as make:
            yield make
