"""Synthesize each example stack once per session (in-process, under mocks)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleet.synth.run import Synthesis, synth_file

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = ("gcp-a3mega-slurm", "gcp-a3ultra-slurm", "gcp-l4-dev")

_cache: dict[str, Synthesis] = {}


@pytest.fixture(params=EXAMPLES)
def example(request: pytest.FixtureRequest) -> Synthesis:
    return synthesized(request.param)


def synthesized(stack: str) -> Synthesis:
    if stack not in _cache:
        _cache[stack] = synth_file(REPO / f"Pulumi.{stack}.yaml")
    return _cache[stack]


@pytest.fixture
def a3mega() -> Synthesis:
    return synthesized("gcp-a3mega-slurm")


@pytest.fixture
def a3ultra() -> Synthesis:
    return synthesized("gcp-a3ultra-slurm")
