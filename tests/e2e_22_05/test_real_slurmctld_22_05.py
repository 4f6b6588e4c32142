"""Each example stack's slurm.conf, rendered for `slurm.release: "22.05"` and started by Debian 12's slurmctld 22.05
(this machine's): tests/slurm/test_real_slurmctld.py, whose suite runs on 23.11.  The render differs by release
(`fleet.slurm.conf.release_settings`: `cloud_reg_addrs` and `PrivateData=cloud` on 22.05 alone), so the option a
stack may choose is started by the slurmctld it names."""

from __future__ import annotations

import pytest

from tests.slurm.test_real_slurmctld import (  # noqa: F401  (the fixture and tests, on this directory's 22.05)
    cluster,
    test_a_site_option_list_is_merged_and_slurmctld_reads_both,
    test_every_pool_appears_as_powered_down_cloud_nodes,
    test_harness_local_slurmd_runs_a_job,
    test_harness_reports_a_config_slurm_rejects,
    test_jobs_power_up_the_right_nodes,
    test_min_nodes_are_excluded_from_suspend,
    test_partitions_and_default,
    test_slurmctld_runs_the_rendered_preemption_of_spot_work_off_the_reservation,
    test_standby_pools_render_a_counted_suspend_exclusion_slurmctld_accepts,
)

pytestmark = [pytest.mark.slurm]
