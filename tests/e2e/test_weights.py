"""Node Weights on a real slurmctld (issue 8, item 1: the node the replay scores is the node Slurm picks).

An 8-GPU pool listed first in the spec, then a 1-GPU pool, both on-demand (a3-highgpu-8g / -1g: the same price
per GPU), Weights from `fleet.slurm.weights.pool_weights` (what `fleet render slurm-conf` writes: the 1-GPU shape
first) and topology/tree as rendered.  What slurmctld does with them, and the simulated Slurm models
(tests/replay/test_simslurm_weights.py makes the same choices):
- a node that needs no power-up comes before every powered-down node, whatever their Weights and indices: the node
  the daemon keeps warm serves the next job (no weight change needed);
- among powered-up nodes the lowest Weight wins: a 1-GPU job takes the idle 1-GPU node, not the idle 8-GPU node of
  the pool listed first.
Among powered-down nodes slurmctld (22.05 and 23.11) ignores Weight; with the rendered topology.conf (one tree per
pool, no root over them, the lowest Weight last: `fleet.slurm.topology`) it powers up the last tree that fits, so
the first 1-GPU job, with everything powered down, lands on the 1-GPU pool (with one root over both pools it landed
on the 8-GPU pool, the leaf with the fewest nodes). An idle 8-GPU node still comes before any powered-down node: the
rendered job_submit.lua (`fleet.slurm.job_submit`: `--prefer=<right-sized machine type>`) keeps a 1-GPU job off it,
as the replay scores it (docs/autoscaler.md "Node weights"). Under strict late binding (`late_bind`, no reservation
pools) the lua sets a hard `--constraint` instead: a job waits for its machine type until the daemon widens it."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from autoscaler.slurm.client import CliSlurm
from fleet.catalog import CapacityType, load_catalog
from fleet.slurm.job_submit import render_job_submit
from fleet.slurm.weights import pool_shapes, pool_weights
from tests.e2e.env import E2E, REGION, e2e_env, pool, wait_for
from tests.harness.cloud_nodes import Nodeset
from tests.harness.slurm import SlurmHarness

pytestmark = [pytest.mark.slurm, pytest.mark.gce, pytest.mark.slow]

OD = CapacityType.ON_DEMAND
POOLS = [("h8", OD, "a3-highgpu-8g"), ("h1", OD, "a3-highgpu-1g")]  # the spec's order: 8-GPU first
WEIGHTS = pool_weights(POOLS, load_catalog(), REGION)
LUA = render_job_submit({"gpu": pool_shapes(POOLS, load_catalog(), REGION)}, "gpu")  # as fleet.slurm.conf does


def _env(slurm_factory: Callable[..., SlurmHarness], lua: str | None, idle_timeout_s: float = 3600) -> Iterator[E2E]:
    big = pool("h8", "on-demand", "gpu", False, max_nodes=2)
    small = pool("h1", "on-demand", "gpu", False, max_nodes=3).model_copy(
        update={"machine_type": "a3-highgpu-1g", "gpus_per_node": 1}
    )
    with e2e_env(
        slurm_factory,
        suspend_time=600,  # Slurm keeps idle nodes up; the daemon's idle keep (1 h) decides
        pools=[big, small],  # the 8-GPU pool listed first, as in the issue
        nodesets=[
            Nodeset("e2e-h8", 2, gpus=8, features="a3-highgpu-8g", weight=WEIGHTS["h8"]),
            Nodeset("e2e-h1", 3, gpus=1, features="a3-highgpu-1g", weight=WEIGHTS["h1"]),
        ],
        partitions={"gpu": ["e2e-h8", "e2e-h1"]},
        # late binding off: these tests are about Slurm's own choice among powered-down nodes (the --prefer lua)
        policy={"idle_timeout_s": idle_timeout_s, "backoff_s": 120, "late_bind": False},
        topology=True,
        job_submit_lua=lua,
    ) as e:
        yield e


@pytest.fixture
def env(slurm_factory: Callable[..., SlurmHarness]) -> Iterator[E2E]:
    yield from _env(slurm_factory, None)


@pytest.fixture
def env_lua(slurm_factory: Callable[..., SlurmHarness]) -> Iterator[E2E]:
    yield from _env(slurm_factory, LUA)


def _job(env: E2E, gpus: int = 1) -> int:
    out = env.root / "log"
    echo = "srun sh -c 'echo $SLURMD_NODENAME; sleep 1'"
    return env.sbatch("-p", "gpu", "-N", "1", f"--gres=gpu:{gpus}", "-o", f"{out}/job-%j.out", "--wrap", echo)


def _words(env: E2E, job: int) -> list[str]:
    """The words job `job` has printed so far (none while slurmstepd has created its output file but the job has
    not written its first line yet, or before the file exists)."""
    path = env.root / "log" / f"job-{job}.out"
    return path.read_text().split() if path.exists() else []


def _ran_on(env: E2E, job: int) -> str:
    """The node job `job` printed first (each job here echoes $SLURMD_NODENAME), waiting for that line."""
    wait_for(lambda: _words(env, job), 120, f"job {job}'s first line of output", env)
    return _words(env, job)[0]


def _up_idle(env: E2E, name: str) -> bool:
    n = env.sinfo()[name]
    return n["state"] == "idle" and set(n["state_flags"]) == {"CLOUD"}


def _run(env: E2E, gpus: int = 1) -> str:
    job = _job(env, gpus)
    wait_for(lambda: job not in env.squeue_ids(), 120, f"job {job} to run and finish", env)
    return _ran_on(env, job)


def test_a_powered_up_node_and_the_lowest_weight_among_them_get_the_job(env: E2E) -> None:
    assert WEIGHTS["h1"] < WEIGHTS["h8"]  # rendered: right-sized first though h8 is listed first
    env.start_daemon()

    # everything powered down: the pool of the lowest Weight, whose tree topology.conf lists last (with one root
    # over both pools, before the twenty-fourth round, 22.05 took the 2-node 8-GPU leaf: the best fit)
    assert _run(env) == "e2e-h1-0"
    assert _run(env, gpus=8) == "e2e-h8-0"  # what only the 8-GPU machine fits
    wait_for(lambda: _up_idle(env, "e2e-h8-0"), 30, "e2e-h8-0 to be idle and kept up", env)

    # e2e-h1-0 busy; the daemon keeps a 1-GPU node warm: e2e-h1-2, above the powered-down e2e-h1-1 in index
    out = env.root / "log"
    busy = env.sbatch("-p", "gpu", "-N", "1", "--gres=gpu:1", "-o", f"{out}/job-%j.out", "--wrap",
                      "srun sh -c 'echo $SLURMD_NODENAME; sleep 600'")  # fmt: skip
    assert _ran_on(env, busy) == "e2e-h1-0"
    env.slurm.run("scontrol", "update", "nodename=e2e-h1-2", "state=power_up", check=True)
    wait_for(lambda: _up_idle(env, "e2e-h1-2"), 90, "e2e-h1-2 to boot and register", env)

    # up nodes first (not e2e-h1-1, powered down with a lower index), the lowest Weight among them (not e2e-h8-0)
    assert _run(env) == "e2e-h1-2"
    assert _run(env) == "e2e-h1-2"
    # the Weight decides between powered-up nodes: below the 1-GPU pool's, the 8-GPU node gets the next job
    env.slurm.run("scontrol", "update", "nodename=e2e-h8-0", f"weight={WEIGHTS['h1'] - 1}", check=True)
    assert _run(env) == "e2e-h8-0"
    env.slurm.run("scontrol", "update", "nodename=e2e-h8-0", f"weight={WEIGHTS['h8']}", check=True)
    assert _run(env) == "e2e-h1-2"
    env.slurm.run("scancel", str(busy), check=True)
    assert {e.name for e in env.fake.events_of("create")} == {"e2e-h1-0", "e2e-h8-0", "e2e-h1-2"}  # no other boot
    nodes = env.sinfo()
    assert nodes["e2e-h1-1"]["weight"] == WEIGHTS["h1"] and "POWERED_DOWN" in nodes["e2e-h1-1"]["state_flags"]


@pytest.fixture
def env_no_keep(slurm_factory: Callable[..., SlurmHarness]) -> Iterator[E2E]:
    yield from _env(slurm_factory, None, idle_timeout_s=0)


def test_an_oversized_busy_node_is_cordoned_its_job_runs_on_and_it_is_deleted_once_empty(env_no_keep: E2E) -> None:
    """Issue 8, item 4 (fragmentation): a 1-GPU job on an 8-GPU node (no job_submit.lua; the 1-GPU pool drained by
    an admin when it was submitted) leaves the node oversized, since the 1-GPU shape costs the same per GPU.  With no
    idle keep for the shape the daemon cordons it (`scontrol update state=drain`, the "oversized" reason): the job
    runs to its end undisturbed, the next small job does not land on the node's seven free GPUs, and the node is
    deleted once its job ends (`autoscaler.planner.defrag.cordon_oversized`)."""
    env = env_no_keep
    env.slurm.run("scontrol", "update", "nodename=e2e-h1-[0-2]", "state=drain", "reason=maintenance", check=True)
    env.start_daemon()
    out = env.root / "log"
    first = env.sbatch("-p", "gpu", "-N", "1", "--gres=gpu:1", "-o", f"{out}/job-%j.out", "--wrap",
                       "srun sh -c 'echo $SLURMD_NODENAME; sleep 45; echo done'")  # fmt: skip
    big = _ran_on(env, first)  # running: it printed its node
    assert big.startswith("e2e-h8-")
    env.slurm.run("scontrol", "update", "nodename=e2e-h1-[0-2]", "state=undrain", check=True)  # maintenance over

    def cordoned() -> bool:
        n = env.sinfo()[big]
        return "DRAIN" in n["state_flags"] and "oversized" in (n["reason"] or "")

    wait_for(cordoned, 30, f"{big} cordoned while its job runs", env)
    assert first in env.squeue_ids()  # still running: a cordon stops no job
    assert _run(env) != big  # the next small job does not take the cordoned node's free GPUs
    wait_for(lambda: first not in env.squeue_ids(), 90, f"job {first} to finish", env)
    assert _words(env, first) == [big, "done"]  # ran to its end
    wait_for(lambda: big in {e.name for e in env.fake.events_of("delete")}, 60, f"{big} deleted once empty", env)


def test_the_rendered_job_submit_lua_right_sizes_a_powered_down_allocation(env_lua: E2E) -> None:
    env = env_lua
    assert '[1] = "a3-highgpu-1g"' in LUA  # 1 GPU: the 1-GPU machine type is preferred
    env.start_daemon()
    assert _run(env, gpus=8) == "e2e-h8-0"  # what only the 8-GPU machine fits goes there
    wait_for(lambda: _up_idle(env, "e2e-h8-0"), 30, "e2e-h8-0 to be idle and kept up", env)
    # a node that needs no power-up comes first (above): without the lua this job would take the idle 8-GPU node
    # and pin it; the lua's --prefer powers up the right-sized pool instead
    assert _run(env) == "e2e-h1-0"


CLUA = render_job_submit(  # as fleet.slurm.conf renders it under strict late binding (no reservation pools)
    {"gpu": pool_shapes(POOLS, load_catalog(), REGION)}, "gpu", constrain=True
)


@pytest.fixture
def env_constrain(slurm_factory: Callable[..., SlurmHarness]) -> Iterator[E2E]:
    yield from _env(slurm_factory, CLUA)


def _features(env: E2E, job: int) -> str:
    """The job's constraint as `squeue --json` prints it."""
    return next(j["features"] for j in env.slurm.squeue_json()["jobs"] if j["job_id"] == job)


