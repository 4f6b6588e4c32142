"""Reading a file through the gate: it must be a regular file no larger than its limit, and valid UTF-8.

The size is checked with stat() before a byte is read, so a 50 MB spec is refused at once; the read itself
stops one byte past the limit (a file growing underneath is refused too).  A bad byte is reported with its
line and column.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from fleet.input.errors import InputError, position


def _size(n: int) -> str:
    return f"{n / (1024 * 1024):.1f} MiB" if n >= 1024 * 1024 else f"{n:,} bytes"


def check_file(path: Path | str, *, what: str, max_bytes: int) -> int:
    """The size of `path`, a regular file of at most `max_bytes`; InputError naming the file otherwise."""
    p = Path(path)
    try:
        st = os.stat(p)
    except FileNotFoundError:
        raise InputError(str(p), [("", f"no such {what} (No such file or directory)")]) from None
    except OSError as exc:
        raise InputError(str(p), [("", f"cannot read the {what}: {exc.strerror or exc}")]) from None
    if stat.S_ISDIR(st.st_mode):
        raise InputError(str(p), [("", f"is a directory, not a {what}")])
    if not stat.S_ISREG(st.st_mode):
        raise InputError(str(p), [("", f"not a regular file (a {what} must be one)")])
    if st.st_size > max_bytes:
        raise InputError(str(p), [("", f"{_size(st.st_size)} is larger than the {_size(max_bytes)} limit of a {what}")])
    return st.st_size


def read_bytes(path: Path | str, *, what: str, max_bytes: int) -> bytes:
    """The bytes of `path`; InputError naming the file when it is missing, not a regular file or too large."""
    p = Path(path)
    check_file(p, what=what, max_bytes=max_bytes)
    try:
        with open(p, "rb") as fh:
            data = fh.read(max_bytes + 1)
    except OSError as exc:
        raise InputError(str(p), [("", f"cannot read the {what}: {exc.strerror or exc}")]) from None
    if len(data) > max_bytes:
        raise InputError(str(p), [("", f"larger than the {_size(max_bytes)} limit of a {what}")])
    return data


def decode_utf8(data: bytes, source: str) -> str:
    """Strict UTF-8 (a leading BOM dropped); InputError with the line:column of the first invalid byte."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        start = exc.start
        line = data.count(b"\n", 0, start)
        col = start - (data.rfind(b"\n", 0, start) + 1)
        raise InputError(source, [(position(line, col), f"not valid UTF-8 (byte 0x{data[start]:02x})")]) from None


def read_text(path: Path | str, *, what: str, max_bytes: int) -> str:
    """`read_bytes` then `decode_utf8`."""
    return decode_utf8(read_bytes(path, what=what, max_bytes=max_bytes), str(path))
