"""One error type for refused input: the file, where in it (a field path or a line:column), and the reason."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

_POSITION = re.compile(r"^\d+(:\d+)?$")


def format_loc(loc: Iterable[str | int]) -> str:
    """`("clusters", 0, "pools", 1, "max_nodes")` -> `clusters[0].pools[1].max_nodes` ("" for the root)."""
    out = ""
    for part in loc:
        if part == "[key]":  # pydantic's marker for an error in a mapping's key: the path already names it
            continue
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


class InputError(ValueError):
    """A file (or argument) the product refuses.  `errors` lists (where, reason); `where` is a field path
    (`clusters[0].name`), a position (`12` or `12:5`, 1-based line and column) or "" for the file as a whole."""

    def __init__(self, source: str, errors: Sequence[tuple[str, str]]) -> None:
        self.source = str(source)
        self.errors: list[tuple[str, str]] = list(errors)
        super().__init__(str(self))

    def lines(self) -> list[str]:
        """`FILE: field.path: reason` / `FILE:LINE:COL: reason` / `FILE: reason`, one per problem."""
        out = []
        for where, reason in self.errors:
            if not where:
                out.append(f"{self.source}: {reason}")
            elif _POSITION.match(where):
                out.append(f"{self.source}:{where}: {reason}")
            else:
                out.append(f"{self.source}: {where}: {reason}")
        return out

    def __str__(self) -> str:
        return "\n".join(self.lines())


def position(line0: int, col0: int) -> str:
    """A 0-based (line, column) as the 1-based `LINE:COL` of error messages."""
    return f"{line0 + 1}:{col0 + 1}"
