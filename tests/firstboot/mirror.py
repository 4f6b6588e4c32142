"""What a controller fetches at first boot, served from this machine: the gpu-fleet repository and its lock's wheels.

A real controller clones `clusters[].slurm.autoscaler.source` at the pinned `ref` and pip-installs
`deploy/controller-requirements.txt` from PyPI, through Cloud NAT.  A first-boot VM has no route off this
machine, so `Mirror` stands in for both, on the fabric's gateway:

- `git daemon` serves a bare clone of this checkout as `REPO_URL` (a name in each VM's /etc/hosts), so the script's
  own `git clone`, `git fetch --depth 1 origin <commit>` and checks run against this checkout's HEAD;
- an HTTP directory serves the lock's wheels, downloaded once from PyPI for the image's Python (`wheelhouse`, cached
  beside the baked roots) and named by each VM's /etc/pip.conf (`find-links`, no index): the script's own
  `pip install --require-hashes` checks every file against the lock's hashes, as on a real controller.

Not covered: PyPI and GitHub themselves (their availability, TLS), and a lock whose wheels PyPI no longer serves."""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import socket
import subprocess
import sys
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from tests.fakes.metadata import _serve
from tests.firstboot.netns import Fabric
from tests.firstboot.rootfs import baked_once, cache_dir

GIT_HOST = "gpu-fleet-git.fb.internal"
REPO_URL = f"git://{GIT_HOST}/gpu-fleet.git"
WHEELS_PORT = 8081
#: the platform tags a manylinux wheel for the images' glibc (2.39 on noble, 2.36 on bookworm) may carry
PLATFORMS = [f"manylinux_2_{minor}_x86_64" for minor in range(36, 16, -1)] + [
    "manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64", "linux_x86_64",
]  # fmt: skip


class MirrorUnavailable(RuntimeError):
    """Why the repository or the wheels cannot be served here (the test skips, or fails in CI, with it)."""


def head_commit(repo: Path) -> str:
    """The commit this checkout's HEAD is at: what the test stack pins (`autoscaler.ref`)."""
    proc = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise MirrorUnavailable(f"{repo} is not a git checkout: {proc.stderr.strip()}")
    return proc.stdout.strip()


def image_python(root: Path) -> str:
    """`3.12` for a root whose python3 is python3.12."""
    target = os.readlink(root / "usr/bin/python3")
    return target.removeprefix("python")


def wheelhouse(root: Path, lock: Path) -> Path:
    """The wheels of `lock` for the Python of the image `root`, downloaded from PyPI once (hash-checked by pip)."""
    python = image_python(root)
    key = hashlib.sha256(lock.read_bytes() + python.encode()).hexdigest()[:16]
    return baked_once(cache_dir() / f"wheels-{key}", functools.partial(_download, lock=lock, python=python))


def _download(directory: Path, lock: Path, python: str) -> None:
    directory.mkdir(parents=True)
    platforms = [arg for tag in PLATFORMS for arg in ("--platform", tag)]
    cmd = [sys.executable if _has_pip(sys.executable) else "python3", "-m", "pip", "download", "--quiet",
           "--require-hashes", "--no-deps", "--only-binary=:all:", "--python-version", python,
           "--implementation", "cp", *platforms, "-d", str(directory), "-r", str(lock)]  # fmt: skip
    # this machine's pip.conf may constrain or add indexes for its own installs: not for these downloads
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "PIP_CONFIG_FILE": os.devnull})
    if proc.returncode != 0:
        shutil.rmtree(directory, ignore_errors=True)
        raise MirrorUnavailable(f"pip download of {lock} for Python {python} failed:\n{proc.stderr[-2000:]}")
    (directory / ".baked").write_text(f"python={python}\n")


def _has_pip(python: str) -> bool:
    return subprocess.run([python, "-m", "pip", "--version"], capture_output=True, check=False).returncode == 0


class Mirror:
    """The repository and the wheels, served on the fabric's gateway while the cloud runs."""

    def __init__(self, repo: Path, wheels: Path, workdir: Path) -> None:
        self.repo, self.wheels, self.workdir = repo, wheels, workdir
        self._daemon: subprocess.Popen[bytes] | None = None
        self._http = None
        self.gateway = ""

    def start(self, fabric: Fabric) -> None:
        self.gateway = str(fabric.gateway)
        served = self.workdir / "git"
        bare = served / "gpu-fleet.git"
        shutil.rmtree(served, ignore_errors=True)
        served.mkdir(parents=True)
        subprocess.run(["git", "clone", "--quiet", "--bare", str(self.repo), str(bare)], check=True)
        # the script fetches the pinned commit by its hash, which needs no branch to point at it
        subprocess.run(["git", "-C", str(bare), "config", "uploadpack.allowAnySHA1InWant", "true"], check=True)
        log = open(self.workdir / "git-daemon.log", "wb")  # noqa: SIM115  (the daemon's, closed with it)
        self._daemon = subprocess.Popen(
            ["ip", "netns", "exec", fabric.name, "git", "daemon", f"--listen={self.gateway}", "--reuseaddr",
             "--export-all", f"--base-path={served}", "--informative-errors", str(served)],
            stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        self._http = serve_wheels(self.wheels, fabric.bind((self.gateway, WHEELS_PORT)))

    def hosts(self) -> dict[str, str]:
        return {GIT_HOST: self.gateway}

    def files(self) -> dict[str, str]:
        """What each VM's image carries for pip: the wheels' directory as its only source."""
        return {
            "etc/pip.conf": f"[global]\nno-index = true\nfind-links = http://{self.gateway}:{WHEELS_PORT}/\n"
            f"trusted-host = {self.gateway}\n"
        }

    def stop(self) -> None:
        if self._daemon is not None:
            self._daemon.terminate()
            try:
                self._daemon.wait(10)
            except subprocess.TimeoutExpired:
                self._daemon.kill()
            self._daemon = None
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()
            self._http = None


def serve_wheels(wheels: Path, sock: socket.socket) -> ThreadingHTTPServer:
    """The directory `wheels` over HTTP on the bound socket `sock`, until the server's `shutdown`: what pip's
    `find-links` names."""
    return _serve(sock, functools.partial(_QuietFiles, directory=str(wheels)))  # type: ignore[arg-type]


class _QuietFiles(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass
