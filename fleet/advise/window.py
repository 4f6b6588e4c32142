"""Train and test windows of a job trace, by submission day.

Day 0 starts at the first submission.  A job belongs to the window it is submitted in and keeps its full
duration (a job submitted on the last train day may run into the test days: its cost stays with the train
window, as a commitment decision made then would have paid it)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from autoscaler.replay.trace import TraceJob

DAY_S = 86400.0


@dataclass(frozen=True)
class Window:
    name: str  # "all", "train" or "test" (folds: "train-1", ...)
    start_day: float
    days: float
    jobs: tuple[TraceJob, ...]
    start_s: float = 0.0  # the window's first second, in the trace's clock

    @property
    def hours(self) -> float:
        return self.days * 24.0


def history_days(jobs: Sequence[TraceJob]) -> float:
    """Days from the first submission to the last job's end."""
    t0 = min(j.submit for j in jobs)
    return max(j.submit + j.duration for j in jobs) / DAY_S - t0 / DAY_S


def whole(jobs: Sequence[TraceJob]) -> Window:
    """The whole trace: its first submission to its last (what runs on after belongs to no window)."""
    t0 = min(j.submit for j in jobs)
    days = (max(j.submit for j in jobs) + 1.0 - t0) / DAY_S
    return Window("all", 0.0, days, tuple(jobs), t0)


def split(jobs: Sequence[TraceJob], train_days: float, test_days: float) -> tuple[Window, Window]:
    """The first `train_days` and the `test_days` after them; each must hold at least one job.

    The test window ends at the trace's last submission (as `whole` does), not later: past it the trace records
    no demand, only the reservation's bill.  Asked for more than a day past it, `--train/--test` is refused."""
    if train_days <= 0 or test_days <= 0:
        raise ValueError("--train/--test: both must be positive numbers of days")
    t0 = min(j.submit for j in jobs)
    cut = t0 + train_days * DAY_S
    end = cut + test_days * DAY_S
    train = tuple(j for j in jobs if j.submit < cut)
    test = tuple(j for j in jobs if cut <= j.submit < end)
    span = (max(j.submit for j in jobs) - t0) / DAY_S
    if not train:
        raise ValueError(f"--train: no job is submitted in the first {train_days:g} days")
    if not test:
        raise ValueError(
            f"--test: no job is submitted in days {train_days:g}..{train_days + test_days:g} "
            f"(the trace's submissions span {span:.1f} days)"
        )
    if train_days + test_days > span + 1:
        raise ValueError(
            f"--train/--test: {train_days:g} + {test_days:g} days exceed the trace's {span:.1f} days of submissions"
        )
    test_end = min(end, max(j.submit for j in jobs) + 1.0)
    return Window("train", 0.0, train_days, train, t0), Window("test", train_days, (test_end - cut) / DAY_S, test, cut)


def folds(window: Window, k: int) -> list[Window]:
    """`window` cut into `k` consecutive windows of equal length by submission time, named `<name>-<i>`.

    A fold may hold no job: a commitment is paid in it all the same, which is the point of looking."""
    if k < 1:
        raise ValueError("--folds: at least 1")
    start = window.start_s
    length = window.days * DAY_S / k
    out = []
    for i in range(k):
        a, b = start + i * length, start + (i + 1) * length
        last = i == k - 1
        jobs = tuple(j for j in window.jobs if a <= j.submit < b or (last and j.submit >= b))
        out.append(Window(f"{window.name}-{i + 1}", window.start_day + i * window.days / k, window.days / k, jobs, a))
    return out
