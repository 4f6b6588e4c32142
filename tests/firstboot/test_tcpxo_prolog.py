"""The GPUDirect-TCPXO Slurm prolog and epilog an A3 Mega node carries, run against a real Docker.

The first-boot VMs run the prolog through slurmd (test_firstboot.py: `srun -N2` passes it), but with `docker`
stubbed: a recording script that never parses a flag.  Here the prolog and epilog are taken as the stack writes
them (the heredocs of an A3 Mega node's startup script, from `fleet synth` of tests/firstboot/Pulumi.firstboot.yaml)
and run as root against dockerd itself (Debian 12's Docker 20.10, its runc), in a mount namespace of the node's own
(tests/harness/docker.py `Node`: its /etc, /var/lib and /run overlaid or fresh, its /dev a tmpfs with the basic
devices), so the prolog's `rm -rf /var/lib/tcpxo/lib64` and the plugin installer's `-v /var/lib:/var/lib` touch the
node's directories and nothing of this machine's; the prolog's `docker` is the packaged client on the node's
/run/docker.sock, as on the image.

What stands in: the RxDM and NCCL-plugin images are local images under the catalog's pinned names (this machine's
bash and a few tools, tests/harness/minimal_root.py, with a script for an entrypoint, so `docker run` finds them
without a pull) that check what their `docker run` gave them (the import helper's device, the driver's libraries,
LD_LIBRARY_PATH, the GPU request) and log as RxDM does, thousands of lines around "Buffer manager initialization
complete"; `modprobe import-helper` makes the helper's device node; the NVIDIA Container Toolkit's hook is a stub on
dockerd's PATH (dockerd 20.10 offers `--gpus` when `nvidia-container-runtime-hook` is there, and runc calls it
before the container starts). The prolog runs with the job's environment set by the test (SLURM_JOB_ID,
SLURM_JOB_NUM_NODES), not by slurmd.

Not covered: RxDM, the plugin and the import helper themselves (an A3 Mega's hardware), the Toolkit's real hook."""

from __future__ import annotations

import re
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from components.gcp.startup import EPILOG, PROLOG, rxdm_flags
from fleet.catalog import load_catalog
from tests.components.test_startup import written_file
from tests.firstboot.conftest import CLUSTER, STACK, must_run, require, synthesized
from tests.harness.docker import Docker, Node
from tests.harness.docker import unavailable_reason as docker_unavailable
from tests.harness.minimal_root import minimal_root

pytestmark = pytest.mark.slow

TCPXO = load_catalog("gcp").fabric_software("tcpxo")
RXDM_PREFIX = "receive-datapath-manager-"
READY = "Buffer manager initialization complete"

#: the node's own mounts, before its dockerd starts (W: the test's directory for the node)
NODE_SETUP = """
for d in etc var/lib; do
  mkdir -p "$W/node/$d/upper" "$W/node/$d/work"
  mount -t overlay overlay -o "lowerdir=/$d,upperdir=$W/node/$d/upper,workdir=$W/node/$d/work" "/$d"
done
mkdir -p "$W/node/dev-host" && mount --rbind /dev "$W/node/dev-host"
mount -t tmpfs -o mode=0755,nosuid tmpfs /dev
for n in null zero full random urandom tty; do touch "/dev/$n"; mount --bind "$W/node/dev-host/$n" "/dev/$n"; done
mkdir /dev/pts /dev/shm && mount --rbind "$W/node/dev-host/pts" /dev/pts && mount -t tmpfs tmpfs /dev/shm
ln -s /proc/self/fd /dev/fd && ln -s pts/ptmx /dev/ptmx
mount -t tmpfs -o mode=0755 tmpfs /run
"""

#: what the stand-ins' entry scripts (and a test's leftover installer, `sleep infinity`) run
STAND_IN_PROGRAMS = ("bash", "seq", "sleep", "mkdir")

