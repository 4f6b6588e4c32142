"""Offerings of GCE pools from the catalog, reservation slots and quota headroom (pure)."""

from __future__ import annotations

from typing import Any

from autoscaler.gce.offerings import build_offerings
from fleet.catalog import CapacityType, load_catalog
from tests.gce.conftest import PROJECT, REGION, ZONE_A, ZONE_B


def test_one_offering_per_pool_zone_with_catalog_prices(pools: Any) -> None:
    catalog = load_catalog()
    price = catalog.machine("a3-megagpu-8g").price(REGION)
    offers, warnings = build_offerings(
        pools,
        catalog,
        reservations={(PROJECT, ZONE_A, "h100-resv"): (10, 7)},
        quotas={(PROJECT, REGION): {"NVIDIA_H100_MEGA_GPUS": (100.0, 20.0)}},
    )
    assert warnings == []
    by = {(o.key.zone, o.key.capacity_type): o for o in offers}
    assert len(offers) == 5
    assert by[(ZONE_A, CapacityType.RESERVATION)].available_nodes == 3
    assert by[(ZONE_A, CapacityType.RESERVATION)].reservation_size == 10
    assert by[(ZONE_B, CapacityType.ON_DEMAND)].available_nodes == 10  # floor(80 GPUs / 8)
    assert by[(ZONE_B, CapacityType.ON_DEMAND)].hourly_usd == price.on_demand
    assert by[(ZONE_B, CapacityType.SPOT)].available_nodes is None  # no PREEMPTIBLE_ metric given
    assert by[(ZONE_B, CapacityType.SPOT)].per_gpu_hourly_usd == price.spot / 8


def test_over_used_quota_or_reservation_is_zero_not_negative(pools: Any) -> None:
    offers, _ = build_offerings(
        pools,
        load_catalog(),
        reservations={(PROJECT, ZONE_A, "h100-resv"): (2, 3)},
        quotas={(PROJECT, REGION): {"NVIDIA_H100_MEGA_GPUS": (8.0, 16.0)}},
    )
    assert {o.available_nodes for o in offers if o.key.capacity_type is not CapacityType.SPOT} == {0}


def test_pools_without_a_price_are_warned_about_not_offered(pools: Any) -> None:
    odd = pools[0].model_copy(update={"name": "mystery", "machine_type": "z9-imaginary-8g"})
    far = pools[1].model_copy(update={"name": "far", "region": "antarctica-south1"})
    offers, warnings = build_offerings([odd, far], load_catalog(), reservations={}, quotas={})
    assert offers == []
    assert len(warnings) == 2
    assert "pool mystery: machine_type 'z9-imaginary-8g' not in the catalog" in warnings[0]
    assert "pool far: no on-demand price for a3-megagpu-8g in antarctica-south1" in warnings[1]
