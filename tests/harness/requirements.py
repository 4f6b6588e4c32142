"""Skip a test whose real dependency (Slurm, gcc, slurmrestd) is missing — or fail it where CI demands it.

CI sets FLEET_REQUIRE_SLURM=1 (see .ci/run): a real-Slurm test that cannot run there is a failure,
so a broken install step never hides behind a green run.
"""

from __future__ import annotations

import os

import pytest


def missing(reason: str) -> None:
    """Skip with `reason`, or fail with it when FLEET_REQUIRE_SLURM=1."""
    if os.environ.get("FLEET_REQUIRE_SLURM") == "1":
        pytest.fail(f"FLEET_REQUIRE_SLURM=1 but {reason}")
    pytest.skip(reason)
