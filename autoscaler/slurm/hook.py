"""The fastest way in for slurmctld: ``python -m autoscaler.slurm.hook resume|suspend|resume-fail|job-end HOSTLIST``.

Same behaviour as `fleet slurm resume ...` (which shares `run`), without importing typer or the rest of the
CLI (~50 ms instead of ~450 ms).  Exit 0 once the rows are queued (names in no managed pool are refused with
one summary line on stderr and not queued); 2 on a bad hostlist or when every name is outside the managed
pools; 1 when the state store is missing, damaged or cannot be written.  The deploy/slurm/*.sh wrappers call this.

``job-end HOSTLIST [--job-id N]`` is the EpilogSlurmctld entry (deploy/slurm/epilog_slurmctld.sh passes
SLURM_JOB_NODELIST and SLURM_JOB_ID): one wake-up row for the daemon's watcher.  Every job runs it, so a job on
no managed node (a static partition) writes nothing and exits 0; a bad hostlist exits 2, a store problem 1
(slurmctld only logs a failing EpilogSlurmctld: the job and its nodes are not affected; the daemon's regular
poll then frees the nodes instead).
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import sys
from datetime import UTC, datetime
from pathlib import Path

from autoscaler.daemon.state import StateError
from autoscaler.slurm.handoff import HandOff, default_state_path, hand_off, hand_off_job_end, resume_jobs
from autoscaler.slurm.hostlist import HostlistError
from fleet.input.limits import MAX_SLURM_JOB_ID


def run(action: str, hostlist: str, state: Path | None, *, job_id: int | None = None, log: Path | None = None) -> int:
    """Queue the call for the daemon; what it says goes to stderr and, with `log`, to that file too (`report`)."""
    action = action.replace("-", "_")
    path = state or default_state_path()

    def say(message: str) -> None:
        report(message, log, f"{action} {hostlist}")

    try:
        if action == "job_end":
            res: HandOff = hand_off_job_end(hostlist, path, job_id=job_id)
        else:
            res = hand_off(action, hostlist, path, jobs=resume_jobs() if action == "resume" else None)
    except (HostlistError, ValueError) as exc:
        say(f"HOSTLIST: {exc}")
        return 2
    except StateError as exc:
        say(f"--state: {exc}")
        return 1
    except (OSError, sqlite3.Error) as exc:
        say(f"--state: cannot write the daemon's state store: {exc}")
        return 1
    if action == "job_end":
        if res.queued:
            job = f"job {job_id}" if job_id is not None else "a job"
            say(f"job_end: {job} freed {res.queued} managed node(s): autoscaler woken")
        return 0
    if res.refused:
        say(res.refused_summary(action))
    if res.queued or not res.refused:
        say(f"{action}: queued {res.queued} node(s) for the autoscaler")
    return 0 if res.queued else 2


def report(message: str, log: Path | None, call: str = "") -> None:
    """One line to stderr and, with `log`, appended there with the time, this process's id and the `call` it is about
    (the log interleaves every call's lines; a character that is not printable, such as a newline in a hostlist,
    is written as "?", so one record stays one line).  slurmctld keeps none of a power program's output (23.11
    logs it only under DebugFlags=Script) nor an EpilogSlurmctld's, so the wrappers (deploy/slurm) name the hook
    log.  A log that cannot be written is skipped: a hook never fails over its log."""
    print(message, file=sys.stderr)
    if log is None:
        return
    stamp = datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
    line = f"{stamp} [{os.getpid()}] {message}" + (f" ({call})" if call else "")
    try:
        with log.open("a") as out:
            out.write("".join(c if c.isprintable() else "?" for c in line) + "\n")
    except OSError:
        pass


def _job_id(text: str) -> int:
    if not (text.isascii() and text.isdigit()) or not 1 <= int(text) <= MAX_SLURM_JOB_ID:
        raise argparse.ArgumentTypeError(f"must be a Slurm job id (1..{MAX_SLURM_JOB_ID}, a uint32), not {text!r}")
    return int(text)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m autoscaler.slurm.hook", description=__doc__)
    ap.add_argument("action", choices=["resume", "suspend", "resume-fail", "job-end"])
    ap.add_argument("hostlist")
    ap.add_argument("--state", type=Path, default=None, help="the daemon's state store")
    ap.add_argument("--job-id", type=_job_id, default=None, help="job-end: the job that ended (SLURM_JOB_ID)")
    ap.add_argument("--log", type=Path, default=None, help="also append what the hook says here, with the time")
    a = ap.parse_args(argv)
    if a.job_id is not None and a.action != "job-end":
        ap.error("--job-id: only with job-end")
    return run(a.action, a.hostlist, a.state, job_id=a.job_id, log=a.log)


if __name__ == "__main__":
    sys.exit(main())
