"""The daemon's slurmrestd client (`slurm.mode: rest`) on Slurm 23.11, as the stacks' Ubuntu 24.04 controller runs
it: the tests of tests/slurm_source/test_slurmrestd.py, unchanged, on noble's slurmctld and slurmrestd (this
directory's `slurm_factory`; the controller wrapper's plugin there, openapi/slurmctld, serves v0.0.40 only).

Until the thirty-eighth round `mode: rest` failed on 23.11 at its default `rest_api` (v0.0.38) and its v0.0.40 reads
and node updates had never met a real slurmrestd; `auto` now chooses v0.0.40 there, and scontrol's POWER_DOWN_FORCE
is sent as the two state flags it is."""

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
