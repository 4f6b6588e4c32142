"""The rendered job_submit.lua and the autoscaler read a job's GPUs per node the same way, for every way a user asks
for GPUs, on a real slurmctld 22.05.

The lua right-sizes a job (a hard `--constraint` under strict late binding, a `--prefer` otherwise) from the GPUs per
node it reads in the submission; the daemon plans nodes for the GPUs per node it reads in squeue
(`autoscaler.slurm.readers.parse_job`).  If the two disagree, the daemon boots one shape and the job is pinned to
another, or not pinned at all and lands on the spare GPUs of a larger node.  Until the tenth round the lua read
`--gres=gpu:N` / `--gpus-per-node=N` only: a `--gpus=N` job got no constraint.  The constraint the lua sets is
marked (AdminComment `autoscaler.slurm.constraint.RIGHT_SIZED_MARK`), so the daemon tells it from a user's own.

The cluster: one partition with the four a3-highgpu shapes (1, 2, 4, 8 GPUs), every powered-down name drained (as
late binding holds them), so every job stays pending and its constraint can be read back.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import pytest

from autoscaler.slurm.readers import parse_job
from fleet.catalog import CapacityType, load_catalog
from fleet.slurm.job_submit import constraint_shapes, constraints, preferences, render_job_submit
from fleet.slurm.weights import pool_shapes
from tests.harness.cloud_nodes import CloudNodes, Nodeset, cloud_slurm_conf
from tests.harness.slurm import SlurmHarness, poll_until

pytestmark = pytest.mark.slurm

OD = CapacityType.ON_DEMAND
POOLS = [(f"g{g}", OD, f"a3-highgpu-{g}g") for g in (1, 2, 4, 8)]
SHAPES = {"gpu": pool_shapes(POOLS, load_catalog(), "us-central1")}
CONSTRAINT = constraints(SHAPES)["gpu"]  # GPUs per node -> the right-sized machine type
PREFER = {g: p.expression for g, p in preferences(SHAPES)["gpu"].items()}

#: sbatch arguments -> the GPUs per node both must read
SUBMISSIONS: list[tuple[Sequence[str], int]] = [
    (["--gres=gpu:2"], 2),
    (["--gpus-per-node=2"], 2),
    (["--gpus=1"], 1),
    (["--gpus=3"], 3),
    (["-N", "2", "--gpus=16"], 8),
    (["-N", "2", "--gpus=6"], 3),
    (["-n", "2", "--gpus-per-task=1"], 2),
    (["-N", "1", "--ntasks-per-node=2", "--gpus-per-task=2"], 4),
    (["--gres=gpu"], 1),  # no count: one GPU
    (["--gpus=16"], 8),  # no node count: slurmctld makes it 2 nodes of 8
    (["-N", "1-2", "--gpus=12"], 6),
    (["-n", "1", "--gpus-per-task=2"], 2),
]

#: sbatch arguments -> the machine type both must find: the first, best first, whose nodes have the job's GPUs,
#: CPUs and memory per node (a3-highgpu-1g: 26 CPUs, 226,611 MiB; -2g: 52, 454,246; -4g: 104, 909,516)
SIZED: list[tuple[Sequence[str], str]] = [
    (["--gpus=1", "-c", "26"], "a3-highgpu-1g"),
    (["--gpus=1", "-c", "30"], "a3-highgpu-2g"),
    (["--gres=gpu:1", "-n", "40"], "a3-highgpu-2g"),
    (["--gpus=1", "--ntasks-per-node=4", "-c", "16"], "a3-highgpu-4g"),
    (["--gpus=1", "--mincpus=60"], "a3-highgpu-4g"),
    (["--gpus=1", "--cpus-per-gpu=60"], "a3-highgpu-4g"),
    (["--gpus=1", "--mem=300000"], "a3-highgpu-2g"),
    (["--gpus=1", "-c", "10", "--mem-per-cpu=50000"], "a3-highgpu-4g"),
    (["--gpus=2", "--mem-per-gpu=400000"], "a3-highgpu-4g"),
    (["--gpus=1", "--mem=0"], "a3-highgpu-1g"),  # --mem=0: all of whatever node it gets
    (["-N", "2", "--gpus-per-node=1", "-n", "60"], "a3-highgpu-2g"),  # 30 CPUs on each of 2 nodes
]


def _cluster(slurm_factory: Callable[..., SlurmHarness], lua: str) -> Iterator[SlurmHarness]:
    h = slurm_factory()
    sized = {s.machine_type: s for s in SHAPES["gpu"]}  # CPUs and RealMemory as fleet.slurm.conf renders them
    nodes = CloudNodes(h, [
        Nodeset(f"g{g}", 2, gpus=g, cpus=sized[m].cpus, features=m, memory_mib=sized[m].memory_mib)
        for g in (1, 2, 4, 8) if (m := f"a3-highgpu-{g}g")
    ])  # fmt: skip
    nodes.prepare()
    conf = cloud_slurm_conf(h, nodes, {"gpu": [f"g{g}" for g in (1, 2, 4, 8)]}, suspend_time=600)
    h.start(conf, nodes.gres_conf(), extra_lines=["JobSubmitPlugins=lua"], job_submit_lua=lua)
    try:
        for g in (1, 2, 4, 8):  # the hold: no job is allocated, each stays pending with what the lua set
            h.run("scontrol", "update", f"nodename=g{g}-[0-1]", "state=drain", "reason=held", check=True)
        yield h
    finally:
        nodes.stop_all()
        h.stop()


@pytest.fixture(scope="module")
def constrain(slurm_factory: Callable[..., SlurmHarness]) -> Iterator[SlurmHarness]:
    lua = render_job_submit(SHAPES, "gpu", constrain=True, wake_path="/tmp/gpu-fleet-test-wake")
    yield from _cluster(slurm_factory, lua)


@pytest.fixture(scope="module")
def prefer(slurm_factory: Callable[..., SlurmHarness]) -> Iterator[SlurmHarness]:
    yield from _cluster(slurm_factory, render_job_submit(SHAPES, "gpu"))


def _argv(value: object) -> str | None:
    """A test id: the sbatch arguments as typed (pytest's own for the other parameters)."""
    return " ".join(value) if isinstance(value, list) else None


def _pending(h: SlurmHarness, *args: str) -> dict:
    job = int(h.run("sbatch", "--parsable", "-p", "gpu", *args, "--wrap", "true", check=True).stdout.strip())
    try:
        assert poll_until(lambda: any(j["job_id"] == job for j in h.squeue_json()["jobs"]), 10), h.logs()
        return next(j for j in h.squeue_json()["jobs"] if j["job_id"] == job)
    finally:
        h.run("scancel", str(job))


@pytest.mark.parametrize(("args", "gpus"), SUBMISSIONS, ids=_argv)
def test_the_constraint_is_the_right_sized_machine_for_the_gpus_the_daemon_reads(
    constrain: SlurmHarness, args: Sequence[str], gpus: int
) -> None:
    raw = _pending(constrain, *args)
    assert parse_job(raw).gpus_per_node == gpus, raw
    assert raw["features"] == CONSTRAINT[gpus], raw
    assert parse_job(raw).right_sized_by_lua, raw  # marked: the daemon may widen it on a fallback


@pytest.mark.parametrize(("args", "gpus"), SUBMISSIONS, ids=_argv)
def test_the_prefer_is_the_right_sized_machine_for_the_gpus_the_daemon_reads(
    prefer: SlurmHarness, args: Sequence[str], gpus: int
) -> None:
    raw = _pending(prefer, *args)
    assert parse_job(raw).gpus_per_node == gpus, raw
    assert raw.get("prefer", "") == PREFER.get(gpus, ""), raw
    assert not parse_job(raw).right_sized_by_lua, raw  # a --prefer is not a constraint


def test_jobs_without_gpus_or_with_their_own_constraint_are_left_alone(constrain: SlurmHarness) -> None:
    """...and unmarked: the daemon plans a user's constraint as a hard one and never widens it."""
    assert _pending(constrain, "-N", "1")["features"] == ""
    own = _pending(constrain, "--gpus=1", "-C", "a3-highgpu-8g")
    assert own["features"] == "a3-highgpu-8g" and not parse_job(own).right_sized_by_lua


@pytest.mark.parametrize(("args", "machine"), SIZED, ids=_argv)
def test_the_constraint_is_a_machine_type_whose_nodes_have_the_cpus_and_memory_the_job_asks(
    constrain: SlurmHarness, args: Sequence[str], machine: str
) -> None:
    """Right-sizing by GPUs alone would pin such a job to nodes that cannot hold it, and slurmctld refuses it at
    submission ("CPU count per node can not be satisfied"): the lua takes the first machine type that fits it all,
    and the daemon reads the same CPUs and memory per node from squeue, so it plans that machine type too."""
    raw = _pending(constrain, *args)
    job = parse_job(raw)
    fits = next(
        s.machine_type
        for s in constraint_shapes(SHAPES)["gpu"]
        if s.gpus >= job.gpus_per_node and s.cpus >= job.cpus_per_node and s.memory_mib >= job.memory_per_node_mib
    )
    assert (raw["features"], fits) == (machine, machine), (raw, job)
    assert job.right_sized_by_lua


@pytest.fixture(scope="module", params=["prefer", "nothing-to-prefer"])
def gated(request: pytest.FixtureRequest, slurm_factory: Callable[..., SlurmHarness]) -> Iterator[SlurmHarness]:
    """The gang gate's lua (a reservation fleet's, or `late_bind: false`), in both of its templates: with the
    partition's `--prefer` table, and the wake-up alone where no machine type is preferred (one shape of the
    same largest node)."""
    shapes = SHAPES if request.param == "prefer" else {"gpu": [s for s in SHAPES["gpu"] if s.gpus == 8]}
    lua = render_job_submit(shapes, "gpu", wake=True, gate_gangs=True, wake_path="/tmp/gpu-fleet-test-wake")
    assert ("local prefer = {" in lua) == (request.param == "prefer")
    yield from _cluster(slurm_factory, lua)


@pytest.mark.parametrize(("args", "gpus"), SUBMISSIONS, ids=_argv)
def test_the_gang_gate_holds_exactly_the_jobs_the_daemon_reads_as_gangs(
    gated: SlurmHarness, args: Sequence[str], gpus: int
) -> None:
    """A job slurmctld spreads over several nodes is a gang however it asks for them (`-N 2`, or `--gpus=16` with
    no node count, which slurmctld makes 2 nodes of 8); an ungated one would get the up nodes and wait on them for
    the rest's boot.  The lua gates a job exactly when the daemon reads more than one node in squeue, so the daemon
    releases every gang it gated and no single-node job waits for the gate."""
    job = parse_job(_pending(gated, *args))
    assert job.gpus_per_node == gpus
    assert job.gated == (job.node_count > 1), job


def test_a_job_whose_nodes_are_fixed_is_left_alone(constrain: SlurmHarness, gated: SlurmHarness) -> None:
    """``-w g8-0 --gpus=1``, and ``--reservation`` of a reservation over the 8-GPU nodes: the right-sized constraint
    (a3-highgpu-1g) would keep them off their nodes for good (slurmctld refused the submission); the lua leaves them
    as submitted, and a gang whose nodes are fixed is not gated (it gets those or none)."""
    own = _pending(constrain, "--gpus=1", "-w", "g8-0")
    assert own["features"] == "" and own["required_nodes"] == "g8-0" and not parse_job(own).right_sized_by_lua
    for h in (constrain, gated):
        h.run("scontrol", "create", "reservation", "reservationname=team", "nodes=g8-[0-1]", "users=root",
              "starttime=now", "duration=10", check=True)  # fmt: skip
    try:
        team = parse_job(_pending(constrain, "--gpus=1", "--reservation=team"))
        assert team.features == () and team.reservation == "team" and not team.right_sized_by_lua
        gangs = [parse_job(_pending(gated, "-N", "2", "--gres=gpu:8", *fixed))
                 for fixed in (["-w", "g8-[0-1]"], ["--reservation=team"])]  # fmt: skip
        assert [(g.required_nodes, g.reservation, g.gated) for g in gangs] == [
            (("g8-0", "g8-1"), "", False), ((), "team", False)
        ]  # fmt: skip
    finally:
        for h in (constrain, gated):
            h.run("scontrol", "delete", "reservationname=team")
