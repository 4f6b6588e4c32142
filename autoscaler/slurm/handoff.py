"""The hook side of Slurm power saving: ResumeProgram / SuspendProgram / ResumeFailProgram hand off to the daemon,
and EpilogSlurmctld wakes it when a job ends.

slurmctld runs these programs with a hostlist argument (and, for resume, ``SLURM_RESUME_FILE``: a JSON map of
jobs to the nodes resumed for them).  They must be fast and must not call the cloud: each expands the hostlist
in-process, keeps the names in the pools the daemon manages (the name spaces it recorded in the store at start)
and writes one row per kept node into the daemon's SQLite state store (WAL, so it never waits on a tick), then
exits 0.  Names outside every managed pool are refused with one summary line (count and a few examples), never
queued, so the daemon never runs scontrol on them.  The hooks never create the store: the daemon does.
The daemon's next tick decides how each node's capacity comes (offering, zone) and creates or
deletes the instance named after the node.

EpilogSlurmctld (`hand_off_job_end`) runs for every job that ends, on the controller: it writes one wake-up row
(job id, the job's nodes in managed pools) so the daemon's 1 s watcher ticks at once instead of at the next
poll; a job on no managed node writes nothing and is not an error.  Standard library only.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

from autoscaler.daemon.state import StateError, StateStore
from autoscaler.node_names import split_node_name
from autoscaler.slurm.hostlist import expand
from autoscaler.slurm.readers import parse_resume_file
from autoscaler.slurm.wake import DEPLOYED_STATE

ACTIONS = ("resume", "suspend", "resume_fail")
STATE_ENV = "GPU_FLEET_AUTOSCALER_STATE"


def default_state_path() -> Path:
    return Path(os.environ.get(STATE_ENV) or DEPLOYED_STATE)


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
    """`prefix-i` with i (canonical decimal, `autoscaler.node_names`) below the pool's max_nodes: the daemon's own
    name space, as `snapshot.NameIndex` reads it."""
    parsed = split_node_name(name)
    pool = pools.get(parsed[0]) if parsed else None
    return pool is not None and parsed is not None and parsed[1] < pool[1]


def _store(state_path: Path, timeout_s: float = 10.0) -> tuple[StateStore, dict[str, tuple[str, int]]]:
    store = StateStore(state_path, create=False, full_check=False, timeout_s=timeout_s)
    try:
        pools = store.managed_pools()
    except BaseException:
        store.close()
        raise
    if not pools:
        store.close()
        raise StateError(
            f"{state_path}: the daemon has not recorded its pools yet (start it, or run"
            " `fleet autoscaler init --config FILE` before slurmctld): nothing queued"
        )
    return store, pools


def hand_off(
    action: str, hostlist: str, state_path: Path, *, jobs: dict[str, tuple[int, ...]] | None = None
) -> HandOff:
    """Queue `action` for every node in `hostlist` that a managed pool owns; the rest are refused."""
    if action not in ACTIONS:
        raise ValueError(f"action: must be one of {', '.join(ACTIONS)}, not {action!r}")
    names = expand(hostlist)
    if not names:
        raise ValueError("empty hostlist (slurmctld passes the nodes to act on)")
    store, pools = _store(state_path)
    try:
        keep = [n for n in names if managed(n, pools)]
        refused = tuple(n for n in names if not managed(n, pools))
        queued = store.enqueue_power(action, keep, time.time(), jobs or {}) if keep else 0
        return HandOff(queued, refused)
    finally:
        store.close()


#: how long the job-end hook waits for the store's write lock (the daemon's transactions are short); the
#: daemon's regular poll still sees the freed nodes if the wake-up could not be written
JOB_END_LOCK_TIMEOUT_S = 2.0


def hand_off_job_end(hostlist: str, state_path: Path, *, job_id: int | None = None) -> HandOff:
    """EpilogSlurmctld: record that `job_id` ended on `hostlist` (its managed nodes: `queued` is their count; the
    rest, e.g. static nodes, are in `refused` and ignored).  A job on no managed node writes nothing."""
    names = expand(hostlist)
    if not names:
        raise ValueError("empty hostlist (slurmctld passes the nodes to act on)")
    store, pools = _store(state_path, JOB_END_LOCK_TIMEOUT_S)
    try:
        keep = [n for n in names if managed(n, pools)]
        refused = tuple(n for n in names if not managed(n, pools))
        if keep:
            store.enqueue_job_end(job_id, keep, time.time())
        return HandOff(len(keep), refused)
    finally:
        store.close()
