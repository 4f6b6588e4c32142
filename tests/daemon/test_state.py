"""The SQLite state store: migrations, WAL, intents, power queue, backoff memory, orphans, leader lock."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from autoscaler.daemon.lock import LeaderLock
from autoscaler.daemon.state import MIGRATIONS, StateError, StateStore, connect


def test_new_store_is_migrated_and_in_wal_mode(tmp_path: Path) -> None:
    s = StateStore(tmp_path / "s.db")
    assert s.conn.execute("PRAGMA user_version").fetchone()[0] == len(MIGRATIONS)
    assert s.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    s.close()
    # reopening is a no-op
    assert StateStore(tmp_path / "s.db").conn.execute("PRAGMA user_version").fetchone()[0] == len(MIGRATIONS)


def test_a_newer_schema_is_refused(tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / "s.db")
    conn.execute(f"PRAGMA user_version = {len(MIGRATIONS) + 1}")
    conn.close()
    with pytest.raises(StateError, match="newer"):
        connect(tmp_path / "s.db")


def test_intents_are_keyed_by_request_id_and_released_by_name(tmp_path: Path) -> None:
    s = StateStore(tmp_path / "s.db")
    off = {"provider": "gcp", "zone": "z", "machine_type": "m", "capacity_type": "spot", "reservation": None}
    assert s.record_intent("r1", "spot", off, ["a-0", "a-1"], 1.0)
    assert not s.record_intent("r1", "spot", off, ["a-0", "a-1"], 2.0)  # same id: recorded once
    s.set_request_state("r1", "launched", 3.0)
    assert s.open_request_for("a-1").request_id == "r1"
    s.release_names(["a-0"], 4.0, "deleted")
    assert s.request("r1").names == ("a-1",) and s.request("r1").state == "launched"
    s.release_names(["a-1"], 5.0, "deleted")
    assert s.request("r1").state == "released" and s.open_request_for("a-1") is None


def test_power_queue_rows_per_node_in_order(tmp_path: Path) -> None:
    s = StateStore(tmp_path / "s.db")
    s.enqueue_power("resume", ["a-0", "a-1"], 1.0, {"a-0": (7,)})
    s.enqueue_power("suspend", ["a-0"], 2.0, {})
    rows = s.open_power()
    assert [(r.action, r.name, r.jobs) for r in rows] == [
        ("resume", "a-0", (7,)),
        ("resume", "a-1", ()),
        ("suspend", "a-0", ()),
    ]
    s.finish_power([rows[0].id], 3.0)
    assert [r.id for r in s.open_power()] == [rows[1].id, rows[2].id]
    with pytest.raises(sqlite3.IntegrityError):
        s.enqueue_power("reboot", ["a-0"], 1.0, {})


def test_unavailable_memory_keeps_the_later_expiry_and_expires(tmp_path: Path) -> None:
    s = StateStore(tmp_path / "s.db")
    s.mark_unavailable("k", {"zone": "z"}, 100.0, "stockout", 1)
    s.mark_unavailable("k", {"zone": "z"}, 50.0, "quota", 2)
    (row,) = s.unavailable(10.0)
    assert (row.until, row.reason, row.failures) == (100.0, "quota", 2)
    assert s.unavailable(100.0) == []


def test_orphans_remember_when_first_seen(tmp_path: Path) -> None:
    s = StateStore(tmp_path / "s.db")
    assert s.orphan_seen("a-3", "spot", 10.0) == 10.0
    assert s.orphan_seen("a-3", "spot", 20.0) == 10.0
    s.clear_orphans(["a-3"])
    assert s.orphans() == {}


def test_leader_lock_is_exclusive_and_released_when_the_holder_dies(tmp_path: Path) -> None:
    state = tmp_path / "s.db"
    a, b = LeaderLock(state), LeaderLock(state)
    assert a.try_acquire() and a.try_acquire()
    assert not b.try_acquire()
    a.release()
    assert b.try_acquire()
    b.release()
    # a process holding the lock is SIGKILLed: the lock is free at once (no lease to wait out)
    code = (
        "import sys, time; from autoscaler.daemon.lock import LeaderLock; "
        f"l = LeaderLock({str(state)!r}); assert l.try_acquire(); print('held', flush=True); time.sleep(60)"
    )
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "held"
        assert not LeaderLock(state).try_acquire()
        p.kill()
        p.wait(timeout=10)
        c = LeaderLock(state)
        assert c.try_acquire()
        c.release()
    finally:
        if p.poll() is None:
            p.kill()


def test_job_history_records_arrivals_starts_and_ends_as_squeue_showed_them(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from autoscaler.daemon.state import JOB_HISTORY_KEEP_S

    s = StateStore(tmp_path / "state.db")
    s.observe_jobs([(1, 100.0, 2, 8, None), (2, 150.0, 1, 1, None)], now=200.0)
    assert s.jobs_observed_since() == 200.0
    s.observe_jobs([(1, 100.0, 2, 8, 210.0), (2, 150.0, 1, 1, None)], now=220.0)  # job 1 runs
    s.observe_jobs([(2, 150.0, 1, 1, None)], now=900.0)  # job 1 left the queue: ended when first seen gone
    rows = s.job_history(0.0, 900.0)
    assert [(r.submit, r.nodes, r.gpus_per_node, r.run_s) for r in rows] == [(100.0, 2, 8, 690.0), (150.0, 1, 1, None)]
    assert s.job_history(0.0, 199.0) == []  # nothing had been seen by then
    s.observe_jobs([], now=950.0)  # job 2 cancelled while pending: an arrival with no run
    assert [r.run_s for r in s.job_history(0.0, 950.0)] == [690.0, None]
    s.observe_jobs([], now=950.0 + JOB_HISTORY_KEEP_S + 1)
    assert s.job_history(0.0, 1e12) == []  # pruned after two days
    assert s.jobs_observed_since() == 200.0
    s.close()
