"""The daemon's end-to-end loop on Debian 12's Slurm 22.05, the `slurm.release: "22.05"` option: the e2e test of
tests/e2e/test_end_to_end.py, unchanged (this directory's `slurm_factory`).

A 2-node gang and two 1-node jobs get instances from the fake Compute API, run, and their idle nodes are suspended
and deleted by name; the daemon reads 22.05's JSON (nodes from `sinfo --json`, which 23.02+ groups) and slurmctld
runs its hooks."""

from __future__ import annotations

import pytest

from tests.e2e.conftest import env  # noqa: F401  (the fixture, on noble's slurm_factory)
from tests.e2e.test_end_to_end import test_jobs_get_instances_run_and_idle_nodes_are_deleted  # noqa: F401

pytestmark = [pytest.mark.slurm, pytest.mark.gce, pytest.mark.slow]
