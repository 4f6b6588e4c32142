"""`fleet policy check --resources` on hand-edited `fleet synth --json` files: a field of the wrong type is refused
naming the resource and the field (exit 2, no traceback), and a value written without its list brackets or with an
unusual spelling of "everywhere" cannot slip past a guardrail."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from fleet.policy.rules import DEFAULT_SETTINGS, PropertyError, Resource, check_all, no_open_ingress
from tests.inputs.cli import fleet

URN = "urn:pulumi:dev::gpu-fleet::gcp:compute/firewall:Firewall::ssh"
FIREWALL = "gcp:compute/firewall:Firewall"


def synth_json(tmp_path: Path, *resources: dict[str, Any]) -> Path:
    path = tmp_path / "synth.json"
    path.write_text(json.dumps({"stack": "dev", "resources": list(resources)}))
    return path


def firewall(**inputs: Any) -> dict[str, Any]:
    base = {"direction": "INGRESS", "allows": [{"protocol": "tcp", "ports": ["22"]}]}
    return {"urn": URN, "type": FIREWALL, "name": "ssh", "custom": True, "inputs": {**base, **inputs}}


@pytest.mark.parametrize(
    ("change", "field", "got"),
    [
        ({"inputs": [1, 2]}, "inputs", "list"),
        ({"inputs": "x"}, "inputs", "str"),
        ({"name": 5}, "name", "int"),
        ({"custom": "yes"}, "custom", "str"),
    ],
)
def test_a_resource_field_of_the_wrong_type_is_named(tmp_path: Path, change: dict, field: str, got: str) -> None:
    path = synth_json(tmp_path, {**firewall(), **change})
    out = fleet("policy", "check", "--resources", path)
    assert out.code == 2 and "Traceback" not in out.stderr, (out.code, out.stderr, out.exception)
    assert f"--resources: {path}: resources[0] ({URN}): {field}: expected" in out.stderr
    assert f"got {got}" in out.stderr


def test_a_gpu_count_that_is_not_a_number_is_named(tmp_path: Path) -> None:
    vm = {
        "urn": "urn:pulumi:dev::gpu-fleet::gcp:compute/instance:Instance::vm",
        "type": "gcp:compute/instance:Instance",
        "name": "vm",
        "inputs": {"machineType": "n1-standard-8", "guestAccelerators": [{"count": {"n": 8}}]},
    }
    path = synth_json(tmp_path, vm)
    out = fleet("policy", "check", "--resources", path)
    assert out.code == 2 and "Traceback" not in out.stderr, (out.code, out.stderr, out.exception)
    assert f"{vm['urn']}: guestAccelerators[0].count: {{'n': 8}} is not a whole number" in out.stderr


def test_counts_the_engine_writes_as_floats_or_strings_still_count() -> None:
    vm = Resource("urn:pulumi:dev::p::gcp:compute/instance:Instance::vm", "gcp:compute/instance:Instance", "vm",
                  {"machineType": "n1-standard-8", "guestAccelerators": [{"count": 8.0}, {"count": "8"}]})  # fmt: skip
    from fleet.policy.rules import gpus_of

    assert gpus_of(vm.props) == 16
    with pytest.raises(PropertyError, match=re.escape("guestAccelerators[0].count: 8.5 is not a whole number")):
        gpus_of({"guestAccelerators": [{"count": 8.5}]})


@pytest.mark.parametrize(
    "ranges", ["0.0.0.0/0", ["10.0.0.0/8", "::/0"], [" 0.0.0.0/0 "], ["::0/0"], ["1.2.3.4/0"], "0::/0"]
)
def test_open_ingress_is_found_however_it_is_written(ranges: Any) -> None:
    msgs = no_open_ingress(FIREWALL, firewall(sourceRanges=ranges)["inputs"], DEFAULT_SETTINGS)
    assert msgs and "opens it to the internet" in msgs[0], ranges


def test_a_single_allow_without_brackets_is_still_an_allow_rule(tmp_path: Path) -> None:
    rule = firewall(sourceRanges="0.0.0.0/0", allows={"protocol": "tcp", "ports": ["22"]})
    assert no_open_ingress(FIREWALL, rule["inputs"], DEFAULT_SETTINGS)
    out = fleet("policy", "check", "--resources", synth_json(tmp_path, rule))
    assert out.code == 1 and "no-open-ingress" in out.stdout, out.stdout + out.stderr


def test_closed_ranges_pass() -> None:
    for ranges in (["10.0.0.0/8"], "35.235.240.0/20", [], "", None, ["not-a-cidr"]):
        assert not no_open_ingress(FIREWALL, firewall(sourceRanges=ranges)["inputs"], DEFAULT_SETTINGS), ranges
    assert not check_all([Resource(URN, FIREWALL, "ssh", firewall(sourceRanges=["10.0.0.0/8"])["inputs"])])
