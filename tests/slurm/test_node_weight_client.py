"""Node Weights through the daemon's Slurm clients: read from sinfo / slurmrestd JSON, set with
`update_weight` (`scontrol update nodename=<hostlist> weight=<n>`, or slurmrestd's node update where the openapi
has one), against a real slurmctld 22.05 and, for the REST shapes, a recorded transport.  And the one job write,
`update_job_features` (strict late binding widens a pending job's constraint), as commands and request bodies; on
a real slurmctld and slurmrestd in tests/slurm/test_job_features.py."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from autoscaler.slurm.client import MAX_WEIGHT, CliSlurm, RestSlurm, SlurmUnavailable
from autoscaler.slurm.readers import parse_node, parse_sinfo
from fleet.catalog import load_catalog
from fleet.slurm import render_slurm_conf
from fleet.slurm.weights import pool_weights
from fleet.spec import load_stack_file
from fleet.spec.derive import node_name_prefix
from tests.harness.slurm import SlurmHarness, for_this_slurm

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "slurm"


# --- reading -----------------------------------------------------------------------------------------------
def test_weight_is_read_from_2205_sinfo_json() -> None:
    nodes = parse_sinfo(json.loads((DATA / "sinfo-full.json").read_text()))
    assert nodes and {n.weight for n in nodes} == {1}  # the sample cluster's slurm.conf sets no Weight: default 1


def test_weight_shapes() -> None:
    assert parse_node({"name": "a-0", "weight": 1004}).weight == 1004
    assert parse_node({"name": "a-0", "weight": {"set": True, "infinite": False, "number": 1004}}).weight == 1004
    assert parse_node({"name": "a-0", "weight": {"set": False, "number": 0}}).weight is None
    assert parse_node({"name": "a-0"}).weight is None


# --- writing: the commands ----------------------------------------------------------------------------------
class Recorder:
    def __init__(self) -> None:
        self.argv: list[list[str]] = []

    def __call__(self, argv: list[str], **kw: object) -> subprocess.CompletedProcess:
        self.argv.append(argv)
        return subprocess.CompletedProcess(argv, 0, "", "")


def test_cli_sets_one_weight_on_a_compressed_hostlist() -> None:
    rec = Recorder()
    cli = CliSlurm(runner=rec)
    cli.update_weight(["r-2", "r-0", "r-1", "x-5"], 1008)
    cli.update_weight([], 1008)  # nothing to do: no call
    assert rec.argv == [["scontrol", "update", "nodename=r-[0-2],x-5", "weight=1008"]]


@pytest.mark.parametrize("bad", [-1, 1.5, "1004", None, True, MAX_WEIGHT + 1])
def test_a_weight_scontrol_would_refuse_is_refused_first(bad: object) -> None:
    rec = Recorder()
    with pytest.raises(ValueError, match=r"^weight: .* is not an integer in 0\.\.4294967293$"):
        CliSlurm(runner=rec).update_weight(["r-0"], bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"^weight: "):
        RestSlurm("http://127.0.0.1:1", token="t", api="v0.0.39").update_weight(["r-0"], bad)  # type: ignore[arg-type]
    assert rec.argv == []


def _rest(api: str, seen: list[httpx.Request], cli: CliSlurm | None = None) -> RestSlurm:
    rest = RestSlurm("http://restd", token="jwt", user="slurm", api=api, cli=cli)

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"errors": []})

    rest.client = httpx.Client(
        base_url="http://restd",
        transport=httpx.MockTransport(handler),
        headers=rest.client.headers,
        auth=rest.client.auth,
    )
    return rest


def test_rest_uses_the_node_update_endpoint_where_the_api_has_one() -> None:
    seen: list[httpx.Request] = []
    _rest("v0.0.39", seen).update_weight(["r-0", "r-1"], 1003)
    # one update for all the names, as scontrol sends it: a hostlist, URL-encoded in the path (slurmrestd 23.11
    # answers "Unable to parse URL path" to raw brackets)
    assert [(r.method, r.url.raw_path) for r in seen] == [("POST", b"/slurm/v0.0.39/node/r-%5B0-1%5D")]
    # v0.0.39's update_node_msg: weight is a uint32_no_val
    assert [json.loads(r.content) for r in seen] == [{"weight": {"set": True, "infinite": False, "number": 1003}}]
    assert seen[0].headers["X-SLURM-USER-TOKEN"] == "jwt"


def test_rest_on_2205_falls_back_to_scontrol() -> None:
    seen: list[httpx.Request] = []
    rec = Recorder()
    _rest("v0.0.38", seen, CliSlurm(runner=rec)).update_weight(["r-1"], 1003)
    assert seen == [] and rec.argv == [["scontrol", "update", "nodename=r-1", "weight=1003"]]
    with pytest.raises(SlurmUnavailable, match="no scontrol fallback"):
        _rest("v0.0.38", seen).update_weight(["r-1"], 1003)


# --- a pending job's constraint ------------------------------------------------------------------------------
def test_cli_replaces_a_jobs_constraint_with_one_scontrol_call() -> None:
    rec = Recorder()
    cli = CliSlurm(runner=rec)
    cli.update_job_features(42, "a3-highgpu-1g|a3-highgpu-8g")
    cli.update_job_features(43, "a3-highgpu-1g")
    assert rec.argv == [
        ["scontrol", "update", "jobid=42", "features=a3-highgpu-1g|a3-highgpu-8g"],
        ["scontrol", "update", "jobid=43", "features=a3-highgpu-1g"],
    ]


@pytest.mark.parametrize(
    "bad", ["", "a|", "|a", "a||b", "a&b", "a,b", "[a*2]", "a b", "a\nb", "a|b\n", "a;reboot", "a)", None, 7]
)
def test_a_constraint_that_is_not_names_joined_by_bars_is_refused_first(bad: object) -> None:
    """Only feature names joined by `|` (what the daemon writes): no `&`, counts, brackets, spaces or newlines."""
    rec = Recorder()
    with pytest.raises(ValueError, match=r"^features: .* is not feature names \(\[A-Za-z0-9_\.-\]\) joined by '\|'$"):
        CliSlurm(runner=rec).update_job_features(42, bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"^features: "):
        RestSlurm("http://127.0.0.1:1", token="t").update_job_features(42, bad)  # type: ignore[arg-type]
    assert rec.argv == []


def test_cli_sets_and_clears_a_jobs_excluded_nodes_and_refuses_what_is_not_node_names() -> None:
    """A pending gang's ExcNodeList (`core.gang_exclusions`): one scontrol call, the names as a hostlist, none to
    clear it; anything that is not a list of node names is refused before scontrol runs."""
    rec = Recorder()
    cli = CliSlurm(runner=rec)
    cli.update_job_excluded_nodes(42, ["c1-od8g-0", "c1-od8g-1", "c1-od8g-3"])
    cli.update_job_excluded_nodes(42, [])
    assert rec.argv == [
        ["scontrol", "update", "jobid=42", "ExcNodeList=c1-od8g-[0-1,3]"],
        ["scontrol", "update", "jobid=42", "ExcNodeList="],
    ]
    for bad in ("c1-od8g-0", ["a b"], ["a;reboot"], [""], [7], None):
        with pytest.raises(ValueError, match=r"^names: "):
            cli.update_job_excluded_nodes(42, bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"^job_id: "):
        cli.update_job_excluded_nodes(0, ["a-0"])
    assert len(rec.argv) == 2


@pytest.mark.parametrize("bad", [0, -3, True, "42", 4.0, None])
def test_a_job_id_that_is_not_a_positive_int_is_refused_first(bad: object) -> None:
    rec = Recorder()
    with pytest.raises(ValueError, match=r"^job_id: .* is not a positive integer$"):
        CliSlurm(runner=rec).update_job_features(bad, "a3-highgpu-1g")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"^job_id: "):
        RestSlurm("http://127.0.0.1:1", token="t").update_job_features(bad, "a3-highgpu-1g")  # type: ignore[arg-type]
    assert rec.argv == []


def test_scontrol_refusing_a_job_update_is_reported_with_its_reason() -> None:
    def refuse(argv: list[str], **kw: object) -> subprocess.CompletedProcess:
        return subprocess.CompletedProcess(argv, 1, "", "Job is no longer pending execution for job 42\n")

    with pytest.raises(SlurmUnavailable, match=r"jobid=42 .* exited 1: Job is no longer pending execution"):
        CliSlurm(runner=refuse).update_job_features(42, "a3-highgpu-8g")


def test_rest_on_2205_updates_the_job_through_slurmrestd() -> None:
    """v0.0.38's ``POST job/{id}`` takes the job properties themselves: ``constraints`` is --constraint."""
    seen: list[httpx.Request] = []
    rec = Recorder()
    _rest("v0.0.38", seen, CliSlurm(runner=rec)).update_job_features(42, "a3-highgpu-1g|a3-highgpu-8g")
    assert [(r.method, r.url.path) for r in seen] == [("POST", "/slurm/v0.0.38/job/42")]
    assert json.loads(seen[0].content) == {"constraints": "a3-highgpu-1g|a3-highgpu-8g"}
    assert rec.argv == []  # no scontrol


