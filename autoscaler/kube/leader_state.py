"""What one leader hands on to the next through the Lease they elect on: the stockout / backoff memory.

The Slurm daemon keeps that memory in SQLite on its controller; the Kubernetes daemon runs as replicas of a
Deployment with no volume, so the leader writes it as an annotation of its own Lease (`LeaseElector.state`,
written with every renewal it changes) and a replica that takes the Lease over reads it back.  Only entries
still in force are kept (`active_unavailable`), so the annotation stays a few hundred bytes.  Pure: JSON in,
JSON out.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from loguru import logger

from autoscaler.daemon.snapshot import offering_from_dict, offering_to_dict
from autoscaler.model import UnavailableOffering
from autoscaler.model.policy import active_unavailable

#: the Lease annotation holding the backoff memory (JSON list)
BACKOFF = "autoscaling.gpu-fleet.dev/backoff-memory"


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
