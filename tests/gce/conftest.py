"""Fixtures for the GCE actuator tests: the fake Compute server (see tests/fakes/fixtures.py)."""

from tests.fakes.fixtures import compute_client_kwargs, fake_compute, fake_compute_factory  # noqa: F401
