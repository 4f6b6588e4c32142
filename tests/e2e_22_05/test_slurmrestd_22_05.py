"""The daemon's slurmrestd client (`slurm.mode: rest`) on Debian 12's Slurm 22.05: the tests of
tests/slurm_source/test_slurmrestd.py, which run on the stacks' 23.11 (openapi/slurmctld, v0.0.40 only), re-run
unchanged on 22.05's openapi/v0.0.38, which has no node update (scontrol then makes them).  Until the forty-first
round this file re-ran them on 23.11, when the suite itself ran on 22.05."""

from __future__ import annotations

import pytest

from tests.slurm_source.test_slurmrestd import (  # noqa: F401  (the fixture and tests, on noble's slurm_factory)
    restd,
    test_an_api_version_slurmrestd_does_not_serve_is_named_with_those_it_does,
    test_an_expired_or_foreign_token_is_refused_and_named,
    test_auto_chooses_the_newest_checked_api_slurmrestd_serves,
    test_rest_client_reads_a_blocked_gang_and_leases_it_through_scontrol,
    test_rest_client_reads_a_gated_gang_and_releases_it_through_scontrol,
    test_rest_client_reads_the_active_reservations_as_scontrol_does,
    test_rest_client_reads_what_the_cli_reads,
    test_rest_client_updates_nodes,
    test_tokens_the_daemon_signs_with_the_clusters_key_are_accepted_and_renewed,
)

pytestmark = [pytest.mark.slurm]
