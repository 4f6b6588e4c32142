"""The slurmrestd client (JWT, `slurm.rest_api: auto`) against a real slurmctld + slurmrestd: same jobs, nodes and
reservations as the CLI; node updates through scontrol on 22.05 (openapi v0.0.38 has no node update), through
slurmrestd's own on 23.11 (v0.0.40).  They run on the stacks' 23.11 (the root conftest's `slurm_factory`);
tests/e2e_22_05/test_slurmrestd_22_05.py re-runs them on 22.05."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Iterator

import pytest

from autoscaler.slurm.client import CliSlurm, RestSlurm, SlurmUnavailable
from autoscaler.slurm.readers import SlurmNode
from autoscaler.slurm.tokens import SigningKey, TokenFile
from tests.harness.cloud_nodes import CloudNodes, Nodeset, cloud_slurm_conf
from tests.harness.slurm import SlurmHarness, poll_until, slurm_release
from tests.harness.slurmrestd import jwt_key_line, jwt_key_path, require_slurmrestd, start_slurmrestd

pytestmark = pytest.mark.slurm


def expected_api() -> str:
    """The openapi version `auto` must choose on the Slurm the harness starts (the controller wrapper's plugin:
    openapi/v0.0.38 on 22.05, openapi/slurmctld, which serves v0.0.40 only, on 23.11)."""
    return "v0.0.38" if slurm_release() < (23, 2) else "v0.0.40"


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


def test_auto_chooses_the_newest_checked_api_slurmrestd_serves(restd) -> None:
    """`slurm.rest_api: auto` (the default) reads slurmrestd's own OpenAPI document: v0.0.38 on 22.05 and v0.0.40 on
    23.11, so a daemon in `mode: rest` works on either without a version in its config."""
    _, url, token = restd
    assert RestSlurm(url, token=token, user="root").api == expected_api()


def test_rest_client_reads_what_the_cli_reads(restd) -> None:
    h, url, token = restd
    jid = int(h.run("sbatch", "--parsable", "-p", "gpu", "-N", "3", "--gres=gpu:8", "--wrap", "true").stdout)
    held = int(h.run("sbatch", "--parsable", "-p", "gpu", "-N", "1", "--gres=gpu:2", "-H", "--wrap", "true").stdout)
    rest = RestSlurm(url, token=token, user="root")
    cli = CliSlurm(env={"SLURM_CONF": str(h.conf_path)})
    assert poll_until(lambda: next(j for j in cli.jobs() if j.job_id == jid).reason != "None", 15)
    (job,) = [j for j in rest.jobs() if j.job_id == jid]
    assert (job.partition, job.node_count, job.gpus_per_node, job.pending) == ("gpu", 3, 8, True)
    assert job.reason in ("PartitionNodeLimit", "PartitionConfig")

    # every field the daemon reads, record for record; two reads a few ms apart, retried while slurmctld's scheduler
    # moves a reason between them (PartitionConfig / PartitionNodeLimit: seen once in CI)
    def same_jobs() -> bool:
        return {j.job_id: j for j in rest.jobs()} == {j.job_id: j for j in cli.jobs()}

    assert poll_until(same_jobs, 15), ({j.job_id: j for j in rest.jobs()}, {j.job_id: j for j in cli.jobs()})
    assert {j.job_id for j in rest.jobs()} >= {jid, held}
    rn = {n.name: n for n in rest.nodes()}
    cn = {n.name: n for n in cli.nodes()}
    assert set(rn) == set(cn) and {"r1-od-0", "r1-od-1"} <= set(rn)
    assert rn["r1-od-0"].cloud and rn["r1-od-0"].powered_down and rn["r1-od-0"].gpus == 8
    assert poll_until(lambda: {n.name: n for n in rest.nodes()} == {n.name: n for n in cli.nodes()}, 15), (rn, cn)
    subprocess.run(["scancel", str(jid), str(held)], env=h.env, check=False)


def test_rest_client_updates_nodes(restd) -> None:
    """Drain, undrain, power up, power down and down as the daemon makes them: through scontrol on 22.05, whose
    openapi has no node update, and through slurmrestd alone on 23.11 (no scontrol to fall back on)."""
    h, url, token = restd
    cli = CliSlurm(env={"SLURM_CONF": str(h.conf_path)})
    rest = RestSlurm(url, token=token, user="root", cli=cli if expected_api() == "v0.0.38" else None)

    def node() -> SlurmNode:
        return {x.name: x for x in cli.nodes()}["r1-od-1"]

    rest.update_nodes(["r1-od-1"], "drain", "gpu-fleet test")
    assert node().drain and node().reason == "gpu-fleet test"
    rest.update_nodes(["r1-od-1"], "undrain")
    assert not node().drain
    # a gang's names in one update: slurmctld runs the ResumeProgram once for both, so the daemon's hook queues them
    # as one request (one update per name split a gang into single launches on 23.11: tests/e2e/test_rest_mode.py)
    rest.update_nodes(["r1-od-0", "r1-od-1"], "power_up")
    assert poll_until(lambda: node().powering_up, 15), node()
    assert poll_until(lambda: any(c.endswith(" resume r1-od-[0-1]") for c in h.power_calls()), 15), h.power_calls()
    rest.update_nodes(["r1-od-0", "r1-od-1"], "power_down_force")  # scontrol's two flags: POWER_DOWN, POWERED_DOWN
    assert poll_until(lambda: node().powered_down or node().powering_down, 15), node()
    assert poll_until(lambda: node().powered_down and not node().powering_down, 60), node()
    # a preempted instance's node (`Daemon._preempted`): DOWN (no reason given: the client sends its default one,
    # which scontrol and slurmctld want with a DOWN), then a power-down, which the power thread takes on the DOWN
    # node; with idle_on_node_suspend it comes back powered down and no longer DOWN
    rest.update_nodes(["r1-od-1"], "down")
    assert node().down and node().reason == "gpu-fleet autoscaler", node()
    rest.update_nodes(["r1-od-1"], "power_down", "gpu-fleet: instance preempted")
    assert poll_until(lambda: node().powering_down and not node().down, 15), node()
    assert poll_until(lambda: node().powered_down and not (node().powering_down or node().down), 60), node()


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
    """`slurm.rest_api` set to v0.0.38 on Slurm 23.11 (whose openapi/slurmctld serves v0.0.40 only), v0.0.40 on
    22.05, or any version the running slurmrestd lacks: the daemon's error says which it serves, read from
    slurmrestd's own OpenAPI document, instead of a bare 404 every tick."""
    _, url, token = restd
    served = expected_api()
    other = "v0.0.40" if served == "v0.0.38" else "v0.0.38"
    rest = RestSlurm(url, token=token, user="root", api=other)
    with pytest.raises(SlurmUnavailable, match=rf"serves no API {other} \(it serves {served};.*set slurm\.rest_api"):
        rest.nodes()


