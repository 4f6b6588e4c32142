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

The client is `/usr/bin/docker`, the one packaged with that dockerd (Debian's 20.10, or docker-ce's): a newer
client found first on PATH may lack the buildx plugin its `DOCKER_BUILDKIT=1` then needs."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
from pathlib import Path

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


class DockerError(RuntimeError):
    """dockerd, the registry or a client command failed: the command and the end of its output."""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Docker:
    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.socket = workdir / "docker.sock"
        self.registry = f"127.0.0.1:{_free_port()}"
        self.env = {
            **os.environ,
            "DOCKER_HOST": f"unix://{self.socket}",
            "DOCKER_CONFIG": str(workdir / "client"),  # no one's ~/.docker (credentials, contexts)
            "DOCKER_BUILDKIT": "1",
            "BUILDKIT_PROGRESS": "plain",
        }
        self._daemons: list[subprocess.Popen[bytes]] = []

    def start(self) -> None:
        """dockerd and the registry, each logging under workdir; returns once both answer."""
        conf = self.workdir / "registry.yml"
        conf.write_text(
            f"version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: {self.workdir}/registry\n"
            f"http:\n  addr: {self.registry}\n"
        )
        self._spawn("registry", ["docker-registry", "serve", str(conf)])
        self._spawn("dockerd", [
            "dockerd", "--data-root", str(self.workdir / "data"), "--exec-root", str(self.workdir / "exec"),
            "--host", f"unix://{self.socket}", "--pidfile", str(self.workdir / "docker.pid"),
            "--iptables=false", "--ip6tables=false", "--bridge=none", "--storage-driver=overlay2",
            "--exec-opt", "native.cgroupdriver=cgroupfs", "--log-level=warn",
        ])  # fmt: skip
        if not poll_until(lambda: self._call(["info"], check=False).returncode == 0, timeout=60):
            raise DockerError(f"dockerd did not answer in 60 s:\n{self._log('dockerd')}")
        if not poll_until(self._registry_answers, timeout=30):
            raise DockerError(f"the registry did not answer on {self.registry} in 30 s:\n{self._log('registry')}")

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
        raw = f"{self.registry}/{name}:raw"
        pack = subprocess.Popen(["tar", "-C", str(root), "-c", "."], stdout=subprocess.PIPE)
        imported = subprocess.run(
            [str(CLIENT), "import", "-", raw], stdin=pack.stdout, capture_output=True, text=True, env=self.env
        )
        if pack.stdout is not None:
            pack.stdout.close()
        if pack.wait() != 0 or imported.returncode != 0:
            raise DockerError(f"docker import of {root} failed: {imported.stderr[-2000:]}")
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
        mounts = Path("/proc/mounts").read_text().splitlines()
        for target in sorted((line.split()[1] for line in mounts), reverse=True):
            if target.startswith(str(self.workdir)):
                subprocess.run(["umount", "-l", target], capture_output=True, check=False)