def _job_field(env: E2E, job: int, key: str) -> object:
    return next(j[key] for j in env.slurm.squeue_json()["jobs"] if j["job_id"] == job)


def test_the_constrain_mode_lua_pins_a_gpu_job_to_its_right_sized_machine_type(env_constrain: E2E) -> None:
    """The lua sets the job's hard constraint (`--constraint`, read back from squeue as its `features`) to the
    right-sized machine type: with the 1-GPU pool held (drained, as late binding holds every pool) a 1-GPU job waits
    rather than take a free 8-GPU node, until the daemon's client widens its constraint.  A job that names its
    own constraint is left alone.  (No daemon runs: slurmctld's choices only.)"""
    env = env_constrain
    assert 0 <= CLUA.index('{ "a3-highgpu-1g", 1, ') < CLUA.index('{ "a3-highgpu-8g", 8, ')  # 1g first, then 8g
    env.slurm.run("scontrol", "update", "nodename=e2e-h1-[0-2]", "state=drain", "reason=held", check=True)
    job = _job(env)
    own = env.sbatch("-p", "gpu", "-N", "1", "--gres=gpu:1", "-C", "a3-highgpu-8g", "--wrap", "sleep 600")
    assert _features(env, job) == "a3-highgpu-1g"
    assert _features(env, own) == "a3-highgpu-8g"  # the user's, not replaced
    # an 8-GPU node is free all along: the job with its own constraint gets it, the pinned one waits
    mine = wait_for(lambda: _job_field(env, own, "nodes"), 15, f"job {own} to get a node", env)
    assert str(mine).startswith("e2e-h8-")
    wait_for(lambda: _job_field(env, job, "state_reason") != "None", 15, f"job {job} to be scheduled", env)
    assert (_job_field(env, job, "job_state"), _job_field(env, job, "nodes")) == ("PENDING", "")
    assert _job_field(env, job, "state_reason") == "ReqNodeNotAvail"

    CliSlurm(env={"SLURM_CONF": str(env.slurm.conf_path)}).update_job_features(job, "a3-highgpu-1g|a3-highgpu-8g")
    assert _features(env, job) == "a3-highgpu-1g|a3-highgpu-8g"
    nodes = wait_for(lambda: _job_field(env, job, "nodes"), 15, f"job {job} to get a node once widened", env)
    assert str(nodes).startswith("e2e-h8-")
    env.slurm.run("scancel", str(job), str(own), check=True)


