"""Power-hook calls that fail, on Debian 12's Slurm 22.05: tests/e2e's ResumeTimeout test (its ResumeFailProgram
call made, and lost), unchanged (test_daemon_lost_suspend_22_05.py: the lost suspend).

22.05 replaces a DOWN node's reason with "ResumeTimeout reached" where 23.11 appends it to the daemon's drain
reason ("<reason> : ResumeTimeout reached"): the daemon's sweep of lost resume-fail calls reads both
(autoscaler/daemon/lost_calls.py)."""

from __future__ import annotations

import pytest

from tests.e2e.test_resume_timeout import (  # noqa: F401
    env,
    test_resume_timeout_backs_off_the_offering_and_the_job_runs_elsewhere,
)

pytestmark = [pytest.mark.slurm, pytest.mark.gce, pytest.mark.slow]
