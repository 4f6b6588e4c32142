"""Helpers for component tests: declare resources under Pulumi's mocks and look at what was registered."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from fleet.synth.engine import RecordedResource, SynthResult, run_program


class Declared:
    """What one program registered, with small finders."""

    def __init__(self, result: SynthResult) -> None:
        self.result = result
        self.resources = result.resources

    def of_type(self, suffix: str) -> list[RecordedResource]:
        """Resources whose type token ends with `suffix`, e.g. `compute/network:Network`."""
        return [r for r in self.resources if r.type.endswith(suffix)]

    def one(self, suffix: str) -> RecordedResource:
        found = self.of_type(suffix)
        assert len(found) == 1, f"expected one {suffix}, got {[r.name for r in found]}"
        return found[0]

    def named(self, name: str) -> RecordedResource:
        return self.result.named(name)


@pytest.fixture
def declare() -> Callable[[Callable[[], Any]], Declared]:
    """`declare(fn)` runs `fn` under mocks (project my-proj) and returns what it registered."""

    def run(fn: Callable[[], Any]) -> Declared:
        return Declared(run_program(fn, stack="test", default_gcp_project="my-proj"))

    return run
