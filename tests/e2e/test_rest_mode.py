"""The daemon's whole loop in `slurm.mode: rest`: the end-to-end test of test_end_to_end.py with the daemon reading
Slurm through a real slurmrestd (JWT auth, `rest_api: auto`) and signing its own tokens with slurm.conf's HS256 key
(`slurm.jwt_key_file`), as it would on the stacks' controller.  Until the thirty-ninth round `mode: rest` had met a
real slurmrestd only call by call (tests/slurm_source/test_slurmrestd.py), never a running daemon.

Reads (jobs, nodes, reservations) go to slurmrestd only; node updates go where `RestSlurm` sends them: scontrol on
22.05 (openapi v0.0.38 has no node update), slurmrestd's own on 23.11 (the suite's release;
tests/e2e_22_05/test_daemon_rest_22_05.py runs this module on 22.05)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from autoscaler.slurm.client import CliSlurm, RestSlurm
from tests.e2e.env import E2E, e2e_env
from tests.e2e.test_end_to_end import test_jobs_get_instances_run_and_idle_nodes_are_deleted as end_to_end
from tests.harness.slurm import SlurmHarness

pytestmark = [pytest.mark.slurm, pytest.mark.gce, pytest.mark.slow]


@pytest.fixture
def env(slurm_factory: Callable[..., SlurmHarness]) -> Iterator[E2E]:
    with e2e_env(slurm_factory, suspend_time=6, slurm_mode="rest") as e:
        yield e


def test_the_daemon_in_rest_mode_runs_jobs_and_deletes_idle_nodes(env: E2E, monkeypatch: pytest.MonkeyPatch) -> None:
    rest_calls: list[tuple[str, str]] = []
    cli_reads: list[str] = []
    call = RestSlurm._call

    def recorded(self: RestSlurm, method: str, path: str, **kw: Any) -> dict[str, Any]:
        rest_calls.append((method, path))
        return call(self, method, path, **kw)

    def no_cli_read(what: str) -> Callable[..., Any]:
        def read(self: CliSlurm, *a: Any, **kw: Any) -> Any:
            cli_reads.append(what)
            raise AssertionError(f"mode: rest read {what} through the CLI")

        return read

    monkeypatch.setattr(RestSlurm, "_call", recorded)
    for what in ("jobs", "nodes", "reservations"):
        monkeypatch.setattr(CliSlurm, what, no_cli_read(what))

    end_to_end(env)

    assert isinstance(env.daemon.slurm, RestSlurm) and env.daemon.slurm.tokens.origin.startswith("a token signed")
    ticks = env.ticks
    assert ticks and all(t.slurm_ok and t.error is None for t in ticks), [(t.slurm_ok, t.error) for t in ticks]
    assert not cli_reads
    # every tick read the queue and the nodes from slurmrestd
    assert rest_calls.count(("GET", "jobs")) >= len(ticks) and rest_calls.count(("GET", "nodes")) >= len(ticks)
