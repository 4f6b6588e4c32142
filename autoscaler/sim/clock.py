"""Simulated time: a clock the replay loop advances and the sim cloud reads.  Nothing sleeps."""

from __future__ import annotations


class SimClock:
    """Seconds since the start of a simulation (or any epoch the caller picks).

    Time only moves forward: `advance_to` refuses to go back, so an event loop bug shows up as an
    error instead of negative durations on the bill."""

    def __init__(self, start: float = 0.0) -> None:
        self._now = float(start)

    def __call__(self) -> float:
        return self._now

    @property
    def now(self) -> float:
        return self._now

    def advance_to(self, t: float) -> None:
        if t < self._now:
            raise ValueError(f"clock cannot go back: now={self._now}, asked {t}")
        self._now = float(t)
