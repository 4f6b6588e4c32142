"""The settings a running fleet runs with (autoscaler/core/settings.py): the rule over what was observed so far,
on a fixed refresh grid, never over the future, with the operator's explicit settings left as set."""

from __future__ import annotations

from autoscaler.core.settings import MIN_SPAN_S, SeenJob, SettingsTracker, facts_at, reserved_nodes
from autoscaler.model import Policy
from tests.planner.factory import family_offerings, pool

OFFERS = family_offerings()
ONE_G = "a3-highgpu-1g"


def _busy_1g(t0: float, t1: float, every: float = 60.0, run: float = 600.0) -> list[SeenJob]:
    """1-GPU jobs every `every` seconds in [t0, t1), each ended `run` seconds after it was submitted."""
    out, t = [], t0
    while t < t1:
        out.append(SeenJob(t, 1, 1, t + run, run))
        t += every
    return out


def _history(jobs: list[SeenJob], calls: list[tuple[float, float]] | None = None):  # type: ignore[no-untyped-def]
    def history(start: float, at: float) -> list[SeenJob]:
        if calls is not None:
            calls.append((start, at))
        return [j for j in jobs if start <= j.submit <= at]

    return history


def test_no_history_no_keep_no_hold_the_cheap_side() -> None:
    tr = SettingsTracker(base=Policy(), boot_s=360.0)
    p = tr.current(0.0, 0.0, offerings=OFFERS, pools=[pool(8)], history=_history([]))
    assert p.idle_timeout_for(ONE_G) == 0.0 and p.batch_window_s == 0.0 and p.expected_run_s is None


def test_busy_shape_gets_kept_once_its_arrivals_are_seen() -> None:
    jobs = _busy_1g(0.0, 7200.0)  # 60 an hour: one per minute, far faster than one per boot
    tr = SettingsTracker(base=Policy(), boot_s=360.0)
    p = tr.current(7200.0, 0.0, offerings=OFFERS, pools=[pool(1)], history=_history(jobs))
    assert p.idle_timeout_for(ONE_G) == 360.0  # w = 0: keep one boot's worth (ski rental)
    assert p.idle_timeout_for("a3-highgpu-8g") == 0.0  # nothing arrives for it
    assert p.expected_run_s == 600.0


def test_settings_are_those_of_the_last_grid_point_whenever_asked() -> None:
    jobs = _busy_1g(0.0, 20_000.0)
    calls: list[tuple[float, float]] = []
    a = SettingsTracker(base=Policy(), boot_s=360.0, refresh_s=600.0)
    b = SettingsTracker(base=Policy(), boot_s=360.0, refresh_s=600.0)
    for t in (10.0, 590.0, 610.0, 1199.0, 4000.0):  # a daemon ticking now and then
        a.current(t, 0.0, offerings=OFFERS, pools=[pool(1)], history=_history(jobs, calls))
    for t in range(0, 4001, 10):  # a daemon ticking every 10 s
        b.current(float(t), 0.0, offerings=OFFERS, pools=[pool(1)], history=_history(jobs))
    assert a.policy == b.policy and a.computed_at == b.computed_at == 3600.0
    # only grid points are ever evaluated, once each, and never past them: no look at the future
    assert [at for _, at in calls] == [0.0, 600.0, 3600.0]
    assert all(at <= t for (_, at), t in zip(calls, (10.0, 610.0, 4000.0), strict=True))


def test_a_run_counts_only_once_its_job_ended_by_the_grid_point() -> None:
    running = [SeenJob(0.0, 1, 1, ended_at=5000.0, run_s=4900.0)]  # ends after the point asked about
    f = facts_at(
        running, 3600.0, offerings=OFFERS, pools=[], boot_s=360.0, wait_value_usd_per_gpu_hour=0.0, span_s=3600.0
    )
    assert f.mean_run_s is None and f.arrivals_per_hour == 1.0


def test_a_young_daemon_counts_its_span_as_at_least_an_hour() -> None:
    jobs = [SeenJob(100.0, 1, 1)]
    f = facts_at(jobs, 160.0, offerings=OFFERS, pools=[], boot_s=360.0, wait_value_usd_per_gpu_hour=0.0, span_s=60.0)
    assert f.arrivals_per_hour == 3600.0 / MIN_SPAN_S  # one job, not 60 an hour


def test_explicit_settings_are_never_replaced_by_the_rule() -> None:
    jobs = _busy_1g(0.0, 7200.0)
    base = Policy(idle_timeout_s=600.0, max_nodes=12)
    tr = SettingsTracker(base=base, boot_s=360.0, explicit=frozenset({"idle_timeout_s", "max_nodes"}))
    p = tr.current(7200.0, 0.0, offerings=OFFERS, pools=[pool(1)], history=_history(jobs))
    assert p.idle_timeout_s == 600.0 and p.max_nodes == 12
    # pinning the idle timeout pins idle keep for every shape: no per-shape keep or warm cap from the rule
    assert p.idle_timeout_for(ONE_G) == 600.0 and p.idle_keep_max_by_machine == {}
    assert p.expected_run_s == 600.0 and p.defragment  # fields the operator did not set are the rule's
    hold = SettingsTracker(base=Policy(batch_window_s=30.0), explicit=frozenset({"batch_window_s"}))
    q = hold.current(7200.0, 0.0, offerings=OFFERS, pools=[pool(1)], history=_history(jobs))
    assert (q.batch_window_s, q.batch_idle_s) == (30.0, 0.0)  # the hold pair as the operator left it
    assert q.idle_timeout_for(ONE_G) == 360.0


def test_reserved_nodes_are_the_reservation_pools_sizes() -> None:
    from fleet.catalog import CapacityType

    res = pool(8, CapacityType.RESERVATION, max_nodes=40)
    assert reserved_nodes([res, pool(8), pool(1)]) == 40


def test_the_hold_budget_comes_from_the_config_policy() -> None:
    from fleet.catalog import CapacityType
    from tests.planner.factory import pool as mk_pool

    res = mk_pool(8, CapacityType.RESERVATION, max_nodes=4)
    jobs = [SeenJob(60.0 * i, 1, 8, 60.0 * i + 900.0, 900.0) for i in range(100)]
    none = SettingsTracker(base=Policy(), boot_s=360.0)
    some = SettingsTracker(base=Policy(reservation_hold_max_s=120.0), boot_s=360.0)
    for tr in (none, some):
        tr.current(7200.0, 0.0, offerings=OFFERS, pools=[res, mk_pool(8)], history=_history(jobs))
    assert none.policy is not None and none.policy.batch_window_s == 0.0  # the default budget: never held
    assert some.policy is not None and 0.0 < some.policy.batch_window_s <= 120.0


def test_a_long_running_daemon_keeps_only_the_latest_changes() -> None:
    tr = SettingsTracker(base=Policy(), boot_s=360.0, refresh_s=600.0, log_limit=3)
    for k in range(12):  # a burst of 1-GPU jobs every other hour: the keep switches on and off
        jobs = _busy_1g(0.0, 3600.0 * (k + 1)) if k % 2 else []
        tr.current(3600.0 * (k + 1), 0.0, offerings=OFFERS, pools=[pool(1)], history=_history(jobs))
    assert tr.changes > 3 and len(tr.log) == 3 and tr.log[-1][1] == tr.policy
