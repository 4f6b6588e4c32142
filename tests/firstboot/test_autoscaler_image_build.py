"""deploy/autoscaler.Dockerfile built, pushed and pulled as its header tells a platform team to, and run by a real
container runtime as the Kubernetes stacks' Deployment runs it.

Docker builds the Dockerfile from this checkout's working tree with BuildKit (`docker build -f
deploy/autoscaler.Dockerfile --build-arg BASE_IMAGE=<image>@sha256:<digest> .`: Docker's own parser, its
Dockerfile-specific `.dockerignore`, its layers), pushes it to a registry (tests/harness/docker.py: a dockerd and a
registry of the test's own), and Podman pulls it by the digest of the push, as a kubelet pulls the stack's `image`,
and runs it with runc, with the flags the Deployment's pod spec gives (tests/harness/oci.py `pod_flags`: user 65532,
read-only root, no capabilities, the ConfigMap read-only and the state emptyDir).  Nothing comes from the internet:
the base image is the first-boot images' own root (Ubuntu 24.04's Python 3.12, or Debian 12's 3.11 under
FLEET_FIRSTBOOT_OS=debian), imported and pushed, standing in for python.org's image and named by digest, with an
/etc/pip.conf that points pip at the lock's wheels over HTTP on this machine (tests/firstboot/mirror.py
`wheelhouse`), as a site's mirror would.

The last two tests run the image as the Kubernetes stacks deploy it, unchanged but for the stack's `image`, set to
the reference the push gave (Podman runs the image the Deployment names): the stack's own ConfigMap files at
/etc/gpu-fleet (`in_cluster: true`), the Deployment's env and args, the ServiceAccount token the kubelet mounts and
the API server's service env, against the fake API server over TLS that accepts that token alone, bound to the
stack's RBAC; each runs until SIGTERM, as a rollout ends it, in a pod network of its own (a network namespace,
tests/firstboot/netns.py).  `k8s-neocloud-kueue` answers its readiness probe at the pod's address and scales a
Cluster API MachineDeployment; `gke-a3ultra-kueue` gets its Google credentials from the metadata server as
Workload Identity gives them and launches in the stack's node pool MIG on compute.googleapis.com
(the fake, which takes that account's tokens alone).

Not covered: python.org's base image itself, a registry with TLS and credentials, the kubelet itself (the
readiness probe's request is made by the test, from the pod network's gateway), the cluster's DNS (the pod's
/etc/hosts names Google's endpoints), GKE's own metadata server and IAM (the fake metadata server hands
the annotated account's token to the pod's address; whether that account may call Compute is not checked)."""

from __future__ import annotations

import http.client
import ipaddress
import os
import re
import secrets
import socket
import ssl
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from components.gcp.startup import AUTOSCALER_HOME, AUTOSCALER_LOCK
from components.kubernetes.autoscaler import CONFIG_DIR, WORKLOAD_IDENTITY_ANNOTATION
from tests.components.test_autoscaler_image import DOCKERFILE, deployed_pod
from tests.fakes.compute_api import FakeCompute
from tests.fakes.kube_api import FakeKube
from tests.fakes.metadata import FakeMetadata, VmMetadata
from tests.fakes.metadata_secrets import make_tls
from tests.firstboot.conftest import must_run
from tests.firstboot.mirror import MirrorUnavailable, image_python, serve_wheels, wheelhouse
from tests.firstboot.netns import METADATA_IP, Fabric
from tests.harness import oci
from tests.harness.docker import Docker
from tests.harness.docker import unavailable_reason as docker_unavailable
from tests.harness.slurm import poll_until
from tests.kube.cluster import deployed_rbac, pod_template
from tests.kube.test_cli import assert_served_the_request, seed_one_request, write_config
from tests.kube.test_deployed import Deployed, accepted
from tests.stacks.test_kube_stacks import of_kind

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
NAME = "gpu-fleet-autoscaler"
IMAGE_TESTS = "the autoscaler image's build and runs"


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[oci.Engine]:
    must_run(oci.unavailable_reason(), IMAGE_TESTS)
    built = oci.Engine(tmp_path_factory.mktemp("oci"))
    try:
        yield built
    finally:
        built.close()


@pytest.fixture(scope="module")
def docker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Docker]:
    must_run(docker_unavailable(), IMAGE_TESTS)
    daemon = Docker(tmp_path_factory.mktemp("docker"))
    try:
        daemon.start()
        yield daemon
    finally:
        daemon.close()


