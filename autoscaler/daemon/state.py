"""The daemon's durable state: one SQLite file (stdlib sqlite3, WAL mode, versioned migrations).

Tables
- ``requests``: launch intents keyed by a deterministic request id, written *before* the cloud is called, so a
  daemon killed between the call and the bookkeeping finds the intent on restart and adopts the instances
  (names and request id match) instead of launching again.  States: intent -> launched -> (failed | released).
- ``node_history``: every state change of every node the daemon touched (name, state, at, reason).
- ``unavailable``: offerings that failed (stockout, quota, ResumeTimeout) and until when to avoid them.
- ``power_queue``: Slurm's ResumeProgram / SuspendProgram / ResumeFailProgram requests, written by
  `fleet slurm resume|suspend|resume-fail` (the hooks) and taken by the daemon's next tick.
- ``orphans``: cloud instances nobody wants, with the time first seen (deleted after a grace period).
- ``leader``: who holds the actuation lock (informational; the lock itself is an fcntl lock, see `lock`).
- ``store_meta``: who created the store and when (an empty store is accepted only when gpu-fleet made it).
- ``job_history``: every job squeue showed (submit time, nodes, GPUs per node, when its current run started, when
  it left the queue), for the settings rule's observed arrival rates and run times (`autoscaler.core.settings`);
  rows older than two days are pruned; ``store_meta.jobs_observed_since`` says when observation began.
- ``managed_pools``: the node name spaces (``prefix-i``, i < max_nodes) the daemon manages, recorded at start,
  so the hooks can refuse names outside them without reading the inventory.
- ``job_end_wakes``: Slurm's EpilogSlurmctld calls (a job ended on these managed nodes), written by
  `python -m autoscaler.slurm.hook job-end` and settled by the tick that sees the nodes freed (the run loop's
  watcher ticks at once while one is open, so a freed node is scaled down within a second or two, not at the
  next poll).

Integrity: every open checks the file before use (`check_file`): a 0-byte file, a damaged header, a file that
SQLite cannot read, a failed ``PRAGMA integrity_check`` or a foreign ``application_id`` raise `StateError`
naming the path and what to do.  The daemon then refuses to start (exit 2): starting from an empty store would
forget queued Slurm requests, launch intents (risking double launches) and backoffs.

This module imports only the standard library: the Slurm hooks use it and must start fast.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import sqlite3
import tempfile
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

# Each entry migrates from version i to i+1; never edit a released entry, append a new one.
MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE requests (
        request_id TEXT PRIMARY KEY,
        pool TEXT NOT NULL,
        offering TEXT NOT NULL,          -- JSON of the OfferingKey
        names TEXT NOT NULL,             -- JSON list of instance / Slurm node names
        state TEXT NOT NULL,             -- intent | launched | failed | released
        created_at REAL NOT NULL,
        updated_at REAL NOT NULL,
        detail TEXT NOT NULL DEFAULT ''
    );
    CREATE INDEX requests_state ON requests(state);
    CREATE TABLE node_history (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        name TEXT NOT NULL,
        state TEXT NOT NULL,
        at REAL NOT NULL,
        reason TEXT NOT NULL DEFAULT ''
    );
    CREATE INDEX node_history_name ON node_history(name, at);
    CREATE TABLE unavailable (
        key TEXT PRIMARY KEY,            -- str(OfferingKey)
        offering TEXT NOT NULL,          -- JSON of the OfferingKey
        until REAL NOT NULL,
        reason TEXT NOT NULL DEFAULT '',
        failures INTEGER NOT NULL DEFAULT 1,
        message TEXT NOT NULL DEFAULT ''
    );
    CREATE TABLE power_queue (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        action TEXT NOT NULL CHECK (action IN ('resume', 'suspend', 'resume_fail')),
        name TEXT NOT NULL,
        jobs TEXT NOT NULL DEFAULT '[]', -- JSON list of job ids (from SLURM_RESUME_FILE)
        at REAL NOT NULL,
        done_at REAL
    );
    CREATE INDEX power_queue_open ON power_queue(done_at, id);
    CREATE TABLE orphans (
        name TEXT PRIMARY KEY,
        pool TEXT NOT NULL,
        first_seen REAL NOT NULL
    );
    CREATE TABLE leader (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        holder TEXT NOT NULL,
        pid INTEGER NOT NULL,
        acquired_at REAL NOT NULL,
        renewed_at REAL NOT NULL
    );
    """,
)

