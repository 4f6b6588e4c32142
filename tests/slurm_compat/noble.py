"""Slurm as the stacks' image runs it: Ubuntu 24.04's own packages (Slurm 23.11), in an Ubuntu noble root.

The first-boot and e2e suites run Debian 12's Slurm 22.05, the one this machine installs.  The controller and GPU
images the stacks boot are Ubuntu 24.04, whose Slurm is 23.11.4: it prints other JSON (`fleet.slurm.nodes_json`),
drops plugins 22.05 had, and its slurmctld held every job InvalidAccount on a root without PMIx
(`components.gcp.startup` package lists).  None of that shows on 22.05.

`noble_root()` debootstraps noble (minbase) from the Ubuntu archive and installs the Slurm packages the generated
scripts name (the controller's and the GPU nodes' lists, read at run time), baked once under
$FLEET_FIRSTBOOT_CACHE like the first-boot root.  `wrappers(root, dir)` writes one script per Slurm and munge
program that runs the noble binary in that root: in a private mount namespace (`unshare -m`) with this machine's
/tmp, /dev, /sys and a /proc bound in, so the test harness's files under /tmp are where the binaries look, the
network is this machine's, and no mount outlives the process (the root can be deleted safely at any time).  Put
the directory first on PATH and `tests.harness.slurm` starts noble's slurmctld, slurmd and munged, and runs its
clients, unchanged.  Needs root, debootstrap, unshare and the Ubuntu archive (a skip says which is missing)."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import urllib.request
from pathlib import Path

from components.gcp import startup
from tests.firstboot.rootfs import baked_once, cache_dir, package_set
from tests.harness.slurm import HOST_ROOT
from tests.harness.slurmrestd import DROPS_PRIVILEGES

SUITE = "noble"
MIRROR = "http://archive.ubuntu.com/ubuntu"
#: Ubuntu releases debootstrap by the script of its oldest supported one
SCRIPT = "/usr/share/debootstrap/scripts/gutsy"
PROGRAMS = ("slurmctld", "slurmd", "slurmstepd", "sbatch", "srun", "squeue", "sinfo", "scontrol", "scancel",
            "munged", "mungekey", "munge", "unmunge", "slurmrestd")  # fmt: skip
#: slurmrestd refuses to run as root, and a wrapper run as another user cannot make its mount namespace: its wrapper,
#: run as root, drops to this user inside the root, and carries the mark `tests.harness.slurmrestd` reads
RESTD_USER = ("nobody", "nogroup")
#: what the Slurm daemons need besides the packages the scripts name
EXTRA = ("ca-certificates",)


class NobleUnavailable(RuntimeError):
    """Why Ubuntu's Slurm cannot run here (the tests skip with it)."""


def slurm_packages() -> list[str]:
    """The Slurm, munge and PMIx packages the controller's and the GPU nodes' scripts install."""
    names = {p for role in ("controller", "compute") for p in startup._PACKAGES[role].split()}
    return sorted(p for p in names if p.startswith(("slurm", "munge", "libpmix")))


def unavailable_reason() -> str | None:
    if os.geteuid() != 0:
        return "Ubuntu's Slurm runs in a chroot: needs root"
    for tool in ("debootstrap", "unshare", "chroot"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (scripts/setup.sh installs debootstrap)"
    if not Path(SCRIPT).exists():
        return f"debootstrap has no {SCRIPT}"
    try:
        urllib.request.urlopen(f"{MIRROR}/dists/{SUITE}/Release", timeout=10).close()
    except OSError as exc:
        return f"the Ubuntu archive ({MIRROR}) is not reachable from here: {exc}"
    return None


def _run(cmd: list[str], log: Path, timeout: float) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})  # fmt: skip
    with log.open("a") as out:
        out.write(f"$ {' '.join(cmd)}\n{proc.stdout}{proc.stderr}\n")
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-15:])
        raise NobleUnavailable(f"{' '.join(cmd[:3])} ... failed ({proc.returncode}):\n{tail}")


def noble_root(log: Path) -> Path:
    """The baked noble root with Ubuntu's Slurm (built once, cached by package list)."""
    return _baked("slurm", slurm_packages(), log)


def image_root(packages: list[str], log: Path) -> Path:
    """The noble root the first-boot VMs boot (tests/firstboot/os_image.py): `packages`, the packages the generated
    scripts install, and what a GCE Ubuntu image carries (`rootfs.IMAGE_PACKAGES`), baked once."""
    return _baked("image", package_set(packages), log)


