"""The shipped machine catalog: facts the stacks and the planner rely on."""

import pytest

from fleet.catalog import CapacityType, UnknownMachineType, load_catalog

REQUIRED = [
    "a2-highgpu-8g", "a2-ultragpu-8g", "a3-highgpu-1g", "a3-highgpu-2g", "a3-highgpu-4g", "a3-highgpu-8g",
    "a3-megagpu-8g", "a3-ultragpu-8g", "a4-highgpu-8g", "g2-standard-8", "g2-standard-48", "g2-standard-96",
]  # fmt: skip


@pytest.mark.parametrize("name", REQUIRED)
def test_required_machine_types_have_zones_and_prices(name: str) -> None:
    m = load_catalog().machine(name)
    assert m.gpu_count >= 1 and m.gpu.memory_gib > 0 and m.gpu.bf16_dense_tflops > 0
    assert m.zones, "every shipped type must be offered somewhere"
    priced = [r for r in m.zones if m.price(r)]
    assert priced, "at least one offering region must have a price"
    for region in priced:
        p = m.price(region)
        assert p.on_demand > 0
        assert p.spot is None or p.spot < p.on_demand


def test_nic_layouts_match_the_public_blueprints() -> None:
    cat = load_catalog()
    mega = cat.machine("a3-megagpu-8g").nics
    assert (mega.gvnic, mega.gpu_nics, mega.total, mega.gpu_nic_mtu) == (1, 8, 9, 8896)
    for name in ("a3-ultragpu-8g", "a4-highgpu-8g"):
        n = cat.machine(name).nics
        assert (n.gvnic, n.rdma_nics, n.total, n.fabric) == (2, 8, 10, "rdma")
    assert cat.machine("a3-megagpu-8g").gpu.accelerator_type == "nvidia-h100-mega-80gb"


def test_list_price_is_taken_verbatim_from_the_source() -> None:
    # ../shared/data/prices/gcp/list_prices_by_region.csv: a3-highgpu-8g,us-central1,hour=88.4899999
    p = load_catalog().machine("a3-highgpu-8g").price("us-central1")
    assert p.source == "list"
    assert p.on_demand == pytest.approx(88.49, abs=0.01)
    assert p.hourly(CapacityType.SPOT) == pytest.approx(50.6095, abs=0.01)


def test_h200_and_b200_are_never_priced_below_h100() -> None:
    cat = load_catalog()
    h100 = cat.machine("a3-highgpu-8g").price("us-central1").on_demand
    for name in ("a3-ultragpu-8g", "a4-highgpu-8g"):
        for region, price in cat.machine(name).prices.items():
            assert price.on_demand >= 0.9 * h100, (name, region)


def test_right_sizing_shapes_share_a_per_gpu_price() -> None:
    fam = load_catalog().family("a3-highgpu")
    assert [m.gpu_count for m in fam] == [1, 2, 4, 8]
    per_gpu = [m.price("us-central1").on_demand / m.gpu_count for m in fam]
    assert max(per_gpu) == pytest.approx(min(per_gpu), rel=0.01)


def test_unknown_machine_type_suggests_the_nearest_name() -> None:
    with pytest.raises(UnknownMachineType, match="did you mean a3-megagpu-8g"):
        load_catalog().machine("a3-mega-8g")


def test_every_machine_has_a_host_layout_and_gpu_software():
    from fleet.catalog import load_catalog

    cat = load_catalog()
    for m in cat.machines():
        assert m.sockets * m.cores_per_socket * m.threads_per_core == m.vcpus, m.name
        assert m.software and m.software.image.startswith("projects/ubuntu-os-accelerator-images/"), m.name
        # Canonical signs the accelerator images' driver; A3 Mega's TCPXO module is built on the node, unsigned
        assert m.software.secure_boot is (m.software.fabric != "tcpxo"), m.name
    mega, ultra, a4, g2 = (
        cat.machine(n) for n in ("a3-megagpu-8g", "a3-ultragpu-8g", "a4-highgpu-8g", "g2-standard-8")
    )
    assert (mega.sockets, mega.cores_per_socket, mega.threads_per_core) == (2, 52, 2)
    assert (ultra.sockets, ultra.cores_per_socket, ultra.threads_per_core) == (2, 56, 2)
    assert (mega.software.fabric, ultra.software.fabric, a4.software.fabric, g2.software.fabric) == (
        "tcpxo",
        "gib",
        "gib",
        "none",
    )
    tcpxo, gib = cat.fabric_software("tcpxo"), cat.fabric_software("gib")
    assert tcpxo.rxdm_image.endswith(":v1.0.23") and tcpxo.nccl_plugin_image.endswith(":v1.0.17")
    assert (gib.nccl_package, gib.nccl_version) == ("nccl-gib", "v1.1.0")
    assert cat.host_image.endswith("/family/ubuntu-2404-lts-amd64")  # the GPU image's Ubuntu release
