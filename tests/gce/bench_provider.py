"""Benchmarks of GceProvider calls against the fake Compute server (real client, loopback HTTP).
Not collected by default; run explicitly:

    .venv/bin/pytest -q tests/gce/bench_provider.py --benchmark-columns=min,median,max,rounds

Each call is measured end to end (provider logic + google-cloud-compute REST + the fake); the
fake answers in ~2 ms per HTTP call, so these bound the actuator's own overhead per daemon tick.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from autoscaler.cloud import LaunchRequest
from tests.gce.conftest import ZONE_A

pytestmark = pytest.mark.gce


def test_bench_launch_two_nodes(benchmark: Any, provider: Any, fake: Any) -> None:
    counter = itertools.count()
    off = provider.offering_for("spot", ZONE_A)

    def launch() -> None:
        i = next(counter)
        provider.launch(LaunchRequest(f"b-{i}", "spot", off, (f"c1-spot-{2 * i}", f"c1-spot-{2 * i + 1}")))

    benchmark.pedantic(launch, rounds=30, iterations=1)
    assert fake.duplicates() == {}


def test_bench_list_nodes_all_pools(benchmark: Any, provider: Any, fake: Any) -> None:
    off = provider.offering_for("spot", ZONE_A)
    provider.launch(LaunchRequest("seed", "spot", off, tuple(f"c1-spot-{i}" for i in range(16))))
    nodes = benchmark(provider.list_nodes)
    assert len(nodes) == 16


def test_bench_poll_errors_idle(benchmark: Any, provider: Any) -> None:
    assert benchmark(provider.poll_errors) == []


def test_bench_offerings(benchmark: Any, provider: Any) -> None:
    assert len(benchmark(provider.offerings)) == 5