def _baked(kind: str, packages: list[str], log: Path) -> Path:
    """The noble root of `kind` with `packages`, baked once (cached under a key of the mirror, suite and packages)."""
    key = hashlib.sha256(f"{MIRROR}\n{SUITE}\n{' '.join(packages)}\nv1".encode()).hexdigest()[:16]
    return baked_once(cache_dir() / f"{SUITE}-{kind}-{key}", lambda root: _bake(root, packages, log))


def usable_root(log: Path) -> Path:
    """The baked noble root, or NobleUnavailable saying why there is none here (what cannot run it, or what failed
    building it: the build's output is in `log`)."""
    if reason := unavailable_reason():
        raise NobleUnavailable(f"Ubuntu's Slurm cannot run here: {reason}")
    try:
        return noble_root(log)
    except NobleUnavailable as exc:
        raise NobleUnavailable(f"Ubuntu's Slurm could not be set up ({log}): {exc}") from exc


def _bake(root: Path, packages: list[str], log: Path) -> None:
    """debootstrap noble, then Ubuntu's Slurm packages (no mount ever lives in the root: the module docstring)."""
    _run(["debootstrap", "--variant=minbase", f"--include={','.join(EXTRA)}", SUITE, str(root), MIRROR, SCRIPT],
         log, 900)  # fmt: skip
    (root / "etc/apt/sources.list").write_text(f"deb {MIRROR} {SUITE} main universe\n")
    policy = root / "usr/sbin/policy-rc.d"  # no package starts a service in the root
    policy.write_text("#!/bin/sh\nexit 101\n")
    policy.chmod(0o755)
    _run(["chroot", str(root), "apt-get", "update", "-q"], log, 300)
    _run(["chroot", str(root), "apt-get", "install", "-y", "-q", "--no-install-recommends", *packages], log, 600)
    for deb in (root / "var/cache/apt/archives").glob("*.deb"):
        deb.unlink()
    policy.unlink()  # an image has none: a package a script installs on a VM starts its service
    (root / ".baked").write_text(f"suite={SUITE}\npackages={' '.join(packages)}\n")


def wrappers(root: Path, directory: Path) -> Path:
    """One script per program in `directory`, each running noble's binary in `root` (module docstring)."""
    directory.mkdir(parents=True, exist_ok=True)
    mounts = ('mount --bind /tmp "$R/tmp" && mount --rbind /dev "$R/dev" && mount --rbind /sys "$R/sys"'
              ' && mount -t proc proc "$R/proc" && mount --bind /etc/hosts "$R/etc/hosts"'
              f' && mount --rbind / "$R{HOST_ROOT}"')  # fmt: skip
    (root / HOST_ROOT.lstrip("/")).mkdir(parents=True, exist_ok=True)  # `host_script`s run there
    (root / "etc/hosts").touch()  # the bind's target: this machine's names (the harness's SlurmctldHost)
    for name in PROGRAMS:
        found = [p for p in (f"usr/sbin/{name}", f"usr/bin/{name}") if (root / p).exists()]
        if not found:
            raise NobleUnavailable(f"{name} is not in the noble root ({root})")
        script = directory / name
        drop = (
            f"setpriv --reuid={RESTD_USER[0]} --regid={RESTD_USER[1]} --clear-groups " if name == "slurmrestd" else ""
        )
        text = (
            "#!/bin/sh\n"
            + (f"{DROPS_PRIVILEGES}\n" if drop else "")
            # already in the root (a job's srun, a hook's scontrol): the program itself
            + f'[ -d {HOST_ROOT}/proc/self ] && exec {drop}/{found[0]} "$@"\n'
            + f'exec unshare -m --propagation private sh -c \'{mounts} && exec chroot "$R" "$@"\' '
            + f'sh {drop}/{found[0]} "$@"\n'
        )
        script.write_text(text.replace("$R", str(root)))
        script.chmod(0o755)
    return directory


def main(argv: list[str]) -> int:
    """`python -m tests.slurm_compat.noble DIR`: bake the root (if not cached), write the wrappers into DIR and print
    the PATH that runs any Slurm test on 23.11, e.g. ``PATH=DIR:$PATH pytest -n 2 tests/e2e``."""
    if len(argv) != 1:
        print("usage: python -m tests.slurm_compat.noble DIR", file=sys.stderr)
        return 2
    log = Path(argv[0]).resolve().with_suffix(".build.log")
    try:
        directory = wrappers(usable_root(log), Path(argv[0]).resolve())
    except NobleUnavailable as exc:
        print(exc, file=sys.stderr)
        return 1
    print(f"PATH={directory}:$PATH")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
