"""A small memo for the planner's passes over the catalog (offerings and pools).

A daemon or a replay plans every few seconds over the same pools and, between stockouts, reservation use and
price changes, the same offerings.  The passes that read only those (`defrag.step_down`,
`defrag.pool_gpu_prices`, the `OfferBook` and its per-class candidate lists) need not redo their work each plan:
`recent_calls` returns an earlier result while the arguments are equal to that call's (a sequence argument:
equal items in the same order).  The inputs are frozen dataclasses, so equal inputs give equal results; the
tuple compare is done in C and takes an identical object as equal without calling its `__eq__`, so the usual hit
(the very same objects) costs a pointer compare per item.  A few calls are remembered because one tick plans
more than once (each pool's resumed names alone, then the whole queue).  Results are shared between callers, so
they must not be mutated: `step_down` and `pool_gpu_prices` return read-only mappings; the `OfferBook`'s
candidate lists are plain lists that no caller writes (not enforced).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterable, Mapping
from collections.abc import Set as AbstractSet
from typing import TypeVar

R = TypeVar("R")


def _frozen(arg: object) -> object:
    """A sequence argument as a tuple (read once, compared item by item); anything else as it is."""
    if isinstance(arg, (Mapping, AbstractSet)):
        raise TypeError(f"recent_calls: a {type(arg).__name__} argument is not supported (pass its items in order)")
    return tuple(arg) if isinstance(arg, Iterable) and not isinstance(arg, (str, bytes)) else arg


def recent_calls(size: int) -> Callable[[Callable[..., R]], Callable[..., R]]:
    """`fn` (positional arguments only) remembering its last `size` calls: equal arguments in, that result out."""

    def decorate(fn: Callable[..., R]) -> Callable[..., R]:
        recent: list[tuple[tuple[object, ...], R]] = []  # most recent first
        lock = threading.Lock()  # a daemon may plan from more than one thread

        @functools.wraps(fn)
        def wrapper(*args: object) -> R:
            key = tuple(_frozen(a) for a in args)
            with lock:
                for i, (prev, result) in enumerate(recent):
                    if prev == key:
                        if i:
                            recent.insert(0, recent.pop(i))
                        return result
            result = fn(*key)
            with lock:
                recent.insert(0, (key, result))
                del recent[size:]
            return result

        return wrapper

    return decorate
