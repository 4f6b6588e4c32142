"""The log line both daemons (Slurm and Kubernetes) write when the settings rule changes what they run with."""

from __future__ import annotations

from loguru import logger

from autoscaler.model import Policy
from autoscaler.planner.rule import FleetFacts


def log_settings(policy: Policy, facts: FleetFacts | None, seen: str, since: float) -> None:
    """One line, with the settings as fields: idle keep, warm cap, standby per shape, reservation hold, and the facts
    behind them (arrivals per hour, mean run); `seen` names what the rule ran over ("jobs", "requests")."""
    run = policy.expected_run_s
    logger.bind(
        idle_keep_s=dict(policy.idle_timeout_by_machine),
        warm_max=dict(policy.idle_keep_max_by_machine),
        standby=dict(policy.standby_by_machine),
        hold_s=policy.batch_window_s,
        arrivals_per_hour=round(facts.arrivals_per_hour, 2) if facts else None,
        mean_run_s=facts.mean_run_s if facts else None,
    ).info(
        "settings: idle keep {} s, warm cap {}, standby {}, reservation hold {} s, expected run {} s (the settings "
        "rule over the {} seen since {:.0f})",
        dict(policy.idle_timeout_by_machine),
        dict(policy.idle_keep_max_by_machine),
        dict(policy.standby_by_machine),
        policy.batch_window_s,
        None if run is None else round(run),
        seen,
        since,
    )