RPOOLS = [("resv", CapacityType.RESERVATION, "a3-highgpu-8g"), ("h1", OD, "a3-highgpu-1g")]
RWEIGHTS = pool_weights(RPOOLS, load_catalog(), REGION)
RLUA = render_job_submit(  # as fleet.slurm.conf renders it for a partition with a reservation pool
    {"gpu": pool_shapes([(n, OD, m) for n, _, m in RPOOLS], load_catalog(), REGION)}, "gpu", {"gpu": 8}
)


def _env_resv(slurm_factory: Callable[..., SlurmHarness], reserved: int) -> Iterator[E2E]:
    """`reserved` reserved 8-GPU nodes and a 1-GPU on-demand pool of 2, Weights, topology and job_submit.lua as
    rendered."""
    small = pool("h1", "on-demand", "gpu", False, max_nodes=2).model_copy(
        update={"machine_type": "a3-highgpu-1g", "gpus_per_node": 1}
    )
    with e2e_env(
        slurm_factory,
        suspend_time=600,
        pools=[pool("resv", "reservation", "gpu", False, max_nodes=reserved, reservation="e2e-resv"), small],
        nodesets=[
            Nodeset("e2e-resv", reserved, gpus=8, features="a3-highgpu-8g,reservation", weight=RWEIGHTS["resv"]),
            Nodeset("e2e-h1", 2, gpus=1, features="a3-highgpu-1g", weight=RWEIGHTS["h1"]),
        ],
        partitions={"gpu": ["e2e-resv", "e2e-h1"]},
        policy={"idle_timeout_s": 3600, "backoff_s": 120, "late_bind": False},  # a reservation: no late binding anyway
        reservations={"e2e-resv": ("us-central1-a", reserved)},
        topology=True,
        job_submit_lua=RLUA,
    ) as e:
        yield e