@pytest.fixture(scope="module")
def wheels_url(root_image: Path) -> Iterator[str]:
    """The lock's wheels for the base's Python, over HTTP on this machine's loopback (the build's RUNs share the
    host's network), as a site's package mirror would serve them."""
    try:
        wheels = wheelhouse(root_image, REPO / AUTOSCALER_LOCK)
    except MirrorUnavailable as exc:
        must_run(str(exc), IMAGE_TESTS)
    sock = socket.create_server(("127.0.0.1", 0))
    server = serve_wheels(wheels, sock)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}/"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def base(docker: Docker, root_image: Path, wheels_url: str) -> str:
    """The base image, pushed to the registry and named by its digest, with pip pointed at the wheels alone."""
    pip_conf = f"[global]\nno-index = true\nfind-links = {wheels_url}\n"
    return docker.import_root(root_image, "python-base", {"/etc/pip.conf": pip_conf})


@pytest.fixture(scope="module")
def image(docker: Docker, engine: oci.Engine, base: str) -> str:
    """The Dockerfile's own instructions: `docker build` from this checkout, `docker push`, and the image pulled
    by the digest of the push, as the stack's `image` names it."""
    tag = f"{docker.registry}/{NAME}:test"
    done = docker.build(DOCKERFILE, REPO, tag, {"BASE_IMAGE": base})
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    reference = docker.push(tag)
    engine.pull(reference)
    return reference


def _shell(engine: oci.Engine, image: str, script: str) -> str:
    """`script` by /bin/sh in `image`, as its USER, read-only (a user's `docker run --entrypoint sh`)."""
    done = engine.run(image, ["--read-only", "--network", "none", "--entrypoint", "/bin/sh"], ["-c", script])
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_the_image_runs_the_deployments_command_as_the_deployments_user(engine: oci.Engine, image: str) -> None:
    """What the builder recorded: the ENTRYPOINT is the venv's `fleet` (the pod gives args only), the USER is the
    pod's runAsUser:runAsGroup, and bytecode is never written at run time (the root filesystem is read-only)."""
    config = engine.config(image)
    container, pod = deployed_pod()
    security = pod["securityContext"]
    assert config["Entrypoint"] == [f"{AUTOSCALER_HOME}/.venv/bin/fleet"] and "command" not in container
    assert config["User"] == f"{security['runAsUser']}:{security['runAsGroup']}"
    assert "PYTHONDONTWRITEBYTECODE=1" in config["Env"]


def test_the_image_holds_the_project_and_a_checked_venv_and_no_bytecode_of_the_build_context(
    engine: oci.Engine, image: str, root_image: Path
) -> None:
    """/opt/gpu-fleet holds the project's packages, deploy/ and the venv the controller's script built (`pip check`
    passes: the lock is whole); the `.dockerignore` beside the Dockerfile kept the context's `__pycache__` out, so
    every .pyc is the image's Python's, compiled by the build."""
    listing = _shell(engine, image, f"ls -A {AUTOSCALER_HOME}").split()
    assert sorted(listing) == [".venv", "autoscaler", "components", "deploy", "fleet", "pyproject.toml", "stacks"]
    _shell(engine, image, f"{AUTOSCALER_HOME}/.venv/bin/pip check --disable-pip-version-check")
    tags = _shell(engine, image, f"find {AUTOSCALER_HOME} -path '*/.venv' -prune -o -name '*.pyc' -print")
    python = "cpython-" + image_python(root_image).replace(".", "")
    foreign = [path for path in tags.split() if f".{python}." not in path]
    assert tags.split() and not foreign, foreign[:5]


def test_the_image_serves_a_provisioning_request_as_its_pod_runs_it(
    engine: oci.Engine, image: str, tmp_path: Path
) -> None:
    """The Deployment's container, run by Podman with the pod spec's flags (`pod_flags`) and its own args plus
    `--once`: one tick against the fake API server (the Deployment's RBAC) serves a ProvisioningRequest by scaling
    a Cluster API MachineDeployment: the image holds every module the Kubernetes daemon imports, and the daemon
    needs nothing writable but the pod's emptyDir."""
    container, pod = deployed_pod()
    config, state = tmp_path / "config", tmp_path / "state"
    config.mkdir()
    state.mkdir()
    fake = FakeKube(rbac=deployed_rbac(cluster_api=True))
    fake.start()
    try:
        seed_one_request(fake)
        write_config(config, fake, seen_at=Path(CONFIG_DIR))
        fields = {"metadata.name": "gpu-fleet-autoscaler-0", "metadata.namespace": "gpu-fleet-system"}
        flags = oci.pod_flags(pod, container, {"config": config, "state": state}, fields)
        run = engine.run(image, flags, [*container["args"], "--once"])
        assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-3000:]
        assert_served_the_request(run.stdout, fake)
    finally:
        fake.stop()
    assert not fake.forbidden, fake.forbidden


