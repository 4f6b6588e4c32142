"""The address plan: new blocks never overlap a used range, are aligned, and are the lowest free ones."""

from __future__ import annotations

from ipaddress import IPv4Network

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fleet.bootstrap.addressing import (
    GPU_SUPERNET,
    SYSTEM_SUPERNET,
    AddressPlanExhausted,
    UsedRange,
    allocate,
    gpu_prefix,
    plan_addresses,
)

SUPER = IPv4Network("10.0.0.0/16")


@st.composite
def used_ranges(draw: st.DrawFn, min_prefix: int = 12) -> list[IPv4Network]:
    """Ranges in and around SUPER, of any size and alignment (as other stack files may hold)."""
    nets = []
    for _ in range(draw(st.integers(0, 12))):
        prefix = draw(st.integers(min_prefix, 30))
        base = draw(st.integers(int(SUPER.network_address) - 2**20, int(SUPER.broadcast_address) + 2**20))
        nets.append(IPv4Network((base, prefix), strict=False))
    return nets


@settings(max_examples=300, deadline=None)
@given(used=used_ranges(), prefixlen=st.integers(16, 28))
def test_allocate_never_overlaps_and_is_lowest(used: list[IPv4Network], prefixlen: int) -> None:
    try:
        block = allocate(prefixlen, SUPER, used)
    except AddressPlanExhausted:
        free = [b for b in SUPER.subnets(new_prefix=prefixlen) if not any(b.overlaps(u) for u in used)]
        assert free == []
        return
    assert block.prefixlen == prefixlen
    assert block.subnet_of(SUPER)
    assert not any(block.overlaps(u) for u in used)
    lower = [b for b in SUPER.subnets(new_prefix=prefixlen) if b < block]
    assert all(any(b.overlaps(u) for u in used) for b in lower), "a lower free block was skipped"


@settings(max_examples=100, deadline=None)
@given(
    stacks=st.lists(st.tuples(st.integers(1, 600), st.sampled_from([0, 4, 8, 9])), min_size=1, max_size=8),
    reserved=used_ranges(min_prefix=17),
)
def test_regions_added_in_turn_never_overlap(stacks: list[tuple[int, int]], reserved: list[IPv4Network]) -> None:
    used = [UsedRange(r, "reserved") for r in reserved]
    for nodes, subnets in stacks:
        plan = plan_addresses(nodes, 2, subnets, used)
        for new in (plan.system_cidr, plan.gpu_cidr):
            clash = [u for u in used if u.cidr.overlaps(new)]
            assert not clash, f"{new} overlaps {clash}"
        assert plan.system_cidr.subnet_of(SYSTEM_SUPERNET)
        assert plan.gpu_cidr.subnet_of(GPU_SUPERNET)
        used += [UsedRange(plan.system_cidr, "system"), UsedRange(plan.gpu_cidr, "gpu")]


def test_gpu_range_holds_one_subnet_per_nic_with_headroom() -> None:
    total, per_subnet = gpu_prefix(max_nodes=200, subnets=9)  # A3 Ultra: 1 extra gVNIC + 8 RDMA
    assert per_subnet == 23  # 400 addresses + 4 reserved -> /23 (510 usable)
    assert total == 19  # 9 subnets -> 16 slots of /23
    assert (1 << (32 - total)) >= 9 * (1 << (32 - per_subnet))


def test_default_ranges_of_other_stacks_are_avoided() -> None:
    used = [UsedRange(IPv4Network("10.0.0.0/20"), "a"), UsedRange(IPv4Network("10.128.0.0/16"), "a")]
    plan = plan_addresses(16, 2, 8, used)
    assert plan.system_cidr == IPv4Network("10.0.16.0/20")
    assert plan.gpu_cidr == IPv4Network("10.129.0.0/21")


def test_exhausted_supernet_is_an_error() -> None:
    with pytest.raises(AddressPlanExhausted, match="no free /20"):
        allocate(20, IPv4Network("10.0.0.0/19"), [IPv4Network("10.0.0.0/20"), IPv4Network("10.0.16.0/24")])
