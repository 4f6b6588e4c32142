"""At most one daemon actuates per state file: an exclusive, non-blocking fcntl lock on ``<state>.lock``.

Why a lock file and not a lease row with an expiry: the state is a local SQLite file, so every daemon that can
share it runs on the same host, where the kernel gives a stronger guarantee than a lease: the lock is released
the instant its holder dies (SIGKILL included), so a restarted daemon takes over at once without waiting out a
lease TTL, and no clock is involved.  A second daemon that finds the lock held stays passive (reads, serves
metrics, actuates nothing) and retries every tick.  The holder is also written to the ``leader`` table so
`fleet autoscaler status` can say who it is.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path


class LeaderLock:
    def __init__(self, state_path: Path | str) -> None:
        self.path = Path(f"{state_path}.lock")
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def try_acquire(self) -> bool:
        """Take the lock if free; True when this process holds it (idempotent)."""
        if self._fd is not None:
            return True
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd
        return True

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None