def test_a_command_the_image_is_not_for_says_what_it_lacks(engine: oci.Engine, image: str) -> None:
    """The image holds the daemon's dependencies only: a stack command there ends with a clear error (the stack
    file it wants), not a traceback over a missing module."""
    run = engine.run(image, ["--read-only", "--network", "none"], ["synth", "--stack", "gcp-l4-dev"])
    assert run.returncode != 0 and run.stderr.startswith("error: --stack: no Pulumi.gcp-l4-dev.yaml"), run.stderr
    assert "Traceback" not in run.stderr


def test_a_base_image_given_by_tag_stops_the_build_before_anything_is_copied(docker: Docker, base: str) -> None:
    """A tag could move under a rebuild: the build's first RUN refuses it, naming BASE_IMAGE, and no image is
    tagged.  The tag names the very image the registry holds, so nothing but that check stops it."""
    by_tag = base.split("@", 1)[0] + ":test"
    tag = f"{docker.registry}/{NAME}:by-tag"
    done = docker.build(DOCKERFILE, REPO, tag, {"BASE_IMAGE": by_tag})
    output = done.stdout + done.stderr
    assert done.returncode != 0
    assert f"BASE_IMAGE={by_tag}: give the base image by digest" in output, output[-2000:]
    steps = re.findall(r"^#\d+ \[\s*\d+/\d+\] ([A-Z]+) ", output, re.MULTILINE)
    assert steps[-1] == "RUN" and "COPY" not in steps, steps
    assert not docker.exists(tag)


@contextmanager
def pod_network(name: str, last_octet: int) -> Iterator[tuple[Fabric, str, str, str]]:
    """A pod network of the test's own (tests/firstboot/netns.py): (the fabric, the pod's netns for Podman's
    `--network ns:...`, the gateway the test's servers bind to, the pod's address).  Removed on exit."""
    fabric = Fabric(f"fb{name}{os.getpid()}", ipaddress.ip_network(f"10.{last_octet}.0.0/24"))
    fabric.create()
    try:
        pod_ip = ipaddress.ip_address(f"10.{last_octet}.0.10")
        yield fabric, fabric.attach("pod", pod_ip), str(fabric.gateway), str(pod_ip)
    finally:
        fabric.destroy()


def _answers(fabric: Fabric, address: tuple[str, int], path: str) -> int:
    """The HTTP status a GET of `path` at `address` (the pod's) answers with, asked from the fabric as the node's
    kubelet asks a readiness probe (0: nothing listens yet)."""
    try:
        sock = fabric.bind((str(fabric.gateway), 0))
        sock.settimeout(5)
        sock.connect(address)
        conn = http.client.HTTPConnection(*address, timeout=5)
        conn.sock = sock
        conn.request("GET", path)
        return conn.getresponse().status
    except OSError:
        return 0


def stack_pinned_to(stack: str, image: str, tmp_path: Path) -> Path:
    """The shipped stack file with its autoscaler's `image` set to `image`, the reference by digest the push gave
    (what docs/kubernetes.md has a team do after its push), written in a directory of its own."""
    text = (REPO / f"Pulumi.{stack}.yaml").read_text()
    pinned, count = re.subn(r"(?m)^(\s*image: )\S+@sha256:[0-9a-f]{64}$", lambda m: m.group(1) + image, text)
    assert count == 1, f"Pulumi.{stack}.yaml: expected one autoscaler image pinned by digest, found {count}"
    path = tmp_path / "stack" / f"Pulumi.{stack}.yaml"
    path.parent.mkdir()
    path.write_text(pinned)
    return path


#: the fake API server's port at the pod network's gateway
API_PORT = 6443


@dataclass(frozen=True)
class PodFiles:
    """What the kubelet puts into the stack's autoscaler pod, as directories here: the ConfigMap's files, the state
    emptyDir, the ServiceAccount volume (`token`, `ca.crt`, `namespace`)."""

    config: Path
    state: Path
    account: Path


