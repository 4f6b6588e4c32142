"""A Dockerfile read as Docker's builder reads it: its instructions, in order, for the tests to check and follow.

Lines ending in a backslash continue on the next line, comment lines (`#` first) are dropped, also inside a
continued instruction, and the keyword is case-insensitive.  Only what deploy/autoscaler.Dockerfile uses is taken
(ARG, FROM, COPY, RUN in shell form, ENV KEY=VALUE, USER, ENTRYPOINT in exec form); any other instruction or form is
refused with the line it is on, so a Dockerfile the tests cannot follow fails them instead of being half read.
`ignored` reads the `<Dockerfile>.dockerignore` beside it (BuildKit's per-Dockerfile ignore file)."""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from pathlib import Path

KEYWORDS = ("ARG", "FROM", "COPY", "RUN", "ENV", "USER", "ENTRYPOINT")


@dataclass(frozen=True)
class Instruction:
    keyword: str  # upper case
    text: str  # the rest of the instruction, continuations joined
    line: int  # where it starts (1-based)


def instructions(path: Path) -> list[Instruction]:
    out: list[Instruction] = []
    pending: list[str] = []
    start = 0
    for number, raw in enumerate(path.read_text().splitlines(), 1):
        stripped = raw.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if not pending:
            start = number
        continued = stripped.endswith("\\")
        pending.append(stripped[:-1].rstrip() if continued else stripped)
        if continued:
            continue
        keyword, _, text = " ".join(pending).partition(" ")
        pending = []
        if keyword.upper() not in KEYWORDS:
            raise ValueError(
                f"{path}:{start}: {keyword}: not an instruction these tests follow ({', '.join(KEYWORDS)})"
            )
        out.append(Instruction(keyword.upper(), text.strip(), start))
    if pending:
        raise ValueError(f"{path}:{start}: the last instruction ends in a line continuation")
    return out


def env_pairs(instruction: Instruction) -> dict[str, str]:
    """`ENV A=1 B="two words"` -> {"A": "1", "B": "two words"} (the legacy `ENV A 1` form is refused)."""
    pairs = {}
    for word in shlex.split(instruction.text):
        key, sep, value = word.partition("=")
        if not sep:
            raise ValueError(f"line {instruction.line}: ENV {instruction.text!r}: write KEY=VALUE")
        pairs[key] = value
    return pairs


def copy_paths(instruction: Instruction) -> tuple[str, str]:
    """`COPY src dest` -> (src relative to the context, absolute dest); flags and several sources are refused."""
    words = shlex.split(instruction.text)
    if len(words) != 2 or words[0].startswith("--") or not words[1].startswith("/"):
        raise ValueError(f"line {instruction.line}: COPY {instruction.text!r}: expected `COPY <src> </absolute/dest>`")
    return words[0], words[1]


def exec_form(instruction: Instruction) -> list[str]:
    """`ENTRYPOINT ["a", "b"]` -> ["a", "b"] (the shell form is refused: it would not take the pod's args)."""
    argv = json.loads(instruction.text) if instruction.text.startswith("[") else None
    if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv):
        raise ValueError(f"line {instruction.line}: {instruction.keyword} {instruction.text!r}: use the exec form")
    return argv


def ignored(dockerfile: Path) -> list[str]:
    """The names `<dockerfile>.dockerignore` excludes anywhere in the context: only `**/NAME` and `**/*.EXT`
    patterns are taken."""
    path = dockerfile.with_name(dockerfile.name + ".dockerignore")
    patterns = []
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if not line.startswith("**/") or "/" in line[3:] or line.startswith("!"):
            raise ValueError(f"{path}: {line!r}: only `**/NAME` patterns are followed here")
        patterns.append(line[3:])
    return patterns


def the_one(found: list[Instruction], keyword: str) -> Instruction:
    """The single `keyword` instruction (there must be exactly one)."""
    matching = [i for i in found if i.keyword == keyword]
    if len(matching) != 1:
        raise ValueError(f"expected one {keyword}, found {len(matching)}")
    return matching[0]
