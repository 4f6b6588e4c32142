"""Pure spec -> component mapping: planes and NICs per machine type, names, MTU, inventory entries."""

from __future__ import annotations

import pytest

from fleet.catalog import load_catalog
from fleet.inventory import InventoryPool
from fleet.spec.load import SpecError, load_spec
from fleet.spec.model import FleetSpec
from stacks import plan

CAT = load_catalog()


def raw_spec(machine_type: str, region: str, zones: list[str], **pool) -> dict:
    part = {"name": "gpu", "pools": ["p"], "spot_tolerant": pool.get("capacity") == "spot"}
    return {
        "project": "my-gpu-project",
        "region": region,
        "zones": zones,
        "clusters": [
            {
                "name": "c",
                "pools": [{"name": "p", "machine_type": machine_type, "max_nodes": 4, **pool}],
                "slurm": {"partitions": [part]},
            }
        ],
    }


def spec(machine_type: str, region: str, zones: list[str], **pool) -> FleetSpec:
    return load_spec(raw_spec(machine_type, region, zones, **pool))


def test_a3mega_gets_eight_gpudirect_planes_and_nine_nics():
    s = spec("a3-megagpu-8g", "us-east4", ["us-east4-a"])
    fp = plan.fabric_plans(s, CAT)[("c", "a3-megagpu-8g")]
    assert [p.name for p in fp.planes] == [f"c-gpunet-{i}" for i in range(8)]
    assert {p.kind for p in fp.planes} == {"gpudirect"} and {p.mtu for p in fp.planes} == {8896}
    assert len(fp.nics) == 9 and fp.nics[0].plane == plan.SYSTEM
    assert [n.plane for n in fp.nics[1:]] == [p.name for p in fp.planes]
    cidrs = [c for p in fp.planes for c in p.cidrs]
    assert len(set(cidrs)) == 8  # distinct subnets carved from gpu_cidr
    assert plan.system_mtu(s, CAT) == 8244


def test_a3ultra_gets_a_second_gvnic_vpc_and_a_zonal_rdma_vpc():
    s = spec("a3-ultragpu-8g", "us-central1", ["us-central1-b"])
    fp = plan.fabric_plans(s, CAT)[("c", "a3-ultragpu-8g")]
    kinds = [(p.name, p.kind, len(p.cidrs)) for p in fp.planes]
    assert kinds == [("c-net-1", "gvnic", 1), ("c-rdma", "rdma", 8)]
    assert fp.planes[1].zone == "us-central1-b"
    assert [n.nic_type for n in fp.nics] == ["GVNIC", "GVNIC"] + ["MRDMA"] * 8
    assert [n.subnet for n in fp.nics[2:]] == list(range(8))
    assert plan.boot_disk_type(CAT.machine("a3-ultragpu-8g")) == "hyperdisk-balanced"
    assert plan.system_mtu(s, CAT) == 8896


def test_single_nic_machine_gets_no_planes():
    s = spec("g2-standard-8", "us-central1", ["us-central1-a"], capacity="spot")
    fp = plan.fabric_plans(s, CAT)[("c", "g2-standard-8")]
    assert fp.planes == [] and len(fp.nics) == 1
    assert plan.system_mtu(s, CAT) == 1460


def test_rdma_machine_in_two_zones_is_a_spec_error():
    # schema-valid only: the spec rules reject this too; the plan must not rely on them
    s = FleetSpec.model_validate(raw_spec("a4-highgpu-8g", "us-west3", ["us-west3-b", "us-west3-c"]))
    with pytest.raises(SpecError) as exc:
        plan.fabric_plans(s, CAT)
    assert exc.value.errors[0][0] == "clusters[0].pools[0].zones"
    assert "RoCE" in exc.value.errors[0][1]


def test_inventory_entry_validates_against_the_contract():
    s = spec("a3-megagpu-8g", "us-east4", ["us-east4-b", "us-east4-c"], capacity="spot")
    entry = plan.inventory_entry(s, s.clusters[0], s.clusters[0].pools[0], CAT, "c-p-abc")
    pool = InventoryPool.model_validate(entry)
    assert pool.instance_groups == {"us-east4-b": "c-p-us-east4-b", "us-east4-c": "c-p-us-east4-c"}
    assert pool.gpus_per_node == 8 and pool.gpu_type == "nvidia-h100-mega-80gb"
    assert pool.slurm_partitions == ["gpu"] and pool.spot_tolerant is True


@pytest.mark.parametrize(
    ("stack", "name"),
    [("gcp-a3mega-slurm", "gcp-a3mega-slurm"), ("Prod_EU.1", "prod-eu-1"), ("42", "f-42"), ("a" * 30, "a" * 20)],
)
def test_fleet_name_is_gce_safe(stack, name):
    assert plan.fleet_name(stack) == name


def test_two_fabric_types_in_one_cluster_get_tagged_plane_names():
    raw = raw_spec("a3-megagpu-8g", "us-east4", ["us-east4-b"])
    raw["clusters"][0]["pools"].append({"name": "u", "machine_type": "a3-ultragpu-8g", "max_nodes": 2})
    raw["clusters"][0]["slurm"]["partitions"].append({"name": "ultra", "pools": ["u"]})
    s = load_spec(raw)
    plans = plan.fabric_plans(s, CAT)
    mega = [p.name for p in plans[("c", "a3-megagpu-8g")].planes]
    ultra = [p.name for p in plans[("c", "a3-ultragpu-8g")].planes]
    assert mega == [f"c-a3mega-gpunet-{i}" for i in range(8)]
    assert ultra == ["c-a3ultra-net-1", "c-a3ultra-rdma"]
    cidrs = [c for fp in plans.values() for p in fp.planes for c in p.cidrs]
    assert len(cidrs) == len(set(cidrs)) == 8 + 1 + 8


@pytest.mark.parametrize(
    ("cluster", "fs"), [("a3ultra", "a3ultra"), ("my-big-cluster", "mybigclu"), ("---", "scratch")]
)
def test_lustre_filesystem_names_are_short_alphanumerics(cluster, fs):
    assert plan.lustre_filesystem_name(cluster) == fs
