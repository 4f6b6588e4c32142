"""The run loop: an apscheduler interval job (the poll; never two ticks at once, missed runs coalesced), a 1 s watcher
that starts an extra tick when Slurm's hooks queued power-save requests or a job ended (EpilogSlurmctld's wake-up rows:
ticks follow at most once a second until a tick sees the job's nodes freed and settles the row, so a node still
COMPLETING gets another look a second later) or, while it holds pools, when a job was submitted (the job_submit.lua
rewrote `autoscaler.slurm.wake`'s file), or under late binding when a node booted drained has registered, and, under any
hold, when slurmctld's power thread took a held name's power-down or tried a job the last tick found untried (one
sinfo or squeue read a second while such a boot, power-down or job is out: the tick undrains the boot, drains the
powered-down name again, plans the job), and clean shutdown on SIGTERM/SIGINT
(the tick in progress finishes, the state is saved, exit 0). A tick that finds the state file damaged (sqlite3
"DatabaseError: file is not a database / database disk image is malformed") stops the loop with exit 2: the unit's
RestartPreventExitStatus=2 keeps systemd from restarting into the same failure.

A woken tick is a one-shot job beside the poll, not a reschedule of it: the poll keeps its phase (ticks at
start + k * interval_s), as the replay's gpu-fleet driver models it (its fixed 10 s grid plus the hook-woken
ticks).  Rescheduling the interval job would restart its grid at every woken tick (apscheduler's interval
trigger counts from the previous run).  One lock keeps ticks from overlapping: a tick that finds another
running is skipped (that one reads the same state; the watcher tries again a second later).
"""

from __future__ import annotations

import signal
import sqlite3
import threading
import time
from collections.abc import Callable
from datetime import datetime

from apscheduler.schedulers.background import BackgroundScheduler
from loguru import logger

from autoscaler.daemon.state import recovery_advice
from autoscaler.daemon.tick import Daemon, TickResult

TICK_JOB = "tick"
WAKE_JOB = "woken-tick"
WATCH_S = 1.0  # the watcher's period
#: the watcher starts a tick when the last one started at least this long ago: one period less scheduling
#: jitter, so an open wake-up gets a tick every period (a node still COMPLETING is looked at again ~1 s later)
MIN_GAP_S = 0.9 * WATCH_S


_UNSEEN = object()


class RunLoop:
    def __init__(
        self, daemon: Daemon, *, interval_s: float, on_tick: Callable[[TickResult], None] | None = None
    ) -> None:
        self.daemon = daemon
        self.interval_s = interval_s
        self.on_tick = on_tick
        self.stop_event = threading.Event()
        self.scheduler = BackgroundScheduler(
            job_defaults={"coalesce": True, "max_instances": 1, "misfire_grace_time": None}
        )
        self._last_tick = 0.0
        self._tick_lock = threading.Lock()
        self._watch_conn: sqlite3.Connection | None = None
        self._wake_mtime: int | object | None = _UNSEEN  # the submit wake-up file's mtime at the last look
        self.exit_code = 0

    def _tick(self) -> None:
        if not self._tick_lock.acquire(blocking=False):
            return  # the poll and a woken tick met: the running one serves both
        try:
            self._last_tick = time.monotonic()
            res = self.daemon.tick()
        finally:
            self._tick_lock.release()
        if self.on_tick is not None:
            self.on_tick(res)
        if res.error and res.error.startswith("DatabaseError:"):
            logger.bind(error=res.error, state_path=str(self.daemon.store.path)).error(
                "{}: the state store is damaged ({}); stopping. {}",
                self.daemon.store.path,
                res.error,
                recovery_advice(self.daemon.store.path),
            )
            self.exit_code = 2
            self.stop_event.set()

    def _watch(self) -> None:
        """Tick now when hooks queued requests or a job-end wake-up is open, and the last tick is older than a
        second."""
        if self._watch_conn is None:
            if getattr(self.daemon, "dry_run", False) or not self.daemon.store.path.exists():
                return  # --dry-run works on an in-memory copy: never open (or create) the file
            uri = f"{self.daemon.store.path.resolve().as_uri()}?mode=ro"
            self._watch_conn = sqlite3.connect(uri, uri=True, timeout=1, check_same_thread=False)
        n = 0
        for table in ("power_queue", "job_end_wakes"):
            try:
                n += self._watch_conn.execute(f"SELECT count(*) FROM {table} WHERE done_at IS NULL").fetchone()[0]
            except sqlite3.Error:
                continue
        if self._submitted():
            n += 1  # a pool is held and a job was submitted (the job_submit.lua rewrote the wake-up file)
        if not n and getattr(self.daemon, "awaiting_hold_change", False) and self.daemon.hold_change_due():
            n = 1  # a held boot registered (the tick undrains it) or a held power-down was taken (it drains it)
        if n and time.monotonic() - self._last_tick >= MIN_GAP_S:
            # a one-shot run now (no trigger: a date trigger at once); the poll's grid is left as it is
            self.scheduler.add_job(self._tick, id=WAKE_JOB, replace_existing=True)

    def _submitted(self) -> bool:
        """The submit wake-up file (`Daemon.submit_wake`) changed since the last look (not on the first look)."""
        path = getattr(self.daemon, "submit_wake", None)
        if path is None:
            return False
        try:
            mtime: int | None = path.stat().st_mtime_ns
        except OSError:
            mtime = None
        seen, self._wake_mtime = self._wake_mtime, mtime
        return seen is not _UNSEEN and mtime is not None and mtime != seen

    def request_stop(self, signum: int | None = None, _frame: object = None) -> None:
        if signum is not None:
            logger.info("signal {}: finishing the current tick, then exiting", signal.Signals(signum).name)
        self.stop_event.set()

    def run(self, *, install_signals: bool = True) -> int:
        if install_signals:
            signal.signal(signal.SIGTERM, self.request_stop)
            signal.signal(signal.SIGINT, self.request_stop)
        self.scheduler.add_job(
            self._tick, "interval", seconds=self.interval_s, id=TICK_JOB, next_run_time=datetime.now().astimezone()
        )
        self._submitted()  # the submit wake-up file's state before the first tick: a later change is a submission
        self.scheduler.add_job(self._watch, "interval", seconds=WATCH_S, id="watch")
        self.scheduler.start()
        logger.info("autoscaler running: tick every {:g}s", self.interval_s)
        try:
            while not self.stop_event.wait(0.5):
                pass
        finally:
            self.scheduler.shutdown(wait=True)  # lets a running tick finish
            if self._watch_conn is not None:
                self._watch_conn.close()
            self.daemon.lock.release()
            self.daemon.store.close()
            logger.info("autoscaler stopped")
        return self.exit_code
