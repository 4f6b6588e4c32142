"""The Debian 12 root every simulated VM boots from: debootstrap from this machine's own Debian mirror, baked once.

The root plays the part of the VM image.  Like the images the Cluster Toolkit boots (built with Slurm,
munge and the GPU software baked in), it already carries the packages the startup scripts install, so
booting needs no network: a VM's network namespace has no route off this machine, and the scripts'
install steps must (and, being idempotent, do) find everything present.  Baking beats giving apt a
path out through the host: the test then runs the same with or without a mirror, cannot reach any
other address, and every VM boots in seconds instead of re-downloading ~100 MB.

Which packages: those the generated scripts name (`components.gcp.startup` package lists, read at
run time, not copied here) plus what a GCE Debian image already has (curl, CA certificates,
gpg, iproute2, iptables, procps, kmod).

The mirror is read from this machine's apt sources at run time (the deb822 `URIs:` of the source
whose suites include bookworm, or a classic `deb URI bookworm main` line); no host is written here.
Roots are cached under $FLEET_FIRSTBOOT_CACHE (default /var/cache/gpu-fleet/firstboot), keyed by
mirror, suite and package list; a root is complete only once its `.baked` marker exists.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

SUITE = "bookworm"
IMAGE_PACKAGES = ("curl", "ca-certificates", "gpg", "iproute2", "iptables", "procps", "kmod", "util-linux", "rsync")
SOURCES = (Path("/etc/apt/sources.list"), Path("/etc/apt/sources.list.d"))
DEFAULT_CACHE = Path("/var/cache/gpu-fleet/firstboot")


class RootfsError(RuntimeError):
    pass


def debian_mirror(sources: tuple[Path, ...] = SOURCES) -> str:
    """The URI of this machine's Debian archive for `SUITE` (not the security archive)."""
    files: list[Path] = []
    for src in sources:
        if src.is_dir():
            files += sorted(p for p in src.iterdir() if p.suffix in (".sources", ".list"))
        elif src.is_file():
            files.append(src)
    for path in files:
        text = path.read_text(errors="replace")
        if path.suffix == ".sources":
            for stanza in re.split(r"\n\s*\n", text):
                fields = dict(
                    (m.group(1).lower(), m.group(2).strip())
                    for m in re.finditer(r"^([A-Za-z-]+):\s*(.*)$", stanza, re.M)
                )
                suites = fields.get("suites", "").split()
                enabled = fields.get("enabled", "yes").lower() != "no"
                if "deb" in fields.get("types", "").split() and SUITE in suites and enabled:
                    return fields["uris"].split()[0]
        else:
            for line in text.splitlines():
                m = re.match(r"^\s*deb\s+(?:\[[^\]]*\]\s+)?(\S+)\s+(\S+)\s", line + " ")
                if m and m.group(2) == SUITE:
                    return m.group(1)
    raise RootfsError(f"no apt source for Debian {SUITE} in {', '.join(map(str, sources))}")


def package_set(script_packages: list[str]) -> list[str]:
    return sorted(set(script_packages) | set(IMAGE_PACKAGES))


def cache_dir() -> Path:
    return Path(os.environ.get("FLEET_FIRSTBOOT_CACHE", str(DEFAULT_CACHE)))


def baked_root(script_packages: list[str], log: Path | None = None) -> Path:
    """A complete Debian root with `script_packages` baked in, built once and reused (cache keyed by inputs)."""
    if shutil.which("debootstrap") is None:
        raise RootfsError("debootstrap is not installed (scripts/setup.sh installs it)")
    mirror = debian_mirror()
    packages = package_set(script_packages)
    key = hashlib.sha256(f"{mirror}\n{SUITE}\n{' '.join(packages)}\nv1".encode()).hexdigest()[:16]
    return baked_once(cache_dir() / f"{SUITE}-{key}", lambda root: _bake(root, mirror, packages, log))


def baked_once(root: Path, bake: Callable[[Path], None]) -> Path:
    """`root`, built by `bake(root)` unless its `.baked` marker says a build completed (which `bake` writes last);
    one build at a time across test runs (a lock file beside it), an interrupted build removed first."""
    marker = root / ".baked"
    if marker.exists():
        return root
    root.parent.mkdir(parents=True, exist_ok=True)
    with open(root.parent / f".{root.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another test run may be baking the same root
        if not marker.exists():
            if root.exists():
                shutil.rmtree(root)  # an interrupted build
            bake(root)
    return root


def _bake(root: Path, mirror: str, packages: list[str], log: Path | None) -> None:
    marker = root / ".baked"
    root.parent.mkdir(parents=True, exist_ok=True)
    cmd = ["debootstrap", "--variant=minbase", f"--include={','.join(packages)}", SUITE, str(root), mirror]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if log:
        log.write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-20:])
        shutil.rmtree(root, ignore_errors=True)
        raise RootfsError(f"debootstrap {SUITE} from {mirror} failed ({proc.returncode}):\n{tail}")
    for deb in (root / "var/cache/apt/archives").glob("*.deb"):
        deb.unlink()
    marker.write_text(f"mirror={mirror}\nsuite={SUITE}\npackages={' '.join(packages)}\n")
