"""GPU job traces: `submission_time,duration,num_gpu` CSV (the ITP trace format) -> `TraceJob`s.

Extra columns (e.g. `job_id`) are kept when present.  A job of more than `node_gpus` GPUs is a gang
of ceil(n / node_gpus) nodes with `node_gpus` GPUs each; smaller jobs need one node.  Errors name
the file, the line and the column.  Files come in through the input gate's limits (fleet.input.limits): file
size, field length, row count, ten years at most for a time, strict UTF-8 with the line of a bad byte."""

from __future__ import annotations

import csv
import math
import random
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from fleet.input.errors import InputError
from fleet.input.files import check_file
from fleet.input.limits import (
    MAX_TRACE_BYTES,
    MAX_TRACE_FIELD_CHARS,
    MAX_TRACE_GPUS_PER_JOB,
    MAX_TRACE_ROWS,
    MAX_TRACE_SECONDS,
)

REQUIRED = ("submission_time", "duration", "num_gpu")
MAX_TRACE_LINE_BYTES = 4 * MAX_TRACE_FIELD_CHARS * 4  # a few fields of the longest kind, in UTF-8
_NUMBER = re.compile(r"-?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?")
_INTEGER = re.compile(r"[0-9]+")


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
    rows: Iterable[dict[str, str]], source: str = "<trace>", max_gpus_per_job: int = MAX_TRACE_GPUS_PER_JOB
) -> list[TraceJob]:
    """Jobs of already-split CSV rows (the header is line 1, rows from line 2)."""
    return _parse_numbered(enumerate(rows, start=2), source, max_gpus_per_job)


def _number(raw: str, col: str, where: str) -> float:
    if len(raw) > 32 or not _NUMBER.fullmatch(raw):
        raise TraceError(f"{where}: column {col}: {raw[:40]!r} is not a number")
    value = float(raw)
    if not math.isfinite(value):
        raise TraceError(f"{where}: column {col}: {raw!r} is not finite")
    return value


def _parse_numbered(
    rows: Iterable[tuple[int, dict[str, str]]], source: str, max_gpus_per_job: int = MAX_TRACE_GPUS_PER_JOB
) -> list[TraceJob]:
    jobs: list[TraceJob] = []
    for line, row in rows:
        where = f"{source}:{line}"
        missing = [c for c in REQUIRED if c not in row or row[c] is None]
        if missing:
            raise TraceError(f"{where}: missing column(s) {', '.join(missing)} (need {', '.join(REQUIRED)})")
        if len(jobs) >= MAX_TRACE_ROWS:
            raise TraceError(f"{where}: more than {MAX_TRACE_ROWS:,} jobs (the trace limit)")
        for col, raw in row.items():
            if raw is not None and len(raw) > MAX_TRACE_FIELD_CHARS:
                raise TraceError(f"{where}: column {col}: {len(raw):,} characters (at most {MAX_TRACE_FIELD_CHARS})")
        values = {col: _number(row[col].strip(), col, where) for col in REQUIRED}
        if values["submission_time"] < 0:
            raise TraceError(f"{where}: column submission_time: must be >= 0, got {row['submission_time']}")
        if values["duration"] <= 0:
            raise TraceError(f"{where}: column duration: must be > 0 seconds, got {row['duration']}")
        for col in ("submission_time", "duration"):
            if values[col] > MAX_TRACE_SECONDS:
                raise TraceError(
                    f"{where}: column {col}: {row[col].strip()} s is more than ten years ({MAX_TRACE_SECONDS:,} s)"
                )
        gpus = values["num_gpu"]
        if not _INTEGER.fullmatch(row["num_gpu"].strip()) or not 1 <= gpus <= max_gpus_per_job:
            raise TraceError(
                f"{where}: column num_gpu: must be an integer in 1..{max_gpus_per_job}, got {row['num_gpu']}"
            )
        job_id = (row.get("job_id") or "").strip() or f"job-{line - 1}"
        if not job_id.isprintable():
            raise TraceError(f"{where}: column job_id: control characters are not allowed")
        jobs.append(TraceJob(job_id, values["submission_time"], values["duration"], int(gpus)))
    if not jobs:
        raise TraceError(f"{source}: no jobs")
    ids = [j.id for j in jobs]
    if len(set(ids)) != len(ids):
        seen: set[str] = set()
        dup = next(i for i in ids if i in seen or seen.add(i))  # type: ignore[func-returns-value]
        raise TraceError(f"{source}: column job_id: {dup!r} appears more than once")
    jobs.sort(key=lambda j: (j.submit, j.id))
    return jobs


