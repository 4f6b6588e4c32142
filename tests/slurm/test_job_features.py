"""Widening a pending job's hard constraint on a real slurmctld (and slurmrestd): strict late binding
(`Policy.late_bind`) pins a GPU job to its right-sized machine type with ``--constraint``; when the planner falls
back to another machine type the daemon widens it with `update_job_features` (``scontrol update jobid=<id>
features=a|b``, or on 22.05 slurmrestd's ``POST job/{id}``; 23.11's v0.0.40 client goes through scontrol) and the
job runs on the fallback.  It runs on the stacks' 23.11; tests/e2e_22_05 re-runs the slurmrestd v0.0.38 tests on
22.05.

The cluster: a held 1-GPU pool (its powered-down CLOUD nodes drained, as late binding holds every pool) and an
8-GPU pool, both in partition ``gpu``, every node carrying its machine type as a feature (as `fleet.slurm.conf`
renders them).  A job constrained to the held 1-GPU machine type stays pending until it is widened; then slurmctld
allocates (powers up) an 8-GPU node, the test boots that node's slurmd and the job runs there.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from autoscaler.slurm.client import CliSlurm, RestSlurm, SlurmClient, SlurmUnavailable
from autoscaler.slurm.constraint import RIGHT_SIZED_MARK
from autoscaler.slurm.readers import parse_job
from tests.harness.cloud_nodes import CloudNodes, Nodeset, cloud_slurm_conf
from tests.harness.slurm import SlurmHarness, poll_until, spec_release
from tests.harness.slurmrestd import jwt_key_line, require_slurmrestd, start_slurmrestd

pytestmark = pytest.mark.slurm

SMALL, BIG = "a3-highgpu-1g", "a3-highgpu-8g"
WIDENED = f"{SMALL}|{BIG}"


@dataclass
class Cluster:
    harness: SlurmHarness
    nodes: CloudNodes
    cli: CliSlurm
    rest: RestSlurm  # as the daemon builds it in `mode: rest` (`autoscaler.daemon.build`): scontrol at hand
    rest_url: str
    rest_token: str


@pytest.fixture(scope="module")
def cluster(slurm_factory: Callable[..., SlurmHarness]) -> Iterator[Cluster]:
    require_slurmrestd()
    h = slurm_factory()
    nodes = CloudNodes(h, [Nodeset("lb1", 2, gpus=1, features=SMALL), Nodeset("lb8", 1, gpus=8, features=BIG)])
    nodes.prepare()
    conf = cloud_slurm_conf(h, nodes, {"gpu": ["lb1", "lb8"]}, suspend_time=600)
    h.start(conf + jwt_key_line(h), nodes.gres_conf())
    try:
        h.run("scontrol", "update", "nodename=lb1-[0-1]", "state=drain", "reason=held", check=True)  # the hold
        url = start_slurmrestd(h)
        token = h.run("scontrol", "token", "username=root", "lifespan=900", check=True).stdout.strip()
        cli = CliSlurm(env={"SLURM_CONF": str(h.conf_path)})
        token = token.split("=", 1)[1]
        yield Cluster(h, nodes, cli, RestSlurm(url, token=token, user="root", cli=cli), url, token)
    finally:
        nodes.stop_all()
        h.stop()


def _submit(
    c: Cluster, *, gpus: int = 1, constraint: str = SMALL, wrap: str = "echo $SLURMD_NODENAME", hold: bool = False
) -> int:
    """A batch job, by default 1 GPU pinned to the held 1-GPU machine type (as the constrain-mode job_submit.lua
    pins it); it prints the node it ran on to log/job-<id>.out."""
    out = c.harness.root / "log" / "job-%j.out"
    argv = ["sbatch", "--parsable", "-p", "gpu", f"--gres=gpu:{gpus}", f"--constraint={constraint}", "-o", str(out)]
    argv += ["--hold"] if hold else []
    return int(c.harness.run(*argv, "--wrap", wrap, check=True).stdout.strip())


def _raw(c: Cluster, job_id: int) -> dict[str, Any]:
    """The job as `squeue --json` prints it."""
    return next(j for j in c.harness.squeue_json()["jobs"] if j["job_id"] == job_id)


def _scheduled_pending(c: Cluster, job_id: int) -> dict[str, Any]:
    """The job once slurmctld's scheduler has looked at it (a reason is set), still pending."""
    assert poll_until(lambda: _raw(c, job_id)["state_reason"] != "None", 15), c.harness.logs()
    raw = _raw(c, job_id)
    assert (raw["job_state"], raw["state_reason"], raw["nodes"]) == ("PENDING", "ReqNodeNotAvail", ""), raw
    return raw


