"""How often a gang's released names go to another job under late binding (docs/simulate.md "Known limits").

    .venv/bin/python bench/late_bind_race.py synth:bursty-gangs ../shared/data/traces/itp/cluster07.csv

Under late binding a gang's names are released (undrained while powered down) for Slurm to allocate, and Slurm
gives them to the first pending job that fits, in queue order: an older single-node job of the same shape that
waits for its drained boot can take one, and the gang waits for the next release.  This replays gpu-fleet (its
defaults) over each trace and counts the allocations that took a released name, by single-node job and by gang.
The simulated Slurm allocates released names the way slurmctld does, so the count is what the figures include.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from autoscaler.replay import simslurm
from autoscaler.replay.gpu_fleet import GpuFleetPolicy
from autoscaler.replay.scenario import Scenario
from autoscaler.replay.synth import load_source


def count(source: str) -> dict[str, int]:
    """Allocations that took a released name in one replay of `source` (a trace CSV or `synth:REGIME[:SEED]`)."""
    counts = {"single_on_released": 0, "gang_on_released": 0, "gang_allocations": 0}
    original = simslurm.SimSlurm._allocate

    def allocate(self, job, picked, now):  # type: ignore[no-untyped-def]
        released = sum(
            1 for p, c in picked if isinstance(c, int) and p.name in self.held and c in self.released[p.name]
        )
        if job.nodes > 1:
            counts["gang_allocations"] += 1
        if released:
            counts["single_on_released" if job.nodes == 1 else "gang_on_released"] += 1
        return original(self, job, picked, now)

    _, jobs = load_source(source)
    scenario = Scenario()
    simslurm.SimSlurm._allocate = allocate  # type: ignore[method-assign]
    try:
        simslurm.SimSlurm(jobs, scenario, GpuFleetPolicy.for_scenario(scenario)).run()
    finally:
        simslurm.SimSlurm._allocate = original  # type: ignore[method-assign]
    return counts


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    from loguru import logger

    logger.remove()
    for source in argv:
        print(source, count(source))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
