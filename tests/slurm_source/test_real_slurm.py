"""Against a real slurmctld: jobs sbatch'ed to CLOUD partitions read back right, and Slurm's power-saving
programs (our `python -m autoscaler.slurm.hook`) reach the daemon's state store."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from autoscaler.daemon.state import StateStore
from autoscaler.slurm.client import CliSlurm, SlurmUnavailable
from tests.harness.cloud_nodes import CloudNodes, Nodeset, cloud_nodes_unavailable_reason, cloud_slurm_conf
from tests.harness.requirements import missing
from tests.harness.slurm import SlurmHarness, host_script

pytestmark = pytest.mark.slurm


def write_hook(bin_dir: Path, action: str, state: Path) -> str:
    """The hook slurmctld runs for `action`, run on this machine's venv wherever slurmctld runs (`host_script`)."""
    body = f'exec {sys.executable} -m autoscaler.slurm.hook {action} "$1" --state {state}'
    return host_script(bin_dir / f"fleet-{action}.sh", body)


@pytest.fixture(scope="module")
def cluster(slurm_factory: Callable[..., SlurmHarness]) -> Iterator[tuple[SlurmHarness, Path]]:
    reason = cloud_nodes_unavailable_reason()
    if reason:
        missing(reason)
    probe = slurm_factory()
    state = probe.root / "autoscaler.db"
    store = StateStore(state)  # what the daemon does at start: create the store, record its name spaces
    store.set_managed_pools([("od", "t1-od", 4), ("spot", "t1-spot", 4)])
    store.close()
    bin_dir = probe.root / "bin"
    h = slurm_factory(
        root=probe.root,
        resume_program=write_hook(bin_dir, "resume", state),
        suspend_program=write_hook(bin_dir, "suspend", state),
        resume_fail_program=write_hook(bin_dir, "resume-fail", state),
    )
    nodes = CloudNodes(h, [Nodeset("t1-od", 4), Nodeset("t1-spot", 4, gpus=4)])
    nodes.prepare()
    conf = cloud_slurm_conf(h, nodes, {"gpu": ["t1-od"], "spot": ["t1-spot"]}, suspend_time=300)
    h.start(conf, nodes.gres_conf())
    yield h, state
    h.stop()


def wait_for(pred: Callable[[], object], timeout: float = 20.0) -> object:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(0.2)
    raise AssertionError("condition not met in time")


def test_sbatch_to_cloud_partitions_is_read_with_nodes_gpus_and_partition(cluster) -> None:
    h, state = cluster
    client = CliSlurm(env={"SLURM_CONF": str(h.conf_path)})
    gang = h.run(
        "sbatch", "--parsable", "-p", "gpu", "-N", "2", "--gres=gpu:8", "-t", "30", "--wrap", "sleep 600", check=True
    )
    small = h.run("sbatch", "--parsable", "-p", "spot", "-N", "1", "--gres=gpu:2", "--wrap", "sleep 600", check=True)
    toobig = h.run("sbatch", "--parsable", "-p", "gpu", "-N", "6", "--gres=gpu:8", "--wrap", "true", check=True)
    ids = {int(gang.stdout.strip()): "gang", int(small.stdout.strip()): "small", int(toobig.stdout.strip()): "toobig"}

    def scheduled() -> dict:
        jobs = {ids[j.job_id]: j for j in client.jobs() if j.job_id in ids}
        return jobs if not jobs["gang"].pending and not jobs["small"].pending else {}

    jobs = wait_for(scheduled)
    g, s, t = jobs["gang"], jobs["small"], jobs["toobig"]
    assert (g.partition, g.node_count, g.gpus_per_node, g.time_limit_s) == ("gpu", 2, 8, 1800.0)
    assert (s.partition, s.node_count, s.gpus_per_node) == ("spot", 1, 2)
    # CLOUD nodes are allocated at once; a job that can never fit stays PENDING with the reason
    assert g.state in ("CONFIGURING", "RUNNING") and len(g.nodes) == 2 and all(n.startswith("t1-od-") for n in g.nodes)
    assert t.pending and t.reason in ("PartitionNodeLimit", "PartitionConfig") and t.gpus == 48
    nodes = {n.name: n for n in client.nodes()}
    for n in g.nodes:  # allocated while still powered down; POWERING_UP once ResumeProgram runs (1-3 s later)
        assert nodes[n].cloud and (nodes[n].powering_up or nodes[n].powered_down) and nodes[n].has_work
        assert nodes[n].gpus == 8 and nodes[n].gpus_used == 8
    idle_cloud = [n for n in nodes.values() if n.cloud and n.powered_down and not n.has_work]
    assert len(idle_cloud) >= 4 and all(n.gpus in (4, 8) for n in idle_cloud)

    # ResumeProgram reached the daemon's store, with the job -> nodes map from SLURM_RESUME_FILE
    def resumed() -> list:
        if not state.exists():
            return []
        rows = StateStore(state).open_power()
        return [r for r in rows if r.action == "resume"] if len({r.name for r in rows}) >= 3 else []

    rows = wait_for(resumed)
    by_name = {r.name: r for r in rows}
    assert set(g.nodes) | set(s.nodes) <= set(by_name)
    assert all(by_name[n].jobs == (g.job_id,) for n in g.nodes), [(r.name, r.jobs) for r in rows]
    h.run("scancel", *map(str, ids), check=True)


