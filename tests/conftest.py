"""Project-wide pytest wiring: the real-Slurm skip and the `slurm_factory` fixture.

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
from typing import Any

import pytest
from hypothesis import settings

from tests.harness.requirements import missing
from tests.harness.slurm import SlurmHarness, slurm_unavailable_reason

settings.register_profile("ci", derandomize=True, print_blob=True)
settings.register_profile("dev")
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("slurm") is not None:
        reason = slurm_unavailable_reason()
        if reason:
            missing(reason)


@pytest.fixture(scope="session")
def slurm_factory() -> Iterator[Callable[..., SlurmHarness]]:
    """`slurm_factory(**SlurmHarness kwargs)` -> a new, not yet started harness; all are stopped at session end.

    Start/stop one per module (a module-scoped fixture) to keep the suite fast.
    """
    reason = slurm_unavailable_reason()
    if reason:
        missing(reason)
    made: list[SlurmHarness] = []

    def make(**kwargs: Any) -> SlurmHarness:
        harness = SlurmHarness(**kwargs)
        made.append(harness)
        return harness

    yield make
    for harness in made:
        harness.stop()