def _widen_and_run(c: Cluster, client: SlurmClient) -> None:
    """A job pinned to the held machine type stays pending; widened by `client`, it runs on the 8-GPU node."""
    job = _submit(c)
    assert _scheduled_pending(c, job)["features"] == SMALL
    client.update_job_features(job, WIDENED)
    raw = _raw(c, job)
    assert raw["features"] == WIDENED  # measured on 22.05.8: the expression as written, "|" kept
    assert parse_job(raw).features == (SMALL, BIG)
    assert [j.features for j in client.jobs() if j.job_id == job] == [(SMALL, BIG)]
    assert poll_until(lambda: _raw(c, job)["nodes"], 15), f"job {job} not allocated\n{c.harness.logs()}"
    node = _raw(c, job)["nodes"]
    assert node == "lb8-0", _raw(c, job)
    c.nodes.boot(node)  # the "VM" slurmctld powered up (a no-op when an earlier test booted it)
    assert poll_until(lambda: _raw(c, job)["job_state"] == "COMPLETED", 90), c.harness.logs()
    assert (c.harness.root / "log" / f"job-{job}.out").read_text().split() == [node]
    assert _raw(c, job)["features"] == WIDENED


@pytest.mark.slow
def test_scontrol_widens_a_pending_jobs_constraint_and_it_runs_on_the_fallback(cluster: Cluster) -> None:
    _widen_and_run(cluster, cluster.cli)


@pytest.mark.slow
def test_slurmrestd_v0038_widens_a_pending_jobs_constraint_too(cluster: Cluster) -> None:
    """22.05's openapi has a job update (``POST job/{id}``, body ``{"constraints": ...}``): no scontrol needed."""
    if spec_release() != "22.05":
        pytest.skip(f"slurmrestd {spec_release()} serves no v0.0.38 (tests/e2e_22_05 runs this on 22.05)")
    bare = RestSlurm(cluster.rest_url, token=cluster.rest_token, user="root")
    assert bare.cli is None and bare.api == "v0.0.38"
    _widen_and_run(cluster, bare)


@pytest.mark.parametrize("client", ["cli", "rest"])
def test_slurmctld_refusing_an_update_is_reported_and_changes_nothing(cluster: Cluster, client: str) -> None:
    """An unknown feature or job id is refused (`SlurmUnavailable` with slurmctld's reason); the job keeps its
    constraint."""
    c: SlurmClient = getattr(cluster, client)
    job = _submit(cluster, hold=True)  # held: the scheduler leaves it alone
    try:
        with pytest.raises(SlurmUnavailable, match="Invalid feature specification"):
            c.update_job_features(job, f"{SMALL}|no-such-machine")
        with pytest.raises(SlurmUnavailable, match="Invalid job id specified"):
            c.update_job_features(job + 100_000, WIDENED)
        assert _raw(cluster, job)["features"] == SMALL
    finally:
        cluster.harness.run("scancel", str(job))


def test_a_job_no_longer_pending_cannot_be_widened(cluster: Cluster) -> None:
    """Once slurmctld has allocated nodes (CONFIGURING while they boot, then RUNNING) the constraint is fixed:
    scontrol says so, and the daemon's caller learns it (its view of the queue may be a tick old)."""
    job = _submit(cluster, gpus=8, constraint=BIG, wrap="sleep 300")
    try:
        assert poll_until(lambda: _raw(cluster, job)["nodes"], 15), cluster.harness.logs()
        assert _raw(cluster, job)["job_state"] in ("CONFIGURING", "RUNNING")
        with pytest.raises(SlurmUnavailable, match="Job is no longer pending execution"):
            cluster.cli.update_job_features(job, WIDENED)
        assert _raw(cluster, job)["features"] == BIG
    finally:
        cluster.harness.run("scancel", str(job))
        cluster.nodes.boot("lb8-0")  # slurmctld may have powered it up for this job: let it register


@pytest.mark.parametrize("client", ["cli", "rest"])
def test_the_luas_mark_and_the_constraint_expression_reach_the_daemon(cluster: Cluster, client: str) -> None:
    """What tells the job_submit.lua's constraint (widenable) from a user's (hard): the AdminComment the lua sets,
    read back through squeue and slurmrestd alike, with the constraint expression as written."""
    c: SlurmClient = getattr(cluster, client)
    job = _submit(cluster, constraint=f"({SMALL}|{BIG})&{SMALL}", hold=True)
    try:
        got = next(j for j in c.jobs() if j.job_id == job)
        assert (got.constraint, got.right_sized_by_lua) == (f"({SMALL}|{BIG})&{SMALL}", False)
        cluster.harness.run("scontrol", "update", f"jobid={job}", f"admincomment={RIGHT_SIZED_MARK}", check=True)
        assert next(j for j in c.jobs() if j.job_id == job).right_sized_by_lua
    finally:
        cluster.harness.run("scancel", str(job))
