"""One mutation of a valid spec per rule: the error names the exact field path and the reason."""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from fleet.spec import SpecError, load_spec
from fleet.spec.rules import RULES, check, slurm_time_minutes

Spec = dict[str, Any]


def pool(d: Spec, i: int) -> dict[str, Any]:
    return d["clusters"][0]["pools"][i]


def parts(d: Spec) -> list[dict[str, Any]]:
    return d["clusters"][0]["slurm"]["partitions"]


def storage(d: Spec) -> dict[str, Any]:
    return d["clusters"][0].setdefault("storage", {})


@dataclass(frozen=True)
class Case:
    rule: str
    mutate: Callable[[Spec], None]
    path: str
    reason: str

    def __str__(self) -> str:
        return f"{self.rule}:{self.path}"


def dup_cluster(d: Spec) -> None:
    d["clusters"].append(copy.deepcopy(d["clusters"][0]))


def colliding_prefix(d: Spec) -> None:
    pool(d, 1)["name"] = "a-b"
    parts(d)[1]["pools"] = ["a-b"]
    other = copy.deepcopy(d["clusters"][0])
    other["name"] = "c1-a"
    other["pools"] = [{**copy.deepcopy(pool(d, 1)), "name": "b"}]
    other["slurm"]["partitions"] = [{"name": "pre", "pools": ["b"], "spot_tolerant": True}]
    d["clusters"].append(other)


def long_names(d: Spec) -> None:
    d["region"] = "northamerica-northeast1"
    d["zones"] = ["northamerica-northeast1-b"]
    d["clusters"][0]["name"] = "c" * 20
    name = "p" * 20
    d["clusters"][0]["pools"] = [{"name": name, "machine_type": "g2-standard-8", "capacity": "spot", "max_nodes": 2}]
    d["clusters"][0]["slurm"]["partitions"] = [{"name": "dev", "pools": ["p" * 20], "spot_tolerant": True}]


def flex_compact(d: Spec) -> None:
    pool(d, 0).update(capacity="flex-start", reservation=None)


def g2_in(zone: str) -> Callable[[Spec], None]:
    def mutate(d: Spec) -> None:
        pool(d, 1).update(machine_type="g2-standard-8", zones=[zone])

    return mutate


def g2_fleet_zone_b(d: Spec) -> None:
    d["zones"] = ["us-east4-a", "us-east4-b"]
    pool(d, 1)["machine_type"] = "g2-standard-8"
    d["zones"] = ["us-east4-b"]
    pool(d, 0)["zones"] = None
    pool(d, 0)["compact_placement"] = False


def a4_pools(zone0: str, zones1: list[str] | None) -> Callable[[Spec], None]:
    """Two a4-highgpu-8g pools in us-west3 (offered in b and c)."""

    def mutate(d: Spec) -> None:
        d["region"], d["zones"] = "us-west3", ["us-west3-b", "us-west3-c"]
        pool(d, 0).update(machine_type="a4-highgpu-8g", zones=[zone0])
        pool(d, 1).update(machine_type="a4-highgpu-8g", zones=zones1)

    return mutate


