"""The daemon's whole loop in `slurm.mode: rest` on Slurm 23.11, the stacks' release: tests/e2e/test_rest_mode.py,
unchanged, on noble's slurmctld, slurmd and slurmrestd (this directory's `slurm_factory`).  There `rest_api: auto`
chooses v0.0.40 and node updates go through slurmrestd itself."""

from __future__ import annotations

import pytest

from tests.e2e.test_rest_mode import env, test_the_daemon_in_rest_mode_runs_jobs_and_deletes_idle_nodes  # noqa: F401

pytestmark = [pytest.mark.slurm, pytest.mark.gce, pytest.mark.slow]
