"""Widening a pending job's constraint on Debian 12's Slurm 22.05: tests/slurm/test_job_features.py's slurmrestd
tests, whose v0.0.38 job update (``POST job/{id}``) 23.11's slurmrestd does not serve, so the suite, on 23.11,
skips the first of them there."""

from __future__ import annotations

import pytest

from tests.slurm.test_job_features import (  # noqa: F401  (the fixture and tests, on this directory's 22.05)
    cluster,
    test_slurmctld_refusing_an_update_is_reported_and_changes_nothing,
    test_slurmrestd_v0038_widens_a_pending_jobs_constraint_too,
)

pytestmark = [pytest.mark.slurm]
