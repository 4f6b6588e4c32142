"""Slurm hostlist expressions, expanded and compressed without calling `scontrol show hostnames`.

Slurm hands its power-saving hooks a hostlist such as ``a3-pool-[0-3,7],login-0``; the hooks must be fast
and must not depend on a working controller, so they expand it here.  Supports comma-separated hosts,
bracket ranges with zero padding (``n[001-010]``), several bracket groups per name (``r[1-2]n[1-2]``)
and nested commas inside brackets.
"""

from __future__ import annotations

import re
from collections.abc import Iterable


class HostlistError(ValueError):
    """A malformed hostlist expression; the message names the offending part."""


def _split_top(expr: str) -> list[str]:
    parts: list[str] = []
    depth = 0
    cur: list[str] = []
    for ch in expr:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise HostlistError(f"hostlist {expr!r}: unbalanced ']'")
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if depth != 0:
        raise HostlistError(f"hostlist {expr!r}: unbalanced '['")
    parts.append("".join(cur))
    return [p.strip() for p in parts if p.strip()]


def _expand_range(spec: str, expr: str) -> list[str]:
    out: list[str] = []
    for item in spec.split(","):
        item = item.strip()
        m = re.fullmatch(r"(\d+)(?:-(\d+))?", item)
        if not m:
            raise HostlistError(f"hostlist {expr!r}: bad range {item!r} (expected N or N-M)")
        lo_s, hi_s = m.group(1), m.group(2) or m.group(1)
        lo, hi = int(lo_s), int(hi_s)
        if hi < lo:
            raise HostlistError(f"hostlist {expr!r}: range {item!r} runs backwards")
        if hi - lo > 1_000_000:
            raise HostlistError(f"hostlist {expr!r}: range {item!r} is too large")
        width = len(lo_s) if lo_s.startswith("0") and len(lo_s) > 1 else 0
        out.extend(str(i).zfill(width) for i in range(lo, hi + 1))
    return out


def _expand_one(host: str, expr: str) -> list[str]:
    m = re.search(r"\[([^\[\]]*)\]", host)
    if not m:
        if "[" in host or "]" in host:
            raise HostlistError(f"hostlist {expr!r}: bad brackets in {host!r}")
        return [host]
    head, tail = host[: m.start()], host[m.end() :]
    return [h for v in _expand_range(m.group(1), expr) for h in _expand_one(head + v + tail, expr)]


def expand(expr: str) -> list[str]:
    """``"gpu-[0-2],cpu-7"`` -> ``["gpu-0", "gpu-1", "gpu-2", "cpu-7"]`` (order kept, duplicates dropped)."""
    seen: dict[str, None] = {}
    for part in _split_top(expr.strip()):
        for h in _expand_one(part, expr):
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
