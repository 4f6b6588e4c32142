"""Kueue's admission in replays: quotas, cohort borrowing and lending limits, gang admission, FIFO strategies."""

from __future__ import annotations

import pytest

from autoscaler.replay.kueue_admission import Admission, ClusterQueue, Workload, even_queues, split_teams


def wl(i: str, q: str, gpus: int, t: float = 0.0, prio: int = 0) -> Workload:
    return Workload(i, q, gpus, t, prio)


def test_a_workload_is_admitted_whole_within_nominal_quota_or_waits() -> None:
    a = Admission.of([ClusterQueue("a", 16)])
    a.submit(wl("w1", "a", 8))
    a.submit(wl("w2", "a", 16, 1))
    assert [w.id for w in a.admit()] == ["w1"]  # w2 needs 16, only 8 left: no partial admission
    a.finish("w1")
    assert [w.id for w in a.admit()] == ["w2"]


def test_best_effort_fifo_lets_smaller_work_pass_strict_fifo_does_not() -> None:
    for strategy, expected in (("BestEffortFIFO", ["w2"]), ("StrictFIFO", [])):
        a = Admission.of([ClusterQueue("a", 8, strategy=strategy)])
        a.submit(wl("big", "a", 16, 0))
        a.submit(wl("w2", "a", 8, 1))
        assert [w.id for w in a.admit()] == expected


def test_borrowing_takes_what_the_cohort_lends_within_the_limits() -> None:
    qs = [
        ClusterQueue("a", 8, "c", borrowing_limit=8),
        ClusterQueue("b", 16, "c", lending_limit=4),
    ]
    a = Admission.of(qs)
    a.submit(wl("w1", "a", 12))  # 8 nominal + 4 b lends at most
    assert [w.id for w in a.admit()] == ["w1"]
    a.submit(wl("w2", "a", 1))
    assert a.admit() == []  # b lends no more than 4
    a.submit(wl("w3", "b", 12))
    assert [w.id for w in a.admit()] == ["w3"]  # b's own 12 of its 16 (4 lent)


def test_priority_then_age_orders_a_queue() -> None:
    a = Admission.of([ClusterQueue("a", 8)])
    a.submit(wl("old", "a", 8, 0, prio=0))
    a.submit(wl("urgent", "a", 8, 5, prio=10))
    assert [w.id for w in a.admit()] == ["urgent"]


def test_unknown_queue_is_an_error_naming_it() -> None:
    with pytest.raises(ValueError, match="no ClusterQueue 'x'"):
        Admission.of([ClusterQueue("a", 8)]).submit(wl("w", "x", 1))


def test_teams_split_evenly_and_deterministically() -> None:
    qs = even_queues(3, 100)
    assert [q.nominal_gpus for q in qs] == [34, 33, 33] and {q.cohort for q in qs} == {"research"}
    ids = [str(i) for i in range(300)]
    assert split_teams(ids, 3, 7) == split_teams(ids, 3, 7)
    counts = {t: list(split_teams(ids, 3, 7).values()).count(t) for t in ("team-1", "team-2", "team-3")}
    assert all(70 < c < 130 for c in counts.values())
