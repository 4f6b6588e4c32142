"""The Kubernetes daemon against the Kueue replay on generated traces, tick by tick (tests/kube/test_one_path.py's
comparison on bigger inputs than the suite runs).

    .venv/bin/python bench/kube_one_path.py [--regime long-tail] [--jobs 40] [--case reserved-reclaimed]
        [--quota-gpus 128] [--seed 0] [--json]

The first `--jobs` jobs of `synth:REGIME` (seed `--seed`; times rounded to the second, every other job
spot-tolerant) are replayed through the replay's Kubernetes driver behind one team's Kueue quota, then
`KubeDaemon.tick` runs at each of its ticks over the world it saw (the real `kubernetes` client against the
fake API server, the deployed RBAC).  `--case` is one of the test's cases (`mixed`, `mixed-warm`,
`8g-only-warm`, `reserved-reclaimed`: the scenario's family, reservation, reclaim rate and wait value).  Prints
the ticks compared, the launches, whether any node was reclaimed, and each tick whose decisions differ
(launches node by node, Provisioned answers, cordons, deletes); exits 1 when any does.  Minutes, not seconds:
every daemon tick is a round of HTTP calls.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from autoscaler.replay.synth import generate
from autoscaler.replay.trace import TraceJob
from tests.fakes.kube_api import FakeKube
from tests.kube.cluster import deployed_rbac
from tests.kube.test_one_path import CASES, daemon_differences, replay


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--regime", default="long-tail")
    ap.add_argument("--jobs", type=int, default=40)
    ap.add_argument("--case", default="reserved-reclaimed", choices=[c.name for c in CASES])
    ap.add_argument("--quota-gpus", type=int, default=128)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    from loguru import logger

    logger.remove()
    gen = generate(a.regime, a.seed)[: a.jobs]
    t0 = gen[0].submit
    jobs = [
        TraceJob(f"j{i}", float(round(j.submit - t0)), float(round(j.duration)), j.gpus, i % 2 == 1)
        for i, j in enumerate(gen)
    ]
    case = next(c for c in CASES if c.name == a.case)
    start = time.monotonic()
    driver, sc = replay(case, jobs, a.quota_gpus)
    fake = FakeKube(rbac=deployed_rbac(cluster_api=False))
    fake.start()
    try:
        diffs = daemon_differences(fake, driver, sc, case)
    finally:
        fake.stop()
    out = {
        "trace": f"synth:{a.regime}:{a.seed}, first {len(jobs)} jobs",
        "case": a.case,
        "quota_gpus": a.quota_gpus,
        "ticks": len(driver.log),
        "launches": sum(len(t.launches) for t in driver.log),
        "reclaims": any(j.attempt for t in driver.log for j in t.jobs),
        "differing_ticks": [
            {"t": round(t, 3), "replay_vs_daemon": {k: [str(x) for x in v] for k, v in d.items()}} for t, d in diffs
        ],
        "wall_s": round(time.monotonic() - start, 1),
        "forbidden": [list(f) for f in fake.forbidden],
    }
    if a.json:
        print(json.dumps(out, indent=1))
    else:
        print(f"{out['trace']}, case {a.case}, quota {a.quota_gpus} GPUs: {out['ticks']} ticks, "
              f"{out['launches']} launches, reclaims {out['reclaims']}, {out['wall_s']} s")  # fmt: skip
        for d in out["differing_ticks"][:10]:
            print(f"  t={d['t']}: {d['replay_vs_daemon']}")
        print("same decisions at every tick" if not diffs else f"{len(diffs)} tick(s) differ")
    return 1 if diffs or fake.forbidden else 0


if __name__ == "__main__":
    sys.exit(main())
