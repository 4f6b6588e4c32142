"""loguru set-up: human lines by default, one flat JSON object per line with `--log-json`.

JSON lines carry ``time`` (ISO 8601 UTC), ``level``, ``message`` and every field bound with
``logger.bind(...)`` (command, names, pool, offering, request_id, error, ...), so `jq` can filter them.
A logged exception adds ``exception`` (type and message) and ``traceback`` (the full formatted traceback).

The standard library's `logging` (apscheduler, urllib3, google-auth) is routed through loguru too
(`InterceptHandler`), so under `--log-json` every line the process writes is JSON, with ``logger`` naming
the library's logger.
"""

from __future__ import annotations

import json
import logging
import sys
import traceback
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, TextIO

# stdlib loggers that are chatty at INFO (apscheduler logs every job run): WARNING and above only
QUIET_LIBRARIES = ("apscheduler", "urllib3", "google", "httpx", "httpcore")


class InterceptHandler(logging.Handler):
    """Hand every stdlib log record to loguru, keeping its level, logger name and exception."""

    def emit(self, record: logging.LogRecord) -> None:
        from loguru import logger

        try:
            level: str | int = logger.level(record.levelname).name
        except ValueError:
            level = record.levelno
        logger.bind(logger=record.name).opt(depth=0, exception=record.exc_info).log(level, record.getMessage())


def _json_sink(stream: TextIO) -> Callable[[Any], None]:
    def sink(message: Any) -> None:
        r = message.record
        obj = {
            "time": datetime.fromtimestamp(r["time"].timestamp(), UTC).isoformat(timespec="milliseconds"),
            "level": r["level"].name,
            "message": r["message"],
            **{k: v for k, v in r["extra"].items()},
        }
        exc = r["exception"]
        if exc is not None:
            obj["exception"] = f"{exc.type.__name__ if exc.type else 'Exception'}: {exc.value}"
            obj["traceback"] = "".join(traceback.format_exception(exc.type, exc.value, exc.traceback))
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
    root = logging.getLogger()
    if not any(isinstance(h, InterceptHandler) for h in root.handlers):
        root.addHandler(InterceptHandler())  # added once; other handlers (pytest's capture) stay
    numeric = logging.getLevelName(level)
    root.setLevel(numeric if isinstance(numeric, int) else logging.INFO)
    for name in QUIET_LIBRARIES:
        logging.getLogger(name).setLevel(max(logging.WARNING, root.level))
