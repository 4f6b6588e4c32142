"""The hook side of Slurm power saving: ResumeProgram / SuspendProgram / ResumeFailProgram hand off to the daemon.

slurmctld runs these programs with a hostlist argument (and, for resume, ``SLURM_RESUME_FILE``: a JSON map of
jobs to the nodes resumed for them).  They must be fast and must not call the cloud: each expands the hostlist
in-process, keeps the names in the pools the daemon manages (the name spaces it recorded in the store at start)
and writes one row per kept node into the daemon's SQLite state store (WAL, so it never waits on a tick), then
exits 0.  Names outside every managed pool are refused with one summary line (count and a few examples), never
queued, so the daemon never runs scontrol on them.  The hooks never create the store: the daemon does.
The daemon's next tick decides how each node's capacity comes (offering, zone) and creates or
deletes the instance named after the node.  Standard library only.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

from autoscaler.daemon.state import StateError, StateStore
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


@dataclass(frozen=True)
class HandOff:
    queued: int
    refused: tuple[str, ...]  # names in no managed pool (not queued)

    def refused_summary(self, action: str, examples: int = 5) -> str:
        shown = ", ".join(self.refused[:examples]) + (", ..." if len(self.refused) > examples else "")
        return (
            f"{action}: refused {len(self.refused)} node name(s) in no pool the autoscaler manages ({shown});"
            " not queued, no scontrol run on them"
        )


def managed(name: str, pools: dict[str, tuple[str, int]]) -> bool:
    """`prefix-i` with i below the pool's max_nodes (the daemon's own name space, see snapshot.NameIndex)."""
    prefix, _, idx = name.rpartition("-")
    pool = pools.get(prefix)
    return pool is not None and idx.isdigit() and int(idx) < pool[1]


def hand_off(
    action: str, hostlist: str, state_path: Path, *, jobs: dict[str, tuple[int, ...]] | None = None
) -> HandOff:
    """Queue `action` for every node in `hostlist` that a managed pool owns; the rest are refused."""
    if action not in ACTIONS:
        raise ValueError(f"action: must be one of {', '.join(ACTIONS)}, not {action!r}")
    names = expand(hostlist)
    if not names:
        raise ValueError("HOSTLIST: empty hostlist")
    store = StateStore(state_path, create=False, full_check=False)
    try:
        pools = store.managed_pools()
        if not pools:
            raise StateError(
                f"{state_path}: the daemon has not recorded its pools yet (start it, or run"
                " `fleet autoscaler init --config FILE` before slurmctld): nothing queued"
            )
        keep = [n for n in names if managed(n, pools)]
        refused = tuple(n for n in names if not managed(n, pools))
        queued = store.enqueue_power(action, keep, time.time(), jobs or {}) if keep else 0
        return HandOff(queued, refused)
    finally:
        store.close()
