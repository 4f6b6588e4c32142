"""GPU job traces: `submission_time,duration,num_gpu` CSV (the ITP trace format) -> `TraceJob`s.

Extra columns (e.g. `job_id`) are kept when present.  A job of more than `node_gpus` GPUs is a gang
of ceil(n / node_gpus) nodes with `node_gpus` GPUs each; smaller jobs need one node.  Errors name
the file, the line and the column."""

from __future__ import annotations

import csv
import math
import random
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

REQUIRED = ("submission_time", "duration", "num_gpu")


class TraceError(ValueError):
    """A trace that cannot be replayed; the message names the file, line and column."""


@dataclass(frozen=True)
class TraceJob:
    id: str
    submit: float
    duration: float
    gpus: int
    spot_ok: bool = False

    def shape(self, node_gpus: int = 8) -> tuple[int, int]:
        """(nodes, gpus per node) of this job."""
        if self.gpus <= node_gpus:
            return 1, self.gpus
        return math.ceil(self.gpus / node_gpus), node_gpus


def parse_trace(
    rows: Iterable[dict[str, str]], source: str = "<trace>", max_gpus_per_job: int = 4096
) -> list[TraceJob]:
    jobs: list[TraceJob] = []
    for line, row in enumerate(rows, start=2):
        missing = [c for c in REQUIRED if c not in row or row[c] is None]
        if missing:
            raise TraceError(f"{source}:{line}: missing column(s) {', '.join(missing)} (need {', '.join(REQUIRED)})")
        values: dict[str, float] = {}
        for col in REQUIRED:
            raw = row[col].strip()
            try:
                values[col] = float(raw)
            except ValueError:
                raise TraceError(f"{source}:{line}: column {col}: {raw!r} is not a number") from None
            if not math.isfinite(values[col]):
                raise TraceError(f"{source}:{line}: column {col}: {raw!r} is not finite")
        if values["submission_time"] < 0:
            raise TraceError(f"{source}:{line}: column submission_time: must be >= 0, got {row['submission_time']}")
        if values["duration"] <= 0:
            raise TraceError(f"{source}:{line}: column duration: must be > 0 seconds, got {row['duration']}")
        gpus = values["num_gpu"]
        if gpus != int(gpus) or not 1 <= gpus <= max_gpus_per_job:
            raise TraceError(
                f"{source}:{line}: column num_gpu: must be an integer in 1..{max_gpus_per_job}, got {row['num_gpu']}"
            )
        job_id = (row.get("job_id") or "").strip() or f"job-{line - 1}"
        jobs.append(TraceJob(job_id, values["submission_time"], values["duration"], int(gpus)))
    if not jobs:
        raise TraceError(f"{source}: no jobs")
    ids = [j.id for j in jobs]
    if len(set(ids)) != len(ids):
        dup = next(i for i in ids if ids.count(i) > 1)
        raise TraceError(f"{source}: column job_id: {dup!r} appears more than once")
    jobs.sort(key=lambda j: (j.submit, j.id))
    return jobs


def load_trace(path: str | Path) -> list[TraceJob]:
    """Read a trace CSV (lines starting with '#' are comments)."""
    p = Path(path)
    if not p.is_file():
        raise TraceError(f"{p}: no such trace file")
    with p.open(newline="") as fh:
        lines = (ln for ln in fh if not ln.startswith("#"))
        reader = csv.DictReader(lines)
        if reader.fieldnames is None:
            raise TraceError(f"{p}: empty file")
        missing = [c for c in REQUIRED if c not in reader.fieldnames]
        if missing:
            raise TraceError(f"{p}:1: header lacks column(s) {', '.join(missing)} (has {', '.join(reader.fieldnames)})")
        return parse_trace(reader, str(p))


def mark_spot_tolerant(jobs: list[TraceJob], fraction: float, seed: int) -> list[TraceJob]:
    """A seeded choice of round(fraction * n) jobs that tolerate preemption (they may run on spot)."""
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"spot_fraction: must be in 0..1, got {fraction}")
    k = round(fraction * len(jobs))
    chosen = set(random.Random(f"{seed}:spot-tolerant").sample(range(len(jobs)), k)) if k else set()
    return [TraceJob(j.id, j.submit, j.duration, j.gpus, i in chosen) for i, j in enumerate(jobs)]


def peak_concurrent_gpus(jobs: Iterable[TraceJob]) -> int:
    """Peak GPUs in use if every job started at its submission (the demand curve's maximum)."""
    events: list[tuple[float, int]] = []
    for j in jobs:
        events.append((j.submit, j.gpus))
        events.append((j.submit + j.duration, -j.gpus))
    events.sort(key=lambda e: (e[0], e[1]))  # ends before starts at the same instant
    cur = peak = 0
    for _, d in events:
        cur += d
        peak = max(peak, cur)
    return peak
