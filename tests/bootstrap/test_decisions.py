"""Machine choice, zones, nearest regions, quotas and prices of a bootstrap plan."""

from __future__ import annotations

import pytest

from fleet.bootstrap.errors import BadArgument, NoZoneOffers
from fleet.bootstrap.machine import GPU_FAMILIES, choose_machine
from fleet.bootstrap.plan import plan_region
from fleet.bootstrap.quotas import RegionQuota, shortfalls
from fleet.bootstrap.regions import great_circle_km, known_regions, nearest_offering, region_locations
from fleet.bootstrap.request import BootstrapRequest, parse_capacity
from fleet.catalog import CapacityType, load_catalog

CAT = load_catalog()


#: a Kueue (GKE) request's own arguments, as the CLI fills them
KUEUE = {
    "scheduler": "kueue",
    "autoscaler_image": "registry.example/autoscaler@sha256:" + "0" * 64,
    "upgrade_exclusion_start": "2026-12-01T00:00:00Z",
    "authorized_networks": ("203.0.113.7/32",),
}


def plan(region: str = "us-central1", gpu: str = "h100", gpus: int = 64, capacity: str = "on-demand", **kw):
    kw.setdefault("labels", (("team", "ml-platform"), ("cost-center", "cc-gpu")))
    request = BootstrapRequest("my-gpu-project", region, gpu, gpus, capacity=parse_capacity(capacity), **kw)
    return plan_region(request, CAT, [])


@pytest.mark.parametrize(
    ("gpu", "gpus", "region", "machine", "nodes"),
    [
        ("h100", 64, "us-central1", "a3-megagpu-8g", 8),  # multi-node H100: A3 Mega's fabric
        ("h100", 8, "us-central1", "a3-highgpu-8g", 1),  # one node needs no fabric: A3 High
        ("h100", 2, "us-central1", "a3-highgpu-2g", 1),
        ("h100", 64, "asia-south1", "a3-highgpu-8g", 8),  # no A3 Mega there: A3 High
        ("h200", 20, "europe-west4", "a3-ultragpu-8g", 3),  # rounded up to whole nodes
        ("b200", 16, "us-west3", "a4-highgpu-8g", 2),
        ("a100", 3, "us-central1", "a2-highgpu-4g", 1),
        ("a100-80gb", 16, "us-central1", "a2-ultragpu-8g", 2),
        ("l4", 1, "us-east1", "g2-standard-4", 1),
        ("l4", 24, "us-east1", "g2-standard-96", 3),
    ],
)
def test_machine_and_nodes(gpu: str, gpus: int, region: str, machine: str, nodes: int) -> None:
    choice = choose_machine(CAT, gpu, gpus, region)
    assert (choice.machine.name, choice.nodes) == (machine, nodes)
    assert choice.gpus >= gpus
    assert choice.machine.zones_in(region)


def test_every_zone_chosen_offers_the_machine_type() -> None:
    checked = 0
    for gpu in GPU_FAMILIES:
        for region in known_regions(CAT):
            for capacity in ("on-demand", "spot", "reservation:resv-a"):
                try:
                    p = plan(region, gpu, 16, capacity)
                except NoZoneOffers:
                    continue
                m = p.choice.machine
                pool = p.spec["clusters"][0]["pools"][0]
                assert p.zones and all(m.offered_in(z) for z in p.zones), (gpu, region)
                assert set(pool["zones"]) <= set(p.zones)
                assert set(p.spec["zones"]) == set(p.zones)
                checked += 1
    assert checked > 100


def test_region_without_the_gpu_names_the_nearest_regions_with_prices() -> None:
    with pytest.raises(NoZoneOffers) as info:
        plan("europe-west2", "h200", 32)  # London: no A3 Ultra per the catalog
    err = info.value
    assert err.exit_code == 3
    regions = [alt.region for _, alt in err.alternatives]
    assert regions[:2] == ["europe-west1", "europe-west4"]  # Belgium, then the Netherlands
    distances = [alt.distance_km for _, alt in err.alternatives]
    assert distances == sorted(distances) and distances[0] < 400
    for m, alt in err.alternatives:
        assert m.zones_in(alt.region) == alt.zones
        assert alt.price == m.price(alt.region) and alt.price.on_demand > 0
    assert "europe-west1" in str(err) and "$86.76/h" in str(err)
    data = err.to_json()["nearest_regions"][0]
    assert data["region"] == "europe-west1" and data["on_demand_usd_per_node_hour"] == 86.7599


def test_great_circle_distance() -> None:
    loc = region_locations()
    london_paris = great_circle_km(loc["europe-west2"], loc["europe-west9"])
    assert 330 < london_paris < 360  # ~344 km
    assert great_circle_km(loc["us-central1"], loc["us-central1"]) == 0