MIGRATIONS += (
    """
    CREATE TABLE store_meta (
        key TEXT PRIMARY KEY,
        value TEXT NOT NULL
    );
    CREATE TABLE managed_pools (
        prefix TEXT PRIMARY KEY,         -- node / instance name prefix of the pool (names are prefix-i)
        pool TEXT NOT NULL,
        max_nodes INTEGER NOT NULL
    );
    """,
)

MIGRATIONS += (
    """
    CREATE TABLE job_history (
        job_id INTEGER PRIMARY KEY,
        submit REAL NOT NULL,
        nodes INTEGER NOT NULL,
        gpus_per_node INTEGER NOT NULL,
        started_at REAL,                 -- squeue's start_time of the current run (RUNNING)
        ended_at REAL,                   -- the first tick the job was no longer in squeue
        first_seen REAL NOT NULL,
        last_seen REAL NOT NULL
    );
    CREATE INDEX job_history_submit ON job_history(submit);
    CREATE INDEX job_history_open ON job_history(ended_at);
    """,
)

MIGRATIONS += (
    """
    CREATE TABLE job_end_wakes (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        job_id INTEGER,                  -- SLURM_JOB_ID (NULL when the hook was not given one)
        names TEXT NOT NULL,             -- JSON list of the job's nodes in managed pools
        at REAL NOT NULL,                -- when the hook ran
        done_at REAL                     -- when a tick saw every node freed (or gave up waiting)
    );
    CREATE INDEX job_end_wakes_open ON job_end_wakes(done_at, id);
    """,
)

MIGRATIONS += (
    """
    CREATE TABLE gang_exclusions (
        job_id INTEGER PRIMARY KEY,      -- a pending gang's Slurm job id
        names TEXT NOT NULL,             -- JSON list: the ExcNodeList the daemon set on it
        at REAL NOT NULL                 -- when
    );
    """,
)

# gang_exclusions.intent: JSON list, the ExcNodeList the daemon is about to set (`intend_gang_exclusion`).  No SQL
# comment on the line: SQLite appends an added column's text to the table's CREATE statement, where a trailing
# comment would swallow the closing parenthesis.
MIGRATIONS += ("ALTER TABLE gang_exclusions ADD COLUMN intent TEXT",)

OPEN_REQUEST_STATES = ("intent", "launched")
JOB_HISTORY_KEEP_S = 2 * 86_400.0
JOB_HISTORY_PRUNE_EVERY_S = 3_600.0
APPLICATION_ID = 0x47464153  # "GFAS": PRAGMA application_id of every gpu-fleet autoscaler state store
SQLITE_HEADER = b"SQLite format 3\x00"
_OUR_TABLES = frozenset({"requests", "node_history", "unavailable", "power_queue", "orphans", "leader"})  # version 1


class StateError(RuntimeError):
    """The state file is unusable (newer schema than this code, corrupt, foreign, missing, unwritable)."""


def recovery_advice(path: Path | str) -> str:
    p = shlex.quote(str(path))
    return (
        "The daemon refuses to actuate on it and will not start from an empty store (that would forget queued "
        "Slurm power-save requests, launch intents and backoffs). To recover: stop the daemon, keep a copy "
        f"(cp -a {p}* /root/), then either restore a backup, or salvage what SQLite can read "
        f"(sqlite3 {p} .recover | sqlite3 {p}.recovered && mv {p}.recovered {p}), or move it away "
        f"(mv {p} {p}.damaged; rm -f {p}-wal {p}-shm) to let the daemon create a new store; on its first tick it "
        "adopts the running instances Slurm uses and Slurm re-sends its pending power-save requests."
    )


def _refuse(path: Path | str, what: str) -> StateError:
    return StateError(f"{path}: {what}. {recovery_advice(path)}")


