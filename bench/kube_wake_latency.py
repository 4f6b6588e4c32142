"""How soon the Kubernetes daemon acts on a watch event between polls, against the local fake API server.

    .venv/bin/python bench/kube_wake_latency.py [--rounds 10] [--json]

The setup of tests/kube/test_watch_e2e.py: the real `kubernetes` client, the fake API server
(tests/fakes/kube_api.py), one Cluster API pool, the daemon's run loop (`KubeRunLoop`) with its watches and a poll
of an hour, so every action after the first tick was woken.  Each round: a ProvisioningRequest for one 8-GPU pod is
created -> the MachineDeployment's replicas rise (request -> launch); the Machine and its Ready Node appear ->
the request is answered Provisioned (Ready -> Provisioned); Kueue deletes the request -> the idle node is cordoned
and, one tick later, its Machine marked and the replicas lowered (request deleted -> scale-down).  Prints the
median / mean / max of each latency: the figure the replay's Kueue gpu-fleet assumes for an event's tick
(`autoscaler.kube.wake.WAKE_LATENCY_S`, 1 s).  What it does not cover: a real API server's watch delivery (a
cache in front of etcd, typically milliseconds) and the reads of a large cluster (thousands of pods per tick).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.fakes.kube_api import FakeKube
from tests.kube.cluster import machine_deployment, pod_template, provisioning_request, reconcile_capi
from tests.kube.test_capi_e2e import NS, cond, daemon, replicas
from tests.kube.test_watch_e2e import running  # the daemon's loop and watches, an hour's poll


def _until(pred: Any, timeout: float = 30.0) -> float:
    """Seconds until `pred()` holds (polled every 5 ms)."""
    t0 = time.monotonic()
    while not pred():
        if time.monotonic() - t0 > timeout:
            raise TimeoutError("the daemon did not act within 30 s")
        time.sleep(0.005)
    return time.monotonic() - t0


def run(rounds: int) -> dict[str, list[float]]:
    fake = FakeKube()
    fake.start()
    fake.create(machine_deployment("neo-h100", NS, "h100"))
    d = daemon(fake, time.time)
    out: dict[str, list[float]] = {"request -> launch": [], "Ready -> Provisioned": [], "deleted -> scale-down": []}
    try:
        with running(d, fake) as loop:
            fake.create(pod_template("train", "team-a", 8))
            for i in range(rounds):
                name = f"wl-{i}"
                fake.create(provisioning_request(name, "team-a", "train", 1))
                out["request -> launch"].append(_until(lambda: replicas(fake) == 1))
                reconcile_capi(fake, NS)
                out["Ready -> Provisioned"].append(
                    _until(lambda n=name: (cond(fake, n, "Provisioned") or {}).get("status") == "True")
                )
                time.sleep(1.2)  # the woken ticks of this round are over (1 s apart at most)
                fake.delete("provisioningrequests", name, "team-a")
                out["deleted -> scale-down"].append(_until(lambda: replicas(fake) == 0))
                reconcile_capi(fake, NS)
                time.sleep(1.2)
    finally:
        fake.stop()
    out["woken ticks"] = [float(loop.woken_ticks)]
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    res = run(args.rounds)
    summary = {
        k: {
            "median_s": round(statistics.median(v), 3),
            "mean_s": round(statistics.mean(v), 3),
            "max_s": round(max(v), 3),
        }
        for k, v in res.items()
        if k != "woken ticks"
    }
    if args.json:
        print(json.dumps({"rounds": args.rounds, "latency": summary, "woken_ticks": res["woken ticks"][0]}, indent=2))
    else:
        for k, v in summary.items():
            print(f"{k:24s} median {v['median_s']:.3f} s  mean {v['mean_s']:.3f} s  max {v['max_s']:.3f} s")
        print(f"woken ticks: {res['woken ticks'][0]:.0f} over {args.rounds} rounds (no poll after the first tick)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
