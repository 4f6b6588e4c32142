"""A damaged or foreign state file on the real daemon CLI: refused at start with the path and what to do (exit 2,
no traceback, the file left as it was); an empty store is accepted only when the daemon creates it; `--dry-run`
never creates or writes the state file."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from autoscaler.daemon.state import APPLICATION_ID, StateError, StateStore
from tests.e2e.env import inventory

FLEET = Path(sys.executable).with_name("fleet")


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(FLEET), *args], capture_output=True, text=True, timeout=120)


@pytest.fixture
def config(tmp_path: Path) -> Path:
    pools = inventory()
    (tmp_path / "inv.json").write_text(json.dumps([p.model_dump(mode="json") for p in pools]))
    (tmp_path / "slurm.conf").write_text("ClusterName=x\nSlurmctldHost=localhost(127.0.0.1)\nSlurmctldPort=1\n")
    cfg = {
        "inventory": "inv.json",
        "state_path": "state.db",
        "slurm": {"conf": "slurm.conf", "timeout_s": 2},
        # a closed port: a daemon that got past the store check would fail here, not exit 2 with the advice
        "provider": {
            "endpoint": "http://127.0.0.1:1",
            "anonymous": True,
            "options": {"retry": {"initial": 0.1, "maximum": 0.2, "deadline": 1, "attempt_timeout": 1}},
        },
        "metrics": {"enabled": False},
    }
    path = tmp_path / "a.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def populated(state: Path) -> None:
    """A real store with enough rows to span many pages (queued requests, intents, history)."""
    s = StateStore(state)
    s.enqueue_power("resume", [f"e2e-od-{i}" for i in range(4)], 1.0, {"e2e-od-0": (5,)})
    s.record_intent("r1", "od", {"zone": "z"}, ["e2e-od-0"], 2.0)
    for i in range(3000):
        s.add_history(f"e2e-od-{i % 4}", "requested", float(i), "x" * 40)
    s.close()


def truncated(state: Path) -> None:
    populated(state)
    data = state.read_bytes()
    state.write_bytes(data[: len(data) // 2])


def garbage_header(state: Path) -> None:
    populated(state)
    with state.open("r+b") as f:
        f.write(os.urandom(100))


def zero_bytes(state: Path) -> None:
    state.write_bytes(b"")


def main_damaged_wal_kept(state: Path) -> None:
    """A daemon killed with recent writes still in its WAL, then the main file damaged: the WAL is still there."""
    populated(state)  # closed cleanly: checkpointed into the main file
    code = (
        "import os, sys; from autoscaler.daemon.state import StateStore; s = StateStore(sys.argv[1]);"
        " s.conn.execute('PRAGMA wal_autocheckpoint = 0');"
        " s.enqueue_power('suspend', ['e2e-od-1'], 9.0, {}); os._exit(0)"
    )
    subprocess.run([sys.executable, "-c", code, str(state)], check=True, timeout=60)
    assert Path(f"{state}-wal").stat().st_size > 0
    data = bytearray(state.read_bytes())
    mid = len(data) // 2 // 4096 * 4096
    data[mid : mid + 8 * 4096] = os.urandom(8 * 4096)  # history pages the WAL does not cover
    state.write_bytes(bytes(data))


def foreign_sqlite(state: Path) -> None:
    conn = sqlite3.connect(state)
    conn.execute("CREATE TABLE accounts (id INTEGER PRIMARY KEY, name TEXT)")
    conn.commit()
    conn.close()


def empty_sqlite_not_ours(state: Path) -> None:
    conn = sqlite3.connect(state)
    conn.execute("PRAGMA user_version = 0")
    conn.execute("VACUUM")  # writes a valid, empty database file
    conn.close()
    assert state.stat().st_size > 0


CASES: dict[str, tuple[Callable[[Path], None], str]] = {
    "half-truncated": (truncated, "damaged"),
    "garbage header": (garbage_header, "not an SQLite database"),
    "0 bytes": (zero_bytes, "0 bytes"),
    "main file damaged, WAL kept": (main_damaged_wal_kept, "damaged"),
    "foreign SQLite file": (foreign_sqlite, "not a gpu-fleet state store"),
    "empty SQLite file not made by the daemon": (empty_sqlite_not_ours, "not created by the daemon"),
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("extra", [[], ["--dry-run"], ["--log-json"]], ids=["run", "dry-run", "log-json"])
def test_damaged_or_foreign_state_file_is_refused_at_start(config: Path, case: str, extra: list[str]) -> None:
    state = config.parent / "state.db"
    damage, why = CASES[case]
    damage(state)
    before = {p.name: p.read_bytes() for p in config.parent.glob("state.db*")}
    cp = run("autoscaler", "run", "--config", str(config), "--once", *extra)
    assert cp.returncode == 2, (cp.returncode, cp.stderr[-2000:])
    assert "Traceback" not in cp.stderr and why in cp.stderr
    assert str(state) in cp.stderr and "To recover" in cp.stderr
    if "--log-json" in extra:
        (line,) = cp.stderr.strip().splitlines()
        assert json.loads(line)["level"] == "ERROR"
    after = {p.name: p.read_bytes() for p in config.parent.glob("state.db*")}
    assert after == before  # nothing repaired, replaced or started from scratch
    assert not Path(f"{state}.lock").exists() or "--dry-run" in extra  # never took the leader lock


def test_status_and_hooks_refuse_a_damaged_store_too(config: Path) -> None:
    state = config.parent / "state.db"
    truncated(state)
    cp = run("autoscaler", "status", "--state", str(state))
    assert cp.returncode == 2 and "Traceback" not in cp.stderr and "damaged" in cp.stderr
    cp = subprocess.run(
        [sys.executable, "-m", "autoscaler.slurm.hook", "resume", "e2e-od-0", "--state", str(state)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert cp.returncode == 1 and "Traceback" not in cp.stderr and "damaged" in cp.stderr


def test_a_new_store_is_created_by_the_daemon_and_marked_as_ours(config: Path) -> None:
    state = config.parent / "state.db"
    cp = run("autoscaler", "init", "--config", str(config))
    assert cp.returncode == 0, cp.stderr
    s = StateStore(state, create=False)
    assert s.conn.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
    assert s.meta()["created_by"] == "daemon"
    assert set(s.managed_pools()) == {"e2e-od", "e2e-spot"}
    assert s.conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    s.close()
    assert run("autoscaler", "init", "--config", str(config)).returncode == 0  # idempotent


def test_a_store_from_before_application_id_is_adopted(tmp_path: Path) -> None:
    """Stores written by the previous release (schema 1, application_id 0) are ours: kept, not refused."""
    from autoscaler.daemon.state import MIGRATIONS

    conn = sqlite3.connect(tmp_path / "old.db", isolation_level=None)
    for stmt in MIGRATIONS[0].split(";"):
        if stmt.strip():
            conn.execute(stmt)
    conn.execute("PRAGMA user_version = 1")
    conn.execute("INSERT INTO power_queue(action, name, jobs, at) VALUES ('resume', 'a-0', '[]', 1.0)")
    conn.close()
    s = StateStore(tmp_path / "old.db")
    assert [r.name for r in s.open_power()] == ["a-0"]
    assert s.conn.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID


def test_open_without_create_never_makes_a_file(tmp_path: Path) -> None:
    with pytest.raises(StateError, match="no state store"):
        StateStore(tmp_path / "nope.db", create=False)
    assert list(tmp_path.iterdir()) == []


def test_dry_run_never_creates_the_state_file(config: Path) -> None:
    state = config.parent / "state.db"
    cp = run("autoscaler", "run", "--config", str(config), "--once", "--dry-run", "--log-json")
    # the closed Compute endpoint makes the tick fail (exit 1): the point is what it left behind
    assert cp.returncode in (0, 1), cp.stderr[-2000:]
    assert "Traceback" not in cp.stderr
    assert sorted(p.name for p in config.parent.iterdir()) == ["a.yaml", "inv.json", "slurm.conf"]
    assert not state.exists()
