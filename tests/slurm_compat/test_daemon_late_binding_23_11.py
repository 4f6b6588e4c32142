"""Late binding (issue 8, item 1: what the replay scores, the daemon does) on Slurm 23.11, as the stacks' Ubuntu
24.04 image ships it: tests/e2e/test_late_binding.py's first test, unchanged, on noble's slurmctld and slurmd.

The pool is held (its powered-down names drained), a pending job's node is powered up and undrained when it
registers, a second job takes the node the first one freed while its own boots, and idle nodes are scaled down
after the idle timeout and held again.  On 23.11 this test found the daemon's idle clock reading no `last_busy`
(wrapped like every number from 23.02 on): a node up longer than the idle timeout was scaled down the moment it
went idle, and the test's third job needed a third VM."""

from __future__ import annotations

import pytest

from tests.e2e.test_late_binding import (  # noqa: F401
    env,
    test_a_pending_job_takes_the_node_that_frees_while_its_own_boots,
)

pytestmark = [pytest.mark.slurm, pytest.mark.gce, pytest.mark.slow]
