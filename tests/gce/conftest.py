"""Fixtures for the GCE actuator tests: inventory pools, the fake Compute server seeded from them,
and a `GceProvider` pointed at it with a fast retry policy."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from fleet.inventory import InventoryPool, parse_inventory
from tests.fakes.compute_api import FakeCompute
from tests.fakes.fixtures import compute_client_kwargs, fake_compute, fake_compute_factory  # noqa: F401

PROJECT = "test-project"
REGION = "us-central1"
ZONE_A, ZONE_B = "us-central1-a", "us-central1-b"


def pool_dict(name: str, capacity: str, **kw: Any) -> dict[str, Any]:
    zones = kw.pop("zones", [ZONE_A, ZONE_B])
    return {
        "name": name,
        "cluster": "c1",
        "provider": "gcp",
        "project": PROJECT,
        "region": REGION,
        "zones": zones,
        "machine_type": "a3-megagpu-8g",
        "gpu_type": "nvidia-h100-mega-80gb",
        "gpus_per_node": 8,
        "capacity_type": capacity,
        "min_nodes": 0,
        "max_nodes": 16,
        "instance_group": f"c1-{name}",
        "instance_groups": {z: f"c1-{name}-{z[-1]}" for z in zones},
        "node_name_prefix": f"c1-{name}",
        **kw,
    }


@pytest.fixture
def pools() -> list[InventoryPool]:
    return parse_inventory(
        [
            pool_dict("spot", "spot"),
            pool_dict("ondemand", "on-demand"),
            pool_dict("resv", "reservation", reservation="h100-resv", zones=[ZONE_A]),
        ]
    )


@pytest.fixture
def fake(fake_compute_factory: Callable[..., FakeCompute], pools: list[InventoryPool]) -> FakeCompute:  # noqa: F811
    fake = fake_compute_factory(PROJECT)
    fake.add_inventory(pools)
    fake.add_reservation(ZONE_A, "h100-resv", "a3-megagpu-8g", count=4, in_use=1)
    return fake


@pytest.fixture
def make_provider(pools: list[InventoryPool]) -> Callable[..., Any]:
    from autoscaler.gce import GceProvider, RetryPolicy

    def make(fake: FakeCompute, **kw: Any) -> GceProvider:
        retry = kw.pop("retry", RetryPolicy(initial=0.01, maximum=0.05, deadline=5.0, attempt_timeout=1.0))
        return GceProvider(kw.pop("pools", pools), endpoint=fake.url, credentials="anonymous", retry=retry, **kw)

    return make


@pytest.fixture
def provider(fake: FakeCompute, make_provider: Callable[..., Any]) -> Any:
    return make_provider(fake)
