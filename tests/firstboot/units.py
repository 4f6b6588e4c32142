"""The systemd units a booted first-boot VM's script wrote, as the VM's own systemd reads them.

The first-boot VMs run no systemd (a `systemctl` shim starts the units), so nothing there would notice a unit
systemd itself reads differently: systemd logs an unknown or misspelt key ("Unknown key name ... ignoring") and
starts the unit without it, so a misspelt `RequiresMountsFor=` or `ProtectSystem=` would go unnoticed until it
mattered.  `unit_complaints(vm)` runs the image's `systemd-analyze verify` (Ubuntu 24.04's systemd 255) over every
unit file and drop-in under /etc/systemd/system the script wrote, with every executable the units name in place,
and returns what it says about them.  `exposure(vm, unit)` is `systemd-analyze security --offline`'s overall
exposure of a unit file (0 to 10, lower is safer; systemd calls below 2.0 "OK").  Both need the image's systemd:
the Debian 12 stand-in's root has none (`require_systemd_analyze` skips there).  Neither starts anything; the
shim applies MemoryDenyWriteExecute, an allow-list SystemCallFilter, an allow-list RestrictAddressFamilies and the
file-system keys (ProtectSystem, ProtectHome, PrivateTmp, ReadWritePaths, StateDirectory), and no other sandboxing
key.
"""

from __future__ import annotations

import re

import pytest

from tests.firstboot import os_image
from tests.firstboot.vm import Vm

UNIT_DIR = "/etc/systemd/system"
#: what `systemd-analyze verify` prints about a unit file it reads differently from what it says
COMPLAINT = re.compile(r"unknown|ignoring|failed|invalid|not executable|no such|deprecated|bad", re.IGNORECASE)


def require_systemd_analyze() -> None:
    """Skip, saying why, on the Debian 12 stand-in: its baked root has no systemd package (the noble image, which
    the stacks boot and CI runs, has systemd 255's `systemd-analyze`)."""
    if os_image.chosen().name != os_image.UBUNTU.name:
        pytest.skip(f"{os_image.chosen().name}'s first-boot root has no systemd-analyze; the Ubuntu image's checks it")


def written_units(vm: Vm) -> tuple[list[str], list[str]]:
    """(unit files, units with drop-ins) the script wrote under /etc/systemd/system (regular files only: enable
    symlinks are systemd's own)."""
    found = vm.run(["find", UNIT_DIR, "-type", "f", "(", "-name", "*.service", "-o", "-name", "*.timer", "-o",
                    "-name", "*.conf", ")"], check=True).stdout.split()  # fmt: skip
    files = sorted(p for p in found if p.endswith((".service", ".timer")) and ".d/" not in p)
    dropped = sorted({p.split("/")[-2].removesuffix(".d") for p in found if ".d/" in p})
    return files, dropped


def unit_complaints(vm: Vm) -> list[str]:
    """What `systemd-analyze verify` says about the units and drop-ins the script wrote (empty: nothing)."""
    files, dropped = written_units(vm)
    assert files or dropped, f"{vm.name}: no unit under {UNIT_DIR}"
    ours = tuple(files) + tuple(f"{UNIT_DIR}/{u}.d/" for u in dropped) + tuple(dropped)
    complaints = []
    for target in files + dropped:
        run = vm.run(["systemd-analyze", "verify", "--man=no", target], timeout=60)
        for line in (run.stdout + run.stderr).splitlines():
            if COMPLAINT.search(line) and any(name in line for name in ours):
                complaints.append(f"{target}: {line}")
    return complaints


def exposure(vm: Vm, unit_file: str) -> float:
    """`systemd-analyze security --offline=true`'s overall exposure level of `unit_file` on this VM."""
    run = vm.run(["systemd-analyze", "security", "--offline=true", "--no-pager", unit_file], timeout=60)
    level = re.search(r"Overall exposure level for \S+: (\d+\.\d+)", run.stdout + run.stderr)
    assert level, f"{vm.name}: no exposure level for {unit_file}:\n{run.stdout}{run.stderr}"
    return float(level[1])
