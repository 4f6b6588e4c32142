"""Hostlist expressions as slurmctld passes them to the power-saving programs."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from autoscaler.slurm.hostlist import HostlistError, compress, expand


@pytest.mark.parametrize(
    ("expr", "names"),
    [
        ("gpu-a3-0", ["gpu-a3-0"]),
        ("gpu-a3-[0-2]", ["gpu-a3-0", "gpu-a3-1", "gpu-a3-2"]),
        ("a-[1,3-4],b-7", ["a-1", "a-3", "a-4", "b-7"]),
        ("n[08-10]", ["n08", "n09", "n10"]),
        ("r[1-2]n[1-2]", ["r1n1", "r1n2", "r2n1", "r2n2"]),
        ("a-1,a-1", ["a-1"]),
        ("c1-spot-[0-1], c1-res-3", ["c1-spot-0", "c1-spot-1", "c1-res-3"]),
    ],
)
def test_expand(expr: str, names: list[str]) -> None:
    assert expand(expr) == names


@pytest.mark.parametrize("bad", ["a-[0-2", "a-0]", "a-[x]", "a-[3-1]"])
def test_malformed_hostlists_are_rejected_with_the_expression(bad: str) -> None:
    with pytest.raises(HostlistError, match="hostlist"):
        expand(bad)


def test_compress() -> None:
    assert compress(["a-0", "a-1", "a-3", "b-2"]) == "a-[0-1,3],b-2"
    assert compress(["login"]) == "login"


@given(st.sets(st.integers(min_value=0, max_value=300), min_size=1, max_size=40))
def test_compress_then_expand_round_trips(idx: set[int]) -> None:
    names = [f"c1-pool-{i}" for i in sorted(idx)]
    assert expand(compress(names)) == names
