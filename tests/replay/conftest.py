"""Shared fixtures: the small ITP-derived trace shipped in tests/data and hand-made traces."""

from __future__ import annotations

from pathlib import Path

import pytest

from autoscaler.replay.trace import TraceJob, load_trace

DATA = Path(__file__).resolve().parents[1] / "data"
SMALL_TRACE = DATA / "itp_cluster10_first150.csv"


@pytest.fixture(scope="session")
def small_trace() -> list[TraceJob]:
    return load_trace(SMALL_TRACE)


def job(i: int, submit: float, duration: float, gpus: int, spot_ok: bool = False) -> TraceJob:
    return TraceJob(f"j{i}", submit, duration, gpus, spot_ok)