#: RxDM's stand-in: checks what its `docker run` gave it, then logs as RxDM does and serves until stopped
RXDM = f"""#!/bin/bash
fail() {{ echo "rxdm stand-in: $*" >&2; exit 2; }}
[ -c /dev/dmabuf_import_helper ] || fail "no /dev/dmabuf_import_helper device"
[ -d /usr/local/nvidia/lib64 ] || fail "no /usr/local/nvidia/lib64"
[ "$LD_LIBRARY_PATH" = /usr/lib/x86_64-linux-gnu ] || fail "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
[ "${{NVIDIA_VISIBLE_DEVICES:-}}" = all ] || fail "no GPUs asked for (NVIDIA_VISIBLE_DEVICES unset or not all)"
echo "rxdm args: $*"
for i in $(seq 3000); do echo "I1207 rx_rule_manager.cc:$i] installing flow steering rule $i"; done
echo "{READY}"
for i in $(seq 3000); do echo "I1207 rx_buf_mgr.cc:$i] serving receive buffer $i"; done
trap 'exit 0' TERM
sleep infinity & wait
"""

#: the NCCL plugin image's installer: what `install --install-nccl` leaves in /var/lib/tcpxo/lib64
NCCL_INSTALLER = """#!/bin/bash
[ "$*" = "install --install-nccl" ] || { echo "nccl-plugin stand-in: unknown command: $*" >&2; exit 2; }
mkdir -p /var/lib/tcpxo/lib64
for lib in libnccl.so.2 libnccl-net.so; do echo stand-in > "/var/lib/tcpxo/lib64/$lib"; done
echo 'export NCCL_NET=FasTrak' > /var/lib/tcpxo/lib64/nccl-env-profile.sh
"""


@dataclass
class TcpxoNode:
    docker: Docker
    workdir: Path
    syslog: socket.socket  # bound at the node's /dev/log, where `logger` writes (journald's socket on an image)

    def run(self, script: str, job_id: int, nodes: int, timeout: float = 240) -> tuple[int, str]:
        """`script` (a path on the node) as slurmd runs a prolog or epilog: as root, with the job's environment."""
        env = {"PATH": f"{self.workdir / 'node-bin'}:/usr/sbin:/usr/bin:/sbin:/bin",
               "SLURM_JOB_ID": str(job_id), "SLURM_JOB_NUM_NODES": str(nodes)}  # fmt: skip
        done = self.docker.on_node([script], env, timeout=timeout)
        return done.returncode, done.stdout + done.stderr

    def read(self, path: str) -> str:
        done = self.docker.on_node(["cat", path], {})
        assert done.returncode == 0, done.stderr
        return done.stdout

    def explain(self, container: str) -> str:
        """Whether `container` runs, and the head and tail of its log (for a failed check's message)."""
        if container not in self.docker.containers(container):
            return f"\n{container}: no such container"
        log, running = self.docker.logs(container), self.running(container)
        state = "running" if running else "exited"
        return f"\n{container}: {state}, {len(log.splitlines())} log lines:\n{log[:600]}...\n{log[-300:]}"

    def rxdm(self) -> list[str]:
        """The RxDM containers on the node, running or not."""
        return sorted(self.docker.containers(RXDM_PREFIX))

    def running(self, container: str) -> bool:
        return bool(self.docker.inspect(container)["State"]["Running"])

    def journal(self) -> list[str]:
        """What the scripts sent to the node's /dev/log so far (a syslog line each)."""
        lines = []
        while True:
            try:
                lines.append(self.syslog.recv(65536).decode(errors="replace"))
            except BlockingIOError:
                return lines


