"""The hook side of Slurm power saving: ResumeProgram / SuspendProgram / ResumeFailProgram hand off to the daemon.

slurmctld runs these programs with a hostlist argument (and, for resume, ``SLURM_RESUME_FILE``: a JSON map of
jobs to the nodes resumed for them).  They must be fast and must not call the cloud: each expands the hostlist
in-process, writes one row per node into the daemon's SQLite state store (WAL, so it never waits on a tick)
and exits 0.  The daemon's next tick decides how each node's capacity comes (offering, zone) and creates or
deletes the instance named after the node.  Standard library only.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from autoscaler.daemon.state import StateStore
from autoscaler.slurm.hostlist import expand
from autoscaler.slurm.readers import parse_resume_file

ACTIONS = ("resume", "suspend", "resume_fail")
STATE_ENV = "GPU_FLEET_AUTOSCALER_STATE"
DEFAULT_STATE = Path("/var/lib/gpu-fleet/autoscaler.db")


def default_state_path() -> Path:
    return Path(os.environ.get(STATE_ENV) or DEFAULT_STATE)


def resume_jobs(env: dict[str, str] | None = None) -> dict[str, tuple[int, ...]]:
    """node -> job ids from ``SLURM_RESUME_FILE`` when slurmctld sets it (unreadable file: no mapping)."""
    path = (env if env is not None else os.environ).get("SLURM_RESUME_FILE")
    if not path:
        return {}
    try:
        return parse_resume_file(json.loads(Path(path).read_text()))
    except (OSError, ValueError):
        return {}


def hand_off(action: str, hostlist: str, state_path: Path, *, jobs: dict[str, tuple[int, ...]] | None = None) -> int:
    """Queue `action` for every node in `hostlist`; returns the number of nodes queued."""
    if action not in ACTIONS:
        raise ValueError(f"action: must be one of {', '.join(ACTIONS)}, not {action!r}")
    names = expand(hostlist)
    if not names:
        raise ValueError("HOSTLIST: empty hostlist")
    store = StateStore(state_path)
    try:
        return store.enqueue_power(action, names, time.time(), jobs or {})
    finally:
        store.close()