@pytest.mark.parametrize("api", ["v0.0.37", "v0.0.39", "v0.0.40"])
def test_rest_on_other_apis_updates_the_job_through_scontrol(api: str) -> None:
    seen: list[httpx.Request] = []
    rec = Recorder()
    _rest(api, seen, CliSlurm(runner=rec)).update_job_features(42, "a3-highgpu-8g")
    assert seen == [] and rec.argv == [["scontrol", "update", "jobid=42", "features=a3-highgpu-8g"]]
    with pytest.raises(SlurmUnavailable, match="no cli is set"):
        _rest(api, seen).update_job_features(42, "a3-highgpu-8g")


def test_rest_names_slurmrestds_error_for_a_refused_update() -> None:
    """slurmrestd answers a refused update with HTTP 500 and its error in ``errors`` after ~200 characters of
    "meta" (as 22.05.8 does): the message names the error, not the meta."""
    body = {
        "meta": {"plugin": {"type": "openapi/v0.0.38", "name": "Slurm OpenAPI v0.0.38"}, "Slurm": {"release": "x"}},
        "errors": [
            {"description": "a note", "source": "hsearch_r"},
            {"error_number": 2072, "error": "Job is no longer pending execution", "source": "_update_job"},
        ],
    }
    rest = RestSlurm("http://restd", token="jwt", api="v0.0.38")
    rest.client = httpx.Client(
        base_url="http://restd",
        transport=httpx.MockTransport(lambda r: httpx.Response(500, text=json.dumps(body, indent=2))),
    )
    with pytest.raises(SlurmUnavailable, match=r"job/42: HTTP 500 .*Job is no longer pending execution"):
        rest.update_job_features(42, "a3-highgpu-8g")
    rest.client = httpx.Client(base_url="http://restd", transport=httpx.MockTransport(lambda r: httpx.Response(502)))
    with pytest.raises(SlurmUnavailable, match="job/42: HTTP 502"):
        rest.update_job_features(42, "a3-highgpu-8g")


