"""Which OS the first-boot VMs boot: the images' own Ubuntu 24.04 where its archive answers, else Debian 12.

The stacks boot Ubuntu 24.04 (`ubuntu-2404-lts` for the controller and login VMs, the Ubuntu 24.04 accelerator
image for GPU nodes), whose Slurm is 23.11.  So the first-boot VMs boot a baked Ubuntu noble root
(`tests.slurm_compat.noble.image_root`, from archive.ubuntu.com, main and universe), and the test stacks are
synthesized with `slurm.release: "23.11"`: the generated scripts then run on the OS, packages and Slurm they will
meet.  Where the Ubuntu archive does not answer (this machine's registries are Debian's), the VMs boot Debian 12
from this machine's own mirror and the stacks say `release: "22.05"`: the same scripts, on a stand-in OS.  Which
one ran is in every failure's `explain`, and in the report header when tests/firstboot is run on its own (pytest
reads that hook only from the conftest files it starts with).
`FLEET_FIRSTBOOT_OS=debian` (or `ubuntu`, which then fails where the archive does not answer) picks one.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from dataclasses import dataclass
from pathlib import Path

import yaml

from tests.firstboot.rootfs import baked_root
from tests.slurm_compat import noble


@dataclass(frozen=True)
class OsImage:
    name: str
    slurm_release: str  # `clusters[].slurm.release` for a stack booted on it
    rest_api: str  # the slurmrestd API version its Slurm serves (the wrapper loads the newest plugin)
    why: str  # why this one was chosen

    def bake(self, packages: list[str], log: Path) -> Path:
        if self.slurm_release == "23.11":
            return noble.image_root(packages, log)
        return baked_root(packages, log=log)


UBUNTU = OsImage("Ubuntu 24.04 (noble)", "23.11", "v0.0.40", "the images' OS")
DEBIAN = OsImage("Debian 12 (bookworm)", "22.05", "v0.0.38", "a stand-in")
CHOICE = "FLEET_FIRSTBOOT_OS"


class NoSuchImage(RuntimeError):
    pass


@functools.cache
def chosen() -> OsImage:
    wanted = os.environ.get(CHOICE, "").strip().lower()
    if wanted not in ("", "ubuntu", "debian"):
        raise NoSuchImage(f"{CHOICE}={wanted!r}: must be 'ubuntu' or 'debian' (unset: ubuntu where it can be had)")
    if wanted == "debian":
        return dataclasses.replace(DEBIAN, why=f"{DEBIAN.why}: {CHOICE}=debian")
    reason = noble.unavailable_reason()
    if reason is None:
        return UBUNTU
    if wanted == "ubuntu":
        raise NoSuchImage(f"{CHOICE}=ubuntu, but {reason}")
    return dataclasses.replace(DEBIAN, why=f"{DEBIAN.why}: {reason}")


def stack_for(stack: Path, image: OsImage, directory: Path) -> Path:
    """`stack` as a file of the same name in `directory`, every Slurm cluster's `slurm.release` set to the image's
    (the test stacks' only difference between the two OSes)."""
    doc = yaml.safe_load(stack.read_text())
    fleet = doc["config"]["gpu-fleet:fleet"]
    for cluster in fleet["clusters"]:
        if cluster.get("scheduler", "slurm") == "slurm":
            cluster.setdefault("slurm", {})["release"] = image.slurm_release
    directory.mkdir(parents=True, exist_ok=True)
    out = directory / stack.name
    out.write_text(yaml.safe_dump(doc, sort_keys=False))
    return out
