"""What one leader hands on to the next through the Lease they elect on: the stockout / backoff memory, and the
history the settings rule runs over.

The Slurm daemon keeps both in SQLite on its controller; the Kubernetes daemon runs as replicas of a Deployment
with no volume, so the leader writes them as annotations of its own Lease (`LeaseElector.state`, written with a
renewal when they change) and a replica that takes the Lease over reads them back.

- **Backoff memory** (`BACKOFF`): only entries still in force are kept (`active_unavailable`), a few hundred
  bytes.
- **Settings history** (`HISTORY`): when observation began and every arrival the leader has seen in the rule's
  window (a ProvisioningRequest's key, when first seen, its submission, pods, GPUs per pod, and its end and run once
  timed), as compact JSON, zlib-compressed and base64-encoded.  The API server refuses an object whose annotations
  exceed 256 KiB in all, so the text is kept under `HISTORY_MAX_BYTES`: past that the oldest arrivals are left out
  (logged), which a new leader reads as a shorter history (the cheap side: it keeps less warm).

Pure: text in, text out.
"""

from __future__ import annotations

import base64
import binascii
import json
import zlib
from collections.abc import Iterable, Mapping, Sequence, Set

from loguru import logger

from autoscaler.core.settings import SeenJob
from autoscaler.daemon.snapshot import offering_from_dict, offering_to_dict
from autoscaler.model import UnavailableOffering
from autoscaler.model.policy import active_unavailable

#: the Lease annotation holding the backoff memory (JSON list)
BACKOFF = "autoscaling.gpu-fleet.dev/backoff-memory"
#: the Lease annotation holding the settings history (base64 of zlib-compressed JSON)
HISTORY = "autoscaling.gpu-fleet.dev/settings-history"
#: the history's budget: half the API server's 256 KiB for all of an object's annotations (about 20,000 arrivals)
HISTORY_MAX_BYTES = 128 * 1024
_HISTORY_VERSION = 1

#: what a leader hands on of the settings history: when observation began, and request key -> (first seen, arrival)
History = tuple[float | None, dict[str, tuple[float, SeenJob]]]


def memory_to_json(memory: Iterable[UnavailableOffering], now: float) -> str:
    rows = [
        {
            "offering": offering_to_dict(u.key),
            "until": u.until,
            "reason": str(u.reason),
            "failures": u.failures,
            "message": u.message[:512],
        }
        for u in active_unavailable(memory, now)
    ]
    return json.dumps(sorted(rows, key=lambda r: json.dumps(r["offering"], sort_keys=True)), sort_keys=True)


def memory_from_json(text: str | None, now: float) -> tuple[UnavailableOffering, ...]:
    """The memory a previous leader left (entries in force at `now`); () for none, or for an annotation that is
    not what `memory_to_json` writes (logged: the new leader then learns the stockouts again, one refusal each)."""
    if not text:
        return ()
    try:
        rows = json.loads(text)
        memory = tuple(
            UnavailableOffering(
                offering_from_dict(r["offering"]), float(r["until"]), str(r["reason"]), int(r["failures"]),
                str(r.get("message", "")),
            )
            for r in rows
        )  # fmt: skip
    except (ValueError, TypeError, KeyError) as exc:
        logger.bind(annotation=BACKOFF, error=str(exc)).warning("lease annotation {} unreadable: {}", BACKOFF, exc)
        return ()
    return active_unavailable(memory, now)


def _encode(since: float, rows: list[list[object]]) -> str:
    raw = json.dumps({"v": _HISTORY_VERSION, "since": since, "jobs": rows}, separators=(",", ":"))
    return base64.b64encode(zlib.compress(raw.encode(), 9)).decode()


def _rows(items: Sequence[tuple[str, tuple[float, SeenJob]]], listed: Set[str] | None) -> list[list[object]]:
    """One row per arrival (`items` by submission), times to the second and relative (they compress to a few
    bytes): the key (None for a request no longer listed: it cannot be seen again), the submission after the previous
    row's, first seen after the submission, pods, GPUs per pod, end after the submission, run."""
    rows: list[list[object]] = []
    last = 0
    for key, (first, j) in items:
        submit = round(j.submit)
        rows.append([
            key if listed is None or key in listed else None,
            submit - last, round(first) - submit, j.nodes, j.gpus_per_node,
            None if j.ended_at is None else round(j.ended_at) - submit,
            None if j.run_s is None else round(j.run_s),
        ])  # fmt: skip
        last = submit
    return rows


def history_to_text(
    since: float,
    entries: Mapping[str, tuple[float, SeenJob]],
    listed: Set[str] | None = None,
    max_bytes: int = HISTORY_MAX_BYTES,
) -> str:
    """The settings history as the `HISTORY` annotation's value, to the second: at most `max_bytes`, the oldest
    arrivals (by submission) left out until it fits.  `listed`: the request keys still listed (the others' keys are
    left out; None keeps every key)."""
    items = sorted(entries.items(), key=lambda kv: (kv[1][1].submit, kv[0]))
    text = _encode(since, _rows(items, listed))
    kept = len(items)
    while len(text) > max_bytes and kept:
        kept = kept * max_bytes * 9 // (len(text) * 10)  # compressed size is about proportional to the rows kept
        text = _encode(since, _rows(items[len(items) - kept :], listed))
    if kept < len(items):
        logger.bind(annotation=HISTORY, arrivals=len(items), kept=kept, max_bytes=max_bytes).warning(
            "settings history: {} arrivals do not fit the Lease annotation's {} bytes; handing on the latest {}",
            len(items),
            max_bytes,
            kept,
        )
    return text


def history_from_text(text: str | None) -> History:
    """The history a previous leader left: (when its observation began, key -> (first seen, arrival)); (None, {})
    for none, or for an annotation that is not what `history_to_text` writes (logged: the new leader then learns
    afresh).  An arrival whose request was no longer listed gets a key of its own that no request has."""
    if not text:
        return None, {}
    try:
        data = json.loads(zlib.decompress(base64.b64decode(text, validate=True)))
        if data.get("v") != _HISTORY_VERSION:
            raise ValueError(f"version {data.get('v')!r}, this daemon reads {_HISTORY_VERSION}")
        entries: dict[str, tuple[float, SeenJob]] = {}
        submit = 0
        for i, (key, delta, first, nodes, gpn, ended, run) in enumerate(data["jobs"]):
            submit += int(delta)
            job = SeenJob(
                float(submit), int(nodes), int(gpn),
                None if ended is None else float(submit + ended), None if run is None else float(run),
            )  # fmt: skip
            entries[str(key) if key is not None else f"handed-on/{i}"] = (float(submit + first), job)
        return float(data["since"]), entries
    except (ValueError, TypeError, KeyError, AttributeError, binascii.Error, zlib.error) as exc:
        logger.bind(annotation=HISTORY, error=str(exc)).warning("lease annotation {} unreadable: {}", HISTORY, exc)
        return None, {}