def test_region_table_covers_every_catalog_region() -> None:
    missing = set(known_regions(CAT)) - set(region_locations())
    assert not missing


@pytest.mark.parametrize(
    ("kwargs", "argument"),
    [
        ({"gpu": "h300"}, "--gpu"),
        ({"gpus": 0}, "--gpus"),
        ({"region": "mars-north1"}, "--region"),
        ({"region": "us-centrall1"}, "--region"),
        ({"capacity": "reserved"}, "--capacity"),
        ({"capacity": "reservation"}, "--capacity"),
        ({"capacity": "spot:x"}, "--capacity"),
        ({"machine_type": "a3-ultragpu-8g"}, "--machine-type"),
        ({"zones": ("us-central1-f",)}, "--zones"),
        ({"cluster": "Bad_Name"}, "--cluster"),
        ({"reserved_cidrs": ("10.0.0.0/33",)}, "--reserve"),
    ],
)
def test_bad_arguments_name_the_argument(kwargs: dict, argument: str) -> None:
    args = {"region": "us-central1", "gpu": "h100", "gpus": 16, "capacity": "on-demand"} | kwargs
    with pytest.raises(BadArgument) as info:
        plan(**args)
    assert info.value.argument == argument
    assert info.value.exit_code == 2


def test_unknown_region_suggests_the_close_name() -> None:
    with pytest.raises(BadArgument, match="did you mean us-central1"):
        plan("us-centrall1")


def test_reservation_and_compact_pools_get_one_zone() -> None:
    p = plan("us-central1", "h100", 64, "reservation:h100-resv")
    pool = p.spec["clusters"][0]["pools"][0]
    assert pool["reservation"] == "h100-resv" and pool["capacity"] == "reservation"
    assert len(pool["zones"]) == 1 and pool["compact_placement"] is True
    spot = plan("us-central1", "h100", 64, "spot").spec["clusters"][0]["pools"][0]
    assert "compact_placement" not in spot and len(spot["zones"]) == 3


def test_spot_quota_uses_preemptible_metrics_and_reservations_are_not_checked() -> None:
    spot = {q.metric: q for q in plan("us-central1", "h100", 64, "spot").quotas}
    assert spot["PREEMPTIBLE_NVIDIA_H100_MEGA_GPUS"].needed == 64
    assert spot["PREEMPTIBLE_CPUS"].needed == 8 * 208
    assert spot["N2_CPUS"].needed == 8 + 4  # controller + login stay standard VMs
    resv = {q.metric: q for q in plan("us-central1", "h100", 64, "reservation:r").quotas}
    assert resv["NVIDIA_H100_MEGA_GPUS"].checked is False
    a2 = {q.metric for q in plan("us-central1", "a100", 16).quotas}
    assert {"NVIDIA_A100_GPUS", "A2_CPUS"} <= a2


def test_shortfalls_compare_free_quota() -> None:
    needs = plan("us-central1", "h100", 64).quotas
    enough = {q.metric: RegionQuota(q.needed + 10, 10) for q in needs}
    assert shortfalls(needs, enough) == []
    tight = enough | {"NVIDIA_H100_MEGA_GPUS": RegionQuota(64, 8)}
    (short,) = shortfalls(needs, tight)
    assert (short.metric, short.needed, short.available) == ("NVIDIA_H100_MEGA_GPUS", 64, 56)
    missing = {k: v for k, v in enough.items() if k != "CPUS"}
    assert [s.metric for s in shortfalls(needs, missing)] == ["CPUS"]  # an unreported metric has no quota


def test_price_at_min_and_max_by_capacity_type() -> None:
    p = plan("us-central1", "h100", 64)
    rate = CAT.machine("a3-megagpu-8g").price("us-central1")
    assert p.price.per_node == rate.on_demand
    assert (p.price.at_min, p.price.at_max) == (0, pytest.approx(8 * rate.on_demand))
    assert p.prices["spot"].at_max == pytest.approx(8 * rate.spot)
    # a reservation bills whether used or not: its minimum is its full size
    assert p.prices["reservation"].at_min == pytest.approx(8 * rate.on_demand)
    assert p.prices["commit-3y"].per_node == rate.commit_3y
    assert plan("us-central1", "h100", 64, "spot").price.at_max == pytest.approx(8 * rate.spot)


def test_storage_and_slurm_grow_with_the_pool() -> None:
    small = plan("us-central1", "h100", 16)
    big = plan("us-central1", "h100", 8 * 100)
    assert small.storage.home_tier == "BASIC_SSD" and small.storage.scratch_capacity_gib is None
    assert big.storage.home_tier == "ZONAL" and big.storage.scratch_capacity_gib == 18000 * 4
    assert small.slurm.controller_machine_type == "n2-standard-8"
    assert big.slurm.controller_machine_type == "n2-standard-16" and big.slurm.login_nodes == 2


