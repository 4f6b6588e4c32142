"""Writing a file a command was asked for (`--out`, `--report`): checked before the work, written atomically.

Every command that writes a file the user named goes through here, so they all refuse the same things with
the same words, *before* any work is done (a long replay must not end in a traceback about its output path):

- the parent directory must exist and be a directory: nothing is created on the way (a typo in a path is
  refused, not turned into a tree of new directories);
- the target must not be a directory;
- an existing file is refused unless the command's `--force` is given (a report must not silently replace,
  say, a stack file).

The file is then written to a temporary file in the same directory and moved into place with os.replace(),
so a failed or interrupted write leaves no partial file and the old file (with `--force`) intact.  Without
`--force` the move cannot replace a file that appeared in the meantime (a hard link claims the name).

Refusals are `InputError`s rendered `--option: PATH: reason`.
"""

from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path

from fleet.input.errors import InputError

FORCE_HINT = "pass --force to replace it"


def _refuse(option: str, path: Path, reason: str) -> InputError:
    return InputError(f"{option}: {path}", [("", reason)])


def _stat(path: Path) -> os.stat_result | None:
    """stat() of `path` (a symlink followed), None when nothing is there (a dangling symlink included)."""
    try:
        return os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None


def check_parent(path: Path | str, *, option: str) -> Path:
    """`path`'s parent directory: it must exist, be a directory and be writable."""
    p = Path(path)
    parent = p.parent
    try:
        st = _stat(parent)
    except OSError as exc:
        raise _refuse(option, p, f"cannot reach the directory {parent}: {exc.strerror or exc}") from None
    if st is None:
        raise _refuse(option, p, f"the directory {parent} does not exist (it is not created)")
    if not stat.S_ISDIR(st.st_mode):
        raise _refuse(option, p, f"{parent} is not a directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise _refuse(option, p, f"the directory {parent} is not writable")
    return parent


def check_target(path: Path | str, *, option: str, force: bool = False) -> Path:
    """`path` may be written: not a directory or other non-file, and not an existing file unless `force`."""
    p = Path(path)
    try:
        st = _stat(p)
    except OSError as exc:
        raise _refuse(option, p, f"cannot check it: {exc.strerror or exc}") from None
    if st is None:
        if os.path.islink(p):
            raise _refuse(option, p, "is a dangling symbolic link (remove it or choose another path)")
        return p
    if stat.S_ISDIR(st.st_mode):
        raise _refuse(option, p, "is a directory (give a file path)")
    if not stat.S_ISREG(st.st_mode):
        raise _refuse(option, p, "exists and is not a regular file")
    if not force:
        raise _refuse(option, p, f"exists; {FORCE_HINT}, or choose another path")
    return p


def check_output_file(path: Path | str, *, option: str, force: bool = False) -> Path:
    """Everything `write_atomic` needs, checked before any work: the parent, then the target."""
    p = Path(path)
    check_parent(p, option=option)
    return check_target(p, option=option, force=force)


def make_dir(path: Path | str, *, option: str) -> Path:
    """Create one directory whose parent exists (nothing above it); an existing directory is fine."""
    p = Path(path)
    try:
        p.mkdir(exist_ok=True)
    except OSError as exc:
        raise _refuse(option, p, f"cannot create the directory: {exc.strerror or exc}") from None
    if not p.is_dir():
        raise _refuse(option, p, "exists and is not a directory")
    return p


def _temp_in(directory: Path, name: str, mode: int) -> tuple[int, Path]:
    """An exclusively created, hidden temporary file next to the target (same file system: os.replace is atomic)."""
    for _ in range(16):
        tmp = directory / f".{name}.{secrets.token_hex(4)}.tmp"
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode), tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary name in {directory}")


def _move_into_place(tmp: Path, path: Path, *, option: str, force: bool) -> None:
    """os.replace with `force`; otherwise a hard link, which fails when a file took the name since the check."""
    if force:
        os.replace(tmp, path)
        return
    try:
        os.link(tmp, path)
    except FileExistsError:
        raise _refuse(option, path, f"exists; {FORCE_HINT}, or choose another path") from None
    except OSError:  # a file system without hard links: check once more, then replace
        check_target(path, option=option, force=False)
        os.replace(tmp, path)
        return
    os.unlink(tmp)


def write_atomic(path: Path | str, data: str | bytes, *, option: str, force: bool = False, mode: int = 0o666) -> Path:
    """Write `data` (str: UTF-8) to `path` through a temporary file in its directory; `mode` before the umask
    (0o600 for a file only its owner may read).  Refused as `check_output_file` does; a failed write removes the
    temporary file and leaves `path` as it was."""
    p = Path(path)
    check_output_file(p, option=option, force=force)
    payload = data.encode("utf-8") if isinstance(data, str) else data
    tmp: Path | None = None
    try:
        fd, tmp = _temp_in(p.parent, p.name, mode)
        with os.fdopen(fd, "wb") as fh:
            fh.write(payload)
            fh.flush()
            os.fsync(fh.fileno())
        _move_into_place(tmp, p, option=option, force=force)
        tmp = None
    except OSError as exc:
        raise _refuse(option, p, f"cannot write it: {exc.strerror or exc}") from None
    finally:
        if tmp is not None:
            tmp.unlink(missing_ok=True)
    return p
