"""A job's `--constraint` read against one node's features (`autoscaler.slurm.constraint.matches`), and which pools
the daemon may plan a pending job onto (`autoscaler.daemon.snapshot.constrained_pools`)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from autoscaler.daemon.snapshot import NameIndex, job_pools, pool_nodes
from autoscaler.model import Pool
from autoscaler.slurm.constraint import (
    RIGHT_SIZED_MARK,
    ConstraintUnreadable,
    alternatives,
    constraint_expression,
    matches,
)
from autoscaler.slurm.readers import SlurmJob, SlurmNode
from fleet.catalog import CapacityType

NODE = ("h100", "a3-highgpu-8g", "spot")  # what fleet.slurm.conf renders: <gpu>,<machine type>,<capacity type>


@pytest.mark.parametrize(
    ("expr", "ok"),
    [
        ("", True),
        ("a3-highgpu-8g", True),
        ("a3-highgpu-1g", False),
        ("h100&spot", True),
        ("h100&on-demand", False),
        ("a3-highgpu-1g|a3-highgpu-8g", True),
        ("[a3-highgpu-4g|a3-highgpu-8g]", True),
        ("a3-highgpu-8g*2", True),  # a count asks for that many such nodes; this node is one
        ("(a3-highgpu-1g|a3-highgpu-8g)&spot", True),
        ("(a3-highgpu-1g|a3-highgpu-8g)&on-demand", False),
        ("h100&(on-demand|reservation)", False),
    ],
)
def test_an_expression_is_read_against_one_nodes_features(expr: str, ok: bool) -> None:
    assert matches(expr, NODE) is ok


@pytest.mark.parametrize(
    ("expr", "why"),
    [
        ("a3-highgpu-8g&spot|h100", "mixed without parentheses"),  # Slurm's precedence is not documented
        ("(a3-highgpu-8g", "not closed"),
        ("a3-highgpu-8g)", "unbalanced"),
        ("a3-highgpu-8g&", "ends where a feature was expected"),
        ("a3,spot", "cannot read"),
    ],
)
def test_an_expression_it_cannot_read_for_certain_is_refused_with_the_reason(expr: str, why: str) -> None:
    with pytest.raises(ConstraintUnreadable, match=why):
        matches(expr, NODE)


def _pool(name: str, machine: str, capacity: CapacityType) -> Pool:
    return Pool(name, machine, "nvidia-h100-80gb", int(machine.split("-")[-1][:-1]), ("z",), capacity, 4,
                node_name_prefix=f"c1-{name}", queues=frozenset({"gpu"}))  # fmt: skip


POOLS = [
    _pool("spot8", "a3-highgpu-8g", CapacityType.SPOT),
    _pool("od8", "a3-highgpu-8g", CapacityType.ON_DEMAND),
    _pool("od1", "a3-highgpu-1g", CapacityType.ON_DEMAND),
]
SLURM_NODES = {  # as sinfo reports the rendered nodes' features
    f"c1-{p.name}-0": SlurmNode(f"c1-{p.name}-0", "idle", frozenset({"CLOUD", "POWERED_DOWN"}), p.gpus_per_node, 0,
                                ("gpu",), ("h100", p.machine_type, str(p.capacity_type)))
    for p in POOLS
}  # fmt: skip
NODES = pool_nodes(POOLS, SLURM_NODES, NameIndex(POOLS))


def _job(constraint: str, mark: str = "") -> SlurmJob:
    feats = tuple(f for f in constraint.replace("&", "|").split("|") if f)
    return SlurmJob(1, "j", "PENDING", "Resources", "gpu", 1, 1, None, feats, 0, None, 0.0, constraint=constraint,
                    admin_comment=mark)  # fmt: skip


def test_a_users_constraint_limits_the_pools_to_those_whose_nodes_satisfy_it() -> None:
    assert job_pools(_job("a3-highgpu-8g"), POOLS, NODES) == {"spot8", "od8"}
    assert job_pools(_job("h100&on-demand"), POOLS, NODES) == {"od8", "od1"}
    assert job_pools(_job("spot"), POOLS, NODES) == {"spot8"}
    assert job_pools(_job("a100"), POOLS, NODES) == frozenset()


def test_the_luas_own_constraint_no_constraint_or_an_unreadable_one_leave_every_pool() -> None:
    assert job_pools(_job("a3-highgpu-1g", RIGHT_SIZED_MARK), POOLS, NODES) is None
    assert job_pools(_job(""), POOLS, NODES) is None
    assert job_pools(_job("spot&h100|od"), POOLS, NODES) is None


def test_a_pool_slurm_does_not_report_is_known_by_its_machine_and_capacity_type() -> None:
    nodes = pool_nodes(POOLS, {}, NameIndex(POOLS))
    assert nodes["od1"].features == {"a3-highgpu-1g", "on-demand"} and nodes["od1"].cpus == 0
    assert job_pools(_job("a3-highgpu-1g&on-demand"), POOLS, nodes) == {"od1"}
    assert job_pools(replace(_job(""), cpus_per_node=100), POOLS, nodes) is None  # no figure: nothing ruled out


def test_the_cpus_and_memory_a_job_asks_per_node_rule_out_smaller_nodes_whoever_set_its_constraint() -> None:
    sized = {  # CPUs and RealMemory as the stack renders them for a3-highgpu-8g and -1g
        name: replace(
            node, cpus=208 if node.gpus == 8 else 26, real_memory_mib=1_820_057 if node.gpus == 8 else 226_611
        )
        for name, node in SLURM_NODES.items()
    }
    nodes = pool_nodes(POOLS, sized, NameIndex(POOLS))
    assert job_pools(replace(_job(""), cpus_per_node=30), POOLS, nodes) == {"spot8", "od8"}
    assert job_pools(replace(_job(""), memory_per_node_mib=300_000), POOLS, nodes) == {"spot8", "od8"}
    assert job_pools(replace(_job("a3-highgpu-1g", RIGHT_SIZED_MARK), cpus_per_node=30), POOLS, nodes) == {
        "spot8",
        "od8",
    }
    assert job_pools(replace(_job(""), cpus_per_node=26, memory_per_node_mib=226_611), POOLS, nodes) is None


@pytest.mark.parametrize(
    ("expr", "terms"),
    [
        ("a3-highgpu-1g", {"a3-highgpu-1g"}),
        ("a3-highgpu-1g&spot", {"a3-highgpu-1g&spot"}),  # the lua's pin of spot-tolerant work
        ("spot&a3-highgpu-1g", {"a3-highgpu-1g&spot"}),
        ("a3-highgpu-1g|a3-highgpu-2g", {"a3-highgpu-1g", "a3-highgpu-2g"}),  # widened
        ("(a3-highgpu-1g&spot)|a3-highgpu-2g", {"a3-highgpu-1g&spot", "a3-highgpu-2g"}),
    ],
)
def test_a_right_sizing_constraint_reads_as_its_alternatives(expr: str, terms: set[str]) -> None:
    assert alternatives(expr) == terms
    assert alternatives(constraint_expression(terms)) == terms  # what the daemon writes back reads the same


@pytest.mark.parametrize(
    "expr",
    ["", "a3-highgpu-1g|a3-highgpu-2g&spot", "[a3-highgpu-1g|a3-highgpu-2g]", "a3-highgpu-1g&a3-highgpu-2g", "(a|b)"],
)
def test_anything_else_is_not_a_right_sizing_constraint(expr: str) -> None:
    with pytest.raises(ConstraintUnreadable):
        alternatives(expr)