def _stub(directory: Path, name: str, text: str) -> None:
    directory.mkdir(exist_ok=True)
    (directory / name).write_text(text)
    (directory / name).chmod(0o755)


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TcpxoNode]:
    """An A3 Mega node's Docker, the pinned images' stand-ins loaded, and the stack's prolog and epilog in place."""
    require()
    must_run(docker_unavailable(), "the TCPXO prolog against Docker")
    work = tmp_path_factory.mktemp("tcpxo")
    _stub(
        work / "dockerd-bin",
        "nvidia-container-runtime-hook",
        f'#!/bin/bash\ncat >/dev/null\necho "$*" >> {work}/hook.log\n',
    )
    _stub(work / "node-bin", "modprobe", f"""#!/bin/bash
echo "$*" >> {work}/modprobe.log
if [ -e {work}/modprobe-refuses ]; then
  echo "modprobe: ERROR: could not insert '$1': Key was rejected by service" >&2; exit 1
fi
[ "$1" != import-helper ] || [ -e {work}/helper-makes-no-device ] || [ -e /dev/dmabuf_import_helper ] \\
  || mknod -m 0666 /dev/dmabuf_import_helper c 1 3
""")  # fmt: skip
    docker = Docker(
        work, registry=False, node=Node(f"W={work}\n{NODE_SETUP}", work / "dockerd-bin", "/run/docker.sock")
    )
    try:
        docker.start()
        base = docker.import_image(minimal_root(work / "image-root", STAND_IN_PROGRAMS), "fb-node-base:raw")
        for i, (image, entrypoint) in enumerate(((TCPXO.rxdm_image, RXDM), (TCPXO.nccl_plugin_image, NCCL_INSTALLER))):
            context = work / f"image-{i}"
            _stub(context, "entrypoint", entrypoint)
            (context / "Dockerfile").write_text(
                f'FROM {base}\nCOPY entrypoint /entrypoint\nENTRYPOINT ["/entrypoint"]\n'
            )
            done = docker.build(context / "Dockerfile", context, image, {}, network="none")
            assert done.returncode == 0, done.stderr[-2000:]
        script = next(vm for vm in synthesized(STACK).nodes(CLUSTER, "mega")).metadata["startup-script"]
        for path in (PROLOG, EPILOG):
            (work / "script").write_text(written_file(script, path))
            installed = docker.on_node(["install", "-D", "-m", "0755", str(work / "script"), path], {})
            assert installed.returncode == 0, installed.stderr
        # what the node's startup script records before slurmd starts (`echo tcpxo > /etc/gpu-fleet/fabric`)
        assert "echo tcpxo > /etc/gpu-fleet/fabric" in script
        marked = docker.on_node(["bash", "-c", "install -d /etc/gpu-fleet && echo tcpxo > /etc/gpu-fleet/fabric"], {})
        assert marked.returncode == 0, marked.stderr
        syslog = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        syslog.bind(docker.on_node_path("/dev/log"))
        syslog.setblocking(False)
        try:
            yield TcpxoNode(docker, work, syslog)
        finally:
            syslog.close()
    finally:
        docker.close()


def test_a_single_node_job_starts_no_rxdm(node: TcpxoNode) -> None:
    code, output = node.run(PROLOG, job_id=40, nodes=1)
    assert code == 0, output
    assert node.rxdm() == []


def test_a_multi_node_jobs_prolog_installs_the_pinned_plugin_and_starts_the_pinned_rxdm(node: TcpxoNode) -> None:
    """A 2-node job's prolog: the import helper loaded, the plugin installed into the node's /var/lib/tcpxo/lib64 by
    the pinned installer (its container gone) with the aperture devices added to its NCCL profile, and the pinned
    RxDM running with what it needs (privileged on the host's network, NET_ADMIN, every GPU, the import helper and
    the driver's libraries) and its release's flags; the prolog returns once RxDM's log says it is up, though
    the log runs on for thousands of lines after that."""
    code, output = node.run(PROLOG, job_id=41, nodes=2)
    assert code == 0, output + node.explain(f"{RXDM_PREFIX}41")
    assert "import-helper" in (node.workdir / "modprobe.log").read_text().split()
    profile = node.read("/var/lib/tcpxo/lib64/nccl-env-profile.sh")
    assert profile.startswith("export NCCL_NET=FasTrak\n"), profile
    assert "export NCCL_FASTRAK_LLCM_DEVICE_DIRECTORY=/dev/aperture_devices" in profile
    assert node.docker.containers("nccl-installer") == []  # --rm
    assert node.rxdm() == [f"{RXDM_PREFIX}41"]
    found = node.docker.inspect(f"{RXDM_PREFIX}41")
    config, host = found["Config"], found["HostConfig"]
    assert found["State"]["Running"], node.docker.logs(f"{RXDM_PREFIX}41")[-2000:]
    assert config["Image"] == TCPXO.rxdm_image
    assert config["Cmd"] == rxdm_flags(TCPXO.rxdm_image).split()
    assert host["Privileged"] and host["NetworkMode"] == "host" and "NET_ADMIN" in host["CapAdd"]
    assert [(r["Count"], r["Capabilities"]) for r in host["DeviceRequests"]] == [(-1, [["gpu"]])]
    assert {
        "/var/lib/nvidia/lib64:/usr/local/nvidia/lib64",
        "/dev/dmabuf_import_helper:/dev/dmabuf_import_helper",
    } <= set(host["Binds"])
    assert (node.workdir / "hook.log").read_text().split()[:1] == ["prestart"]  # the runtime was asked for the GPUs


