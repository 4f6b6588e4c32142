"""The NCCL gIB installer DaemonSet of the GKE stack, run: its init container's own image, command, arguments,
mounts and privileges, started by a real dockerd as a kubelet starts a pod's container, on a node whose file system
is a directory of the test's.

tests/stacks/test_kube_stacks.py checks the manifest against the Kubernetes client's model and the stack's node
pools; until this module nothing ran the shell script the stack puts in it.  Here the DaemonSet is taken from
`fleet synth` of `gke-a3ultra-kueue`, and `run_as_kubelet` turns its pod spec into one `docker run` (hostPath
volumes at their mount paths, `command`/`args` as Kubernetes overrides an image's ENTRYPOINT/CMD, privileged, the
host's network and PID namespace) and refuses any field of the spec it does not translate, so a field added to the
DaemonSet cannot be dropped here unnoticed.  Then a training pod mounts what the installer left as
docs/kubernetes.md tells one to, and finds the plugin and its environment.

What stands in: the installer image is a few of this machine's programs (tests/harness/minimal_root.py) under the
catalog's pinned name, whose /scripts/container_entry.sh leaves, for `install --install-nccl`, a plugin, NCCL and
`scripts/set_nccl_env.sh` under /var/lib/gib, where upstream's manifest (container-engine-accelerators
gpudirect-rdma/nccl-rdma-installer.yaml) copies them from.  The node's /home/kubernetes/bin/nvidia/lib64 holds a
stand-in of the driver's libcuda, as GKE's driver installer leaves it.  Not covered: the real image's files, GKE's
containerd and kubelet, the pause container (pinned by a digest this machine cannot pull), an RDMA NIC."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fleet.catalog import load_catalog
from stacks.gke_fabric import HOST_GIB, HOST_NVIDIA_LIB, NAME
from tests.harness.docker import Docker
from tests.harness.kubelet import node_dockerd, run_as_kubelet, stand_in
from tests.stacks.test_kube_stacks import of_kind, synthesized

pytestmark = pytest.mark.slow

IMAGE = load_catalog("gcp").fabric_software("gib").gke_installer_image
#: a marker on the node that makes the stand-in's entry script fail, as the real one would on a full disk
REFUSE = "/usr/local/home/kubernetes/bin/gib/.refuse-install"

#: the installer image's /scripts/container_entry.sh: what `install --install-nccl` leaves under /var/lib/gib
ENTRY = f"""#!/bin/sh
set -e
[ "$*" = "install --install-nccl" ] || {{ echo "gib installer stand-in: unknown command: $*" >&2; exit 2; }}
[ ! -e {REFUSE} ] || {{ echo "gib installer stand-in: No space left on device" >&2; exit 1; }}
mkdir -p /var/lib/gib/lib64 /var/lib/gib/scripts
for lib in libnccl.so.2 libnccl-net.so; do echo "stand-in $lib" > /var/lib/gib/lib64/$lib; done
echo "export NCCL_NET=gIB" > /var/lib/gib/scripts/set_nccl_env.sh
"""


@pytest.fixture(scope="module")
def installer() -> dict[str, Any]:
    """The gIB installer's pod spec, as `fleet synth` of the GKE stack declares it."""
    (daemonset,) = of_kind(synthesized("gke-a3ultra-kueue"), "DaemonSet")
    assert daemonset["metadata"]["name"] == NAME
    return daemonset["spec"]["template"]["spec"]


@pytest.fixture(scope="module")
def docker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Docker]:
    """A dockerd holding the installer's stand-in under the catalog's pinned name."""
    work = tmp_path_factory.mktemp("gib")
    root = stand_in(work / "root", ["sh", "mkdir", "cp", "cat", "ls"], {"/scripts/container_entry.sh": (ENTRY, 0o755)})
    with node_dockerd(work, {IMAGE: root}) as docker:
        yield docker


@pytest.fixture
def node(tmp_path: Path) -> Path:
    """A GKE GPU node's file system: the driver's libraries where GKE's driver installer leaves them."""
    (tmp_path / "node" / HOST_NVIDIA_LIB.lstrip("/")).mkdir(parents=True)
    (tmp_path / "node" / HOST_NVIDIA_LIB.lstrip("/") / "libcuda.so.1").write_text("the driver's\n")
    return tmp_path / "node"


