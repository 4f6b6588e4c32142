"""Power-hook calls that fail, on Slurm 23.11 as the stacks' Ubuntu 24.04 image ships it: tests/e2e's ResumeTimeout
test (its ResumeFailProgram call made, and lost), unchanged, on noble's slurmctld and slurmd
(test_daemon_lost_suspend_23_11.py: the lost suspend).

On 23.11 the lost resume-fail variant found that slurmctld appends "ResumeTimeout reached" to the node's reason
("<the daemon's drain reason> : ResumeTimeout reached") where 22.05 replaces it: the daemon's sweep, matching the
whole reason, never made the lost call, and the node stayed DOWN with its late instance running
(autoscaler/daemon/lost_calls.py)."""

from __future__ import annotations

import pytest

from tests.e2e.test_resume_timeout import (  # noqa: F401
    env,
    test_resume_timeout_backs_off_the_offering_and_the_job_runs_elsewhere,
)

pytestmark = [pytest.mark.slurm, pytest.mark.gce, pytest.mark.slow]