def test_the_next_jobs_prolog_replaces_rxdm_and_the_epilog_stops_it(node: TcpxoNode) -> None:
    """The next multi-node job's prolog removes the last job's RxDM and starts its own; its epilog stops it and
    keeps it, its log readable (`docker logs`), until the next prolog."""
    code, output = node.run(PROLOG, job_id=42, nodes=2)
    assert code == 0, output
    assert node.rxdm() == [f"{RXDM_PREFIX}42"]
    code, output = node.run(EPILOG, job_id=42, nodes=2)
    assert code == 0, output
    assert node.rxdm() == [f"{RXDM_PREFIX}42"] and not node.running(f"{RXDM_PREFIX}42")
    assert READY in node.docker.logs(f"{RXDM_PREFIX}42")
    assert node.journal() == []  # nothing failed


def test_an_installer_a_killed_prolog_left_running_does_not_block_the_next_one(node: TcpxoNode) -> None:
    """slurmd kills a prolog that outlives PrologEpilogTimeout, and its `docker run --rm --name nccl-installer` may
    be left running: the next prolog removes it instead of failing on the name."""
    left = node.docker.run_detached(TCPXO.nccl_plugin_image, "nccl-installer", ["/bin/sleep", "infinity"])
    assert node.running(left)
    code, output = node.run(PROLOG, job_id=45, nodes=2)
    assert code == 0, output
    assert node.docker.containers("nccl-installer") == [] and node.rxdm() == [f"{RXDM_PREFIX}45"]
    assert node.journal() == []


def test_an_rxdm_that_exits_fails_the_prolog_at_once_and_says_why_in_the_journal(node: TcpxoNode) -> None:
    """RxDM exiting before it serves (here: the import helper made no device, which RxDM needs) fails the prolog at
    the next check, not after the 120 s wait, and the reason (RxDM's last lines) goes to the journal: Slurm keeps no
    prolog output, and slurmd drains the node with "Prolog error" alone."""
    (node.workdir / "helper-makes-no-device").touch()
    try:
        assert node.docker.on_node(["rm", "-f", "/dev/dmabuf_import_helper"], {}).returncode == 0
        code, output = node.run(PROLOG, job_id=43, nodes=2, timeout=60)
    finally:
        (node.workdir / "helper-makes-no-device").unlink()
    assert code == 1, output
    (line,) = node.journal()
    assert f"gpu-fleet-prolog: job 43: RxDM ({TCPXO.rxdm_image}) exited before initialising:" in line, line
    assert "rxdm stand-in: no /dev/dmabuf_import_helper device" in line, line
    assert node.rxdm() == [f"{RXDM_PREFIX}43"] and not node.running(f"{RXDM_PREFIX}43")  # its log kept


def test_a_failed_step_of_the_prolog_is_named_in_the_journal(node: TcpxoNode) -> None:
    """Any other failing command (here `modprobe import-helper`, refused as a Secure Boot kernel refuses an unsigned
    module) ends the prolog with its line and command in the journal."""
    (node.workdir / "modprobe-refuses").touch()
    try:
        code, output = node.run(PROLOG, job_id=44, nodes=2, timeout=60)
    finally:
        (node.workdir / "modprobe-refuses").unlink()
    assert code == 1, output
    (line,) = node.journal()
    assert re.search(r"gpu-fleet-prolog: job 44: line \d+: modprobe import-helper exited 1$", line.strip()), line


def test_a_node_not_marked_tcpxo_runs_nothing_and_logs_nothing(node: TcpxoNode) -> None:
    """The scripts act only where the startup script recorded the TCPXO fabric: with no /etc/gpu-fleet/fabric, a
    multi-node job's prolog and epilog exit 0 without a docker call or a journal line."""
    before = node.rxdm()
    assert node.docker.on_node(["mv", "/etc/gpu-fleet/fabric", "/etc/gpu-fleet/fabric.away"], {}).returncode == 0
    try:
        for script in (PROLOG, EPILOG):
            code, output = node.run(script, job_id=46, nodes=2)
            assert code == 0 and output == "", output
    finally:
        assert node.docker.on_node(["mv", "/etc/gpu-fleet/fabric.away", "/etc/gpu-fleet/fabric"], {}).returncode == 0
    assert node.rxdm() == before and node.journal() == []
