"""What the Kubernetes daemon's old idle clock would have cost: the Kueue replay with it emulated, against as built.

    .venv/bin/python bench/kube_idle_clock_whatif.py [--trace synth:short] [--json]

Until the twenty-seventh round `KubeDaemon` counted a node no tick had seen idle as idle since it became Ready
(`autoscaler.kube.source.inventory_nodes`), so a node that had been busy longer than its shape's idle timeout was
cordoned at the first tick after its pods finished.  The replay's Kubernetes driver always counted from the first
poll that saw the node idle, which the daemon does now.  This replays `--trace` behind the default Kueue gate
(`fleet simulate --scheduler kueue --policy gpu-fleet`, defaults, seed 0) twice: as built, and with the driver's
idle clock set to the node's registration the first time it is seen idle (the old daemon's rule).  Prints cost,
ratio to the bound, p50 / p95 wait and launches of each.  What it does not cover: the old daemon's other
defects of that round (docs/simulate.md), which need packed requests or reclaims.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from autoscaler.model import NodeState
from autoscaler.replay.gpu_fleet_kube import GpuFleetKubePolicy
from autoscaler.replay.kueue_gate import KueueSetup
from autoscaler.replay.run import run_scenario
from autoscaler.replay.scenario import Scenario
from autoscaler.replay.synth import load_source

FIELDS = ("cost_usd", "cost_ratio", "wait_p50_s", "wait_p95_s", "nodes_launched")


def _run(src: str) -> dict[str, Any]:
    _, jobs = load_source(src)
    res = run_scenario(jobs, Scenario(trace=src), ["gpu-fleet"], kueue=KueueSetup())
    m = res.as_json()["policies"]["gpu-fleet"]
    return {k: m[k] for k in FIELDS}


def _old_idle_clock() -> None:
    """The driver's nodes, idle since registration when first seen idle (the old daemon's fallback)."""
    built = GpuFleetKubePolicy._node

    def node(self: GpuFleetKubePolicy, n: Any, booked: int, now: float) -> Any:
        idle = n.registered and not n.jobs and not booked and n.nominated_for is None
        if idle and n.state is not NodeState.DRAINING and n.name not in self._idle_since:
            self._idle_since[n.name] = n.ready_at if n.ready_at is not None else now
        return built(self, n, booked, now)

    GpuFleetKubePolicy._node = node  # type: ignore[method-assign]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", default="synth:short", help="synth:REGIME[:SEED] or an ITP CSV")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    out = {"trace": a.trace, "as_built": _run(a.trace)}
    _old_idle_clock()
    out["old_idle_clock"] = _run(a.trace)
    if a.json:
        print(json.dumps(out, indent=1))
    else:
        for k in ("as_built", "old_idle_clock"):
            m = out[k]
            print(f"{a.trace} {k:15s} ${m['cost_usd']:,.0f} x{m['cost_ratio']:.4f} p50 {m['wait_p50_s']:.0f} s "
                  f"p95 {m['wait_p95_s']:.0f} s, {m['nodes_launched']:,} launches")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
