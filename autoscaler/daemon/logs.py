"""loguru set-up: human lines by default, one flat JSON object per line with `--log-json`.

JSON lines carry ``time`` (ISO 8601 UTC), ``level``, ``message`` and every field bound with
``logger.bind(...)`` (command, names, pool, offering, request_id, error, ...), so `jq` can filter them.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, TextIO


def _json_sink(stream: TextIO) -> Callable[[Any], None]:
    def sink(message: Any) -> None:
        r = message.record
        obj = {
            "time": datetime.fromtimestamp(r["time"].timestamp(), UTC).isoformat(timespec="milliseconds"),
            "level": r["level"].name,
            "message": r["message"],
            **{k: v for k, v in r["extra"].items()},
        }
        if r["exception"] is not None:
            obj["exception"] = str(r["exception"].value)
        stream.write(json.dumps(obj, default=str) + "\n")
        stream.flush()

    return sink


def setup_logging(*, json_lines: bool = False, level: str = "INFO", stream: TextIO | None = None) -> None:
    from loguru import logger

    logger.remove()
    out = stream or sys.stderr
    if json_lines:
        logger.add(_json_sink(out), level=level)
    else:
        logger.add(out, level=level, format="{time:YYYY-MM-DD HH:mm:ss.SSS} {level: <7} {message}", colorize=False)
