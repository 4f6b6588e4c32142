"""JSON through the gate: duplicate keys, NaN / Infinity, over-long numbers and deep nesting refused.

Python's json module takes `NaN`, `Infinity` and a key given twice (the last wins) without a word; here each
is an error, with the line and column where the parser knows them.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

from fleet.input import limits
from fleet.input.errors import InputError, position
from fleet.input.files import read_text


class _Refused(ValueError):
    def __init__(self, reason: str, needle: str | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.needle = needle  # text to locate in the document for a line number


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _Refused(f"duplicate key {key!r}", needle=json.dumps(key))
        out[key] = value
    return out


def _constant(name: str) -> Any:
    raise _Refused(f"{name} is not a finite number", needle=name)


def _int(text: str) -> int:
    if len(text) > limits.MAX_NUMBER_CHARS:
        raise _Refused(f"number of {len(text):,} characters (at most {limits.MAX_NUMBER_CHARS})", needle=text[:20])
    return int(text)


def _float(text: str) -> float:
    if len(text) > limits.MAX_NUMBER_CHARS:
        raise _Refused(f"number of {len(text):,} characters (at most {limits.MAX_NUMBER_CHARS})", needle=text[:20])
    value = float(text)
    if not math.isfinite(value):
        raise _Refused(f"{text} is not a finite number", needle=text)
    return value


def _depth_ok(value: Any) -> bool:
    """At most `MAX_DEPTH` levels of arrays / objects (walked after parsing; the parser itself stops at
    Python's recursion limit, which the caller reports the same way)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > limits.MAX_DEPTH:
            return False
        children = node.values() if isinstance(node, dict) else node
        stack.extend((c, depth + 1) for c in children if isinstance(c, dict | list))
    return True


def _locate(text: str, needle: str | None, nth: int = 2) -> str:
    """line:col of the `nth` occurrence of `needle` (the duplicate key's second appearance), else ""."""
    if not needle:
        return ""
    starts = [m.start() for m in re.finditer(re.escape(needle), text)]
    if not starts:
        return ""
    at = starts[min(nth, len(starts)) - 1]
    line = text.count("\n", 0, at)
    return position(line, at - (text.rfind("\n", 0, at) + 1))


def parse_json(text: str, source: str) -> Any:
    """The value of a JSON document; InputError with the position (or key) of the first problem."""
    try:
        value = json.loads(text, object_pairs_hook=_pairs, parse_constant=_constant, parse_int=_int, parse_float=_float)
    except _Refused as exc:
        nth = 2 if exc.reason.startswith("duplicate") else 1
        raise InputError(source, [(_locate(text, exc.needle, nth), exc.reason)]) from None
    except json.JSONDecodeError as exc:
        raise InputError(source, [(f"{exc.lineno}:{exc.colno}", f"not valid JSON: {exc.msg}")]) from None
    except RecursionError:
        raise InputError(source, [("", f"nested more than {limits.MAX_DEPTH} levels deep")]) from None
    if isinstance(value, dict | list) and not _depth_ok(value):
        raise InputError(source, [("", f"nested more than {limits.MAX_DEPTH} levels deep")])
    return value


def load_json(path: Path | str, *, what: str, max_bytes: int) -> Any:
    """Read (size-checked, UTF-8) and parse one JSON file."""
    return parse_json(read_text(path, what=what, max_bytes=max_bytes), str(path))