def pod_files(d: Deployed, tmp_path: Path) -> PodFiles:
    """The stack's ConfigMap projected unchanged, an empty state emptyDir, an empty ServiceAccount volume."""
    files = PodFiles(tmp_path / "config", tmp_path / "state", tmp_path / "serviceaccount")
    for directory in (files.config, files.state, files.account):
        directory.mkdir()
    (configmap,) = of_kind(d.syn, "ConfigMap")
    for key, text in configmap["data"].items():
        (files.config / key).write_text(text)
    return files


def start_api_server(d: Deployed, files: PodFiles, fabric: Fabric, tls: ssl.SSLContext, ca: Path) -> FakeKube:
    """The fake API server at the pod network's gateway (API_PORT) over TLS, bound to the RBAC the stack gives the
    Deployment's ServiceAccount and taking a token of its own alone, which goes into the ServiceAccount volume with
    the CA and the namespace, as the kubelet projects them."""
    fake = FakeKube(rbac=d.rbac(), token=secrets.token_urlsafe(32))
    (files.account / "token").write_text(fake.token or "")
    (files.account / "ca.crt").write_text(ca.read_text())
    (files.account / "namespace").write_text(d.config["kubernetes"]["namespace"])
    fake.start(fabric.bind((str(fabric.gateway), API_PORT)), tls=tls)
    return fake


def in_cluster_flags(
    d: Deployed, files: PodFiles, pod_name: str, netns: str, gateway: str, hosts: dict[str, str] | None = None
) -> list[str]:
    """`pod_flags` for the stack's Deployment as the pod `pod_name` in the pod network `netns`, on the API server
    `start_api_server` started at `gateway`."""
    fields = {"metadata.name": pod_name, "metadata.namespace": d.config["kubernetes"]["namespace"]}
    volumes = {"config": files.config, "state": files.state}
    in_cluster = oci.InCluster(gateway, API_PORT, files.account)
    return oci.pod_flags(d.pod, d.container, volumes, fields, in_cluster, network=f"ns:/run/netns/{netns}", hosts=hosts)


def test_the_stacks_deployment_runs_from_the_image_in_cluster_until_sigterm(
    engine: oci.Engine, image: str, tmp_path: Path
) -> None:
    """`k8s-neocloud-kueue`'s Deployment as the kubelet starts it from this image, in a pod network of its own: its
    ConfigMap's files unchanged, the in-cluster client on the ServiceAccount token (the fake refuses any other) over
    TLS.  It answers the readiness probe at the pod's address, takes the Lease as its pod, serves a
    ProvisioningRequest on the stack's MachineDeployments with no call its RBAC forbids, and on SIGTERM finishes,
    releases the Lease and exits 0 within the pod's grace period (Kubernetes' default 30 s)."""
    d = Deployed(stack_pinned_to("k8s-neocloud-kueue", image, tmp_path), tmp_path)
    files = pod_files(d, tmp_path)
    kube = d.config["kubernetes"]
    assert kube["in_cluster"] is True
    with pod_network("neo", 76) as (fabric, netns, gateway, pod_ip):
        ca, tls = make_tls(tmp_path / "tls", (gateway, "kubernetes.default.svc"))
        fake = start_api_server(d, files, fabric, tls, ca)
        try:
            for md in of_kind(d.syn, "MachineDeployment"):
                fake.create(md)
            fake.create(pod_template("train", "training", 8))
            fake.create(d.request("wl-1", "training", "train", 1))
            pod_name = "gpu-fleet-autoscaler-7d9f-abcde"
            flags = in_cluster_flags(d, files, pod_name, netns, gateway)
            container = engine.start(d.container["image"], flags, d.container["args"])
            probe = d.container["readinessProbe"]["httpGet"]
            port = next(p["containerPort"] for p in d.container["ports"] if p["name"] == probe["port"])

            def served() -> bool:
                replicas = sum(int(m["spec"].get("replicas") or 0) for m in fake.list("machinedeployments"))
                return replicas == 1 and _answers(fabric, (pod_ip, port), probe["path"]) == 200

            assert poll_until(served, timeout=90), engine.logs(container)[-3000:]
            lease = fake.get("leases", kube["lease"]["name"], kube["namespace"])
            assert lease["spec"]["holderIdentity"] == pod_name
            code = engine.stop(container, grace_s=30)
            logs = engine.logs(container)
            assert code == 0, logs[-3000:]
            assert "autoscaler stopped" in logs and "Traceback" not in logs, logs[-3000:]
            lease = fake.get("leases", kube["lease"]["name"], kube["namespace"])
            assert "holderIdentity" not in lease["spec"] and lease["spec"]["leaseDurationSeconds"] == 1
        finally:
            fake.stop()
    assert not fake.forbidden, fake.forbidden


