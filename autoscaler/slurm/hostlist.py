"""Slurm hostlist expressions, expanded and compressed without calling `scontrol show hostnames`.

Slurm hands its power-saving hooks a hostlist such as ``a3-pool-[0-3,7],login-0``; the hooks must be fast
and must not depend on a working controller, so they expand it here.  Supports comma-separated hosts,
bracket ranges with zero padding (``n[001-010]``), several bracket groups per name (``r[1-2]n[1-2]``)
and nested commas inside brackets.

Bounded before anything is expanded: the expression's length, the number of names it expands to (the product
of every bracket group of a name, summed over the list: ``a[0-999]b[0-999]c[0-999]`` is a billion names and
is refused at once), the digits of a range bound, and each name's characters and length (node names are GCE
instance names).  Limits: fleet.input.limits.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from fleet.input.limits import MAX_HOSTLIST_CHARS, MAX_HOSTNAME_CHARS, MAX_HOSTS

_NAME_CHARS = re.compile(r"[A-Za-z0-9._-]+")
_ITEM = re.compile(r"(\d{1,9})(?:-(\d{1,9}))?")
_GROUP = re.compile(r"\[([^\[\]]*)\]")


class HostlistError(ValueError):
    """A malformed hostlist expression; the message names the offending part."""


def _split_top(expr: str) -> list[str]:
    parts: list[str] = []
    depth = 0
    cur: list[str] = []
    for ch in expr:
        if ch == "[":
            depth += 1
            if depth > 1:
                raise HostlistError(f"hostlist {_short(expr)}: nested '['")
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise HostlistError(f"hostlist {_short(expr)}: unbalanced ']'")
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if depth != 0:
        raise HostlistError(f"hostlist {_short(expr)}: unbalanced '['")
    parts.append("".join(cur))
    return [p.strip() for p in parts if p.strip()]


def _short(expr: str) -> str:
    return repr(expr) if len(expr) <= 80 else f"{expr[:60]!r}... ({len(expr):,} characters)"


def _items(spec: str, expr: str) -> list[tuple[str, str, int, int]]:
    out = []
    for item in spec.split(","):
        item = item.strip()
        m = _ITEM.fullmatch(item)
        if not m:
            raise HostlistError(f"hostlist {_short(expr)}: bad range {item[:20]!r} (expected N or N-M, up to 9 digits)")
        lo_s, hi_s = m.group(1), m.group(2) or m.group(1)
        lo, hi = int(lo_s), int(hi_s)
        if hi < lo:
            raise HostlistError(f"hostlist {_short(expr)}: range {item!r} runs backwards")
        out.append((lo_s, hi_s, lo, hi))
    return out


def _count_one(host: str, expr: str) -> int:
    """How many names `host` (one comma-free part) expands to, without expanding it; checks its characters."""
    n = 1
    for m in _GROUP.finditer(host):
        n *= sum(hi - lo + 1 for _, _, lo, hi in _items(m.group(1), expr))
    literal = _GROUP.sub("0", host)
    if "[" in literal or "]" in literal:
        raise HostlistError(f"hostlist {_short(expr)}: bad brackets in {_short(host)}")
    if not _NAME_CHARS.fullmatch(literal):
        raise HostlistError(
            f"hostlist {_short(expr)}: {_short(host)} has a character a node name cannot have (A-Z a-z 0-9 . _ -)"
        )
    return n


def count(expr: str) -> int:
    """The number of names `expr` expands to (duplicates included), computed without expanding it."""
    if len(expr) > MAX_HOSTLIST_CHARS:
        raise HostlistError(f"hostlist of {len(expr):,} characters (at most {MAX_HOSTLIST_CHARS:,})")
    return sum(_count_one(part, expr) for part in _split_top(expr.strip()))


def _expand_range(spec: str, expr: str) -> list[str]:
    out: list[str] = []
    for lo_s, _hi_s, lo, hi in _items(spec, expr):
        width = len(lo_s) if lo_s.startswith("0") and len(lo_s) > 1 else 0
        out.extend(str(i).zfill(width) for i in range(lo, hi + 1))
    return out


def _expand_one(host: str, expr: str) -> list[str]:
    m = re.search(r"\[([^\[\]]*)\]", host)
    if not m:
        if "[" in host or "]" in host:
            raise HostlistError(f"hostlist {_short(expr)}: bad brackets in {host!r}")
        return [host]
    head, tail = host[: m.start()], host[m.end() :]
    return [h for v in _expand_range(m.group(1), expr) for h in _expand_one(head + v + tail, expr)]


def expand(expr: str) -> list[str]:
    """``"gpu-[0-2],cpu-7"`` -> ``["gpu-0", "gpu-1", "gpu-2", "cpu-7"]`` (order kept, duplicates dropped).

    Refused (HostlistError) before expanding: more than `MAX_HOSTS` names, names of other characters than
    a node name may have, or longer than `MAX_HOSTNAME_CHARS`."""
    n = count(expr)
    if n > MAX_HOSTS:
        raise HostlistError(f"hostlist {_short(expr)} expands to {n:,} names (at most {MAX_HOSTS:,} at once)")
    seen: dict[str, None] = {}
    for part in _split_top(expr.strip()):
        for h in _expand_one(part, expr):
            if len(h) > MAX_HOSTNAME_CHARS:
                raise HostlistError(
                    f"hostlist {_short(expr)}: {h[:70]!r} is longer than {MAX_HOSTNAME_CHARS} characters"
                )
            seen.setdefault(h, None)
    return list(seen)


def compress(names: Iterable[str]) -> str:
    """Inverse of `expand` for names ending in a number: ``["a-0", "a-1", "a-3"]`` -> ``"a-[0-1,3]"``."""
    groups: dict[str, list[int]] = {}
    plain: list[str] = []
    for n in names:
        m = re.fullmatch(r"(.*?)(0|[1-9]\d*)", n)
        if m and m.group(1):
            groups.setdefault(m.group(1), []).append(int(m.group(2)))
        else:
            plain.append(n)
    out: list[str] = []
    for prefix, nums in groups.items():
        nums = sorted(set(nums))
        if len(nums) == 1:
            out.append(f"{prefix}{nums[0]}")
            continue
        ranges: list[str] = []
        start = prev = nums[0]
        for x in [*nums[1:], None]:
            if x is not None and x == prev + 1:
                prev = x
                continue
            ranges.append(str(start) if start == prev else f"{start}-{prev}")
            if x is not None:
                start = prev = x
        out.append(f"{prefix}[{','.join(ranges)}]")
    return ",".join(out + sorted(set(plain)))
