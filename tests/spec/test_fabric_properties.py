"""The fabric-subnet rule and the carving the stacks use agree, for any pool sizes and gpu_cidr."""

from __future__ import annotations

import itertools
from ipaddress import IPv4Network

from hypothesis import given, settings
from hypothesis import strategies as st

from fleet.catalog import load_catalog
from fleet.spec import FleetSpec
from fleet.spec.derive import GCE_RESERVED_PER_SUBNET, carve_gpu_subnets, fabric_networks, subnet_prefix_for
from fleet.spec.rules import gpu_cidr_fits_fabric

CAT = load_catalog()
TYPES = ["a3-megagpu-8g", "a3-highgpu-8g", "g2-standard-8"]  # 8, 4 and 0 fabric subnets; all in us-central1-a/b/c


def make_spec(sizes: list[tuple[str, int]], prefix: int) -> FleetSpec:
    pools = [{"name": f"p{i}", "machine_type": t, "capacity": "spot", "max_nodes": n} for i, (t, n) in enumerate(sizes)]
    return FleetSpec.model_validate(
        {
            "project": "my-gpu-project",
            "region": "us-central1",
            "zones": ["us-central1-a"],
            "network": {"gpu_cidr": f"10.128.0.0/{prefix}"},
            "clusters": [{"name": "c", "pools": pools, "slurm": {"partitions": [{"name": "x", "pools": ["p0"]}]}}],
        }
    )


@settings(max_examples=40, deadline=None)
@given(
    sizes=st.lists(st.tuples(st.sampled_from(TYPES), st.integers(1, 2000)), min_size=1, max_size=4),
    prefix=st.integers(14, 26),
)
def test_rule_passes_exactly_when_the_subnets_can_be_carved(sizes: list[tuple[str, int]], prefix: int) -> None:
    spec = make_spec(sizes, prefix)
    rule_ok = not list(gpu_cidr_fits_fabric(spec, CAT))
    try:
        carved = carve_gpu_subnets(spec, CAT)
    except ValueError:
        assert not rule_ok
        return
    assert rule_ok
    nets = [n for group in carved.values() for n in group]
    assert all(n.subnet_of(spec.network.gpu_cidr) for n in nets)
    ordered = sorted(nets)
    assert all(not a.overlaps(b) for a, b in itertools.pairwise(ordered))
    for fabric in fabric_networks(spec, CAT):
        group = carved[(fabric.cluster, fabric.machine_type)]
        assert len(group) == fabric.count
        assert all(n.num_addresses >= fabric.max_nodes + GCE_RESERVED_PER_SUBNET for n in group)


@given(st.integers(1, 100_000))
def test_subnet_prefix_is_the_smallest_that_fits(hosts: int) -> None:
    prefix = subnet_prefix_for(hosts)
    size = IPv4Network(f"10.0.0.0/{prefix}").num_addresses
    assert size >= hosts + GCE_RESERVED_PER_SUBNET
    assert prefix == 29 or size // 2 < hosts + GCE_RESERVED_PER_SUBNET