CASES = [
    Case("unique_cluster_names", dup_cluster, "clusters[1].name", "duplicate cluster name 'c1'"),
    Case("unique_pool_names", lambda d: pool(d, 1).update(name="resv"), "clusters[0].pools[1].name",
         "duplicate pool name 'resv'"),
    Case("unique_node_name_prefixes", colliding_prefix, "clusters[1].pools[0].name", "collide with pool c1/a-b"),
    Case("gce_name_lengths", long_names, "clusters[0].pools[0].name", "67 chars (> 63)"),
    Case("fleet_zones_in_region", lambda d: d["zones"].__setitem__(1, "us-west1-a"), "zones[1]",
         "not a zone of region 'us-east4'"),
    Case("fleet_zones_in_region", lambda d: d["zones"].__setitem__(1, "us-east4-a"), "zones[1]", "duplicate zone"),
    Case("known_machine_type", lambda d: pool(d, 1).update(machine_type="a3-megagpu-8"),
         "clusters[0].pools[1].machine_type", "unknown machine type 'a3-megagpu-8' (did you mean a3-megagpu-8g"),
    Case("pool_zones_in_fleet", lambda d: pool(d, 0).update(zones=["us-east4-c"]), "clusters[0].pools[0].zones[0]",
         "not one of the fleet zones"),
    Case("pool_zones_in_fleet", lambda d: pool(d, 1).update(zones=[]), "clusters[0].pools[1].zones", "empty list"),
    Case("machine_offered_in_zones", g2_in("us-east4-b"), "clusters[0].pools[1].zones[0]",
         "g2-standard-8 is not offered in us-east4-b (offered in us-east4-a, us-east4-c)"),
    Case("machine_offered_in_zones", g2_fleet_zone_b, "clusters[0].pools[1].machine_type",
         "offered in none of the fleet zones"),
    Case("max_nodes_positive", lambda d: pool(d, 1).update(max_nodes=0), "clusters[0].pools[1].max_nodes",
         "at least 1"),
    Case("min_not_above_max", lambda d: pool(d, 1).update(min_nodes=5), "clusters[0].pools[1].min_nodes",
         "min_nodes 5 is greater than max_nodes 4"),
    Case("reservation_name", lambda d: pool(d, 0).update(reservation=None), "clusters[0].pools[0].reservation",
         "required with capacity: reservation"),
    Case("reservation_name", lambda d: pool(d, 1).update(reservation="r1"), "clusters[0].pools[1].reservation",
         "cannot be combined with capacity: spot"),
    Case("reservation_name", lambda d: pool(d, 1).update(capacity="flex-start", reservation="r1"),
         "clusters[0].pools[1].reservation", "cannot be combined with capacity: flex-start"),
    Case("reservation_single_zone", lambda d: pool(d, 0).update(zones=None, compact_placement=False),
         "clusters[0].pools[0].zones", "a reservation is zonal"),
    Case("compact_placement_supported", lambda d: pool(d, 0).update(machine_type="a3-highgpu-4g"),
         "clusters[0].pools[0].compact_placement", "a3-highgpu-4g does not support compact placement"),
    Case("compact_placement_supported", lambda d: pool(d, 0).update(max_nodes=1501), "clusters[0].pools[0].max_nodes",
         "1501 nodes exceed the 1500 VMs"),
    Case("compact_placement_single_zone", lambda d: pool(d, 1).update(compact_placement=True),
         "clusters[0].pools[1].zones", "compact placement needs exactly one zone"),
    Case("rdma_single_zone", a4_pools("us-west3-b", None), "clusters[0].pools[1].zones",
         "a4-highgpu-8g uses a zonal RoCE network: name one zone (would use ['us-west3-b', 'us-west3-c'])"),
    Case("rdma_single_zone", a4_pools("us-west3-b", ["us-west3-c"]), "clusters[0].pools[1].zones",
         "share one RoCE network: pool 'resv' is in us-west3-b, this one in us-west3-c"),
    Case("flex_start_compact", flex_compact, "clusters[0].pools[0].compact_placement",
         "flex-start cannot be combined with compact placement on a3-megagpu-8g"),
    Case("labels_valid", lambda d: d.update(labels={"Team": "ml"}), "labels.Team", "label key"),
    Case("labels_valid", lambda d: pool(d, 0).update(labels={"team": "ML Platform"}),
         "clusters[0].pools[0].labels.team", "label value 'ML Platform'"),
    Case("labels_valid", lambda d: pool(d, 0).update(labels={"gpu-fleet-cluster": "other"}),
         "clusters[0].pools[0].labels.gpu-fleet-cluster", "gpu-fleet sets this label itself"),
    Case("labels_valid", lambda d: d.update(labels={"managed-by": "terraform"}), "labels.managed-by",
         "gpu-fleet sets this label itself"),
    Case("cidrs_private", lambda d: d.update(network={"system_cidr": "100.64.0.0/20"}), "network.system_cidr",
         "not a private RFC 1918 range"),
    Case("cidrs_disjoint", lambda d: d.update(network={"gpu_cidr": "10.0.0.0/16"}), "network.gpu_cidr",
         "overlaps network.system_cidr 10.0.0.0/20"),
    Case("cidrs_disjoint", lambda d: d.update(network={"reserved_cidrs": ["10.128.5.0/24"]}),
         "network.reserved_cidrs[0]", "overlaps network.gpu_cidr 10.128.0.0/16"),
    Case("system_cidr_capacity", lambda d: d.update(network={"system_cidr": "10.0.0.0/29"}), "network.system_cidr",
         "4 usable addresses but the fleet may run 10 VMs"),
    Case("gpu_cidr_fits_fabric", lambda d: d.update(network={"gpu_cidr": "10.128.0.0/26"}), "network.gpu_cidr",
         "fabric needs 128 (c1/a3-megagpu-8g: 8 x /28)"),
    Case("filestore_capacity", lambda d: storage(d).update(home={"tier": "BASIC_SSD", "capacity_gb": 1024}),
         "clusters[0].storage.home.capacity_gb", "BASIC_SSD takes 2560..65434 GiB"),
    Case("filestore_capacity", lambda d: storage(d).update(home={"tier": "ENTERPRISE", "capacity_gb": 20480}),
         "clusters[0].storage.home.capacity_gb", "ENTERPRISE takes 1024..10240 GiB"),
    Case("bucket_name_valid", lambda d: storage(d).update(checkpoints={"name": "My_Bucket"}),
         "clusters[0].storage.checkpoints.name", "must be 3-63 chars"),
    Case("bucket_name_valid", lambda d: storage(d).update(checkpoints={"name": "google-ckpt"}),
         "clusters[0].storage.checkpoints.name", "'goog'"),
    Case("bucket_name_valid", lambda d: storage(d).update(checkpoints={"name": "192.168.1.1"}),
         "clusters[0].storage.checkpoints.name", "IP address"),
    Case("bucket_location_near", lambda d: storage(d).update(checkpoints={"location": "europe-west4"}),
         "clusters[0].storage.checkpoints.location", "neither the fleet region 'us-east4'"),
    Case("bucket_location_near", lambda d: storage(d).update(checkpoints={"location": "EUR4"}),
         "clusters[0].storage.checkpoints.location", "multi- or dual-region"),
    Case("scratch_mount_point", lambda d: storage(d).update(scratch={"mount_point": "/home/scratch"}),
         "clusters[0].storage.scratch.mount_point", "under the Filestore home mount"),
    Case("scratch_mount_point", lambda d: storage(d).update(scratch={"mount_point": "/usr"}),
         "clusters[0].storage.scratch.mount_point", "system directory"),
    Case("scratch_mount_point", lambda d: storage(d).update(scratch={"mount_point": "scratch"}),
         "clusters[0].storage.scratch.mount_point", "absolute path"),
    Case("checkpoint_mount_point", lambda d: storage(d).update(checkpoints={"mount_point": "/etc"}),
         "clusters[0].storage.checkpoints.mount_point", "system directory"),
    Case("checkpoint_mount_point", lambda d: storage(d).update(checkpoints={"mount_point": "/home/ckpt"}),
         "clusters[0].storage.checkpoints.mount_point", "under the Filestore home mount"),
    Case("checkpoint_mount_point",
         lambda d: storage(d).update(checkpoints={"mount_point": "/scratch/ckpt"}, scratch={"mount_point": "/scratch"}),
         "clusters[0].storage.checkpoints.mount_point", "overlaps the scratch mount /scratch"),
    Case("scheduler_settings", lambda d: d["clusters"][0].update(scheduler="kueue"), "clusters[0].kueue",
         "required with scheduler: kueue"),
    Case("scheduler_settings", lambda d: d["clusters"][0].update(platform="gke"), "clusters[0].platform",
         "scheduler: slurm runs on platform: gce"),
    Case("scheduler_settings", lambda d: d["clusters"][0].pop("slurm"), "clusters[0].slurm",
         "required with scheduler: slurm"),
    Case("partitions_unique", lambda d: parts(d)[1].update(name="main"), "clusters[0].slurm.partitions[1].name",
         "duplicate partition name 'main'"),
    Case("slurm_reserved_names", lambda d: parts(d)[0].update(name="default"),
         "clusters[0].slurm.partitions[0].name", "'default' is reserved in slurm.conf"),
    Case("slurm_reserved_names", lambda d: (pool(d, 1).update(name="all"), parts(d)[1].update(pools=["all"])),
         "clusters[0].pools[1].name", "ALL means every node"),
    Case("partition_pools_known", lambda d: parts(d)[0].update(pools=["resv", "nope"]),
         "clusters[0].slurm.partitions[0].pools[1]", "unknown pool 'nope' (pools: resv, spot)"),
    Case("partition_pools_known", lambda d: parts(d)[0].update(pools=["resv", "resv"]),
         "clusters[0].slurm.partitions[0].pools[1]", "listed twice"),
    Case("pools_in_a_partition", lambda d: parts(d).pop(1), "clusters[0].pools[1].name",
         "pool 'spot' is in no Slurm partition"),
    Case("one_default_partition", lambda d: parts(d)[1].update(default=True),
         "clusters[0].slurm.partitions[1].default", "'main' is already the default"),
    Case("spot_pools_in_tolerant_partitions", lambda d: parts(d)[1].update(spot_tolerant=False),
         "clusters[0].slurm.partitions[1].pools[0]", "spot capacity but partition 'pre' is not spot_tolerant"),
    Case("partition_max_time", lambda d: parts(d)[0].update(max_time="forever"),
         "clusters[0].slurm.partitions[0].max_time", "not a Slurm time"),
    Case("flex_start_max_time", lambda d: pool(d, 1).update(capacity="flex-start"),
         "clusters[0].slurm.partitions[1].max_time", "longer than the 7 days a flex-start node lives"),
    Case("flex_start_max_time", lambda d: (pool(d, 1).update(capacity="flex-start"),
                                           parts(d)[1].update(max_time="7-00:01:00")),
         "clusters[0].slurm.partitions[1].max_time", "7-00:01:00 is longer"),
    Case("pool_zones_in_fleet", lambda d: pool(d, 1).update(zones=["us-east4-b", "us-east4-b"]),
         "clusters[0].pools[1].zones[1]", "duplicate zone"),
    Case("cluster_zone_in_fleet", lambda d: d["clusters"][0].update(zone="us-east4-c"), "clusters[0].zone",
         "not one of the fleet zones"),
    Case("slurm_extra_config", lambda d: d["clusters"][0]["slurm"].update(extra_config={"PartitionName": "x"}),
         "clusters[0].slurm.extra_config.PartitionName", "partitions come from slurm.partitions"),
    Case("slurm_accounting_tres_needs_slurmdbd",
         lambda d: d["clusters"][0]["slurm"].update(accounting="none", extra_config={"AccountingStorageTRES": "cpu"}),
         "clusters[0].slurm.extra_config.AccountingStorageTRES", "fatal without slurmdbd"),
    Case("slurm_extra_config", lambda d: d["clusters"][0]["slurm"].update(extra_config={"Bad Key": "1"}),
         "clusters[0].slurm.extra_config.Bad Key", "not a slurm.conf key"),
    Case("slurm_extra_config", lambda d: d["clusters"][0]["slurm"].update(extra_config={"PriorityType": "a\nb"}),
         "clusters[0].slurm.extra_config.PriorityType", "one non-empty line"),
    Case("slurm_preemption_owned_by_preempt_spot",  # spot work shares the reservation: the stack owns preemption
         lambda d: (parts(d)[1].update(pools=["spot", "resv"]),
                    d["clusters"][0]["slurm"].update(extra_config={"PreemptMode": "CANCEL"})),
         "clusters[0].slurm.extra_config.PreemptMode", "set preempt_spot: false to configure it yourself"),
    Case("slurm_prolog_owned_by_tcpxo",  # A3 Mega pools: the render's Prolog runs the TCPXO receive-datapath manager
         lambda d: d["clusters"][0]["slurm"].update(extra_config={"Prolog": "/etc/slurm/site-prolog.sh"}),
         "clusters[0].slurm.extra_config.Prolog", "leave GPUDirect jobs without it"),
    Case("slurm_machine_types_not_gpu",
         lambda d: d["clusters"][0]["slurm"].update(controller_machine_type="a3-megagpu-8g"),
         "clusters[0].slurm.controller_machine_type", "GPU machine type"),
    Case("slurm_suspend_time", lambda d: d["clusters"][0]["slurm"].update(suspend_time=300),
         "clusters[0].slurm.suspend_time", "300 s is shorter than the autoscaler's longest idle keep"),
    Case("slurm_suspend_time",  # a wait value lengthens the keep: T = boot * (1 + w / p)
         lambda d: d["clusters"][0]["slurm"].update(suspend_time=600,
                                                    autoscaler={"policy": {"wait_value_usd_per_gpu_hour": 100}}),
         "clusters[0].slurm.suspend_time", "wait value 100 $/GPU-h"),
    Case("autoscaler_policy", lambda d: d["clusters"][0]["slurm"].update(autoscaler={"policy": {"idle_timout_s": 1}}),
         "clusters[0].slurm.autoscaler.policy.idle_timout_s", "unknown policy field"),
    Case("autoscaler_policy", lambda d: d["clusters"][0]["slurm"].update(autoscaler={"policy": {"max_nodes": -1}}),
         "clusters[0].slurm.autoscaler.policy.max_nodes", "must be >= 0"),
    Case("autoscaler_policy",
         lambda d: d["clusters"][0]["slurm"].update(autoscaler={"policy": {"spot_queues": ["nope"]}}),
         "clusters[0].slurm.autoscaler.policy.spot_queues", "'nope' is not a partition"),
    Case("autoscaler_policy",  # a misspelt pool: the cap would never apply
         lambda d: d["clusters"][0]["slurm"].update(autoscaler={"policy": {"pool_max_nodes": {"nosuchpool": 2}}}),
         "clusters[0].slurm.autoscaler.policy.pool_max_nodes", "'nosuchpool' is not a pool of this cluster"),
    Case("autoscaler_policy",
         lambda d: d["clusters"][0]["slurm"].update(autoscaler={"policy": {"pool_max_gpus": {"nosuchpool": 8}}}),
         "clusters[0].slurm.autoscaler.policy.pool_max_gpus", "'nosuchpool' is not a pool of this cluster"),
    Case("autoscaler_policy",  # the base spec has a reservation pool: no strict late binding
         lambda d: d["clusters"][0]["slurm"].update(autoscaler={"policy": {"share_nodes": True}}),
         "clusters[0].slurm.autoscaler.policy.share_nodes", "needs strict late binding"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("value", "minutes"),
    [("90", 90), ("1:30", 1.5), ("2:00:00", 120), ("2-12", 3600), ("2-12:30", 3630), ("1-00:00:30", 1440.5),
     ("INFINITE", None)],
)  # fmt: skip
def test_slurm_time_minutes(value: str, minutes: float | None) -> None:
    assert slurm_time_minutes(value) == minutes


def test_site_preemption_is_allowed_where_the_stack_renders_none(base: Spec) -> None:
    base["clusters"][0]["slurm"]["extra_config"] = {"PreemptType": "preempt/qos"}
    assert check(load_spec(base)) == []  # spot work does not share the reservation here
    parts(base)[1]["pools"] = ["spot", "resv"]
    base["clusters"][0]["slurm"]["autoscaler"] = {"policy": {"preempt_spot": False}}
    assert check(load_spec(base)) == []  # the operator turned the stack's preemption off


def test_base_spec_is_valid(base: Spec) -> None:
    load_spec(base)


@pytest.mark.parametrize("case", CASES, ids=str)
def test_rule_reports_field_path_and_reason(base: Spec, case: Case) -> None:
    case.mutate(base)
    with pytest.raises(SpecError) as info:
        load_spec(base)
    errors = info.value.errors
    assert any(path == case.path and case.reason in reason for path, reason in errors), errors
    assert f"{case.path}: " in str(info.value)


def test_every_rule_has_a_test() -> None:
    tested = {c.rule for c in CASES}
    assert {r.__name__ for r in RULES if r.__module__ == "fleet.spec.rules"} <= tested  # kube_rules: test_kube_rules


VALID_VARIATIONS = {
    "bucket-multiregion": lambda d: d["clusters"][0].update(storage={"checkpoints": {"location": "US"}}),
    "bucket-dual-region": lambda d: (d.update(region="us-central1", zones=["us-central1-a"]),
                                     pool(d, 0).update(zones=["us-central1-a"]),
                                     d["clusters"][0].update(storage={"checkpoints": {"location": "nam4"}})),
    "bucket-region": lambda d: d["clusters"][0].update(storage={"checkpoints": {"location": "us-east4"}}),
    "scratch-home-without-filestore":
        lambda d: d["clusters"][0].update(storage={"home": None, "scratch": {"mount_point": "/home"}}),
    "maxtime-days": lambda d: parts(d)[0].update(max_time="2-12:00:00"),
    "maxtime-minutes": lambda d: parts(d)[0].update(max_time="90"),
    "flex-start-7-days": lambda d: (pool(d, 1).update(capacity="flex-start"), parts(d)[1].update(max_time="7-00")),
    "no-default": lambda d: parts(d)[0].update(default=False),  # none marked: the first is the default
    "pool-in-two-partitions": lambda d: parts(d)[1].update(pools=["spot", "resv"]),
    # more TRES accounted by the cluster's slurmdbd; or a site's own slurmdbd (shared by clusters) instead of it
    "tres-with-slurmdbd": lambda d: d["clusters"][0]["slurm"].update(
        extra_config={"AccountingStorageTRES": "gres/gpu,gres/gpu:h100", "AccountingStorageEnforce": "associations"}),
    "tres-with-own-slurmdbd": lambda d: d["clusters"][0]["slurm"].update(accounting="none", extra_config={
        "AccountingStorageType": "accounting_storage/slurmdbd", "AccountingStorageHost": "dbd.example.internal",
        "AccountingStorageTRES": "gres/gpu"}),
}  # fmt: skip


@pytest.mark.parametrize("mutate", VALID_VARIATIONS.values(), ids=VALID_VARIATIONS.keys())
def test_valid_variations_pass(base: Spec, mutate: Callable[[Spec], None]) -> None:
    mutate(base)
    load_spec(base)


def test_flex_start_with_compact_placement_is_fine_on_a3_ultra(base: Spec) -> None:
    base["region"], base["zones"] = "us-central1", ["us-central1-b"]
    base["clusters"][0]["pools"] = [
        {"name": "flex", "machine_type": "a3-ultragpu-8g", "capacity": "flex-start", "compact_placement": True,
         "max_nodes": 8},
    ]  # fmt: skip
    base["clusters"][0]["slurm"]["partitions"] = [{"name": "main", "pools": ["flex"], "max_time": "7-00:00:00"}]
    load_spec(base)


def test_all_errors_are_reported_at_once(base: Spec) -> None:
    pool(base, 1).update(min_nodes=9, reservation="x")
    parts(base)[0]["pools"] = ["nope", "resv"]
    with pytest.raises(SpecError) as info:
        load_spec(base)
    paths = [p for p, _ in info.value.errors]
    assert paths == [
        "clusters[0].pools[1].min_nodes",
        "clusters[0].pools[1].reservation",
        "clusters[0].slurm.partitions[0].pools[0]",
    ]


def test_check_returns_no_issue_for_a_valid_spec(base: Spec) -> None:
    from fleet.spec import FleetSpec

    assert check(FleetSpec.model_validate(base)) == []