@pytest.fixture
def env_resv(slurm_factory: Callable[..., SlurmHarness]) -> Iterator[E2E]:
    yield from _env_resv(slurm_factory, 1)


def test_a_small_job_takes_a_free_reserved_node_before_it_powers_up_a_right_sized_one(env_resv: E2E) -> None:
    """Reserved GPUs are paid for: with the reserved 8-GPU node up and idle, a 1-GPU job runs there (the rendered
    `--prefer=reservation|a3-highgpu-1g`), not on a powered-down right-sized node (which `--prefer=a3-highgpu-1g`
    alone would power up)."""
    env = env_resv
    assert '[1] = "reservation|a3-highgpu-1g"' in RLUA
    env.start_daemon()
    assert _run(env, gpus=8) == "e2e-resv-0"  # the reservation is filled first (and stays up: keep_reserved_nodes)
    wait_for(lambda: _up_idle(env, "e2e-resv-0"), 30, "e2e-resv-0 to be idle and kept up", env)
    assert _run(env) == "e2e-resv-0"
    assert _run(env) == "e2e-resv-0"
    assert {e.name for e in env.fake.events_of("create")} == {"e2e-resv-0"}  # no right-sized node was powered up


@pytest.fixture
def env_resv3(slurm_factory: Callable[..., SlurmHarness]) -> Iterator[E2E]:
    """`env_resv` with three reserved 8-GPU nodes."""
    yield from _env_resv(slurm_factory, 3)