def _rows(p: Path) -> Iterator[tuple[int, dict[str, str]]]:
    """(line number, row) of a trace file: UTF-8 checked line by line, '#' comments and blank lines skipped,
    no line longer than `MAX_TRACE_LINE_BYTES` (read in bounded pieces, never whole)."""
    header: list[str] | None = None
    with p.open("rb") as fh:
        lineno = 0
        while True:
            raw = fh.readline(MAX_TRACE_LINE_BYTES + 1)
            if not raw:
                break
            lineno += 1
            if len(raw) > MAX_TRACE_LINE_BYTES:
                raise TraceError(f"{p}:{lineno}: line longer than {MAX_TRACE_LINE_BYTES:,} bytes")
            try:
                text = raw.decode("utf-8-sig" if lineno == 1 else "utf-8")
            except UnicodeDecodeError as exc:
                raise TraceError(
                    f"{p}:{lineno}:{exc.start + 1}: not valid UTF-8 (byte 0x{raw[exc.start]:02x})"
                ) from None
            if text.startswith("#") or not text.strip():
                continue
            try:
                fields = next(csv.reader([text]))
            except csv.Error as exc:
                raise TraceError(f"{p}:{lineno}: not valid CSV: {exc}") from None
            if header is None:
                header = [f.strip() for f in fields]
                missing = [c for c in REQUIRED if c not in header]
                if missing:
                    raise TraceError(
                        f"{p}:{lineno}: header lacks column(s) {', '.join(missing)} (has {', '.join(header)})"
                    )
                if len(set(header)) != len(header):
                    raise TraceError(f"{p}:{lineno}: header names a column twice ({', '.join(header)})")
                continue
            if len(fields) > len(header):
                raise TraceError(f"{p}:{lineno}: {len(fields)} fields but the header has {len(header)}")
            yield lineno, dict(zip(header, [*fields, *[None] * (len(header) - len(fields))], strict=True))  # type: ignore[list-item]
    if header is None:
        raise TraceError(f"{p}: empty file")


def load_trace(path: str | Path) -> list[TraceJob]:
    """Read a trace CSV through the input gate (lines starting with '#' are comments)."""
    p = Path(path)
    try:
        check_file(p, what="trace file", max_bytes=MAX_TRACE_BYTES)
    except InputError as exc:
        raise TraceError(str(exc)) from None
    return _parse_numbered(_rows(p), str(p))


def mark_spot_tolerant(jobs: list[TraceJob], fraction: float, seed: int) -> list[TraceJob]:
    """A seeded choice of round(fraction * n) jobs that tolerate preemption (they may run on spot)."""
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"spot_fraction: must be in 0..1, got {fraction}")
    k = round(fraction * len(jobs))
    chosen = set(random.Random(f"{seed}:spot-tolerant").sample(range(len(jobs)), k)) if k else set()
    return [TraceJob(j.id, j.submit, j.duration, j.gpus, i in chosen) for i, j in enumerate(jobs)]


#: the most preemptions one job may expect in a replay: beyond it the replay would spend its time re-running that
#: job (the expectation grows exponentially with rate x nodes x checkpoint interval, or x duration without
#: checkpoints) and, for practical purposes, not end; no spot market is worth measuring there
MAX_EXPECTED_PREEMPTIONS = 1000.0


def expected_preemptions(job: TraceJob, rate_per_node_hour: float, checkpoint_s: float) -> float:
    """How many times `job` is preempted, in expectation, before it finishes: each of its nodes is preempted at
    `rate_per_node_hour` (independently, so the job at rate x nodes), and a preempted job resumes from its last
    checkpoint (every `checkpoint_s` of run time; 0: from the start).  A stretch of t hours between checkpoints
    survives with probability exp(-rate t), so it is attempted exp(rate t) times: exp(rate t) - 1 preemptions."""
    rate = rate_per_node_hour * job.shape()[0]
    hours = job.duration / 3600.0
    if checkpoint_s <= 0:
        return math.expm1(min(rate * hours, 700.0))
    stretch = checkpoint_s / 3600.0
    return math.ceil(hours / stretch) * math.expm1(min(rate * stretch, 700.0))


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
