"""Project-wide pytest wiring: the real-Slurm skip, the `slurm_factory` fixture (the release the stacks' images
run, 23.11, unless FLEET_E2E_SLURM=22.05: `tests.harness.releases`), Ubuntu's Slurm (`noble`, `noble_bin`), slow
modules first.

Tests marked `@pytest.mark.slurm` are skipped, with the reason, when slurmctld/munged are not
installed or we are not root; CI installs them (scripts/setup.sh), so there they run.
Subfolders keep their own fixtures in their own conftest.py.

CI sets FLEET_REQUIRE_SLURM=1: there a missing Slurm is a failure, never a skip.  Hypothesis runs
derandomized under HYPOTHESIS_PROFILE=ci (set by .ci/run), so a CI result is reproducible; the
default profile explores new examples on every run.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import settings

from tests.harness.releases import e2e_release, release_harnesses
from tests.harness.requirements import missing
from tests.harness.slurm import SlurmHarness, slurm_unavailable_reason
from tests.slurm_compat.noble import NobleUnavailable, usable_root, wrappers

settings.register_profile("ci", derandomize=True, print_blob=True)
settings.register_profile("dev")
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))


# the suite mostly waits on Slurm timers, boots and sockets (2 cores were ~60 % busy with 6 workers): 6 overlap more
# of the waits than 4 did (a full run on 2 cores: 596 s against 774-820 s)
XDIST_WORKERS = 6


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """How many pytest-xdist workers `-n auto` (pyproject addopts) starts: PYTEST_XDIST_AUTO_NUM_WORKERS if set,
    else none under `-s` (a worker's output would not reach this terminal: `pytest -s` prints reports in this
    process), else XDIST_WORKERS.  `-n 0` / `-n N` on the command line override it; `--pdb` implies none."""
    if env := os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        if not env.isdigit():
            raise pytest.UsageError(f"PYTEST_XDIST_AUTO_NUM_WORKERS={env!r}: expected a number of workers (0: none)")
        return int(env)
    if config.option.capture == "no":
        return 0
    return XDIST_WORKERS


def pytest_configure(config: pytest.Config) -> None:
    """A bad FLEET_E2E_SLURM stops the run before any test, naming the variable and the releases it takes."""
    e2e_release()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Run the modules that hold `slow` tests (the real-Slurm e2e runs, the first-boot cluster) first.

    Under pytest-xdist (pyproject addopts: `-n auto --dist loadscope --no-loadscope-reorder`) each worker takes
    whole modules in this order, so the long waits start at once, side by side, and the quick modules fill
    the workers around them; left last, one of them would run alone at the end.  A stable sort: the order
    inside a module and among the rest is unchanged.
    """
    slow = {item.nodeid.split("::")[0] for item in items if item.get_closest_marker("slow") is not None}
    items.sort(key=lambda item: item.nodeid.split("::")[0] not in slow)


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("slurm") is not None:
        reason = slurm_unavailable_reason()
        if reason:
            missing(reason)


@pytest.fixture(scope="module")
def slurm_factory(request: pytest.FixtureRequest) -> Iterator[Callable[..., SlurmHarness]]:
    """`slurm_factory(**SlurmHarness kwargs)` -> a new, not yet started harness of the release the tests run on
    (`e2e_release`); all are stopped at the module's end."""
    with release_harnesses(e2e_release(), request) as make:
        yield make


@pytest.fixture(scope="session")
def noble(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The baked noble root with Ubuntu's Slurm 23.11 (tests/slurm_compat/noble.py), built once and cached; a skip
    saying why where it cannot be built, a failure under FLEET_REQUIRE_SLURM=1 (CI runs the e2e suite on it)."""
    try:
        return usable_root(tmp_path_factory.mktemp("noble") / "build.log")
    except NobleUnavailable as exc:
        missing(str(exc))
        raise


@pytest.fixture(scope="session")
def noble_bin(noble: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory of wrappers running noble's Slurm and munge programs: first on PATH, the harness starts 23.11."""
    return wrappers(noble, tmp_path_factory.mktemp("noble-bin"))
