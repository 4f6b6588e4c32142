"""The slurmrestd client (openapi v0.0.38, JWT) against a real slurmctld + slurmrestd: same jobs and nodes as
the CLI; node updates (drain / undrain) go through scontrol, as 22.05's openapi has no node update."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Iterator

import pytest

from autoscaler.slurm.client import CliSlurm, RestSlurm, SlurmUnavailable
from tests.harness.cloud_nodes import CloudNodes, Nodeset, cloud_slurm_conf
from tests.harness.slurm import SlurmHarness
from tests.harness.slurmrestd import jwt_key_line, require_slurmrestd, start_slurmrestd

pytestmark = pytest.mark.slurm


@pytest.fixture(scope="module")
def restd(slurm_factory: Callable[..., SlurmHarness]) -> Iterator[tuple[SlurmHarness, str, str]]:
    require_slurmrestd()
    h = slurm_factory()
    nodes = CloudNodes(h, [Nodeset("r1-od", 2)])
    nodes.prepare()
    conf = cloud_slurm_conf(h, nodes, {"gpu": ["r1-od"]}, suspend_time=300)
    h.start(conf + jwt_key_line(h), nodes.gres_conf())
    url = start_slurmrestd(h)
    token = h.run("scontrol", "token", "username=root", "lifespan=600", check=True).stdout.strip().split("=", 1)[1]
    yield h, url, token
    h.stop()


def test_rest_client_reads_what_the_cli_reads(restd) -> None:
    h, url, token = restd
    jid = int(h.run("sbatch", "--parsable", "-p", "gpu", "-N", "3", "--gres=gpu:8", "--wrap", "true").stdout)
    rest = RestSlurm(url, token=token, user="root")
    cli = CliSlurm(env={"SLURM_CONF": str(h.conf_path)})
    (job,) = [j for j in rest.jobs() if j.job_id == jid]
    assert (job.partition, job.node_count, job.gpus_per_node, job.pending) == ("gpu", 3, 8, True)
    assert job.reason in ("PartitionNodeLimit", "PartitionConfig")
    rn = {n.name: n for n in rest.nodes()}
    cn = {n.name: n for n in cli.nodes()}
    assert set(rn) == set(cn) and {"r1-od-0", "r1-od-1"} <= set(rn)
    assert rn["r1-od-0"].cloud and rn["r1-od-0"].powered_down and rn["r1-od-0"].gpus == 8
    subprocess.run(["scancel", str(jid)], env=h.env, check=False)


def test_rest_client_updates_nodes(restd) -> None:
    h, url, token = restd
    cli = CliSlurm(env={"SLURM_CONF": str(h.conf_path)})
    rest = RestSlurm(url, token=token, user="root", cli=cli)  # 22.05's openapi cannot update nodes: scontrol
    rest.update_nodes(["r1-od-1"], "drain", "gpu-fleet test")
    n = {x.name: x for x in cli.nodes()}["r1-od-1"]
    assert n.drain and n.reason == "gpu-fleet test"
    rest.update_nodes(["r1-od-1"], "undrain")
    assert not {x.name: x for x in cli.nodes()}["r1-od-1"].drain


def test_rest_client_reads_a_gated_gang_and_releases_it_through_scontrol(restd) -> None:
    """A gang as the stack's job_submit.lua gates it (a BeginTime 30 s ahead and the AdminComment mark, set here by
    `--begin` and `scontrol update`, as this harness has no lua): slurmrestd shows it gated as squeue does, and the
    release (`StartTime=now`, no openapi body checked for it) goes through scontrol."""
    from autoscaler.slurm.gang_gate import GANG_GATE_MARK

    h, url, token = restd
    jid = int(h.run("sbatch", "--parsable", "-p", "gpu", "-N", "2", "--gres=gpu:8", "--begin=now+30",
                    "--wrap", "true").stdout)  # fmt: skip
    h.run("scontrol", "update", f"jobid={jid}", f"AdminComment={GANG_GATE_MARK}", check=True)
    cli = CliSlurm(env={"SLURM_CONF": str(h.conf_path)})
    rest = RestSlurm(url, token=token, user="root", cli=cli)
    (job,) = [j for j in rest.jobs() if j.job_id == jid]
    (seen,) = [j for j in cli.jobs() if j.job_id == jid]
    assert job.gated and seen.gated and job.eligible_time == seen.eligible_time
    rest.start_job_now(jid, ["r1-od-0"])
    (after,) = [j for j in cli.jobs() if j.job_id == jid]
    assert not after.gated and after.excluded_nodes == ("r1-od-0",)
    subprocess.run(["scancel", str(jid)], env=h.env, check=False)


def test_rest_client_reads_a_blocked_gang_and_leases_it_through_scontrol(restd) -> None:
    """A gang behind the gate that depends on a job not yet ended: slurmrestd shows its dependency as squeue does
    (`SlurmJob.blocked`), and the lease (`defer_jobs`: one scontrol update for a list of jobs) goes through scontrol;
    a job id that left since is named by slurmctld and the others leased all the same."""
    from autoscaler.slurm.gang_gate import GANG_GATE_MARK, lease_mark

    h, url, token = restd
    first = int(h.run("sbatch", "--parsable", "-p", "gpu", "-N", "1", "--gres=gpu:8", "-H", "--wrap", "true").stdout)
    jid = int(h.run("sbatch", "--parsable", "-p", "gpu", "-N", "2", "--gres=gpu:8", "--begin=now+30",
                    f"--dependency=afterok:{first}", "--wrap", "true").stdout)  # fmt: skip
    h.run("scontrol", "update", f"jobid={jid}", f"AdminComment={GANG_GATE_MARK}", check=True)
    cli = CliSlurm(env={"SLURM_CONF": str(h.conf_path)})
    rest = RestSlurm(url, token=token, user="root", cli=cli)
    (job,) = [j for j in rest.jobs() if j.job_id == jid]
    assert job.blocked and not job.gated and job.dependency == f"afterok:{first}(unfulfilled)"
    until = int(time.time()) + 45
    with pytest.raises(SlurmUnavailable, match="Invalid job id specified"):
        rest.defer_jobs([jid, 999_999], until, lease_mark(until))
    (after,) = [j for j in cli.jobs() if j.job_id == jid]
    assert after.blocked and after.eligible_time == until and after.admin_comment == lease_mark(until)
    subprocess.run(["scancel", str(jid), str(first)], env=h.env, check=False)


def test_rest_client_reads_the_active_reservations_as_scontrol_does(restd) -> None:
    h, url, token = restd
    cli = CliSlurm(env={"SLURM_CONF": str(h.conf_path)})
    rest = RestSlurm(url, token=token, user="root", cli=cli)
    h.run("scontrol", "create", "reservation", "reservationname=team", "nodes=r1-od-[0-1]", "users=root",
          "starttime=now", "duration=10", check=True)  # fmt: skip
    h.run("scontrol", "create", "reservation", "reservationname=later", "nodes=r1-od-1", "users=root",
          "starttime=now+3600", "duration=10", check=True)  # fmt: skip
    try:
        assert rest.reservations() == cli.reservations() == {"team": ("r1-od-0", "r1-od-1")}
    finally:
        h.run("scontrol", "delete", "reservationname=team")
        h.run("scontrol", "delete", "reservationname=later")


def test_an_api_version_slurmrestd_does_not_serve_is_named_with_those_it_does(restd) -> None:
    """`slurm.rest_api` left at v0.0.38 on Slurm 23.11 (whose slurmrestd serves v0.0.39 and v0.0.40), or any version
    the running slurmrestd lacks: the daemon's error says which it serves, read from slurmrestd's own OpenAPI
    document, instead of a bare 404 every tick."""
    _, url, token = restd
    rest = RestSlurm(url, token=token, user="root", api="v0.0.40")  # this harness loads openapi/v0.0.38 only
    with pytest.raises(SlurmUnavailable, match=r"serves no API v0\.0\.40 \(it serves v0\.0\.38;.*set slurm\.rest_api"):
        rest.nodes()
