"""Disk types of the controller and login VMs, by machine series (they are not GPU machines: not in the catalog).

Persistent Disk (`pd-*`) attaches to the earlier machine series only; the later ones (N4, C4, C4A, C4D, N4D,
M4, X4, ... and the A3 Ultra / A4 GPU machines) take Hyperdisk alone.  Google's guidance (cloud.google.com/
compute/docs/disks, "Choose a disk type"): Persistent Disk for earlier-generation machine series, Hyperdisk for
the latest.  A series not listed here is taken to be a later one: Hyperdisk Balanced attaches to every series
that has no Persistent Disk.
"""

from __future__ import annotations

# Machine series that attach Persistent Disk (and, for N2/C2/E2/..., no Hyperdisk Balanced).
PERSISTENT_DISK_SERIES = frozenset(
    {"n1", "n2", "n2d", "e2", "t2d", "t2a", "c2", "c2d", "c3", "c3d", "m1", "m2", "m3", "a2", "g2"}
)


def machine_series(machine_type: str) -> str:
    """`n2-standard-8` -> `n2`; `e2-medium` -> `e2`."""
    return machine_type.split("-", 1)[0].lower()


def takes_persistent_disk(machine_type: str) -> bool:
    return machine_series(machine_type) in PERSISTENT_DISK_SERIES


def boot_disk_type(machine_type: str) -> str:
    """The balanced boot disk the series takes."""
    return "pd-balanced" if takes_persistent_disk(machine_type) else "hyperdisk-balanced"


def state_disk_type(machine_type: str) -> str:
    """The controller's state disk: SSD Persistent Disk as the Toolkit's `controller_state_disk` (pd-ssd), or
    Hyperdisk Balanced where the series takes no Persistent Disk."""
    return "pd-ssd" if takes_persistent_disk(machine_type) else "hyperdisk-balanced"
