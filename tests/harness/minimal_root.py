"""A root file system of a few of this machine's own programs, for a stand-in image that needs a shell and some tools
but no distribution: the programs and the shared libraries `ldd` names for them, at the paths the programs look for
them.  A few MB, so `docker import` takes a second where a first-boot root (hundreds of MB) takes many."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterable
from pathlib import Path

#: `ldd` lines: "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)" and "/lib64/ld-linux-x86-64.so.2 (0x...)"
LDD_PATH = re.compile(r"(?:=>\s*)?(/\S+)\s+\(0x[0-9a-f]+\)")


class MinimalRootError(RuntimeError):
    """A program is not on this machine, or `ldd` could not read it."""


def libraries(program: Path) -> list[Path]:
    """The shared libraries (and the dynamic loader) `program` loads, as `ldd` resolves them here."""
    done = subprocess.run(["ldd", str(program)], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        if "not a dynamic executable" in done.stdout + done.stderr:
            return []
        raise MinimalRootError(f"ldd {program}: {done.stderr.strip() or done.stdout.strip()}")
    return [Path(m[1]) for m in LDD_PATH.finditer(done.stdout)]


def minimal_root(dest: Path, programs: Iterable[str]) -> Path:
    """`dest` made a root holding `programs` (names on PATH) in /usr/bin, with /bin -> usr/bin, each program's
    libraries at the paths `ldd` gives, and an empty /tmp; returns `dest`."""
    (dest / "usr" / "bin").mkdir(parents=True, exist_ok=True)
    (dest / "tmp").mkdir(mode=0o1777, exist_ok=True)
    if not (dest / "bin").exists():
        (dest / "bin").symlink_to("usr/bin")
    for name in programs:
        found = shutil.which(name)
        if found is None:
            raise MinimalRootError(f"{name}: not on this machine's PATH")
        program = Path(found).resolve()
        shutil.copy2(program, dest / "usr" / "bin" / name)
        for library in libraries(program):
            target = dest / library.relative_to("/")
            if not target.exists():
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(library.resolve(), target)
    return dest
