"""A cloud preemption under a running job (the daemon marks the node DOWN, then powers it down) on Debian 12's
Slurm 22.05, the release whose source the fix was read in: tests/e2e/test_cloud_preemption.py, unchanged.
`state=power_down_force` alone left the requeued job COMPLETING until SlurmdTimeout on 22.05 as on 23.11."""

from __future__ import annotations

import pytest

from tests.e2e.conftest import env  # noqa: F401
from tests.e2e.test_cloud_preemption import (  # noqa: F401
    test_a_preempted_spot_instance_has_its_job_requeued_at_once_and_its_node_powered_down,
)

pytestmark = [pytest.mark.slurm, pytest.mark.gce, pytest.mark.slow]
