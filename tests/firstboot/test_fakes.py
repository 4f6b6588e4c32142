"""The first-boot test's own parts, without root: the fake metadata server and Secret Manager refuse what GCE
refuses, and the Debian mirror is read from apt sources in both formats."""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.request

import pytest

from tests.fakes.metadata import FakeMetadata, VmMetadata
from tests.fakes.metadata_secrets import FakeSecretManager, crc32c
from tests.firstboot.declared import _expand
from tests.firstboot.image import NOT_BAKED, script_packages
from tests.firstboot.rootfs import RootfsError, debian_mirror

SA = "node@p.iam.gserviceaccount.com"
FLAVOR = {"Metadata-Flavor": "Google"}


@pytest.fixture
def md() -> FakeMetadata:
    fake = FakeMetadata("p", "42")
    fake.add_instance(VmMetadata("n0", "us-east4-a", "10.0.0.2", SA, {"slurm-conf": "ClusterName=fb\n"}))
    return fake


def test_metadata_answers_a_vm_about_itself_only_with_the_flavor_header(md):
    assert md.answer("10.0.0.2", "/computeMetadata/v1/instance/attributes/slurm-conf", FLAVOR)[2] == "ClusterName=fb\n"
    assert md.answer("10.0.0.2", "/computeMetadata/v1/instance/attributes/", FLAVOR)[2] == "slurm-conf\n"
    assert md.answer("10.0.0.2", "/computeMetadata/v1/project/project-id", FLAVOR)[2] == "p"
    assert md.answer("10.0.0.2", "/computeMetadata/v1/instance/network-interfaces/0/ip", FLAVOR)[2] == "10.0.0.2"
    assert md.answer("10.0.0.2", "/computeMetadata/v1/instance/attributes/slurm-conf", {})[0] == 403
    assert md.answer("10.0.0.2", "/computeMetadata/v1/project/project-id", {**FLAVOR, "X-Forwarded-For": "x"})[0] == 403
    assert md.answer("10.0.0.9", "/computeMetadata/v1/project/project-id", FLAVOR)[0] == 403  # not a VM
    assert md.answer("10.0.0.2", "/computeMetadata/v1/instance/attributes/startup-script", FLAVOR)[0] == 404


def test_secret_manager_serves_only_declared_accessors_with_a_metadata_token(md):
    sm = FakeSecretManager(md, "p", "42")
    sm.add_secret("munge", b"a2V5", {f"serviceAccount:{SA}"})
    sm.add_secret("jwt", b"and0", {"serviceAccount:ctl@p.iam.gserviceaccount.com"})
    path = "/v1/projects/p/secrets/{}/versions/latest:access"
    token = json.loads(md.answer("10.0.0.2", "/computeMetadata/v1/instance/service-accounts/default/token", FLAVOR)[2])
    auth = {"Authorization": f"Bearer {token['access_token']}"}
    status, body = sm.answer(path.format("munge"), auth)
    assert status == 200 and base64.b64decode(body["payload"]["data"]) == b"a2V5"
    assert body["payload"]["dataCrc32c"] == str(crc32c(b"a2V5"))
    assert sm.answer(path.format("jwt"), auth)[0] == 403  # not an accessor
    assert sm.answer(path.format("nope"), auth)[0] == 403  # the real API does not say whether it exists
    assert sm.answer(path.format("munge"), {})[0] == 401
    assert sm.answer(path.format("munge"), {"Authorization": "Bearer forged"})[0] == 401
    assert sm.answer("/v1/projects/other/secrets/munge/versions/latest:access", auth)[0] == 403


def test_crc32c_matches_the_published_check_value():
    assert crc32c(b"123456789") == 0xE3069283


def test_metadata_server_speaks_http(md):
    server = md.serve(("127.0.0.1", 0))
    md.vms["127.0.0.1"] = md.vms.pop("10.0.0.2")
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/computeMetadata/v1/instance/name"
        with urllib.request.urlopen(urllib.request.Request(url, headers=FLAVOR), timeout=5) as r:
            assert r.read() == b"n0" and r.headers["Metadata-Flavor"] == "Google"
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(url, timeout=5)
        assert err.value.code == 403
    finally:
        server.shutdown()
        server.server_close()


def test_mirror_is_read_from_deb822_and_classic_sources(tmp_path):
    d = tmp_path / "sources.list.d"
    d.mkdir()
    (d / "debian.sources").write_text(
        "Types: deb\nURIs: http://mirror.example/debian-security\nSuites: bookworm-security\nComponents: main\n\n"
        "Types: deb\nURIs: http://mirror.example/debian\nSuites: bookworm bookworm-updates\nComponents: main\n"
    )
    assert debian_mirror((tmp_path / "sources.list", d)) == "http://mirror.example/debian"
    classic = tmp_path / "classic.list"
    classic.write_text("# x\ndeb [arch=amd64] http://other.example/debian bookworm main\n")
    assert debian_mirror((classic,)) == "http://other.example/debian"
    with pytest.raises(RootfsError, match="no apt source"):
        debian_mirror((tmp_path / "missing",))


def test_image_packages_come_from_the_scripts_minus_the_stubbed_ones():
    script = 'apt_install git python3-venv\napt_install dkms dmabuf-import-helper\napt_install "lustre-$(uname -r)"\n'
    assert script_packages([script]) - set(NOT_BAKED) == {"git", "python3-venv"}


def test_hostlists_of_the_renderer_expand():
    assert _expand("fb-mega-[0-1]") == ["fb-mega-0", "fb-mega-1"]
    assert _expand("fb-ultra-0") == ["fb-ultra-0"]
