"""Backoff pass: drop expired entries of the unavailable-offering memory and split the offerings
into usable ones and those still backed off (stockout, quota) so the planner falls back to the
next offering or zone."""

from __future__ import annotations

from collections.abc import Iterable

from autoscaler.cloud import Offering, OfferingKey
from autoscaler.model import UnavailableOffering, active_unavailable


def expire_backoff(memory: Iterable[UnavailableOffering], now: float) -> tuple[UnavailableOffering, ...]:
    """The entries still in force at `now`; expired ones are forgotten."""
    return active_unavailable(memory, now)


def split_backed_off(
    offerings: Iterable[Offering], active: Iterable[UnavailableOffering]
) -> tuple[list[Offering], dict[OfferingKey, UnavailableOffering]]:
    """(usable offerings, backed-off key -> memory entry), given only entries in force."""
    blocked = {u.key: u for u in active}
    usable = [o for o in offerings if o.key not in blocked]
    return usable, {o.key: blocked[o.key] for o in offerings if o.key in blocked}
