"""Reading specs from stack files: schema errors as field paths, stack kinds, provider config, examples."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from fleet.catalog import load_catalog
from fleet.spec import FleetSpec, SpecError, load_spec, load_stack_file, read_stack_config, spec_kind, stack_file
from fleet.spec.derive import carve_gpu_subnets, checkpoint_bucket_name, fabric_networks, pool_zones

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ["gcp-a3mega-slurm", "gcp-a3ultra-slurm", "gcp-l4-dev"]


def errors_of(data: Any) -> list[tuple[str, str]]:
    with pytest.raises(SpecError) as info:
        load_spec(data)
    return info.value.errors


SCHEMA_CASES = [
        (lambda d: d["clusters"][0]["pools"][0].pop("max_nodes"), "clusters[0].pools[0].max_nodes", "required field"),
        (lambda d: d["clusters"][0]["pools"][1].update(name="Spot"), "clusters[0].pools[1].name", "RFC 1035"),
        (lambda d: d["clusters"][0]["pools"][1].update(maxnodes=3), "clusters[0].pools[1].maxnodes", "unknown field"),
        (lambda d: d["clusters"][0]["pools"][1].update(capacity="preemptible"), "clusters[0].pools[1].capacity",
         "'reservation', 'spot', 'flex-start' or 'on-demand'"),
        (lambda d: d.update(network={"system_cidr": "10.0.0.1/20"}), "network.system_cidr", "IPv4 network"),
        (lambda d: d.update(project="My Project"), "project", "not a valid GCP project id"),
        (lambda d: d["clusters"][0]["pools"][1].update(min_nodes=-1), "clusters[0].pools[1].min_nodes",
         "greater than or equal to 0"),
        (lambda d: d.update(clusters=[]), "clusters", "at least 1 item"),
        (lambda d: d["clusters"][0].update(storage={"checkpoints": {"soft_delete_days": 3}}),
         "clusters[0].storage.checkpoints.soft_delete_days", "0 (off) or 7 to 90 days"),
]  # fmt: skip


@pytest.mark.parametrize(("mutate", "path", "reason"), SCHEMA_CASES)
def test_schema_errors_use_index_paths(base: dict[str, Any], mutate, path: str, reason: str) -> None:
    mutate(base)
    errors = errors_of(base)
    assert any(p == path and reason in r for p, r in errors), errors


def test_schema_errors_are_all_reported_and_printed_one_per_line(base: dict[str, Any]) -> None:
    base["clusters"][0]["pools"][0]["max_nodes"] = "many"
    base["region"] = "US East"
    with pytest.raises(SpecError) as info:
        load_spec(base)
    lines = str(info.value).splitlines()
    assert [ln.split(":")[0] for ln in lines] == ["region", "clusters[0].pools[0].max_nodes"]


def test_spec_error_is_a_value_error_with_paths() -> None:
    err = SpecError([("a.b", "bad"), ("c", "worse")])
    assert isinstance(err, ValueError)
    assert str(err) == "a.b: bad\nc: worse"


def test_other_stack_kinds_are_not_fleet_specs(base: dict[str, Any]) -> None:
    assert spec_kind(base) == "fleet"
    assert spec_kind({**base, "kind": "fleet"}) == "fleet"
    assert spec_kind({"kind": "project-bootstrap"}) == "project-bootstrap"
    assert errors_of({"kind": "project-bootstrap", "region": "us-east4"}) == [
        ("kind", "stack kind 'project-bootstrap' is not a fleet spec (load_spec handles kind: fleet)")
    ]


def test_a_non_mapping_spec_is_rejected() -> None:
    assert errors_of(["not", "a", "spec"]) == [("gpu-fleet:fleet", "must be a mapping (the fleet spec), got list")]


def write_stack(tmp_path: Path, config: dict[str, Any], name: str = "dev") -> Path:
    path = tmp_path / f"Pulumi.{name}.yaml"
    path.write_text(yaml.safe_dump({"config": config}))
    return path


def test_read_stack_config_returns_the_fleet_value(tmp_path: Path, base: dict[str, Any]) -> None:
    path = write_stack(tmp_path, {"gcp:project": "my-gpu-project", "gpu-fleet:fleet": base})
    assert read_stack_config(path) == base
    assert isinstance(load_stack_file(path), FleetSpec)


def test_missing_fleet_key_names_the_key_and_file(tmp_path: Path) -> None:
    path = write_stack(tmp_path, {"gcp:project": "p"})
    with pytest.raises(SpecError) as info:
        read_stack_config(path)
    [(where, reason)] = info.value.errors
    assert where == "config.gpu-fleet:fleet" and str(path) in reason


def test_missing_stack_file_is_a_spec_error(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="no such stack file"):
        read_stack_config(tmp_path / "Pulumi.nope.yaml")


def test_invalid_yaml_is_reported(tmp_path: Path) -> None:
    path = tmp_path / "Pulumi.x.yaml"
    path.write_text("config: [unclosed")
    with pytest.raises(SpecError, match="not valid YAML"):
        read_stack_config(path)


def test_provider_config_must_agree_with_the_spec(tmp_path: Path, base: dict[str, Any]) -> None:
    path = write_stack(tmp_path, {"gcp:project": "other-project", "gcp:region": "us-east4", "gpu-fleet:fleet": base})
    with pytest.raises(SpecError) as info:
        load_stack_file(path)
    assert info.value.errors == [
        ("gcp:project", "is 'other-project' but the fleet spec says project: 'my-gpu-project'; they must agree")
    ]


def test_stack_file_finds_stacks_and_lists_known_ones(tmp_path: Path, base: dict[str, Any]) -> None:
    path = write_stack(tmp_path, {"gpu-fleet:fleet": base}, name="mine")
    assert stack_file("mine", root=tmp_path) == path
    with pytest.raises(SpecError) as info:
        stack_file("theirs", root=tmp_path)
    [(where, reason)] = info.value.errors
    assert where == "--stack" and "known stacks: mine" in reason


def test_stack_file_defaults_to_the_repo_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert stack_file("gcp-l4-dev") == ROOT / "Pulumi.gcp-l4-dev.yaml"


@pytest.mark.parametrize("stack", EXAMPLES)
def test_examples_load(stack: str) -> None:
    spec = load_stack_file(stack_file(stack, root=ROOT))
    assert spec.clusters and all(c.scheduler == "slurm" for c in spec.clusters)


def test_a3mega_example_shape() -> None:
    spec = load_stack_file(ROOT / "Pulumi.gcp-a3mega-slurm.yaml")
    pools = {p.name: p for p in spec.clusters[0].pools}
    assert pools["resv"].capacity == "reservation" and pools["resv"].reservation and pools["resv"].compact_placement
    assert pools["spot"].capacity == "spot"
    assert all(p.machine_type == "a3-megagpu-8g" for p in pools.values())
    storage = spec.clusters[0].storage
    assert storage.home is not None and storage.checkpoints is not None


def test_a3ultra_example_uses_the_rdma_fabric() -> None:
    spec = load_stack_file(ROOT / "Pulumi.gcp-a3ultra-slurm.yaml")
    [net] = fabric_networks(spec, load_catalog())
    assert (net.machine_type, net.fabric, net.count) == ("a3-ultragpu-8g", "rdma", 9)  # 8 RDMA subnets + 2nd gVNIC


def test_l4_dev_example_is_small_spot() -> None:
    spec = load_stack_file(ROOT / "Pulumi.gcp-l4-dev.yaml")
    pools = spec.clusters[0].pools
    assert all(p.capacity == "spot" and p.machine_type.startswith("g2-") and p.min_nodes == 0 for p in pools)


# ---------------------------------------------------------------- derived values


def test_pool_zones_default_to_fleet_zones_offering_the_type(base: dict[str, Any]) -> None:
    base["zones"] = ["us-east4-a", "us-east4-b", "us-east4-c"]
    base["clusters"][0]["pools"][1]["machine_type"] = "g2-standard-8"  # not offered in us-east4-b
    spec = load_spec(base)
    assert pool_zones(spec, spec.clusters[0].pools[1], load_catalog()) == ("us-east4-a", "us-east4-c")


def test_default_checkpoint_bucket_name(base: dict[str, Any]) -> None:
    spec = load_spec(base)
    assert checkpoint_bucket_name(spec, spec.clusters[0]) == "my-gpu-project-c1-checkpoints"


def test_gpu_subnets_are_carved_aligned_and_disjoint() -> None:
    spec = load_stack_file(ROOT / "Pulumi.gcp-a3mega-slurm.yaml")
    subnets = carve_gpu_subnets(spec, load_catalog())
    [(key, nets)] = subnets.items()
    assert key == ("a3mega", "a3-megagpu-8g") and len(nets) == 8  # one VPC per TCPXO NIC
    # 48 nodes + 4 GCE-reserved addresses -> /26 each
    assert [str(n) for n in nets[:2]] == ["10.128.0.0/26", "10.128.0.64/26"]
    assert all(n.subnet_of(spec.network.gpu_cidr) for n in nets)
    assert all(not a.overlaps(b) for i, a in enumerate(nets) for b in nets[i + 1 :])
