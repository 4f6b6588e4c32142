"""Tables for people: rich boxes on a terminal, whole-cell plain columns everywhere else.

Off a terminal (piped, redirected, CI logs) rich falls back to 80 columns and truncates or folds cells,
which turns machine-type and region names into `a3-ultragp…`.  There every cell is printed whole, columns
padded to their widest cell, so the output can be read, grepped and diffed.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from rich.console import Console
from rich.table import Table


def plain_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Left-aligned columns separated by two spaces; no cell is cut."""
    widths = [len(h) for h in headers]
    for r in rows:
        for i, cell in enumerate(r):
            widths[i] = max(widths[i], len(cell))
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    return "\n".join(lines)


def print_table(
    headers: Sequence[str], rows: Sequence[Sequence[str]], *, title: str | None = None, terminal: bool | None = None
) -> None:
    """Print `rows` under `headers`: a rich table on a terminal, `plain_table` otherwise."""
    if terminal is None:
        terminal = sys.stdout.isatty()
    if not terminal:
        if title:
            print(title)
        print(plain_table(headers, rows))
        return
    table = Table(*headers, title=title)
    for r in rows:
        table.add_row(*r)
    Console().print(table)