def _long_job(env: E2E, gpus: int) -> int:
    return env.sbatch(
        "-p", "gpu", "-N", "1", f"--gres=gpu:{gpus}", "-o", f"{env.root / 'log'}/job-%j.out", "--wrap", "sleep 600"
    )


def _running_on(env: E2E, job: int, timeout: float = 120) -> str:
    def node() -> str | None:
        for j in env.slurm.squeue_json()["jobs"]:
            if j["job_id"] == job and j["job_state"] == "RUNNING":
                return j["nodes"]
        return None

    return wait_for(node, timeout, f"job {job} to run", env)


def _weights(env: E2E) -> dict[str, int]:
    return {name: n["weight"] for name, n in env.sinfo().items()}


def test_the_daemon_keeps_the_reservation_best_fit(env_resv3: E2E) -> None:
    """slurmctld 22.05 (topology/tree) gives a job the registered node with the lowest Weight, then the lowest
    index: with the rendered Weights a 1-GPU job takes an empty reserved node ahead of a partly used one and splits
    the reservation's free GPUs.  The daemon sets each registered reserved node's Weight to rendered + free GPUs,
    so the job goes to the fuller node and the empty one stays whole for the next 8-GPU job."""
    env = env_resv3
    base = RWEIGHTS["resv"]
    env.start_daemon()
    a = _long_job(env, 8)
    assert _running_on(env, a) == "e2e-resv-0"
    b = _long_job(env, 4)
    assert _running_on(env, b) == "e2e-resv-1"
    env.slurm.run("scancel", str(a), check=True)
    wait_for(lambda: env.sinfo()["e2e-resv-0"]["state"] == "idle", 60, "e2e-resv-0 to be idle (A cancelled)", env)

    # the daemon's tick: e2e-resv-0 empty (8 free), e2e-resv-1 half used (4 free); -2 is up and empty too (every
    # reserved slot is launched up front, Policy.launch_reserved_nodes)
    def best_fit() -> bool:
        w = _weights(env)
        return w["e2e-resv-0"] == base + 8 and w["e2e-resv-1"] == base + 4

    wait_for(best_fit, 30, "the daemon to set e2e-resv-1's Weight below e2e-resv-0's", env)
    w = _weights(env)
    assert w["e2e-resv-2"] == base + 8 and w["e2e-h1-0"] == w["e2e-h1-1"] == RWEIGHTS["h1"]

    c = _long_job(env, 1)
    assert _running_on(env, c) == "e2e-resv-1"  # the fuller node; e2e-resv-0 stays whole
    wait_for(lambda: _weights(env)["e2e-resv-1"] == base + 3, 30, "e2e-resv-1's Weight to follow job C", env)

    # `scontrol reconfigure` puts slurm.conf's Weights back; the next tick sets them again
    ticks = len(env.ticks)
    env.slurm.run("scontrol", "reconfigure", check=True)
    wait_for(
        lambda: any(
            c["command"] == "scontrol-weight" and c["outcome"] == "ok" for t in env.ticks[ticks:] for c in t.commands
        ),
        30,
        "the daemon to re-apply the Weights after scontrol reconfigure",
        env,
    )
    wait_for(lambda: _weights(env)["e2e-resv-1"] == base + 3 and _weights(env)["e2e-resv-0"] == base + 8, 30,
             "the best-fit Weights after the reconfigure", env)  # fmt: skip

    # the control: with the rendered Weights (daemon stopped) the next 1-GPU job takes the empty e2e-resv-0
    env.stop_daemon()
    env.slurm.run("scontrol", "update", "nodename=e2e-resv-[0-2]", f"weight={base}", check=True)
    d = _long_job(env, 1)
    assert _running_on(env, d) == "e2e-resv-0"
    assert {e.name for e in env.fake.events_of("create")} == {"e2e-resv-0", "e2e-resv-1", "e2e-resv-2"}  # no more
    env.slurm.run("scancel", str(b), str(c), str(d), check=True)
