"""Docker itself for the tests: a dockerd of the test's own builds with BuildKit, and a registry takes the push.

deploy/autoscaler.Dockerfile tells a platform team to `docker build` it, push it, and set the stack's `image` to the
digest of the push.  `Docker(workdir)` runs exactly that path on this machine with Debian 12's packages
(`docker.io`: dockerd 20.10 with its embedded BuildKit, its containerd and runc; `docker-registry`: the CNCF
distribution registry; scripts/setup.sh installs both):

- a dockerd with its data, exec root and socket under workdir (nothing in /var/lib/docker, no iptables rules, no
  bridge: builds use the host's network, as `docker build --network host` does), stopped by `close`;
- a registry on 127.0.0.1 (dockerd and Podman both treat a loopback registry as plain HTTP), its storage under
  workdir: `push` returns `<registry>/<name>@sha256:<digest>`, the reference a Deployment names and a kubelet
  pulls.

With a `Node`, the dockerd is a machine's own: it starts in a private mount namespace after the node's mounts, and
`on_node` runs a command there (tests/firstboot/test_tcpxo_prolog.py runs an A3 Mega node's Slurm prolog so).
Containers start through `RUNC_WRAPPER`, runc less the capabilities this machine's sandbox withholds from root
(`--privileged` asks for every one); nothing else of a container changes.

The client is `/usr/bin/docker`, the one packaged with that dockerd (Debian's 20.10, or docker-ce's): a newer
client found first on PATH may lack the buildx plugin its `DOCKER_BUILDKIT=1` then needs."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path

from tests.harness.oci import unmount_under
from tests.harness.ports import PortLeases
from tests.harness.slurm import poll_until

CLIENT = Path("/usr/bin/docker")
DAEMONS = ("dockerd", "docker-registry")


def unavailable_reason() -> str | None:
    """Why Docker cannot build and push here (None: it can)."""
    missing = [tool for tool in DAEMONS if shutil.which(tool) is None]
    missing += [] if CLIENT.exists() else [str(CLIENT)]
    if not missing:
        return None
    return f"not installed: {', '.join(missing)} (scripts/setup.sh installs docker.io and docker-registry)"


#: Linux capabilities by number (linux/capability.h), to read a bounding set's mask
CAPABILITIES = (
    "CHOWN", "DAC_OVERRIDE", "DAC_READ_SEARCH", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID", "SETPCAP",
    "LINUX_IMMUTABLE", "NET_BIND_SERVICE", "NET_BROADCAST", "NET_ADMIN", "NET_RAW", "IPC_LOCK", "IPC_OWNER",
    "SYS_MODULE", "SYS_RAWIO", "SYS_CHROOT", "SYS_PTRACE", "SYS_PACCT", "SYS_ADMIN", "SYS_BOOT", "SYS_NICE",
    "SYS_RESOURCE", "SYS_TIME", "SYS_TTY_CONFIG", "MKNOD", "LEASE", "AUDIT_WRITE", "AUDIT_CONTROL", "SETFCAP",
    "MAC_OVERRIDE", "MAC_ADMIN", "SYSLOG", "WAKE_ALARM", "BLOCK_SUSPEND", "AUDIT_READ", "PERFMON", "BPF",
    "CHECKPOINT_RESTORE",
)  # fmt: skip

#: runc, less the capabilities this machine's bounding set withholds even from root (a sandbox may drop
#: CAP_SYS_RESOURCE): runc refuses to start a container asking for one, and `--privileged` asks for them all.  The
#: OCI runtime dockerd is given; it edits the bundle's config.json, then runs runc with the same arguments.
RUNC_WRAPPER = f"""#!/usr/bin/python3
import json, os, sys
bound = int(next(l for l in open("/proc/self/status") if l.startswith("CapBnd:")).split()[1], 16)
withheld = {{"CAP_" + name for bit, name in enumerate({CAPABILITIES!r}) if not bound >> bit & 1}}
args = sys.argv[1:]
bundle = next((args[i + 1] for i, a in enumerate(args[:-1]) if a in ("--bundle", "-b")), None)
bundle = bundle or next((a.split("=", 1)[1] for a in args if a.startswith("--bundle=")), None)
if bundle and withheld:
    path = os.path.join(bundle, "config.json")
    spec = json.load(open(path))
    sets = spec.get("process", {{}}).get("capabilities", {{}})
    for key in sets:
        sets[key] = [c for c in sets[key] if c not in withheld]
    json.dump(spec, open(path, "w"))
