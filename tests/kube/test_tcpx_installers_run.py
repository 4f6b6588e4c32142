"""The GPUDirect-TCPX(O) installer DaemonSets of the GKE stack, run: every init container, from `fleet synth` of GKE
clusters with an A3 Mega and an A3 High pool, started by a real dockerd as a kubelet starts them
(tests/harness/kubelet.py).

TCPXO's first init container enters the node's namespaces (`nsenter --all --target 1`) and sets up the aperture
devices the TCPXO plugin reads (stacks/gke_fabric.py `aperture_script`).  Here the node is a privileged container of
the test's own, whose PID 1 is the node's init: the init container runs with that container's PID and network
namespaces, as a `hostPID` pod runs with a node's, so `nsenter` lands in the stand-in node, never on this machine.
The node lists a realistic A3 Mega PCI bus through a stand-in `lspci` (eight GPUs, the gVNIC, eight aperture
functions `[1ae0:0084]`), whose sysfs directories are a tmpfs of its own, and records what `modprobe` loads.  The
plugin installers (TCPXO's second init container, TCPX's only one) run over hostPath volumes on a node directory
holding the driver's libraries, as tests/kube/test_gib_installer_runs.py does for gIB.

What stands in: each plugin image is a few of this machine's programs (tests/harness/minimal_root.py) under the
catalog's pinned name, whose /scripts/container_entry.sh leaves NCCL and the plugin under /var/lib/tcpx(o)/lib64,
where upstream's manifests (container-engine-accelerators gpudirect-tcpx(o)/nccl-tcpx(o)-installer.yaml) copy them
from.  Not covered: the real images' files (and that TCPXO's holds `nsenter`: an Ubuntu image's util-linux does),
COS's own tools, the import-helper kernel module, GKE's kubelet and containerd, the NRI device injector, RxDM, an
A3 machine."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fleet.catalog import load_catalog
from fleet.synth.run import synth_file
from stacks.gke_fabric import APERTURE_DIR, HOST_NVIDIA_LIB, TCPX_INSTALLER, TCPXO_INSTALLER
from tests.harness.docker import Docker
from tests.harness.kubelet import node_dockerd, run_as_kubelet, stand_in
from tests.harness.slurm import poll_until
from tests.stacks.test_kube_stacks import high_file, mega_file, of_kind

pytestmark = pytest.mark.slow

TCPXO = load_catalog("gcp").fabric_software("tcpxo")
IMAGE = TCPXO.nccl_plugin_image
TCPX_IMAGE = load_catalog("gcp").fabric_software("tcpx").nccl_plugin_image
NODE_IMAGE = "gpu-fleet-test/a3-mega-node:stand-in"
GPUS = [f"0000:{bus:02x}:00.0" for bus in (0x04, 0x05, 0x0A, 0x0B, 0x84, 0x85, 0x8A, 0x8B)]
APERTURES = [f"0000:{bus:02x}:00.1" for bus in (0x06, 0x07, 0x0C, 0x0D, 0x86, 0x87, 0x8C, 0x8D)]
GVNIC = "0000:00:04.0"


def entry(kind: str) -> str:
    """The stand-in plugin image's /scripts/container_entry.sh: what `install --install-nccl` leaves under
    /var/lib/<kind> (tcpx, tcpxo)."""
    return f"""#!/bin/sh
