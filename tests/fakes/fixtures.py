"""Pytest fixtures for the fake Compute REST server; import them into a test module or conftest:

    from tests.fakes.fixtures import fake_compute, fake_compute_factory, compute_client_kwargs  # noqa: F401

    @pytest.mark.gce
    def test_quota(fake_compute):
        fake_compute.add_region("us-central1", ["us-central1-a"], quotas={"NVIDIA_H100_MEGA_GPUS": 16})
        client = compute_v1.RegionsClient(**compute_client_kwargs(fake_compute))
        ...

`fake_compute` is a started server for project "test-project" with no state; `fake_compute_factory`
builds more (hooks, boot delays) and stops them all at teardown.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.fakes.compute_api import FakeCompute

DEFAULT_PROJECT = "test-project"


def compute_client_kwargs(fake: FakeCompute) -> dict[str, Any]:
    """Keyword arguments for any `google.cloud.compute_v1.*Client` that point it at `fake`."""
    from google.api_core.client_options import ClientOptions
    from google.auth.credentials import AnonymousCredentials

    return {
        "transport": "rest",
        "credentials": AnonymousCredentials(),
        "client_options": ClientOptions(api_endpoint=fake.url),
    }


@pytest.fixture
def fake_compute_factory() -> Iterator[Callable[..., FakeCompute]]:
    started: list[FakeCompute] = []

    def make(project: str = DEFAULT_PROJECT, **kw: Any) -> FakeCompute:
        fake = FakeCompute(project, **kw).start()
        started.append(fake)
        return fake

    yield make
    for fake in started:
        fake.stop()


@pytest.fixture
def fake_compute(fake_compute_factory: Callable[..., FakeCompute]) -> FakeCompute:
    return fake_compute_factory()
