"""`--log-json`: every line is JSON, the libraries' stdlib logging (apscheduler) included, tracebacks kept."""

from __future__ import annotations

import io
import json
import logging

from loguru import logger

from autoscaler.daemon.logs import setup_logging


def lines(buf: io.StringIO) -> list[dict]:
    return [json.loads(x) for x in buf.getvalue().splitlines()]


def test_stdlib_logging_of_libraries_comes_out_as_json() -> None:
    buf = io.StringIO()
    setup_logging(json_lines=True, stream=buf)
    logging.getLogger("apscheduler.scheduler").warning(
        'Execution of job "tick" skipped: maximum number of running instances reached (1)'
    )
    logging.getLogger("apscheduler.executors.default").info("Running job tick")  # below the libraries' level
    logger.bind(pool="spot").info("own line")
    (aps, own) = lines(buf)
    assert aps["level"] == "WARNING" and aps["logger"] == "apscheduler.scheduler"
    assert "maximum number of running instances" in aps["message"]
    assert own["pool"] == "spot"


def test_tracebacks_are_kept_in_json_lines() -> None:
    buf = io.StringIO()
    setup_logging(json_lines=True, stream=buf)

    def failing() -> None:
        raise KeyError("pool-x")

    try:
        failing()
    except KeyError as exc:
        logger.opt(exception=exc).error("tick failed unexpectedly")
    try:
        failing()
    except KeyError:
        logging.getLogger("apscheduler.executors.default").exception('Job "tick" raised an exception')
    own, aps = lines(buf)
    for rec in (own, aps):
        assert rec["exception"] == "KeyError: 'pool-x'"
        assert "Traceback (most recent call last)" in rec["traceback"] and "in failing" in rec["traceback"]
    assert aps["logger"] == "apscheduler.executors.default"


def test_human_lines_by_default() -> None:
    buf = io.StringIO()
    setup_logging(stream=buf)
    logging.getLogger("apscheduler.scheduler").warning("skipped")
    assert buf.getvalue().rstrip().endswith("WARNING skipped")