def check_file(path: Path | str) -> None:
    """Refuse a file that cannot be a gpu-fleet state store before SQLite opens it: 0 bytes or a bad header."""
    p = Path(path)
    try:
        with p.open("rb") as f:
            head = f.read(len(SQLITE_HEADER))
    except OSError as exc:
        raise StateError(f"{p}: cannot read the state store: {exc.strerror or exc}") from None
    if not head:
        raise _refuse(p, "the state store is 0 bytes (truncated, or not created by the daemon)")
    if head != SQLITE_HEADER:
        raise _refuse(p, "not an SQLite database (header damaged or overwritten, or a foreign file)")


def check_conn(conn: sqlite3.Connection, path: Path | str) -> bool:
    """PRAGMA integrity_check and application_id / schema version; True when the store predates
    application_id (version-1 stores: adopted once their tables are ours)."""
    try:
        problems = [r[0] for r in conn.execute("PRAGMA integrity_check(5)").fetchall()]
        app_id = conn.execute("PRAGMA application_id").fetchone()[0]
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    except sqlite3.DatabaseError as exc:
        raise _refuse(path, f"the state store is damaged ({exc})") from None
    if problems != ["ok"]:
        raise _refuse(path, f"the state store is damaged (integrity_check: {'; '.join(problems)})")
    if version > len(MIGRATIONS):
        raise StateError(f"state schema version {version} is newer than this daemon knows ({len(MIGRATIONS)})")
    if app_id == APPLICATION_ID:
        return False
    if app_id == 0 and version >= 1 and tables >= _OUR_TABLES:
        return True
    if app_id == 0 and version == 0 and not tables:
        raise _refuse(path, "the state store is empty and was not created by the daemon")
    raise _refuse(path, f"not a gpu-fleet state store (application_id {app_id:#x}, schema version {version})")


@dataclass(frozen=True)
class RequestRow:
    request_id: str
    pool: str
    offering: dict
    names: tuple[str, ...]
    state: str
    created_at: float
    updated_at: float
    detail: str = ""


@dataclass(frozen=True)
class JobRow:
    """A job of ``job_history``: its run took ``ended_at - started_at`` when both are known."""

    submit: float
    nodes: int
    gpus_per_node: int
    started_at: float | None
    ended_at: float | None

    @property
    def run_s(self) -> float | None:
        if self.started_at is None or self.ended_at is None:
            return None
        return max(0.0, self.ended_at - self.started_at)


@dataclass(frozen=True)
class PowerRow:
    id: int
    action: str  # resume | suspend | resume_fail
    name: str
    jobs: tuple[int, ...]
    at: float


@dataclass(frozen=True)
class JobEndRow:
    id: int
    job_id: int | None
    names: tuple[str, ...]
    at: float


@dataclass(frozen=True)
class UnavailableRow:
    key: str
    offering: dict
    until: float
    reason: str
    failures: int = 1
    message: str = ""


@dataclass(frozen=True)
class HistoryRow:
    name: str
    state: str
    at: float
    reason: str


def _private_copy(path: Path, tmp: str) -> Path:
    copy = Path(tmp) / path.name
    shutil.copyfile(path, copy)
    if Path(f"{path}-wal").exists():
        shutil.copyfile(f"{path}-wal", f"{copy}-wal")
    return copy


def verify(path: Path | str, *, into: sqlite3.Connection | None = None, attempts: int = 2) -> bool:
    """The full check (`check_file`, then `check_conn`) on a private copy of the file and its WAL, so a
    refused file is left exactly as it was (SQLite would otherwise replay or delete the WAL on close).  With
    `into`, the checked copy is also backed up into that connection.  A copy torn by a concurrent writer
    (a hook) is retried once.  Returns True for a store from before application_id (see `check_conn`)."""
    p = Path(path)
    check_file(p)
    for attempt in range(attempts):
        with tempfile.TemporaryDirectory(prefix="gpu-fleet-state-check-") as tmp:
            src = sqlite3.connect(str(_private_copy(p, tmp)), isolation_level=None)
            try:
                legacy = check_conn(src, p)
                if into is not None:
                    src.backup(into)
                return legacy
            except StateError:
                if attempt + 1 >= attempts:
                    raise
            except sqlite3.DatabaseError as exc:
                if attempt + 1 >= attempts:
                    raise _refuse(p, f"the state store is damaged ({exc})") from None
            finally:
                src.close()
        time.sleep(0.2)
    raise AssertionError("unreachable")


