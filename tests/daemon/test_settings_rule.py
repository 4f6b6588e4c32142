"""The daemon runs the settings rule over the jobs it has seen (issue 8: whatever the replay scores, the daemon
does): squeue goes into the store's job history each tick, and the policy the decision core gets is the rule's
over that history (autoscaler/core/settings.py), kept across restarts, with the operator's explicit settings
left as set."""

from __future__ import annotations

from autoscaler.cloud import Offering
from autoscaler.core.settings import SettingsTracker
from autoscaler.daemon.build import build_settings
from autoscaler.model import Policy
from autoscaler.slurm.readers import SlurmJob
from fleet.catalog import CapacityType
from tests.daemon.conftest import ZONE_A
from tests.daemon.fakes import offering

MT = "a3-highgpu-8g"


def _job(i: int, submit: float, state: str, start: float | None = None) -> SlurmJob:
    return SlurmJob(
        i, f"j{i}", state, "None" if state == "RUNNING" else "Resources", "gpu", 1, 8, None, (), 0, None, submit,
        start_time=start,
    )  # fmt: skip


def _drive(d, slurm, clock, *, hours: float, every: float = 180.0, run: float = 900.0, step: float = 60.0) -> None:  # type: ignore[no-untyped-def]
    """8-GPU jobs submitted every `every` s, each running `run` s from submit: squeue as Slurm shows it."""
    t0 = clock()
    end = t0 + hours * 3600
    while clock() < end:
        now = clock()
        jobs = []
        k = 0
        while t0 + k * every <= now:
            sub = t0 + k * every
            if now < sub + run:
                jobs.append(_job(k + 1, sub, "RUNNING", start=sub))
            k += 1
        slurm.jobs_ = jobs
        res = d.tick()
        assert res.ok, res.error
        clock.advance(step)


def test_the_policy_is_the_rules_over_the_jobs_the_daemon_has_seen(make_daemon, slurm, cloud, clock) -> None:
    cloud.offers.append(Offering(offering(ZONE_A, CapacityType.ON_DEMAND), 88.0, "nvidia-h100-80gb", 8))
    d = make_daemon(settings=SettingsTracker(base=Policy(backoff_s=300), boot_s=360.0))
    _drive(d, slurm, clock, hours=2.0)
    # 20 jobs an hour for the 8g shape: one per boot's worth of idle time (360 s) is 2 > 1, so keep one boot
    assert d.policy.idle_timeout_for(MT) == 360.0
    assert d.policy.expected_run_s is not None and 900.0 <= d.policy.expected_run_s <= 960.0  # seen at 60 s ticks
    assert d.policy.backoff_s == 300  # the config's other knobs stay
    since = d.store.jobs_observed_since()
    assert since is not None
    # a restarted daemon reads the same history and starts with the same settings
    d.lock.release()
    d2 = make_daemon(settings=SettingsTracker(base=Policy(backoff_s=300), boot_s=360.0))
    slurm.jobs_ = []
    assert d2.tick().ok
    assert d2.store.jobs_observed_since() == since
    assert d2.policy.idle_timeout_by_machine == d.policy.idle_timeout_by_machine


def test_without_arrivals_nothing_is_kept(make_daemon, slurm, cloud, clock) -> None:
    cloud.offers.append(Offering(offering(ZONE_A, CapacityType.ON_DEMAND), 88.0, "nvidia-h100-80gb", 8))
    d = make_daemon(settings=SettingsTracker(base=Policy(), boot_s=360.0))
    _drive(d, slurm, clock, hours=2.0, every=3600.0)  # one job an hour: the next comes long after a boot
    assert d.policy.idle_timeout_for(MT) == 0.0


def test_settings_the_config_pins_are_not_the_rules() -> None:
    raw = {"idle_timeout_s": 600.0, "backoff_s": 300.0}
    tr = build_settings(raw, Policy(idle_timeout_s=600.0, backoff_s=300.0))
    assert tr.explicit == {"idle_timeout_s", "backoff_s"} and tr.boot_s == 360.0
    assert build_settings({"expected_boot_s": 240.0}, Policy(expected_boot_s=240.0)).boot_s == 240.0
