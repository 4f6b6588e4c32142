"""The pod `fleet render gpudirect-pod` prints, run: its RxDM native sidecar started as kubelet starts one, then a
trainer in the template's trainer container (its env, mounts and volumes as printed; a stand-in image and command),
on a node directory holding what the stack's installers leave (tests/kube/test_*installer*_runs.py run those).

What a platform team relies on: the sidecar's command line starts the RxDM entry point of the pinned image with the
flags its version takes (TCPXO's entry script made executable first, as upstream does; TCPX's literal
`\\"--verbose 128 2 0 \\"` passed as one argument), with the driver's libraries and the host's /sys and /proc/sys
where it looks; the trainer finds NCCL and the plugin on its LD_LIBRARY_PATH, TCPXO's aperture devices where its
NCCL variable points, and TCPX's RxDM socket directory, shared with the sidecar through the node, where its NCCL
variable points.

What stands in: both RxDM images and the trainer are a few of this machine's programs under the catalog's pinned
names; the RxDM stand-ins print their arguments and what they see, and TCPX's leaves a file where it would create
its sockets.  Not covered: RxDM itself, the NRI device injector's annotation (pod metadata, not the kubelet's),
GKE's multi-networking interfaces, a GPU."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from fleet.catalog import load_catalog
from fleet.cli.main import app
from stacks.gke_fabric import APERTURE_DIR, HOST_NVIDIA_LIB, NCCL_ENV_SCRIPT, TCPX_RXDM
from tests.firstboot.stubs import PLUGIN_PROFILE
from tests.harness.docker import Docker
from tests.harness.kubelet import node_dockerd, run_as_kubelet, stand_in, start_sidecar
from tests.harness.slurm import poll_until
from tests.stacks.test_kube_stacks import high_file, mega_file

pytestmark = pytest.mark.slow

CATALOG = load_catalog("gcp")
TRAINER = "gpu-fleet-test/trainer:stand-in"
APERTURES = ["0000:06:00.1", "0000:07:00.1"]

#: what both RxDM stand-ins print: their arguments, one per line, and what they see of the node
SEEN = """echo "rxdm LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
for a in "$@"; do echo "rxdm arg: $a"; done
ls /usr/local/nvidia/lib64 | sed 's/^/rxdm lib: /'
[ -d /hostsysfs/bus/pci ] && [ -d /hostprocsysfs/net ] && echo "rxdm host: /sys and /proc/sys"
"""
#: TCPXO's /fts/entrypoint_rxdm_container.sh (left not executable: the sidecar's command makes it so, as upstream's)
TCPXO_ENTRY = f"#!/bin/sh\n{SEEN}echo ready\nexec sleep 600\n"
#: TCPX's RxDM binary: also leaves a file in its --uds_path, where it would create its Unix sockets
TCPX_DAEMON = f"""#!/bin/sh
{SEEN}while [ $# -gt 0 ]; do [ "$1" = --uds_path ] && touch "$2/rxdm.sock"; shift; done
echo ready
exec sleep 600
"""
#: the trainer's stand-in command: what NCCL would look for, where the template's environment points it
TRAINER_CHECK = """IFS=:; for d in $LD_LIBRARY_PATH; do ls "$d" | sed 's/^/lib: /'; done; unset IFS
if [ -n "${NCCL_FASTRAK_LLCM_DEVICE_DIRECTORY:-}" ]; then
  for d in "$NCCL_FASTRAK_LLCM_DEVICE_DIRECTORY"/*; do echo "aperture: $(cat "$d/resource0")"; done
fi
if [ -n "${NCCL_GPUDIRECTTCPX_UNIX_CLIENT_PREFIX:-}" ]; then
  ls "$NCCL_GPUDIRECTTCPX_UNIX_CLIENT_PREFIX" | sed 's/^/socket: /'
fi
if [ -n "${NCCL_LIB_DIR:-}" ]; then
  . "SCRIPT" && echo "nccl: $NCCL_NET $NCCL_TUNER_CONFIG_PATH"
fi
""".replace("SCRIPT", NCCL_ENV_SCRIPT["tcpxo"])


@pytest.fixture(scope="module")
def docker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Docker]:
    """A dockerd holding the RxDM stand-ins under the catalog's pinned names, and the trainer's stand-in."""
    work = tmp_path_factory.mktemp("pod")
    tools = ["sh", "ls", "cat", "sed", "sleep", "touch", "chmod"]
    # TCPXO's entry script is not executable: the sidecar's command makes it so, as upstream's
    tcpxo = stand_in(work / "tcpxo", tools, {"/fts/entrypoint_rxdm_container.sh": (TCPXO_ENTRY, 0o644)})
    tcpx = stand_in(work / "tcpx", tools, {TCPX_RXDM: (TCPX_DAEMON, 0o755)})
    images = {
        str(CATALOG.fabric_software("tcpxo").rxdm_image): tcpxo,
        str(CATALOG.fabric_software("tcpx").rxdm_image): tcpx,
    }
    with node_dockerd(work, {**images, TRAINER: stand_in(work / "trainer", tools, {})}) as docker:
        yield docker


@pytest.fixture
def node(tmp_path: Path) -> Path:
    """A GPU node's file system after the stack's installers ran: NCCL and the plugin next to the driver, the
    aperture devices (TCPXO), the host's /sys and /proc/sys."""
    root = tmp_path / "node"
    nvidia = root / HOST_NVIDIA_LIB.lstrip("/")
    nvidia.mkdir(parents=True)
    for lib in ("libcuda.so.1", "libnccl.so.2", "libnccl-net.so"):
        (nvidia / lib).write_text(lib)
    (nvidia / "nccl-env-profile.sh").write_text(PLUGIN_PROFILE + "\n")  # the TCPXO installer copies it there too
    for bdf in APERTURES:
        (root / APERTURE_DIR.lstrip("/") / bdf).mkdir(parents=True)
        (root / APERTURE_DIR.lstrip("/") / bdf / "resource0").write_text(f"bar0 of {bdf}")
    (root / "sys" / "bus" / "pci").mkdir(parents=True)
    (root / "proc" / "sys" / "net").mkdir(parents=True)
    return root


def _pod(config: Path) -> dict[str, Any]:
    done = CliRunner().invoke(app, ["render", "gpudirect-pod", "--config", str(config), "--pool", "spot",
                                    "--image", TRAINER])  # fmt: skip
    assert done.exit_code == 0, done.output
    return yaml.safe_load(done.stdout)["spec"]


def _run(docker: Docker, pod: dict[str, Any], node: Path) -> tuple[list[str], list[str]]:
    """The sidecar's output once it is ready, and the trainer's."""
    (sidecar,) = pod["initContainers"]
    name = start_sidecar(docker, pod, sidecar, node, f"rxdm-{uuid.uuid4().hex[:8]}")
    try:
        assert poll_until(lambda: "ready" in docker.logs(name), timeout=60), docker.logs(name)
        (trainer,) = pod["containers"]
        ran = run_as_kubelet(docker, pod, {**trainer, "command": ["/bin/sh", "-c", TRAINER_CHECK]}, node)
        assert ran.returncode == 0, ran.stderr
        return docker.logs(name).splitlines(), ran.stdout.splitlines()
    finally:
        docker.remove(name)


def test_the_tcpxo_pod_starts_rxdm_with_its_flags_and_the_trainer_finds_the_plugin_and_the_apertures(
    docker: Docker, node: Path, tmp_path: Path
) -> None:
    rxdm, trainer = _run(docker, _pod(mega_file(tmp_path)), node)
    # the v1.0.23 pin takes the release notes' flag set (`components.gcp.startup.rxdm_flags`)
    args = [line.removeprefix("rxdm arg: ") for line in rxdm if line.startswith("rxdm arg: ")]
    assert args == ["--num_hops=2", "--num_nics=8"]
    assert "rxdm LD_LIBRARY_PATH=/usr/local/nvidia/lib64" in rxdm and "rxdm host: /sys and /proc/sys" in rxdm
    assert {"rxdm lib: libcuda.so.1", "rxdm lib: libnccl-net.so"} <= set(rxdm)
    assert {"lib: libnccl.so.2", "lib: libnccl-net.so", "lib: libcuda.so.1"} <= set(trainer)
    assert [line for line in trainer if line.startswith("aperture: ")] == [f"aperture: bar0 of {b}" for b in APERTURES]
    # the plugin's profile, sourced as the printed template says, finds its NCCL_LIB_DIR in the template's env
    assert "nccl: FasTrak /usr/local/nvidia/lib64/a3plus_tuner_config.textproto" in trainer, trainer


def test_the_tcpx_pod_starts_rxdm_on_the_socket_directory_the_trainer_s_nccl_is_pointed_at(
    docker: Docker, node: Path, tmp_path: Path
) -> None:
    rxdm, trainer = _run(docker, _pod(high_file(tmp_path)), node)
    args = [line.removeprefix("rxdm arg: ") for line in rxdm if line.startswith("rxdm arg: ")]
    # Google's flags, the last one with its quotes, one argument (as a kubelet passes `command` items)
    assert args == ["--gpu_nic_preset", "a3vm", "--gpu_shmem_type", "fd", "--uds_path", "/run/tcpx",
                    "--setup_param", '\\"--verbose 128 2 0 \\"']  # fmt: skip
    assert "rxdm host: /sys and /proc/sys" in rxdm
    assert "socket: rxdm.sock" in trainer  # the sidecar's --uds_path is the trainer's prefix, through the node
    assert {"lib: libnccl.so.2", "lib: libnccl-net.so"} <= set(trainer)
    assert (node / "run" / "tcpx" / "rxdm.sock").exists()  # on the node: a hostPath, created by the kubelet