def connect(
    path: Path | str,
    *,
    timeout_s: float = 10.0,
    create: bool = True,
    created_by: str = "daemon",
    full_check: bool = True,
) -> sqlite3.Connection:
    """Open the state file in WAL mode after checking it, migrating it if needed.

    `full_check` (the daemon): `verify` on a private copy.  Without it (the hooks, which must be fast): the
    header and the application id only; damage elsewhere surfaces as sqlite3.DatabaseError on use.
    A missing file is created (with `created_by` recorded) only when `create`; otherwise StateError."""
    p = Path(path)
    memory = str(path) == ":memory:"
    new = not memory and not p.exists()
    if new and not create:
        raise StateError(f"{p}: no state store here: the daemon creates it when it starts (`fleet autoscaler run`)")
    legacy = False
    if not memory and not new:
        if full_check:
            legacy = verify(p)
        else:
            check_file(p)
    if new:
        try:
            p.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StateError(f"{p}: cannot create the state store's directory: {exc.strerror or exc}") from None
    try:
        conn = sqlite3.connect(str(path), timeout=timeout_s, isolation_level=None, check_same_thread=False)
    except sqlite3.Error as exc:
        raise StateError(f"{p}: cannot open the state store: {exc}") from None
    conn.row_factory = sqlite3.Row
    try:
        if not (memory or new or full_check):
            app_id = conn.execute("PRAGMA application_id").fetchone()[0]
            if app_id != APPLICATION_ID:
                legacy = check_conn(conn, p)  # not ours, or a store from before application_id
        conn.execute(f"PRAGMA busy_timeout = {int(timeout_s * 1000)}")
        if not memory:
            conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
        if new or memory or legacy:
            conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
        migrate(conn)
        if new or memory:
            conn.executemany(
                "INSERT OR IGNORE INTO store_meta(key, value) VALUES (?, ?)",
                [("created_by", created_by), ("created_at", repr(time.time())), ("created_pid", str(os.getpid()))],
            )
    except sqlite3.DatabaseError as exc:
        conn.close()
        raise _refuse(p, f"the state store is damaged ({exc})") from None
    except BaseException:
        conn.close()
        raise
    return conn


def snapshot(path: Path | str) -> sqlite3.Connection:
    """An in-memory copy of the state file for `--dry-run` and `status`: checked like `connect`, and nothing
    is written next to the original (not even SQLite's -wal/-shm files).  A missing file gives an empty
    in-memory store."""
    p = Path(path)
    if not p.exists():
        return connect(":memory:", created_by="dry-run")
    mem = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
    try:
        verify(p, into=mem)
    except BaseException:
        mem.close()
        raise
    mem.row_factory = sqlite3.Row
    migrate(mem)
    return mem


def migrate(conn: sqlite3.Connection) -> int:
    """Apply pending migrations in one transaction each; returns the schema version."""
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    if version > len(MIGRATIONS):
        raise StateError(f"state schema version {version} is newer than this daemon knows ({len(MIGRATIONS)})")
    while version < len(MIGRATIONS):
        conn.execute("BEGIN IMMEDIATE")
        try:
            # re-read under the write lock: another process may have migrated meanwhile
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if version < len(MIGRATIONS):
                for stmt in MIGRATIONS[version].split(";"):
                    if stmt.strip():
                        conn.execute(stmt)
                version += 1
                conn.execute(f"PRAGMA user_version = {version}")
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
    return version


