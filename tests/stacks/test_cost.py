"""Fleet price from the catalog: capacity-type rates, reservations billed at max, missing prices flagged."""

from __future__ import annotations

import pytest

from fleet.catalog import load_catalog
from fleet.spec.load import load_spec
from fleet.synth.cost import fleet_cost

CAT = load_catalog()


def partition(capacity: str) -> dict:
    part = {"name": "gpu", "pools": ["p"], "spot_tolerant": capacity == "spot"}
    if capacity == "flex-start":
        part["max_time"] = "7-00:00:00"
    return part


def one_pool(capacity: str, min_nodes: int = 1, max_nodes: int = 4, **extra) -> object:
    pool = {"name": "p", "machine_type": "a3-megagpu-8g", "capacity": capacity, "min_nodes": min_nodes}
    pool.update(max_nodes=max_nodes, zones=["us-east4-a"], **extra)
    return load_spec(
        {
            "project": "my-gpu-project",
            "region": "us-east4",
            "zones": ["us-east4-a"],
            "clusters": [{"name": "c", "pools": [pool], "slurm": {"partitions": [partition(capacity)]}}],
        }
    )


def test_spot_pool_uses_the_spot_price():
    price = CAT.machine("a3-megagpu-8g").price("us-east4")
    cost = fleet_cost(one_pool("spot"))
    (p,) = cost.by_pool
    assert p.unit_usd_per_hour == price.spot
    assert cost.hourly_usd_at_min == pytest.approx(price.spot * 1, abs=0.01)
    assert cost.hourly_usd_at_max == pytest.approx(price.spot * 4, abs=0.01)
    assert p.price_source == price.source


@pytest.mark.parametrize("capacity", ["on-demand", "flex-start"])
def test_on_demand_and_flex_start_use_the_on_demand_rate(capacity):
    price = CAT.machine("a3-megagpu-8g").price("us-east4")
    cost = fleet_cost(one_pool(capacity, min_nodes=2))
    assert cost.by_pool[0].unit_usd_per_hour == price.on_demand
    assert cost.hourly_usd_at_min == pytest.approx(price.on_demand * 2, abs=0.01)


def test_reservation_bills_at_max_nodes_even_when_idle():
    price = CAT.machine("a3-megagpu-8g").price("us-east4")
    cost = fleet_cost(one_pool("reservation", min_nodes=0, max_nodes=4, reservation="r"))
    assert cost.by_pool[0].billed_nodes_at_min == 4
    assert cost.hourly_usd_at_min == cost.hourly_usd_at_max == pytest.approx(price.on_demand * 4, abs=0.01)


def test_excluded_items_are_listed():
    assert any("controller" in item for item in fleet_cost(one_pool("spot")).excluded)


def test_a_gke_fleet_lists_what_gke_adds_not_a_slurm_controller():
    """`fleet synth`'s "not priced" lines name the system machines the fleet runs: GKE's fee and system pool for a
    GKE cluster, no Slurm controller it does not have."""
    import yaml

    from tests.stacks.test_kube_stacks import REPO

    doc = yaml.safe_load((REPO / "Pulumi.gke-a3ultra-kueue.yaml").read_text())
    excluded = fleet_cost(load_spec(doc["config"]["gpu-fleet:fleet"])).excluded
    assert any("GKE's cluster management fee" in item for item in excluded), excluded
    assert not any("Slurm" in item for item in excluded), excluded
