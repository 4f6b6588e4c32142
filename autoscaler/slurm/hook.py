"""The fastest way in for slurmctld: ``python -m autoscaler.slurm.hook resume|suspend|resume-fail HOSTLIST``.

Same behaviour as `fleet slurm resume ...` (which shares `run`), without importing typer or the rest of the
CLI (~50 ms instead of ~450 ms).  Exit 0 once the rows are queued (names in no managed pool are refused with
one summary line on stderr and not queued); 2 on a bad hostlist or when every name is outside the managed
pools; 1 when the state store is missing, damaged or cannot be written.  The deploy/slurm/*.sh wrappers call this.
"""

from __future__ import annotations

import argparse
import sqlite3
import sys
from pathlib import Path

from autoscaler.daemon.state import StateError
from autoscaler.slurm.handoff import default_state_path, hand_off, resume_jobs
from autoscaler.slurm.hostlist import HostlistError


def run(action: str, hostlist: str, state: Path | None) -> int:
    action = action.replace("-", "_")
    try:
        res = hand_off(
            action, hostlist, state or default_state_path(), jobs=resume_jobs() if action == "resume" else None
        )
    except (HostlistError, ValueError) as exc:
        print(f"HOSTLIST: {exc}", file=sys.stderr)
        return 2
    except StateError as exc:
        print(f"--state: {exc}", file=sys.stderr)
        return 1
    except (OSError, sqlite3.Error) as exc:
        print(f"--state: cannot write the daemon's state store: {exc}", file=sys.stderr)
        return 1
    if res.refused:
        print(res.refused_summary(action), file=sys.stderr)
    if res.queued or not res.refused:
        print(f"{action}: queued {res.queued} node(s) for the autoscaler", file=sys.stderr)
    return 0 if res.queued else 2


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m autoscaler.slurm.hook", description=__doc__)
    ap.add_argument("action", choices=["resume", "suspend", "resume-fail"])
    ap.add_argument("hostlist")
    ap.add_argument("--state", type=Path, default=None, help="the daemon's state store")
    a = ap.parse_args(argv)
    return run(a.action, a.hostlist, a.state)


if __name__ == "__main__":
    sys.exit(main())