# --- against a real slurmctld ---------------------------------------------------------------------------------
@pytest.fixture
def l4dev(slurm_factory) -> Iterator[tuple[SlurmHarness, list[str], int]]:  # type: ignore[no-untyped-def]
    """gcp-l4-dev's rendered slurm.conf on a real slurmctld: its first pool's node names and rendered Weight."""
    spec = for_this_slurm(load_stack_file(ROOT / "Pulumi.gcp-l4-dev.yaml"))
    c = spec.clusters[0]
    harness = slurm_factory()
    harness.start_rendered(render_slurm_conf(spec, c, overrides=harness.overrides()))
    p = c.pools[0]
    rendered = pool_weights(((q.name, q.capacity, q.machine_type) for q in c.pools), load_catalog(), spec.region)
    yield harness, [f"{node_name_prefix(c.name, p.name)}-{i}" for i in range(p.max_nodes)], rendered[p.name]
    harness.stop()


@pytest.mark.slurm
def test_cli_sets_and_reads_back_weights_on_real_slurmctld(l4dev) -> None:  # type: ignore[no-untyped-def]
    harness, names, rendered = l4dev
    assert len(names) >= 2
    cli = CliSlurm(env={"SLURM_CONF": str(harness.conf_path)})
    before = {n.name: n.weight for n in cli.nodes()}
    assert {before[n] for n in names} == {rendered}  # what `fleet render slurm-conf` wrote, as sinfo reports it
    cli.update_weight(names[:2], rendered + 5)
    after = {n.name: n.weight for n in cli.nodes()}
    assert [after[n] for n in names[:2]] == [rendered + 5] * 2
    assert {k: v for k, v in after.items() if k not in names[:2]} == {
        k: v for k, v in before.items() if k not in names[:2]
    }
    with pytest.raises(SlurmUnavailable, match="weight=7"):  # a name slurmctld does not know: refused, said so
        cli.update_weight(["no-such-node-0"], 7)
