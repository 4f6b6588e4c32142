"""A Slurm job's `--constraint` read against a pool's node features: which pools' nodes the job may run on.

The stack's nodes carry `<gpu>,<machine type>,<capacity type>` as features (`fleet.slurm.conf`), and users constrain
jobs with them (``--constraint=a3-highgpu-8g``, ``-C "h100&spot"``, ``-C "[a3-highgpu-4g|a3-highgpu-8g]"``).  The
daemon must plan such a job only onto pools whose nodes satisfy it: a node booted for it in another pool is one
slurmctld will never give it.

`matches` reads the expression as slurmctld 22.05 does for one node's features: ``&`` (AND), ``|`` (OR), ``[...]``
(matching OR: each node needs one of the alternatives, which is all one pool's node can tell) and ``(...)``
grouping; a count (``a3-highgpu-8g*2``) asks for that many such nodes and does not change which nodes qualify.
An expression it cannot read for certain (``&`` and ``|`` mixed at one level without parentheses, unbalanced
brackets, characters Slurm features do not use) raises `ConstraintUnreadable`: the caller then plans as if the job
had no constraint, as the daemon did before it read constraints.

`alternatives` reads the constraints that lua writes and the daemon widens (`a3-highgpu-1g`, `a3-highgpu-1g&spot`,
`a3-highgpu-1g|a3-highgpu-2g`, `(a3-highgpu-1g&spot)|a3-highgpu-2g`) as the terms `autoscaler.core.hold` works with.

`RIGHT_SIZED_MARK` is what the stack's job_submit.lua (constrain mode, `fleet.slurm.job_submit`) writes to a job's
AdminComment when it sets the job's constraint itself: that constraint is right-sizing the daemon may widen on a
stockout fallback.  Users cannot set AdminComment; a constraint without the mark is the user's and is never widened.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from fleet.catalog import CapacityType

__all__ = ["RIGHT_SIZED_MARK", "ConstraintUnreadable", "alternatives", "constraint_expression", "matches"]

#: the AdminComment the constrain-mode job_submit.lua sets on the jobs whose constraint it set
RIGHT_SIZED_MARK = "gpu-fleet:right-sized"

_TOKEN = re.compile(r"\s*(?:([A-Za-z0-9_.:-]+)(?:\*\d+)?|([&|()\[\]]))")


class ConstraintUnreadable(ValueError):
    """A constraint expression `matches` cannot read for certain (the message says why)."""


def _tokens(expr: str) -> list[str]:
    out: list[str] = []
    pos = 0
    expr = expr.rstrip()
    while pos < len(expr):
        m = _TOKEN.match(expr, pos)
        if m is None:
            raise ConstraintUnreadable(f"constraint {expr!r}: cannot read {expr[pos:]!r}")
        out.append(m.group(1) or m.group(2))
        pos = m.end()
    return out


def matches(expr: str, features: Iterable[str]) -> bool:
    """Whether one node with `features` satisfies the constraint `expr` (an empty expression: any node)."""
    have = frozenset(features)
    tokens = _tokens(expr)
    if not tokens:
        return True
    value, pos = _group(tokens, 0, have, expr)
    if pos != len(tokens):
        raise ConstraintUnreadable(f"constraint {expr!r}: unbalanced {tokens[pos]!r}")
    return value


_CLOSE = {"(": ")", "[": "]"}


def _group(tokens: list[str], pos: int, have: frozenset[str], expr: str) -> tuple[bool, int]:
    """One level: operands joined by one kind of operator; stops at a closing bracket or the end."""
    values: list[bool] = []
    op: str | None = None
    expect_operand = True
    while pos < len(tokens):
        t = tokens[pos]
        if expect_operand:
            if t in _CLOSE:
                value, pos = _group(tokens, pos + 1, have, expr)
                if pos >= len(tokens) or tokens[pos] != _CLOSE[t]:
                    raise ConstraintUnreadable(f"constraint {expr!r}: {t!r} is not closed")
                values.append(value)
                pos += 1
            elif t in "&|)]":
                raise ConstraintUnreadable(f"constraint {expr!r}: {t!r} where a feature was expected")
            else:
                values.append(t in have)
                pos += 1
            expect_operand = False
        else:
            if t in ")]":
                break
            if t not in "&|":
                raise ConstraintUnreadable(f"constraint {expr!r}: {t!r} where '&' or '|' was expected")
            if op is not None and t != op:
                raise ConstraintUnreadable(f"constraint {expr!r}: '&' and '|' mixed without parentheses")
            op = t
            pos += 1
            expect_operand = True
    if expect_operand:
        raise ConstraintUnreadable(f"constraint {expr!r}: ends where a feature was expected")
    return (any(values) if op == "|" else all(values)), pos


_CAPACITY_FEATURES = frozenset(str(c) for c in CapacityType)


def constraint_expression(terms: Iterable[str]) -> str:
    """The `--constraint` expression of `terms` (ORed, a pinned alternative in parentheses when there are several):
    `a3-highgpu-1g&spot`, `a3-highgpu-1g|a3-highgpu-2g`; what `alternatives` reads back."""
    ts = sorted(set(terms))
    return "|".join(f"({t})" if "&" in t and len(ts) > 1 else t for t in ts)


def alternatives(expr: str) -> frozenset[str]:
    """The ORed alternatives of a right-sizing constraint (the lua's, or one the daemon widened), each a machine type
    or `<machine type>&<capacity type>` (`autoscaler.core.hold.constraint_allows`).  Anything else (brackets,
    counts, nesting, several machine types ANDed) raises `ConstraintUnreadable`."""
    tokens = _tokens(expr)
    if not tokens:
        raise ConstraintUnreadable(f"constraint {expr!r}: empty")
    terms: list[list[str]] = [[]]
    depth = 0
    expect_feature = True
    top_and = False  # an unparenthesised AND: with an OR beside it, Slurm's reading is not certain (`matches`)
    for t in tokens:
        if t == "(" and expect_feature and depth == 0 and not terms[-1]:
            depth = 1
        elif t == ")" and not expect_feature and depth == 1:
            depth = 0
        elif t == "|" and not expect_feature and depth == 0:
            terms.append([])
            expect_feature = True
        elif t == "&" and not expect_feature:
            top_and = top_and or depth == 0
            expect_feature = True
        elif t not in "&|()[]" and expect_feature:
            terms[-1].append(t)
            expect_feature = False
        else:
            raise ConstraintUnreadable(f"constraint {expr!r}: {t!r} is not part of a right-sizing constraint")
    if expect_feature or depth:
        raise ConstraintUnreadable(f"constraint {expr!r}: incomplete")
    if top_and and len(terms) > 1:
        raise ConstraintUnreadable(f"constraint {expr!r}: '&' and '|' mixed without parentheses")
    out = set()
    for features in terms:
        caps = [f for f in features if f in _CAPACITY_FEATURES]
        types = [f for f in features if f not in _CAPACITY_FEATURES]
        if len(types) != 1 or len(caps) > 1:
            raise ConstraintUnreadable(f"constraint {expr!r}: {'&'.join(features)!r} is not one machine type")
        out.add(f"{types[0]}&{caps[0]}" if caps else types[0])
    return frozenset(out)
