"""The `env` fixture of the end-to-end tests: a fresh `E2E` (tests/e2e/env.py) per test, 6 s SuspendTime.

A module that needs other settings defines its own `env` with `e2e_env(slurm_factory, ...)`."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from tests.e2e.env import E2E, e2e_env
from tests.harness.slurm import SlurmHarness


@pytest.fixture
def env(slurm_factory: Callable[..., SlurmHarness]) -> Iterator[E2E]:
    with e2e_env(slurm_factory, suspend_time=6) as e:
        yield e