class StateStore:
    """Typed access to the state file.  One instance per process; every write is its own transaction."""

    _observing = False  # `jobs_observed_since` is recorded (`observe_jobs`)
    _pruned_at: float | None = None  # when `observe_jobs` last pruned the job history

    def __init__(
        self,
        path: Path | str,
        *,
        create: bool = True,
        created_by: str = "daemon",
        full_check: bool = True,
        timeout_s: float = 10.0,
    ) -> None:
        self.path = Path(path)
        self.conn = connect(path, create=create, created_by=created_by, full_check=full_check, timeout_s=timeout_s)

    @classmethod
    def read_only_copy(cls, path: Path | str) -> StateStore:
        """A store over an in-memory copy of `path` (`snapshot`): writes never reach the file (`--dry-run`)."""
        store = cls.__new__(cls)
        store.path = Path(path)
        store.conn = snapshot(path)
        return store

    # --- store metadata and the managed name spaces -------------------------------------------------------
    def meta(self) -> dict[str, str]:
        return {r["key"]: r["value"] for r in self.conn.execute("SELECT key, value FROM store_meta")}

    def set_managed_pools(self, pools: Sequence[tuple[str, str, int]]) -> None:
        """Record (pool, name prefix, max_nodes) of every pool the daemon manages (replaces the previous set)."""
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            self.conn.execute("DELETE FROM managed_pools")
            self.conn.executemany(
                "INSERT INTO managed_pools(pool, prefix, max_nodes) VALUES (?, ?, ?)", [tuple(p) for p in pools]
            )
            self.conn.execute("COMMIT")
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise

    def managed_pools(self) -> dict[str, tuple[str, int]]:
        """prefix -> (pool, max_nodes)."""
        return {
            r["prefix"]: (r["pool"], r["max_nodes"])
            for r in self.conn.execute("SELECT prefix, pool, max_nodes FROM managed_pools")
        }

    def close(self) -> None:
        self.conn.close()

    # --- launch intents -------------------------------------------------------------------------------
    def record_intent(self, request_id: str, pool: str, offering: dict, names: Sequence[str], now: float) -> bool:
        """Write the intent before calling the cloud.  False when this request id is already recorded."""
        cur = self.conn.execute(
            "INSERT OR IGNORE INTO requests(request_id, pool, offering, names, state, created_at, updated_at)"
            " VALUES (?, ?, ?, ?, 'intent', ?, ?)",
            (request_id, pool, json.dumps(offering, sort_keys=True), json.dumps(list(names)), now, now),
        )
        return cur.rowcount == 1

    def set_request_state(self, request_id: str, state: str, now: float, detail: str = "") -> None:
        self.conn.execute(
            "UPDATE requests SET state = ?, updated_at = ?, detail = ? WHERE request_id = ?",
            (state, now, detail, request_id),
        )

    def _request(self, r: sqlite3.Row) -> RequestRow:
        return RequestRow(
            request_id=r["request_id"],
            pool=r["pool"],
            offering=json.loads(r["offering"]),
            names=tuple(json.loads(r["names"])),
            state=r["state"],
            created_at=r["created_at"],
            updated_at=r["updated_at"],
            detail=r["detail"],
        )

    def requests(self, states: Iterable[str] | None = None) -> list[RequestRow]:
        if states is None:
            rows = self.conn.execute("SELECT * FROM requests ORDER BY created_at").fetchall()
        else:
            st = list(states)
            q = f"SELECT * FROM requests WHERE state IN ({','.join('?' * len(st))}) ORDER BY created_at"
            rows = self.conn.execute(q, st).fetchall()
        return [self._request(r) for r in rows]

    def request(self, request_id: str) -> RequestRow | None:
        r = self.conn.execute("SELECT * FROM requests WHERE request_id = ?", (request_id,)).fetchone()
        return self._request(r) if r else None

    def open_request_for(self, name: str) -> RequestRow | None:
        """The open (intent/launched) request that holds this node name, if any."""
        for r in self.requests(OPEN_REQUEST_STATES):
            if name in r.names:
                return r
        return None

    def release_names(self, names: Iterable[str], now: float, reason: str) -> None:
        """Names deleted or given up: requests whose every name is released become `released`."""
        gone = set(names)
        for r in self.requests(OPEN_REQUEST_STATES):
            if set(r.names) & gone:
                left = [n for n in r.names if n not in gone]
                if left:
                    self.conn.execute(
                        "UPDATE requests SET names = ?, updated_at = ? WHERE request_id = ?",
                        (json.dumps(left), now, r.request_id),
                    )
                else:
                    self.set_request_state(r.request_id, "released", now, reason)

    # --- node history ------------------------------------------------------------------------------------
    def add_history(self, name: str, state: str, now: float, reason: str = "") -> None:
        self.conn.execute(
            "INSERT INTO node_history(name, state, at, reason) VALUES (?, ?, ?, ?)", (name, state, now, reason)
        )

    def history(self, name: str | None = None) -> list[HistoryRow]:
        if name is None:
            rows = self.conn.execute("SELECT name, state, at, reason FROM node_history ORDER BY id").fetchall()
        else:
            rows = self.conn.execute(
                "SELECT name, state, at, reason FROM node_history WHERE name = ? ORDER BY id", (name,)
            ).fetchall()
        return [HistoryRow(r["name"], r["state"], r["at"], r["reason"]) for r in rows]

    # --- unavailable offerings -------------------------------------------------------------------------
    def mark_unavailable(
        self, key: str, offering: dict, until: float, reason: str, failures: int = 1, message: str = ""
    ) -> None:
        self.conn.execute(
            "INSERT INTO unavailable(key, offering, until, reason, failures, message) VALUES (?, ?, ?, ?, ?, ?)"
            " ON CONFLICT(key) DO UPDATE SET until = max(until, excluded.until), reason = excluded.reason,"
            " failures = excluded.failures, message = excluded.message",
            (key, json.dumps(offering, sort_keys=True), until, reason, failures, message),
        )

    def unavailable(self, now: float) -> list[UnavailableRow]:
        """Live entries; expired ones are pruned."""
        self.conn.execute("DELETE FROM unavailable WHERE until <= ?", (now,))
        rows = self.conn.execute("SELECT * FROM unavailable ORDER BY key").fetchall()
        return [
            UnavailableRow(r["key"], json.loads(r["offering"]), r["until"], r["reason"], r["failures"], r["message"])
            for r in rows
        ]

    # --- Slurm power-save queue --------------------------------------------------------------------------
    def enqueue_power(self, action: str, names: Sequence[str], now: float, jobs: dict[str, Sequence[int]]) -> int:
        """One row per node, in one transaction (what the hooks call)."""
        with_jobs = [(action, n, json.dumps(list(jobs.get(n, ()))), now) for n in names]
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            self.conn.executemany("INSERT INTO power_queue(action, name, jobs, at) VALUES (?, ?, ?, ?)", with_jobs)
            self.conn.execute("COMMIT")
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise
        return len(with_jobs)

    def resume_jobs_of(self, names: Iterable[str]) -> dict[str, tuple[int, ...]]:
        """name -> job ids of the latest resume request for it (what Slurm bound the node to), if any."""
        wanted = list(dict.fromkeys(names))
        out: dict[str, tuple[int, ...]] = {}
        for i in range(0, len(wanted), 500):
            chunk = wanted[i : i + 500]
            q = (
                "SELECT name, jobs FROM power_queue WHERE action = 'resume' AND jobs != '[]'"
                f" AND name IN ({','.join('?' * len(chunk))}) ORDER BY id"
            )
            for r in self.conn.execute(q, chunk):
                out[r["name"]] = tuple(json.loads(r["jobs"]))  # later rows win
        return out

    def open_power(self) -> list[PowerRow]:
        rows = self.conn.execute("SELECT * FROM power_queue WHERE done_at IS NULL ORDER BY id").fetchall()
        return [PowerRow(r["id"], r["action"], r["name"], tuple(json.loads(r["jobs"])), r["at"]) for r in rows]

    def finish_power(self, ids: Iterable[int], now: float) -> None:
        self.conn.executemany("UPDATE power_queue SET done_at = ? WHERE id = ?", [(now, i) for i in ids])

    # --- job history (the settings rule's observations) -------------------------------------------------
    def observe_jobs(self, jobs: Sequence[tuple[int, float, int, int, float | None]], now: float) -> None:
        """Record this tick's squeue: (job id, submit, nodes, GPUs per node, start time of the current run or
        None) of every job in the queue.  A job recorded open and absent now has ended (at `now`).  Writes only
        what changed, in one transaction, and nothing when nothing changed; prunes rows older than
        `JOB_HISTORY_KEEP_S` at most every `JOB_HISTORY_PRUNE_EVERY_S`."""
        open_rows = {
            r["job_id"]: r["started_at"]
            for r in self.conn.execute("SELECT job_id, started_at FROM job_history WHERE ended_at IS NULL")
        }
        seen = {j[0] for j in jobs}
        new = [(j[0], j[1], j[2], j[3], j[4], now, now) for j in jobs if j[0] not in open_rows]
        started = [
            (j[4], now, j[0]) for j in jobs if j[0] in open_rows and j[4] is not None and j[4] != open_rows[j[0]]
        ]
        ended = [(now, now, i) for i in open_rows if i not in seen]
        prune = self._pruned_at is None or now - self._pruned_at >= JOB_HISTORY_PRUNE_EVERY_S
        if not (new or started or ended or prune) and self._observing:
            return
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            if not self._observing and "jobs_observed_since" not in self.meta():
                self.conn.execute("INSERT INTO store_meta(key, value) VALUES ('jobs_observed_since', ?)", (repr(now),))
            # a job id seen again after it ended (slurmctld restarted without its state): the latest sighting wins
            self.conn.executemany(
                "INSERT INTO job_history(job_id, submit, nodes, gpus_per_node, started_at, first_seen, last_seen)"
                " VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT(job_id) DO UPDATE SET submit = excluded.submit,"
                " nodes = excluded.nodes, gpus_per_node = excluded.gpus_per_node, started_at = excluded.started_at,"
                " ended_at = NULL, first_seen = excluded.first_seen, last_seen = excluded.last_seen",
                new,
            )
            self.conn.executemany("UPDATE job_history SET started_at = ?, last_seen = ? WHERE job_id = ?", started)
            self.conn.executemany("UPDATE job_history SET ended_at = ?, last_seen = ? WHERE job_id = ?", ended)
            if prune:
                self.conn.execute(
                    "DELETE FROM job_history WHERE ended_at IS NOT NULL AND ended_at < ?", (now - JOB_HISTORY_KEEP_S,)
                )
            self.conn.execute("COMMIT")
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise
        self._observing = True
        if prune:
            self._pruned_at = now

    def jobs_observed_since(self) -> float | None:
        v = self.meta().get("jobs_observed_since")
        return float(v) if v is not None else None

    def job_history(self, since: float, until: float) -> list[JobRow]:
        """Jobs submitted in [since, until] and first seen by `until`, by submit time."""
        rows = self.conn.execute(
            "SELECT submit, nodes, gpus_per_node, started_at, ended_at FROM job_history"
            " WHERE submit >= ? AND submit <= ? AND first_seen <= ? ORDER BY submit, job_id",
            (since, until, until),
        )
        return [JobRow(r["submit"], r["nodes"], r["gpus_per_node"], r["started_at"], r["ended_at"]) for r in rows]

    # --- job-end wake-ups (EpilogSlurmctld) -------------------------------------------------------------
    def enqueue_job_end(self, job_id: int | None, names: Sequence[str], now: float) -> int:
        """One row for the job (what the EpilogSlurmctld hook calls); returns its id."""
        cur = self.conn.execute(
            "INSERT INTO job_end_wakes(job_id, names, at) VALUES (?, ?, ?)", (job_id, json.dumps(list(names)), now)
        )
        return int(cur.lastrowid or 0)

    def open_job_ends(self) -> list[JobEndRow]:
        rows = self.conn.execute("SELECT * FROM job_end_wakes WHERE done_at IS NULL ORDER BY id").fetchall()
        return [JobEndRow(r["id"], r["job_id"], tuple(json.loads(r["names"])), r["at"]) for r in rows]

    def finish_job_ends(self, ids: Iterable[int], now: float, *, keep_s: float = 86400.0) -> None:
        """Settle these rows; rows settled more than `keep_s` ago are deleted (one row per job adds up)."""
        self.conn.executemany("UPDATE job_end_wakes SET done_at = ? WHERE id = ?", [(now, i) for i in ids])
        self.conn.execute("DELETE FROM job_end_wakes WHERE done_at < ?", (now - keep_s,))

    # --- the ExcNodeList the daemon set on pending gangs (autoscaler.core.gang_exclusion) --------------------------
    def intend_gang_exclusion(self, job_id: int, names: Sequence[str], now: float) -> None:
        """Record, before the ``scontrol update``, the exclusion the daemon is about to set on `job_id` (write-ahead):
        a daemon that stops between Slurm's answer and `set_gang_exclusion` still reads that ExcNodeList as its own
        after the restart, not as a user's `--exclude` it may never change."""
        self.conn.execute(
            "INSERT INTO gang_exclusions(job_id, names, at, intent) VALUES (?, '[]', ?, ?)"
            " ON CONFLICT(job_id) DO UPDATE SET intent = excluded.intent",
            (job_id, now, json.dumps(sorted(names))),
        )

    def set_gang_exclusion(self, job_id: int, names: Sequence[str], now: float) -> None:
        """Record the exclusion the daemon set on `job_id` once Slurm took it (none: it cleared it), so that after a
        restart it still tells its own exclusions from a user's `--exclude`."""
        if names:
            self.conn.execute(
                "INSERT OR REPLACE INTO gang_exclusions(job_id, names, at, intent) VALUES (?, ?, ?, NULL)",
                (job_id, json.dumps(sorted(names)), now),
            )
        else:
            self.conn.execute("DELETE FROM gang_exclusions WHERE job_id = ?", (job_id,))

    def gang_exclusions(self) -> dict[int, frozenset[str]]:
        """Job id -> the exclusion the daemon set on it (Slurm took it)."""
        rows = self.conn.execute("SELECT job_id, names FROM gang_exclusions")
        return {r["job_id"]: frozenset(names) for r in rows if (names := json.loads(r["names"]))}

    def own_exclusions(self) -> dict[int, frozenset[frozenset[str]]]:
        """Job id -> every ExcNodeList that is the daemon's on it: the one Slurm took and the one it was about to set
        (`intend_gang_exclusion`; a Slurm that shows either shows the daemon's, `snapshot.users_exclusion`)."""
        out: dict[int, frozenset[frozenset[str]]] = {}
        for r in self.conn.execute("SELECT job_id, names, intent FROM gang_exclusions"):
            sets = {frozenset(json.loads(r["names"])), frozenset(json.loads(r["intent"] or "[]"))} - {frozenset()}
            if sets:
                out[r["job_id"]] = frozenset(sets)
        return out

    def forget_gang_exclusions(self, keep: Iterable[int]) -> dict[int, frozenset[frozenset[str]]]:
        """Drop the records of jobs not in `keep` (the jobs squeue still lists, in any state: Slurm keeps a job's
        ExcNodeList when it requeues it); returns the kept jobs' `own_exclusions`."""
        kept = set(keep)
        records = self.own_exclusions()
        gone = [(j,) for (j,) in self.conn.execute("SELECT job_id FROM gang_exclusions") if j not in kept]
        if gone:
            self.conn.executemany("DELETE FROM gang_exclusions WHERE job_id = ?", gone)
        return {j: sets for j, sets in records.items() if j in kept}

    # --- orphans -------------------------------------------------------------------------------------------
    def orphan_seen(self, name: str, pool: str, now: float) -> float:
        """Record (once) that `name` is unwanted; returns when it was first seen unwanted."""
        self.conn.execute("INSERT OR IGNORE INTO orphans(name, pool, first_seen) VALUES (?, ?, ?)", (name, pool, now))
        return self.conn.execute("SELECT first_seen FROM orphans WHERE name = ?", (name,)).fetchone()[0]

    def orphans(self) -> dict[str, float]:
        return {r["name"]: r["first_seen"] for r in self.conn.execute("SELECT name, first_seen FROM orphans")}

    def clear_orphans(self, names: Iterable[str]) -> None:
        self.conn.executemany("DELETE FROM orphans WHERE name = ?", [(n,) for n in names])

    # --- leader record -------------------------------------------------------------------------------------
    def set_leader(self, holder: str, pid: int, now: float) -> None:
        self.conn.execute(
            "INSERT INTO leader(id, holder, pid, acquired_at, renewed_at) VALUES (1, ?, ?, ?, ?)"
            " ON CONFLICT(id) DO UPDATE SET holder = excluded.holder, pid = excluded.pid,"
            " acquired_at = CASE WHEN leader.holder = excluded.holder THEN leader.acquired_at"
            " ELSE excluded.acquired_at END, renewed_at = excluded.renewed_at",
            (holder, pid, now, now),
        )

    def leader(self) -> dict | None:
        r = self.conn.execute("SELECT holder, pid, acquired_at, renewed_at FROM leader WHERE id = 1").fetchone()
        return dict(r) if r else None
