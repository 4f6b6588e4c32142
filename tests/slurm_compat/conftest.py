"""This directory's Slurm is Ubuntu's 23.11 (the root conftest's `noble_bin`) whatever FLEET_E2E_SLURM says:
`noble_slurm` for one test, and a module's `slurm_factory` for its module-scoped clusters."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from tests.harness.releases import SHIPPED, release_harnesses
from tests.harness.slurm import SlurmHarness


@pytest.fixture
def noble_slurm(request: pytest.FixtureRequest) -> Iterator[Callable[..., SlurmHarness]]:
    """`noble_slurm(**SlurmHarness kwargs)` -> a harness whose programs are noble's (stopped after the test)."""
    with release_harnesses(SHIPPED, request) as make:
        yield make


@pytest.fixture(scope="module")
def slurm_factory(request: pytest.FixtureRequest) -> Iterator[Callable[..., SlurmHarness]]:
    """The suite's `slurm_factory` here is noble's, for a whole module (its module-scoped fixtures start one cluster
    for all its tests, as the suite's do): the tests this directory re-runs start Ubuntu's Slurm 23.11 with no
    change of their own."""
    with release_harnesses(SHIPPED, request) as make:
        yield make