def test_capacity_parsing() -> None:
    assert parse_capacity("reservation:my-resv").reservation == "my-resv"
    assert parse_capacity("flex-start").type is CapacityType.FLEX_START


@pytest.mark.parametrize("capacity", ["on-demand", "spot", "flex-start", "reservation:resv-a"])
def test_every_generated_spec_passes_the_fleet_rules(capacity: str) -> None:
    """plan_region validates its spec with fleet.spec.load_spec (schema + every rule); InvalidPlan would fail."""
    planned = 0
    for gpu in GPU_FAMILIES:
        for gpus in (1, 3, 8, 12, 64, 512, 12800):
            for region in ("us-central1", "europe-west4", "us-east4", "asia-southeast1", "us-west3"):
                try:
                    plan(region, gpu, gpus, capacity)
                except NoZoneOffers:
                    continue
                planned += 1
    assert planned > 100


def test_multi_node_a3_high_is_warned_about_with_the_nearest_regions_whose_fabric_is_set_up() -> None:
    """europe-west9 offers A3 High but not A3 Mega: 64 H100s there get a3-highgpu-8g, whose GPUDirect-TCPX the stack
    sets up no software for, so the plan says multi-node NCCL will not use it and names the nearest A3 Mega
    regions; one node, or a region with A3 Mega, gets no warning."""
    west9 = plan("europe-west9", "h100", 64)
    assert west9.choice.machine.name == "a3-highgpu-8g" and west9.choice.machine.fabric_not_set_up
    (warning,) = west9.warnings
    assert "GPUDirect-TCPX" in warning and "sockets transport" in warning and "these 8 nodes" in warning
    nearest = [alt.region for _, alt in nearest_offering("europe-west9", [CAT.machine("a3-megagpu-8g")])]
    assert f"a3-megagpu-8g in {nearest[0]} (" in warning
    assert plan("europe-west9", "h100", 8).warnings == []  # one node: no inter-node traffic
    assert plan("europe-west4", "h100", 64).warnings == []  # A3 Mega, TCPXO set up
    assert plan("europe-west4", "h200", 64).warnings == []  # A3 Ultra, gIB set up


def test_the_generated_cluster_pins_its_zone_to_the_pools_first() -> None:
    """The controller, login VMs and zonal storage go where the pool starts, written in the file, so a pool listed
    first later does not move /home (fleet.spec.derive.cluster_zone warns of an unpinned zone)."""
    for region, gpu, capacity in (("us-central1", "h100", "spot"), ("europe-west4", "h200", "flex-start")):
        out = plan(region, gpu, 64, capacity)
        (cluster,) = out.spec["clusters"]
        assert cluster["zone"] == cluster["pools"][0]["zones"][0]


def test_a_kueue_region_gets_no_fabric_warning_where_gke_sets_the_fabric_up() -> None:
    """H100s are A3 Mega or, where it is not offered, A3 High, whose GPUDirect-TCPX the Slurm path cannot set up
    (warned, as the test above shows) but GKE's node image can and the GKE stack does: a Kueue region of either,
    like one of A3 Ultra, gets no fabric warning."""
    high = plan("europe-west9", "h100", 64, **KUEUE)
    assert high.choice.machine.name == "a3-highgpu-8g" and high.warnings == []
    mega = plan("us-central1", "h100", 64, **KUEUE)
    assert mega.choice.machine.name == "a3-megagpu-8g" and mega.warnings == []
    assert plan("europe-west4", "h200", 32, **KUEUE).warnings == []


def test_a_kueue_regions_gke_ranges_keep_clear_of_reserved_and_other_stacks_ranges() -> None:
    """GKE's pod, service and control-plane ranges are planned as the system and GPU ranges are: the spec's defaults
    when nothing uses them, else the lowest free blocks, never over a `--reserve`d range."""
    gke = plan("europe-west4", "h200", 32, **KUEUE).spec["clusters"][0]["gke"]
    assert (gke["pods_cidr"], gke["services_cidr"], gke["master_cidr"]) == (
        "10.64.0.0/14",
        "10.68.0.0/20",
        "172.16.0.0/28",
    )
    reserved = ("10.66.0.0/16", "172.16.0.0/24")
    moved = plan("europe-west4", "h200", 32, reserved_cidrs=reserved, **KUEUE)
    gke = moved.spec["clusters"][0]["gke"]
    assert (gke["pods_cidr"], gke["services_cidr"], gke["master_cidr"]) == (
        "10.68.0.0/14",
        "10.64.0.0/20",
        "172.16.1.0/28",
    )
    assert moved.warnings == []