set -e
[ "$*" = "install --install-nccl" ] || {{ echo "{kind} installer stand-in: unknown command: $*" >&2; exit 2; }}
mkdir -p /var/lib/{kind}/lib64
for lib in libnccl.so.2 libnccl-net.so; do echo "stand-in $lib" > /var/lib/{kind}/lib64/$lib; done
"""


def lspci(apertures: list[str]) -> str:
    """The node's `lspci`: `-nn -D` lines of an A3 Mega's bus (GPUs, gVNIC, the aperture functions)."""
    lines = [f"{b} 3D controller [0302]: NVIDIA Corporation GH100 [H100 SXM5 80GB] [10de:2330] (rev a1)" for b in GPUS]
    lines.append(
        f"{GVNIC} Ethernet controller [0200]: Google, Inc. Compute Engine Virtual Ethernet [gVNIC] [1ae0:0042]"
    )
    lines += [f"{b} Ethernet controller [0200]: Google, Inc. Device [1ae0:0084]" for b in apertures]
    body = "\n".join(lines)
    return (
        f'#!/bin/sh\n[ "$*" = "-nn -D" ] || {{ echo "lspci stand-in: $*" >&2; exit 2; }}\ncat <<\'END\'\n{body}\nEND\n'
    )


#: the node's `modprobe`: records the modules asked for
MODPROBE = '#!/bin/sh\necho "$*" >> /var/log/modprobe\n'


def boot(apertures: list[str]) -> str:
    """The node's PID 1 script: its `lspci`, its PCI devices' sysfs directories (a tmpfs over /sys/bus/pci/devices,
    each device a link into a directory with resource files, as sysfs links them into /sys/devices), then sleep."""
    make = " ".join([*GPUS, GVNIC, *apertures])
    return (
        f"set -e\ncat > /usr/bin/lspci <<'EOF_LSPCI'\n{lspci(apertures)}EOF_LSPCI\nchmod 755 /usr/bin/lspci\n"
        "mkdir -p /run/pci\nmount -t tmpfs pci /sys/bus/pci/devices\n"
        f"for bdf in {make}; do\n"
        '  mkdir -p /run/pci/$bdf && echo "bar0 of $bdf" > /run/pci/$bdf/resource0\n'
        '  echo "bar2 of $bdf" > /run/pci/$bdf/resource2 && chmod 600 /run/pci/$bdf/resource*\n'
        "  ln -s /run/pci/$bdf /sys/bus/pci/devices/$bdf\n"
        "done\nexec sleep infinity\n"
    )


def _installer(config: Path, name: str) -> dict[str, Any]:
    (ds,) = [d for d in of_kind(synth_file(config), "DaemonSet") if d["metadata"]["name"] == name]
    return ds["spec"]["template"]["spec"]


@pytest.fixture(scope="module")
def installer(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The TCPXO installer's pod spec, as `fleet synth` declares it for a GKE cluster with an A3 Mega pool."""
    return _installer(mega_file(tmp_path_factory.mktemp("mega")), TCPXO_INSTALLER)


@pytest.fixture(scope="module")
def tcpx_installer(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The TCPX installer's pod spec, for a GKE cluster with an A3 High pool."""
    return _installer(high_file(tmp_path_factory.mktemp("high")), TCPX_INSTALLER)


@pytest.fixture(scope="module")
def docker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Docker]:
    """A dockerd holding the plugin images' stand-ins under the catalog's pinned names and the node's image."""
    work = tmp_path_factory.mktemp("tcpxo")
    tools = ["sh", "mkdir", "cp", "cat", "ls", "chmod", "nsenter"]
    # the entry scripts are not executable: the installers' chmod makes them so
    roots = {
        kind: stand_in(work / f"root-{kind}", tools, {"/scripts/container_entry.sh": (entry(kind), 0o644)})
        for kind in ("tcpx", "tcpxo")
    }
    node_tools = [*tools, "sleep", "mount", "umount", "readlink", "cut", "grep", "ln", "echo"]
    node = stand_in(work / "node", node_tools, {"/usr/sbin/modprobe": (MODPROBE, 0o755)})
    for d in ("sys", "proc", "dev", "run", "var/log"):
        (node / d).mkdir(parents=True, exist_ok=True)
    (node / "sbin").symlink_to("usr/sbin")
    with node_dockerd(work, {IMAGE: roots["tcpxo"], TCPX_IMAGE: roots["tcpx"], NODE_IMAGE: node}) as docker:
        yield docker


@pytest.fixture
def make_node(docker: Docker) -> Iterator[Any]:
    """Start a stand-in A3 Mega node with `apertures` aperture functions; removed after the test."""
    started: list[str] = []

    def start(apertures: list[str] = APERTURES) -> str:
        name = f"node-{uuid.uuid4().hex[:8]}"
        started.append(name)
        docker.run_detached(NODE_IMAGE, name, ["/bin/sh", "-c", boot(apertures)], options=("--privileged",))
        assert poll_until(lambda: _on_node(docker, name, "ls /sys/bus/pci/devices", check=False) != "", timeout=30)
        return name

    yield start
    for name in started:
        docker.remove(name)


def _apertures(installer: dict[str, Any]) -> dict[str, Any]:
    first, _ = installer["initContainers"]
    assert first["image"] == IMAGE and first["command"][0] == "nsenter"
    return first


def _on_node(docker: Docker, node: str, script: str, check: bool = True) -> str:
    """`script`'s output, run in the stand-in node's namespaces (as the init container gets there: nsenter into its
    PID 1); "" when it fails and `check` is off."""
    enter = ["--pid", f"container:{node}", "--privileged", "--entrypoint", "nsenter"]
    done = docker.run(enter, NODE_IMAGE, ["--all", "--target", "1", "--", "sh", "-c", script])
    assert done.returncode == 0 or not check, done.stderr
    return done.stdout if done.returncode == 0 else ""


def _aperture_mounts(docker: Docker, node: str) -> list[str]:
    """The node's mount points under the aperture directory (from its mountinfo: one line per mount)."""
    lines = _on_node(docker, node, "cat /proc/self/mountinfo").splitlines()
    return sorted(line.split()[4] for line in lines if line.split()[4].startswith(APERTURE_DIR + "/"))


