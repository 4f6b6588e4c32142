"""The e2e suite's `env` fixture.

Its Slurm is the root conftest's `slurm_factory`: the release the stacks' images install (23.11, Ubuntu 24.04's
packages in the noble root) unless FLEET_E2E_SLURM=22.05 asks for this machine's Debian 12 Slurm
(`tests.harness.releases`); `tests/e2e_22_05` re-runs part of the suite on 22.05.  `env` is a fresh `E2E`
(tests/e2e/env.py) per test, 6 s SuspendTime; a module that needs other settings defines its own `env` with
`e2e_env(slurm_factory, ...)`."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from tests.e2e.env import E2E, e2e_env
from tests.harness.slurm import SlurmHarness


@pytest.fixture
def env(slurm_factory: Callable[..., SlurmHarness]) -> Iterator[E2E]:
    with e2e_env(slurm_factory, suspend_time=6) as e:
        yield e
