"""`slurm.rest_api: auto` (the default): the daemon's slurmrestd client chooses its openapi version from what the
running slurmrestd's own OpenAPI document lists, the newest of those gpu-fleet was checked against on a real
slurmrestd (`CHECKED_APIS`); a slurmrestd serving none of them, or not answering, is named, and an upgraded
slurmrestd is followed.  The choice on real 23.11 and 22.05 slurmrestds: tests/slurm_source/test_slurmrestd.py and
tests/e2e_22_05/test_slurmrestd_22_05.py."""

from __future__ import annotations

import httpx
import pytest

from autoscaler.daemon.config import SlurmConfig
from autoscaler.slurm.client import CHECKED_APIS, RestSlurm, SlurmUnavailable

NODES = {"nodes": [], "errors": []}


class FakeRestd:
    """slurmrestd serving `apis` (its /openapi/v3 lists their paths); records the paths asked for."""

    def __init__(self, *apis: str) -> None:
        self.apis = list(apis)
        self.paths: list[str] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        self.paths.append(path)
        if path == "/openapi/v3":
            return httpx.Response(200, json={"paths": {f"/slurm/{a}/nodes": {} for a in self.apis}})
        if any(path == f"/slurm/{a}/nodes" for a in self.apis):
            return httpx.Response(200, json=NODES)
        return httpx.Response(404, text="Unable to find requested URL")


def _client(restd: FakeRestd, api: str = "auto") -> RestSlurm:
    rest = RestSlurm("http://restd", token="jwt", api=api)
    rest.client = httpx.Client(base_url="http://restd", transport=httpx.MockTransport(restd))
    return rest


@pytest.mark.parametrize(
    ("served", "chosen"),
    [
        (("v0.0.38",), "v0.0.38"),  # 22.05's openapi/v0.0.38
        (("v0.0.40",), "v0.0.40"),  # 23.11's openapi/slurmctld
        (("v0.0.38", "v0.0.39", "v0.0.40"), "v0.0.40"),  # 23.11 with every plugin loaded
        (("v0.0.38", "v0.0.39"), "v0.0.38"),  # v0.0.39 (23.02's) was never checked: not chosen
        (("v0.0.40", "v0.0.41"), "v0.0.40"),  # nor v0.0.41 (24.05's)
    ],
)
def test_auto_chooses_the_newest_checked_version_served(served: tuple[str, ...], chosen: str) -> None:
    restd = FakeRestd(*served)
    rest = _client(restd)
    assert rest.nodes() == []
    assert rest.api == chosen
    assert restd.paths == ["/openapi/v3", f"/slurm/{chosen}/nodes"]  # the document is read once
    rest.nodes()
    assert restd.paths[-1] == f"/slurm/{chosen}/nodes" and restd.paths.count("/openapi/v3") == 1


def test_a_slurmrestd_serving_no_checked_version_is_named_with_what_it_serves() -> None:
    restd = FakeRestd("v0.0.39", "v0.0.41")
    with pytest.raises(
        SlurmUnavailable, match=r"found none .*\(v0\.0\.38, v0\.0\.40; it serves v0\.0\.39, v0\.0\.41\)"
    ):
        _client(restd).nodes()
    assert restd.paths == ["/openapi/v3"]  # no read went out


def test_a_slurmrestd_that_does_not_answer_is_unavailable_not_a_crash() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    rest = RestSlurm("http://restd", token="jwt")
    rest.client = httpx.Client(base_url="http://restd", transport=httpx.MockTransport(refuse))
    with pytest.raises(SlurmUnavailable, match="/openapi/v3: connection refused"):
        rest.jobs()
    rest.client = httpx.Client(base_url="http://restd", transport=httpx.MockTransport(lambda r: httpx.Response(401)))
    with pytest.raises(SlurmUnavailable, match=r"/openapi/v3 .*HTTP 401"):
        rest.jobs()


def test_auto_follows_a_slurmrestd_upgraded_under_it() -> None:
    """22.05 -> 23.11 on the controller: the next call's 404 names the change, and the call after chooses again."""
    restd = FakeRestd("v0.0.38")
    rest = _client(restd)
    rest.nodes()
    restd.apis = ["v0.0.40"]
    with pytest.raises(SlurmUnavailable, match=r"serves no API v0\.0\.38 \(it serves v0\.0\.40"):
        rest.nodes()
    assert rest.nodes() == [] and rest.api == "v0.0.40"


def test_a_version_set_in_the_config_is_kept_even_where_another_is_served() -> None:
    restd = FakeRestd("v0.0.38", "v0.0.40")
    rest = _client(restd, api="v0.0.38")
    rest.nodes()
    assert restd.paths == ["/slurm/v0.0.38/nodes"]  # no /openapi/v3 read


def test_the_config_takes_auto_by_default_or_a_version_and_refuses_anything_else() -> None:
    assert SlurmConfig().rest_api == "auto" and CHECKED_APIS[-1] == "v0.0.40"
    assert SlurmConfig(rest_api="v0.0.39").rest_api == "v0.0.39"
    for bad in ("latest", "0.0.40", "v0.0.40; rm", "AUTO"):
        with pytest.raises(ValueError, match="must be 'auto' or a slurmrestd API version"):
            SlurmConfig(rest_api=bad)
