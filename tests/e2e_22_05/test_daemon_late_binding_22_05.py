"""Late binding (issue 8, item 1: what the replay scores, the daemon does) on Debian 12's Slurm 22.05, the
`slurm.release: "22.05"` option: tests/e2e/test_late_binding.py's first test, unchanged.

The pool is held (its powered-down names drained), a pending job's node is powered up and undrained when it
registers, a second job takes the node the first one freed while its own boots, and idle nodes are scaled down
after the idle timeout and held again.  22.05 prints plain numbers where 23.02+ wraps them (`last_busy` among
them): the daemon's idle clock reads both."""

from __future__ import annotations

import pytest

from tests.e2e.test_late_binding import (  # noqa: F401
    env,
    test_a_pending_job_takes_the_node_that_frees_while_its_own_boots,
)

pytestmark = [pytest.mark.slurm, pytest.mark.gce, pytest.mark.slow]
