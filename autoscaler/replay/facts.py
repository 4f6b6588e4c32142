"""The facts of a replay scenario for the settings rule (`autoscaler.planner.rule.policy_for`).

Boot time, shapes and on-demand prices come from the scenario; the arrival rate per shape and the
mean run time from the trace being replayed (its submissions over its span: the replay's stand-in
for the history a running daemon observes)."""

from __future__ import annotations

from collections.abc import Sequence

from autoscaler.model.policy import DEFAULT_WAIT_VALUE_USD_PER_GPU_HOUR
from autoscaler.planner.rule import FleetFacts, ShapeFacts, with_arrivals
from autoscaler.replay.scenario import Scenario
from autoscaler.replay.trace import TraceJob


def scenario_facts(
    scenario: Scenario, jobs: Sequence[TraceJob] = (), wait_value_usd_per_gpu_hour: float | None = None
) -> FleetFacts:
    """`wait_value_usd_per_gpu_hour` None: the default (`DEFAULT_WAIT_VALUE_USD_PER_GPU_HOUR`)."""
    shapes = []
    for m in scenario.machines:
        price = m.price(scenario.region)
        assert price is not None  # Scenario.machines keeps priced types only
        shapes.append(ShapeFacts(m.name, m.gpu_count, price.on_demand))
    span = (max(j.submit for j in jobs) - min(j.submit for j in jobs)) if jobs else 0.0
    if jobs and span > 0:
        shaped = with_arrivals(shapes, (j.shape() for j in jobs), span)
        rate = len(jobs) * 3600.0 / span
        mean_run = sum(j.duration for j in jobs) / len(jobs)
    else:
        shaped, rate, mean_run = tuple(shapes), 0.0, None
    return FleetFacts(
        boot_s=scenario.ready_s,
        shapes=tuple(shaped),
        reserved_nodes=scenario.reserved_nodes,
        arrivals_per_hour=rate,
        mean_run_s=mean_run,
        wait_value_usd_per_gpu_hour=(
            DEFAULT_WAIT_VALUE_USD_PER_GPU_HOUR if wait_value_usd_per_gpu_hour is None else wait_value_usd_per_gpu_hour
        ),
    )
