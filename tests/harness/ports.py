"""TCP ports for the daemons tests start, leased across every test process on this machine.

A port that is free when a test picks it may be bound much later: a CLOUD node's slurmd binds its port only when
the fake VM boots, minutes into a test.  Checking "free now" is not enough with several pytest workers: another
worker's check sees the same port free in between, both clusters name it in their slurm.conf, and the second
slurmd to boot fails with "Unable to bind listen port" (a CI run failed so).  So a pick also takes an exclusive
`flock` on a file per port under one directory every process shares; it is held until the owner releases the
lease, or dies (the kernel drops the lock).

Ports are drawn below the kernel's ephemeral range (32768-60999 by default): a port picked there can be taken by
any outgoing connection before the daemon binds it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import random
import socket
import tempfile
from pathlib import Path

PORTS = range(20000, 32768)
LEASE_DIR = Path(tempfile.gettempdir()) / "gpu-fleet-test-ports"


class PortLeases:
    """Ports held by one owner (a Slurm harness); `release` frees them for other test processes."""

    def __init__(self) -> None:
        self._fds: dict[int, int] = {}

    def lease(self, count: int = 1, *, start: int = PORTS.start, stop: int = PORTS.stop) -> int:
        """The first of `count` consecutive ports, free now and leased to no other holder, chosen at random in
        [start, stop) so concurrent processes rarely contend; held until `release`."""
        LEASE_DIR.mkdir(mode=0o1777, exist_ok=True)
        rng = random.Random()
        for _ in range(200):
            base = rng.randrange(start, stop - count)
            taken = self._take(range(base, base + count))
            if taken is not None:
                self._fds.update(taken)
                return base
        raise RuntimeError(f"no {count} consecutive free, unleased ports in {start}..{stop} (leases: {LEASE_DIR})")

    def _take(self, ports: range) -> dict[int, int] | None:
        """Lock and bind-check every port of `ports`; all of them, or none (nothing left held)."""
        held: dict[int, int] = {}
        try:
            for port in ports:
                if port in self._fds:
                    raise OSError(f"port {port} already leased here")
                fd = os.open(LEASE_DIR / str(port), os.O_RDWR | os.O_CREAT, 0o666)
                held[port] = fd
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                with socket.socket() as probe:
                    probe.bind(("127.0.0.1", port))
        except OSError:
            for fd in held.values():
                os.close(fd)
            return None
        return held

    def release(self) -> None:
        for fd in self._fds.values():
            with contextlib.suppress(OSError):
                os.close(fd)
        self._fds.clear()
