"""A lost SuspendProgram call on Debian 12's Slurm 22.05: tests/e2e/test_lost_suspend.py, unchanged: the instance
behind a node slurmctld powered down is deleted all the same, and the name boots again for the next job."""

from __future__ import annotations

import pytest

from tests.e2e.test_lost_suspend import (  # noqa: F401
    env,
    test_a_failed_suspend_call_still_deletes_the_instance_and_the_name_boots_again,
)

pytestmark = [pytest.mark.slurm, pytest.mark.gce, pytest.mark.slow]