def _install(docker: Docker, pod: dict[str, Any], node: Path) -> subprocess.CompletedProcess[str]:
    (init,) = pod["initContainers"]
    assert init["image"] == IMAGE
    return run_as_kubelet(docker, pod, init, node)


def _files(directory: Path) -> dict[str, str]:
    return {str(p.relative_to(directory)): p.read_text() for p in sorted(directory.rglob("*")) if p.is_file()}


def test_the_installer_leaves_the_plugin_where_a_training_pod_finds_it(
    docker: Docker, installer: dict[str, Any], node: Path
) -> None:
    """The init container runs to exit 0 and leaves NCCL and the gIB plugin on the node, next to the driver's
    libraries (kept); a training pod mounting them as docs/kubernetes.md says loads from there with the plugin's
    environment."""
    done = _install(docker, installer, node)
    assert done.returncode == 0, done.stderr
    gib, nvidia = node / HOST_GIB.lstrip("/"), node / HOST_NVIDIA_LIB.lstrip("/")
    assert {"lib64/libnccl-net.so", "lib64/libnccl.so.2", "scripts/set_nccl_env.sh"} <= set(_files(gib))
    assert _files(nvidia) == {
        "libcuda.so.1": "the driver's\n",
        "libnccl.so.2": "stand-in libnccl.so.2\n",
        "libnccl-net.so": "stand-in libnccl-net.so\n",
    }
    training = {
        "volumes": [
            {"name": "gib", "hostPath": {"path": HOST_GIB, "type": "Directory"}},
            {"name": "nvidia", "hostPath": {"path": str(Path(HOST_NVIDIA_LIB).parent), "type": "Directory"}},
        ],
        "containers": [],
    }
    check = (
        '. /usr/local/gib/scripts/set_nccl_env.sh && echo "NCCL_NET=$NCCL_NET"'
        '; IFS=:; for d in $LD_LIBRARY_PATH; do ls "$d"; done'
    )
    trainer = {
        "name": "trainer",
        "image": IMAGE,  # any image with a shell: the pod's own files do not matter here
        "command": ["/bin/sh", "-c", check],
        "env": [{"name": "LD_LIBRARY_PATH", "value": "/usr/local/nvidia/lib64:/usr/local/gib/lib64"}],
        "volumeMounts": [
            {"name": "gib", "mountPath": "/usr/local/gib", "readOnly": True},
            {"name": "nvidia", "mountPath": "/usr/local/nvidia", "readOnly": True},
        ],
    }
    ran = run_as_kubelet(docker, training, trainer, node)
    assert ran.returncode == 0, ran.stderr
    lines = ran.stdout.split()
    assert lines[0] == "NCCL_NET=gIB" and {"libcuda.so.1", "libnccl.so.2", "libnccl-net.so"} <= set(lines), lines


def test_the_installer_runs_again_on_a_node_it_installed(docker: Docker, installer: dict[str, Any], node: Path) -> None:
    """A pod restarted on the same node (a node reboot, a rollout of the DaemonSet) runs the init container over
    its own earlier install: exit 0, the same files."""
    assert _install(docker, installer, node).returncode == 0
    before = _files(node)
    again = _install(docker, installer, node)
    assert again.returncode == 0, again.stderr
    assert _files(node) == before


def test_a_failing_install_fails_the_init_container_and_copies_nothing(
    docker: Docker, installer: dict[str, Any], node: Path
) -> None:
    """The entry script failing fails the init container (the pod stays Init:Error, and kubelet retries it), with
    nothing half-copied next to the driver's libraries: the script stops at the first failing step."""
    gib = node / HOST_GIB.lstrip("/")
    gib.mkdir(parents=True)
    (gib / ".refuse-install").touch()
    done = _install(docker, installer, node)
    assert done.returncode != 0
    assert "No space left on device" in done.stderr
    assert set(_files(node)) == {
        f"{HOST_NVIDIA_LIB.lstrip('/')}/libcuda.so.1",
        f"{HOST_GIB.lstrip('/')}/.refuse-install",
    }