def test_power_down_calls_suspend_and_resume_fail_reaches_the_store(cluster) -> None:
    h, state = cluster
    h.run("scontrol", "update", "nodename=t1-spot-3", "state=power_up", check=True)
    wait_for(lambda: any(r.name == "t1-spot-3" and r.action == "resume" for r in StateStore(state).open_power()))
    h.run("scontrol", "update", "nodename=t1-spot-3", "state=power_down_force", check=True)
    wait_for(lambda: any(r.name == "t1-spot-3" and r.action == "suspend" for r in StateStore(state).open_power()))


def test_cli_client_raises_slurm_unavailable_when_the_controller_is_gone(tmp_path: Path) -> None:
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=x\nSlurmctldHost=localhost(127.0.0.1)\nSlurmctldPort=1\nAuthType=auth/none\n")
    with pytest.raises(SlurmUnavailable):
        CliSlurm(conf=conf, timeout_s=5).nodes()


def test_a_pending_job_array_is_read_as_its_tasks(cluster) -> None:
    """slurmctld keeps a job array's pending tasks in one record, listed once by squeue: the client reads every task
    of an irregular 300-task array (squeue cuts the list at 64 characters unless SLURM_BITSTR_LEN=0, which the
    client sets), and a throttled array (``%2``) as the tasks it may start."""
    h, _ = cluster
    client = CliSlurm(env={"SLURM_CONF": str(h.conf_path)})
    tasks = sorted(set(range(0, 1000, 7)) | set(range(1, 1000, 13)))
    spec = ",".join(map(str, tasks))
    held = int(h.run("sbatch", "--parsable", "-p", "gpu", "-H", "--gres=gpu:8", f"--array={spec}", "--wrap", "true",
                     check=True).stdout)  # fmt: skip
    throttled = int(h.run("sbatch", "--parsable", "-p", "gpu", "-H", "--gres=gpu:8", "--array=0-9%2", "--wrap",
                          "true", check=True).stdout)  # fmt: skip
    jobs = {j.job_id: j for j in client.jobs()}
    a, t = jobs[held], jobs[throttled]
    assert a.array_tasks.whole and a.tasks == len(tasks) == 209
    assert a.unit_ids() == tuple(f"job/{held}_{i}" for i in tasks)
    assert t.array_tasks.throttle == 2 and t.array_tasks.count == 10 and t.tasks == 2
    assert t.unit_ids() == (f"job/{throttled}_0", f"job/{throttled}_1")
    h.run("scancel", str(held), str(throttled), check=True)


def test_an_advanced_reservation_and_its_jobs_are_read(cluster) -> None:
    """``scontrol show reservation -o`` (22.05 has no JSON) read as reservation -> nodes, only active ones; a job
    submitted to one shows it (`SlurmJob.reservation`)."""
    h, _ = cluster
    client = CliSlurm(env={"SLURM_CONF": str(h.conf_path)})
    assert client.reservations() == {}  # "No reservations in the system"
    h.run("scontrol", "create", "reservation", "reservationname=team", "nodes=t1-od-[2-3]", "users=root",
          "starttime=now", "duration=10", check=True)  # fmt: skip
    h.run("scontrol", "create", "reservation", "reservationname=later", "nodes=t1-od-1", "users=root",
          "starttime=now+3600", "duration=10", check=True)  # fmt: skip
    try:
        assert client.reservations() == {"team": ("t1-od-2", "t1-od-3")}
        job = int(h.run("sbatch", "--parsable", "-p", "gpu", "-H", "--reservation=team", "--gres=gpu:8", "--wrap",
                        "true", check=True).stdout)  # fmt: skip
        (seen,) = [j for j in client.jobs() if j.job_id == job]
        assert seen.reservation == "team" and seen.nodes_fixed
        h.run("scancel", str(job), check=True)
    finally:
        h.run("scontrol", "delete", "reservationname=team")
        h.run("scontrol", "delete", "reservationname=later")