def test_tokens_the_daemon_signs_with_the_clusters_key_are_accepted_and_renewed(restd) -> None:
    """`slurm.jwt_key_file`: the daemon signs its own tokens with slurm.conf's HS256 key (what the stacks' controller
    keeps at /var/spool/slurmctld/jwt_hs256.key), so a daemon running for days never holds an expired one.  Real
    slurmrestd accepts them; once the lifespan is half gone the next request carries a new token."""
    h, url, _ = restd
    now = [time.time()]
    key = SigningKey(jwt_key_path(h), "root", lifespan_s=120, clock=lambda: now[0])
    rest = RestSlurm(url, token=key, user="root")
    assert {"r1-od-0", "r1-od-1"} <= {n.name for n in rest.nodes()}
    first = key.token()
    now[0] += 61  # past half the lifespan: renewed, and the renewed token works
    assert {n.name for n in rest.nodes()} >= {"r1-od-0"} and key.token() != first


def test_an_expired_or_foreign_token_is_refused_and_named(restd, tmp_path) -> None:
    """A token past its `exp` (an `scontrol token` of 30 minutes, read once at start, is one half an hour later) or
    signed with another key: slurmctld refuses it, slurmrestd answers HTTP 500 with a generic error (22.05:
    "Unspecified error", 23.11: "Unexpected message received"), and the daemon's error says the token expired, or
    names where it came from; a token file rewritten with a good token is used from the next request on
    (`slurm.jwt_file`)."""
    h, url, token = restd
    stale = SigningKey(jwt_key_path(h), "root", lifespan_s=60, clock=lambda: time.time() - 3600)
    expired = r"HTTP 500 .*: a token signed with slurm\.jwt_key_file \S+ expired at 20\d\d-"
    with pytest.raises(SlurmUnavailable, match=expired):
        RestSlurm(url, token=stale, user="root").nodes()
    other = tmp_path / "other.key"
    other.write_bytes(b"k" * 32)
    foreign = rf"HTTP 500 .*is a token signed with slurm\.jwt_key_file {other} signed"
    with pytest.raises(SlurmUnavailable, match=foreign):
        RestSlurm(url, token=SigningKey(other, "root"), user="root").nodes()

    path = tmp_path / "slurm.jwt"
    path.write_text(f"SLURM_JWT={stale.token()}\n")
    rest = RestSlurm(url, token=TokenFile(path), user="root")
    with pytest.raises(SlurmUnavailable, match=rf"slurm\.jwt_file {path} expired at"):
        rest.nodes()
    path.write_text(f"SLURM_JWT={token}\n")  # what a timer running `scontrol token` writes
    assert "r1-od-0" in {n.name for n in rest.nodes()}