os.execvp("runc", ["runc", *args])
"""


#: what an image made from a first-boot root leaves out: apt's lists and caches (as python.org's slim images do) and
#: the root's MariaDB data, a third of its bytes, which every import, push and pull would otherwise hash and copy
LEFT_OUT = ("var/lib/apt/lists", "var/cache/apt", "var/lib/mysql")


class DockerError(RuntimeError):
    """dockerd, the registry or a client command failed: the command and the end of its output."""


@dataclass(frozen=True)
class Node:
    """dockerd as a machine's own: started in a private mount namespace after `setup` (shell lines, as root: the
    mounts that give it its own /etc, /dev, ... under the test's workdir), with `path` first on its PATH, and
    answering on `socket` too (where that machine's tools look, e.g. /run/docker.sock)."""

    setup: str
    path: Path
    socket: str


class Docker:
    def __init__(self, workdir: Path, registry: bool = True, node: Node | None = None) -> None:
        self.workdir = workdir
        self.socket = workdir / "docker.sock"
        self._ports = PortLeases()  # the registry's, held until `close`: another worker's daemon cannot take it
        self.registry = f"127.0.0.1:{self._ports.lease()}" if registry else ""
        self.node = node
        self.env = {
            **os.environ,
            "DOCKER_HOST": f"unix://{self.socket}",
            "DOCKER_CONFIG": str(workdir / "client"),  # no one's ~/.docker (credentials, contexts)
            "DOCKER_BUILDKIT": "1",
            "BUILDKIT_PROGRESS": "plain",
        }
        self._daemons: list[subprocess.Popen[bytes]] = []

    def start(self) -> None:
        """dockerd (and the registry), each logging under workdir; returns once they answer."""
        if self.registry:
            conf = self.workdir / "registry.yml"
            conf.write_text(
                f"version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n"
                f"    rootdirectory: {self.workdir}/registry\nhttp:\n  addr: {self.registry}\n"
            )
            self._spawn("registry", ["docker-registry", "serve", str(conf)])
        (self.workdir / "daemon.json").write_text("{}\n")  # not this machine's /etc/docker/daemon.json
        dockerd = [
            "dockerd", "--config-file", str(self.workdir / "daemon.json"),
            "--data-root", str(self.workdir / "data"), "--exec-root", str(self.workdir / "exec"),
            "--host", f"unix://{self.socket}", "--pidfile", str(self.workdir / "docker.pid"),
            "--iptables=false", "--ip6tables=false", "--bridge=none", "--storage-driver=overlay2",
            "--exec-opt", "native.cgroupdriver=cgroupfs", "--log-level=warn",
            "--add-runtime", f"sandboxed-runc={self._runtime()}", "--default-runtime", "sandboxed-runc",
        ]  # fmt: skip
        if self.node is None:
            self._spawn("dockerd", dockerd)
        else:
            dockerd += ["--host", f"unix://{self.node.socket}"]
            script = f"{self.node.setup}\nexport PATH={self.node.path}:$PATH\nexec {shlex.join(dockerd)}\n"
            self._spawn("dockerd", ["unshare", "--mount", "--propagation", "private", "bash", "-euc", script])
        if not poll_until(lambda: self._call(["info"], check=False).returncode == 0, timeout=60):
            raise DockerError(f"dockerd did not answer in 60 s:\n{self._log('dockerd')}")
        if self.registry and not poll_until(self._registry_answers, timeout=30):
            raise DockerError(f"the registry did not answer on {self.registry} in 30 s:\n{self._log('registry')}")

    def on_node_path(self, path: str) -> str:
        """`path` as the node sees it, from this machine (through dockerd's root: /proc/PID/root)."""
        assert self.node is not None, "on_node_path needs a Docker started with a Node"
        return f"/proc/{self._dockerd_pid()}/root{path}"

    def _runtime(self) -> Path:
        wrapper = self.workdir / "runc-sandboxed"
        wrapper.write_text(RUNC_WRAPPER)
        wrapper.chmod(0o755)
        return wrapper

    def on_node(self, argv: list[str], env: dict[str, str], timeout: float = 300) -> subprocess.CompletedProcess[str]:
        """`argv` run in the node's mount namespace (dockerd's), with only `env`; the result, failed or not."""
        assert self.node is not None, "on_node needs a Docker started with a Node"
        pid = self._dockerd_pid()
        nsenter = ["nsenter", f"--mount=/proc/{pid}/ns/mnt", "--", "env", "-i", *(f"{k}={v}" for k, v in env.items())]
        return subprocess.run([*nsenter, *argv], capture_output=True, text=True, timeout=timeout, check=False)

    def _dockerd_pid(self) -> int:
        """dockerd's pid: with a Node, unshare and bash exec into it, so the first process spawned is it."""
        return next(d.pid for d in self._daemons if d.args[0] in ("dockerd", "unshare"))

    def _spawn(self, name: str, argv: list[str]) -> None:
        log = open(self.workdir / f"{name}.log", "wb")  # noqa: SIM115  (the daemon's, closed with it)
        self._daemons.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True))

    def _log(self, name: str) -> str:
        return (self.workdir / f"{name}.log").read_text(errors="replace")[-3000:]

    def _registry_answers(self) -> bool:
        try:
            with socket.create_connection(tuple(self.registry.split(":")), timeout=2):  # type: ignore[arg-type]
                return True
        except OSError:
            return False

    def _call(self, args: list[str], timeout: float = 300, check: bool = True) -> subprocess.CompletedProcess[str]:
        argv = [str(CLIENT), *args]
        done = subprocess.run(argv, capture_output=True, text=True, env=self.env, timeout=timeout, check=False)
        if check and done.returncode != 0:
            raise DockerError(f"docker {' '.join(args[:2])} ... exited {done.returncode}:\n{done.stderr[-3000:]}")
        return done

    def import_root(self, root: Path, name: str, files: dict[str, str]) -> str:
        """An image of the directory `root` plus `files` (path in the image -> text), pushed as `name`; returns
        the pushed reference by digest (what a site's mirror of python.org's image would be named by)."""
        raw = self.import_image(root, f"{self.registry}/{name}:raw")
        context = self.workdir / f"{name}-context"
        for path, text in files.items():
            target = context / "files" / path.lstrip("/")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
        (context / "Dockerfile").write_text(f"FROM {raw}\nCOPY files/ /\n")
        tag = f"{self.registry}/{name}:test"
        done = self.build(context / "Dockerfile", context, tag, {})
        if done.returncode != 0:
            raise DockerError(f"adding {sorted(files)} to {raw} failed:\n{done.stderr[-2000:]}")
        return self.push(tag)

    def import_image(self, root: Path, tag: str) -> str:
        """`docker import` of the directory `root` as `tag` (one layer, no config), less `LEFT_OUT`; returns
        `tag`."""
        excluded = [f"--exclude=./{path}" for path in LEFT_OUT]
        pack = subprocess.Popen(["tar", "-C", str(root), *excluded, "-c", "."], stdout=subprocess.PIPE)
        imported = subprocess.run(
            [str(CLIENT), "import", "-", tag], stdin=pack.stdout, capture_output=True, text=True, env=self.env
        )
        if pack.stdout is not None:
            pack.stdout.close()
        if pack.wait() != 0 or imported.returncode != 0:
            raise DockerError(f"docker import of {root} failed: {imported.stderr[-2000:]}")
        return tag

    def build(
        self, dockerfile: Path, context: Path, tag: str, build_args: dict[str, str], network: str = "host"
    ) -> subprocess.CompletedProcess[str]:
        """`docker build -f dockerfile -t tag [--build-arg K=V ...] context` with BuildKit (plain progress, on the
        host's network); the result, failed or not."""
        argv = ["build", "--network", network, "-f", str(dockerfile), "-t", tag]
        argv += [arg for key, value in build_args.items() for arg in ("--build-arg", f"{key}={value}")]
        return self._call([*argv, str(context)], timeout=900, check=False)

    def push(self, tag: str) -> str:
        """`docker push tag` to the registry; the image's reference by the digest of the push."""
        self._call(["push", tag])
        digests = self._call(["image", "inspect", tag, "--format", "{{json .RepoDigests}}"]).stdout
        repository = tag.rsplit(":", 1)[0]
        (reference,) = [d for d in json.loads(digests) or [] if d.startswith(f"{repository}@sha256:")]
        return reference

    def inspect(self, thing: str) -> dict:
        """`docker inspect` of a container or image: its one object."""
        (found,) = json.loads(self._call(["inspect", thing]).stdout)
        return found

    def containers(self, name_filter: str) -> list[str]:
        """Names of the containers (running or not) whose name matches `name_filter`."""
        done = self._call(["container", "list", "--all", "--filter", f"name={name_filter}", "--format", "{{.Names}}"])
        return done.stdout.split()

    def run(
        self, options: list[str], image: str, command: list[str], timeout: float = 300
    ) -> subprocess.CompletedProcess[str]:
        """`docker run --rm OPTIONS IMAGE COMMAND...` in the foreground; the result, failed or not."""
        return self._call(["run", "--rm", *options, image, *command], timeout=timeout, check=False)

    def run_detached(self, image: str, name: str, command: list[str], options: tuple[str, ...] = ()) -> str:
        """`docker run --detach --name NAME [OPTIONS] --entrypoint COMMAND[0] IMAGE COMMAND[1:]`; returns `name`."""
        self._call(["run", "--detach", "--name", name, *options, "--entrypoint", command[0], image, *command[1:]])
        return name

    def run_detached_with(self, options: tuple[str, ...], image: str, command: list[str]) -> None:
        """`docker run OPTIONS IMAGE COMMAND...`, OPTIONS holding `--detach` and `--name`: a long-running container."""
        assert "--detach" in options and "--name" in options, options
        self._call(["run", *options, image, *command])

    def remove(self, container: str) -> None:
        """`docker rm --force CONTAINER` (stopped and removed, whatever its state)."""
        self._call(["rm", "--force", container])

    def logs(self, container: str) -> str:
        done = self._call(["container", "logs", container])
        return done.stdout + done.stderr

    def exists(self, tag: str) -> bool:
        return self._call(["image", "inspect", tag], check=False).returncode == 0

    def close(self) -> None:
        """Stop dockerd (it stops its containerd) and the registry; unmount anything left under workdir."""
        for daemon in reversed(self._daemons):
            daemon.send_signal(signal.SIGTERM)
            try:
                daemon.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(daemon.pid, signal.SIGKILL)
                daemon.wait()
        self._daemons.clear()
        self._ports.release()
        unmount_under(self.workdir)
