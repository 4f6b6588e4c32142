"""The topology timer against Debian 12's slurmctld 22.05 (`slurm.release: "22.05"`): tests/slurm/test_topology.py's
real-slurmctld test, whose suite runs on 23.11.  The timer asks `scontrol show nodes --json` first, which 22.05
refuses, and reads `sinfo --json` then: this is where that fallback meets a real 22.05."""

from __future__ import annotations

import pytest

from tests.slurm.test_topology import (  # noqa: F401  (the test, on this directory's 22.05)
    test_a_node_that_reports_its_host_moves_in_real_slurmctlds_tree,
)

pytestmark = [pytest.mark.slurm]
