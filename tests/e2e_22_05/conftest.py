"""Part of the e2e suite re-run on Debian 12's Slurm 22.05 (`slurm.release: "22.05"`, this machine's): the suite
itself runs on the release the stacks' images install, 23.11 (tests/e2e/conftest.py).  When FLEET_E2E_SLURM=22.05
already runs the whole suite here, these re-runs are skipped."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from tests.harness.releases import E2E_VARIABLE, HOST, e2e_release, release_harnesses
from tests.harness.slurm import SlurmHarness


@pytest.fixture(scope="module")
def slurm_factory(request: pytest.FixtureRequest) -> Iterator[Callable[..., SlurmHarness]]:
    """This machine's Slurm (22.05), for a whole module."""
    if e2e_release() == HOST:
        pytest.skip(f"{E2E_VARIABLE}={HOST}: the e2e suite itself ran on {HOST}")
    with release_harnesses(HOST, request) as make:
        yield make
