"""The clairvoyant lower bound, checked against hand-computed numbers."""

from __future__ import annotations

import pytest

from autoscaler.replay.lower_bound import boot_floor_usd, lower_bound, per_gpu_rates
from autoscaler.replay.scenario import Scenario
from fleet.catalog import load_catalog
from tests.replay.conftest import job

PRICE_1G = load_catalog().machine("a3-highgpu-1g").price("us-central1")
PRICE_8G = load_catalog().machine("a3-highgpu-8g").price("us-central1")


def test_rates_are_the_cheapest_per_gpu_of_the_family() -> None:
    od, spot = per_gpu_rates(Scenario())
    assert od == pytest.approx(min(PRICE_1G.on_demand, PRICE_8G.on_demand / 8))
    assert spot == pytest.approx(min(PRICE_1G.spot, PRICE_8G.spot / 8))


def test_no_reservation_prices_every_gpu_second_at_on_demand() -> None:
    od, _ = per_gpu_rates(Scenario())
    jobs = [job(1, 0, 3600, 8), job(2, 1800, 7200, 2)]
    lb = lower_bound(jobs, Scenario())
    assert lb.usd == pytest.approx(od * (8 * 1 + 2 * 2))
    assert lb.demand_gpu_hours == pytest.approx(12)


def test_reservation_is_paid_for_the_span_and_only_demand_beyond_it_costs_more() -> None:
    sc = Scenario(reserved_nodes=1)  # 8 reserved GPUs
    od, _ = per_gpu_rates(sc)
    jobs = [job(1, 0, 7200, 8), job(2, 0, 3600, 4)]  # 12 GPUs for 1 h, then 8 for 1 h
    lb = lower_bound(jobs, sc)
    assert lb.reservation_usd == pytest.approx(sc.reservation_hourly_usd * 2)
    assert lb.usd == pytest.approx(lb.reservation_usd + 4 * od * 1)


def test_spot_tolerant_work_is_priced_at_spot_and_the_reservation_covers_on_demand_work_first() -> None:
    sc = Scenario(reserved_nodes=1, spot_fraction=0.5)
    od, spot = per_gpu_rates(sc)
    jobs = [job(1, 0, 3600, 8, spot_ok=True), job(2, 0, 3600, 8, spot_ok=False)]
    lb = lower_bound(jobs, sc)
    # the reservation takes the on-demand-only job; the tolerant one runs on spot
    assert lb.usd == pytest.approx(lb.reservation_usd + 8 * spot)
    assert lb.usd < lb.reservation_usd + 8 * od


def test_boot_floor_charges_one_boot_per_new_gpu_or_the_idle_gap_when_shorter() -> None:
    sc = Scenario()  # boot 360 s
    od, _ = per_gpu_rates(sc)
    lb = lower_bound([job(1, 0, 3600, 8)], sc)
    assert boot_floor_usd([job(1, 0, 3600, 8)], sc) == pytest.approx(lb.usd + 8 * 360 * od / 3600)
    # a second job 100 s after the first ended reuses the idle GPUs (100 s < a boot); 1000 s after, it boots
    near = [job(1, 0, 3600, 8), job(2, 3700, 3600, 8)]
    far = [job(1, 0, 3600, 8), job(2, 4600, 3600, 8)]
    assert boot_floor_usd(near, sc) == pytest.approx(lower_bound(near, sc).usd + 8 * (360 + 100) * od / 3600)
    assert boot_floor_usd(far, sc) == pytest.approx(lower_bound(far, sc).usd + 8 * (360 + 360) * od / 3600)


def test_boot_floor_ignores_demand_the_reservation_covers() -> None:
    sc = Scenario(reserved_nodes=1)
    jobs = [job(1, 0, 3600, 8), job(2, 0, 1800, 4)]
    od, _ = per_gpu_rates(sc)
    assert boot_floor_usd(jobs, sc) == pytest.approx(lower_bound(jobs, sc).usd + 4 * 360 * od / 3600)