def test_the_gke_stacks_deployment_runs_from_the_image_on_workload_identity(
    engine: oci.Engine, image: str, root_image: Path, tmp_path: Path
) -> None:
    """`gke-a3ultra-kueue`'s Deployment from this image, in a pod network of its own: its ConfigMap unchanged (the
    `gce` provider on compute.googleapis.com, no endpoint, no key), so the Compute client finds its credentials as
    on GKE, from the metadata server at 169.254.169.254, which answers for the Google service account the
    ServiceAccount's Workload Identity annotation names.  The fake Compute API, over TLS, takes that account's
    tokens alone.  One workload's request gets the stack's reserved node pool launched, and SIGTERM ends it with the
    Lease released.  What stands in for the cluster: the fake API server and the two Google endpoints in the
    test's network namespace, the names resolved by the pod's /etc/hosts, and the test CA in the image's
    certificate bundle (bound over certifi's file, as a corporate image would carry it)."""
    d = Deployed(stack_pinned_to("gke-a3ultra-kueue", image, tmp_path), tmp_path)
    files = pod_files(d, tmp_path)
    (account_manifest,) = [
        m for m in of_kind(d.syn, "ServiceAccount") if m["metadata"]["name"] == d.pod["serviceAccountName"]
    ]
    gsa = account_manifest["metadata"]["annotations"][WORKLOAD_IDENTITY_ANNOTATION]
    assert d.config["provider"] == {"kind": "gce"}  # nothing points it anywhere but Google
    kube = d.config["kubernetes"]
    pools = d.pools()
    servers: list = []
    compute = FakeCompute(pools[0].project)
    with pod_network("gke", 77) as (fabric, netns, gateway, pod_ip):
        ca, tls = make_tls(tmp_path / "tls", (gateway, "compute.googleapis.com", "kubernetes.default.svc"))
        fake = start_api_server(d, files, fabric, tls, ca)
        try:
            metadata = FakeMetadata(pools[0].project)
            metadata.add_instance(VmMetadata(name="gke-node-0", zone=pools[0].zones[0], ip=pod_ip, service_account=gsa))
            servers.append(metadata.serve_socket(fabric.bind((METADATA_IP, 80))))
            compute.add_inventory(pools)
            for p in pools:
                if p.reservation:
                    compute.add_reservation(p.zones[0], p.reservation, p.machine_type, count=4)
            compute.authorize = lambda token: metadata.service_account_of(token) == gsa
            compute.start(sock=fabric.bind((gateway, 443)), tls=tls)
            namespace = next(n for n in d.namespaces() if n != "gpu-fleet-system")
            fake.create(pod_template("train", namespace, 8))
            fake.create(d.request("wl-1", namespace, "train", 1))

            hosts = {"compute.googleapis.com": gateway, "metadata.google.internal": METADATA_IP}
            flags = in_cluster_flags(d, files, "gpu-fleet-autoscaler-5c8d-fghij", netns, gateway, hosts)
            python = f"python{image_python(root_image)}"
            bundle = f"{AUTOSCALER_HOME}/.venv/lib/{python}/site-packages/certifi/cacert.pem"
            container = engine.start(
                d.container["image"], [*flags, "--volume", f"{ca}:{bundle}:ro"], d.container["args"]
            )

            def launched() -> bool:
                return sum(compute.create_counts().values()) >= 1 and accepted(fake, "wl-1", namespace)

            assert poll_until(launched, timeout=120), engine.logs(container)[-4000:]
            (mig,) = [m for m in compute.state.migs.values() if m.target_size]
            assert mig.reservation and mig.name in {g for p in pools for g in p.instance_groups.values()}
            assert not [r for r in compute.requests if r[2] == 401], compute.requests[:5]
            grants = {grant.service_account for grant in metadata.tokens.values()}
            assert grants == {gsa}, grants  # every token it used was the Workload Identity account's
            assert engine.stop(container, grace_s=30) == 0, engine.logs(container)[-3000:]
            lease = fake.get("leases", kube["lease"]["name"], kube["namespace"])
            assert "holderIdentity" not in lease["spec"]
        finally:
            fake.stop()
            compute.stop()
            for server in servers:
                server.shutdown()
                server.server_close()
    assert not fake.forbidden, fake.forbidden