def test_the_first_init_container_mounts_each_aperture_function_for_the_plugin(
    docker: Docker, installer: dict[str, Any], make_node: Any, tmp_path: Path
) -> None:
    """In the node's namespaces: the import helper loaded, each of the eight aperture functions (and nothing else on
    the bus) bind-mounted at /dev/aperture_devices/<BDF>, its `resource*` files readable and writable by the
    unprivileged trainer, as the plugin (`NCCL_FASTRAK_LLCM_DEVICE_DIRECTORY`) opens them."""
    node = make_node()
    done = run_as_kubelet(docker, installer, _apertures(installer), tmp_path, namespaces_of=node)
    assert done.returncode == 0, done.stderr
    assert _on_node(docker, node, "cat /var/log/modprobe").split() == [TCPXO.kernel_module]
    assert _aperture_mounts(docker, node) == [f"{APERTURE_DIR}/{b}" for b in sorted(APERTURES)]
    listing = _on_node(docker, node, f"ls {APERTURE_DIR}").split()
    assert listing == sorted(APERTURES)
    for bdf in APERTURES:
        assert _on_node(docker, node, f"cat {APERTURE_DIR}/{bdf}/resource0") == f"bar0 of {bdf}\n"
        modes = _on_node(docker, node, f"ls -l {APERTURE_DIR}/{bdf}/").split("\n")
        for line in (m for m in modes if "resource" in m):
            assert line.startswith("-rw-rw-rw-"), line
    # this machine is untouched: nsenter went into the stand-in node
    assert not Path(APERTURE_DIR).exists()


def test_the_first_init_container_runs_again_over_its_own_mounts(
    docker: Docker, installer: dict[str, Any], make_node: Any, tmp_path: Path
) -> None:
    """A pod restarted on the node (a rollout of the DaemonSet, a crash of the pause container) replaces its
    mounts: exit 0, still one mount per aperture function, not two stacked."""
    node = make_node()
    first = _apertures(installer)
    assert run_as_kubelet(docker, installer, first, tmp_path, namespaces_of=node).returncode == 0
    again = run_as_kubelet(docker, installer, first, tmp_path, namespaces_of=node)
    assert again.returncode == 0, again.stderr
    assert _aperture_mounts(docker, node) == [f"{APERTURE_DIR}/{b}" for b in sorted(APERTURES)]


def test_a_node_missing_aperture_functions_fails_the_pod_saying_how_many(
    docker: Docker, installer: dict[str, Any], make_node: Any, tmp_path: Path
) -> None:
    """Fewer aperture functions than GPU NICs (a node whose NICs did not all come up): the init container fails,
    naming what it found and what it wants, so `kubectl get pods -n kube-system` shows Init:Error instead of NCCL
    falling back to the gVNIC on the first job."""
    node = make_node(APERTURES[:4])
    done = run_as_kubelet(docker, installer, _apertures(installer), tmp_path, namespaces_of=node)
    assert done.returncode != 0
    assert f"gpu-fleet: 4 TCPXO aperture devices [1ae0:0084] on this node, want {TCPXO.devices}" in done.stderr


@pytest.mark.parametrize("kind", ["tcpxo", "tcpx"])
def test_the_installer_leaves_nccl_and_the_plugin_next_to_the_driver(
    docker: Docker, installer: dict[str, Any], tcpx_installer: dict[str, Any], tmp_path: Path, kind: str
) -> None:
    """The plugin image's installer (TCPXO's second init container, TCPX's only one) over the node's /var/lib and
    /home/kubernetes/bin: NCCL and the plugin next to the driver's libraries (kept), where `fleet render
    gpudirect-pod` mounts the trainer's and the sidecar's LD_LIBRARY_PATH from; and again on the same node, the same
    files."""
    node = tmp_path / "node"
    (node / "var" / "lib").mkdir(parents=True)
    nvidia = node / HOST_NVIDIA_LIB.lstrip("/")
    nvidia.mkdir(parents=True)
    (nvidia / "libcuda.so.1").write_text("the driver's\n")
    pod = installer if kind == "tcpxo" else tcpx_installer
    install = pod["initContainers"][-1]
    assert install["image"] == (IMAGE if kind == "tcpxo" else TCPX_IMAGE)
    for _ in range(2):
        done = run_as_kubelet(docker, pod, install, node)
        assert done.returncode == 0, done.stderr
        assert {p.name: p.read_text() for p in nvidia.iterdir()} == {
            "libcuda.so.1": "the driver's\n",
            "libnccl.so.2": "stand-in libnccl.so.2\n",
            "libnccl-net.so": "stand-in libnccl-net.so\n",
        }
