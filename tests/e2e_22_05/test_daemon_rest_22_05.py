"""The daemon's whole loop in `slurm.mode: rest` on Debian 12's Slurm 22.05: tests/e2e/test_rest_mode.py,
unchanged, on this machine's slurmctld, slurmd and slurmrestd (this directory's `slurm_factory`).  There
`rest_api: auto` chooses v0.0.38, which has no node update: node updates go through scontrol."""

from __future__ import annotations

import pytest

from tests.e2e.test_rest_mode import env, test_the_daemon_in_rest_mode_runs_jobs_and_deletes_idle_nodes  # noqa: F401

pytestmark = [pytest.mark.slurm, pytest.mark.gce, pytest.mark.slow]
