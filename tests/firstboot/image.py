"""The packages baked into the first-boot test image: what the generated startup scripts install from Debian.

A VM in the test has no route to a mirror, as a VM booting a baked image needs none: every Debian
package the scripts install is baked in, and their install steps (`apt-get update` / `apt_install`)
then find it present.  The list is read from the generated scripts themselves (every literal
`apt_install NAME` and the role package lists of `components.gcp.startup`), so a package the scripts
start installing is baked too.  Left out, and replaced by the recording stubs of
`tests.firstboot.stubs` (or simply absent, so the step that needs them fails), are the packages that
are not Debian's or that drive hardware this machine does not have.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from components.gcp import startup

NOT_BAKED = {
    "dkms": "builds the dmabuf import helper module: stubbed (modinfo/modprobe)",
    "dmabuf-import-helper": "Google's TCPXO repository, not Debian: stubbed (modinfo/modprobe)",
    "apt-transport-artifact-registry": "Google's repository, not Debian",
    "docker.io": "the RxDM container runtime: stubbed (docker, dockerd)",
    "nvidia-container-toolkit": "NVIDIA's repository: registered at its pinned version, stubbed (nvidia-ctk)",
    "nvidia-container-toolkit-base": "NVIDIA's repository: registered at its pinned version",
    "libnvidia-container-tools": "NVIDIA's repository: registered at its pinned version",
    "libnvidia-container1": "NVIDIA's repository: registered at its pinned version",
    "lustre-client-utils": "Google's Lustre repository: absent, so a Lustre mount cannot succeed",
    "gcsfuse": "Google's Cloud Storage FUSE repository: stubbed (a bind mount of a local directory)",
    "nccl-gib": "Google's gIB repository: registered at its pinned version, its plugin absent (no RDMA here)",
}
_APT_INSTALL = re.compile(r"\bapt_install\s+([^;&|\n]+)")
#: a package an `apt_install` names, with or without a pinned version (`gcsfuse=3.11.2`, `nccl-gib=v1.1.0`)
PACKAGE = re.compile(r"(?P<name>[a-z0-9][a-z0-9+.-]+)(?:=[A-Za-z0-9.+:~-]+)?")


def script_packages(scripts: Iterable[str]) -> set[str]:
    names: set[str] = set()
    for script in scripts:
        for m in _APT_INSTALL.finditer(script):
            for token in m.group(1).split():
                if found := PACKAGE.fullmatch(token.strip("'\"")):
                    names.add(found["name"])
    return names


def image_packages(scripts: Iterable[str] = ()) -> list[str]:
    roles = getattr(startup, "PACKAGES", None) or startup._PACKAGES
    names = {pkg for pkgs in roles.values() for pkg in (pkgs.split() if isinstance(pkgs, str) else pkgs)}
    return sorted((names | script_packages(scripts)) - set(NOT_BAKED))
