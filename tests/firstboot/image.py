"""The packages baked into the first-boot test image: every package the generated startup scripts install.

Read from `components.gcp.startup` (the lists the scripts are generated from), so a package the scripts
start installing is baked too and the test never needs a route to a mirror while a VM boots.  GPU and
fabric packages (NVIDIA driver, dmabuf-import-helper, ibverbs/gIB) are not Debian packages: their steps
run against the recording stubs of `tests.firstboot.stubs` instead.
"""

from __future__ import annotations

from components.gcp import startup


def image_packages() -> list[str]:
    roles = getattr(startup, "PACKAGES", None) or getattr(startup, "_PACKAGES")
    names = {pkg for packages in roles.values() for pkg in (packages.split() if isinstance(packages, str) else packages)}
    return sorted(names)
