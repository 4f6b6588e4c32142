"""How soon the Kubernetes daemon acts on a watch event between polls, against the local fake API server.

    .venv/bin/python bench/kube_wake_latency.py [--rounds 10] [--pods N] [--no-cache] [--json]

The setup of tests/kube/test_watch_e2e.py: the real `kubernetes` client, the fake API server
(tests/fakes/kube_api.py), one Cluster API pool, the daemon's run loop (`KubeRunLoop`) with its watches and a poll
of an hour, so every action after the first tick was woken.  Each round: a ProvisioningRequest for one 8-GPU pod is
created -> the MachineDeployment's replicas rise (request -> launch); the Machine and its Ready Node appear ->
the request is answered Provisioned (Ready -> Provisioned); Kueue deletes the request -> the idle node is cordoned
and, one tick later, its Machine marked and the replicas lowered (request deleted -> scale-down).  Prints the
median / mean / max of each latency: the figure the replay's Kueue gpu-fleet assumes for an event's tick
(`autoscaler.kube.wake.WAKE_LATENCY_S`, 1 s).

`--pods N` adds N running CPU pods on 20 CPU nodes (the rest of a cluster, which the daemon's reads carry), and
the bench also counts what the rounds cost the API server: list calls and objects listed, by resource, and each
tick's time.  `--no-cache` runs the daemon as before the twentieth round (`loop.watch_cache: false`: every tick
lists ProvisioningRequests, Nodes, Pods and Machines).  What it does not cover: a real API server's watch delivery
(a cache in front of etcd, typically milliseconds) and its cost per listed object, which is not the fake's.
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
from tests.kube.cluster import machine_deployment, pod_template, provisioning_request, ready_node, reconcile_capi
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


def background(fake: FakeKube, pods: int, nodes: int = 20) -> None:
    """`pods` running CPU pods spread over `nodes` CPU nodes: the rest of a cluster."""
    for i in range(nodes if pods else 0):
        node = ready_node(f"cpu-{i}", {"pool": "cpu"}, gpus=0)
        node["status"]["allocatable"].pop("nvidia.com/gpu")
        fake.create(node)
    for i in range(pods):
        fake.create({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"web-{i}", "namespace": "apps",
                     "labels": {"app": "web"}}, "spec": {"nodeName": f"cpu-{i % nodes}", "containers": [
                     {"name": "web", "image": "nginx", "resources": {"requests": {"cpu": "100m"}}}]},
                     "status": {"phase": "Running"}})  # fmt: skip


def run(rounds: int, pods: int = 0, cache: bool = True) -> dict[str, Any]:
    fake = FakeKube()
    fake.start()
    fake.create(machine_deployment("neo-h100", NS, "h100"))
    background(fake, pods)
    d = daemon(fake, time.time)
    tick_s: list[float] = []
    real_tick = d.tick

    def timed_tick() -> Any:
        t0 = time.perf_counter()
        try:
            return real_tick()
        finally:
            tick_s.append(time.perf_counter() - t0)

    d.tick = timed_tick  # type: ignore[method-assign]
    out: dict[str, Any] = {"request -> launch": [], "Ready -> Provisioned": [], "deleted -> scale-down": []}
    try:
        with running(d, fake, cache=cache) as loop:
            lists0, objects0, ticks0 = dict(fake.lists), dict(fake.listed_objects), len(tick_s)
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
            lists = {k: v - lists0.get(k, 0) for k, v in fake.lists.items() if v - lists0.get(k, 0)}
            objects = {k: v - objects0.get(k, 0) for k, v in fake.listed_objects.items() if v - objects0.get(k, 0)}
    finally:
        fake.stop()
    ticks = tick_s[ticks0:]
    out["woken ticks"] = loop.woken_ticks
    out["api"] = {
        "ticks": len(ticks),
        "tick_median_s": round(statistics.median(ticks), 4),
        "tick_max_s": round(max(ticks), 4),
        "list_calls": lists,
        "objects_listed": objects,
        "objects_listed_per_tick": round(sum(objects.values()) / max(1, len(ticks)), 1),
    }
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--pods", type=int, default=0, help="running CPU pods elsewhere in the cluster")
    ap.add_argument("--no-cache", action="store_true", help="every tick lists (loop.watch_cache: false)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if args.rounds < 1 or args.pods < 0:
        ap.error("--rounds must be >= 1 and --pods >= 0")
    res = run(args.rounds, args.pods, cache=not args.no_cache)
    summary = {
        k: {
            "median_s": round(statistics.median(v), 3),
            "mean_s": round(statistics.mean(v), 3),
            "max_s": round(max(v), 3),
        }
        for k, v in res.items()
        if isinstance(v, list)
    }
    api = res["api"]
    if args.json:
        print(json.dumps({"rounds": args.rounds, "pods": args.pods, "cache": not args.no_cache, "latency": summary,
                          "woken_ticks": res["woken ticks"], "api": api}, indent=2))  # fmt: skip
    else:
        for k, v in summary.items():
            print(f"{k:24s} median {v['median_s']:.3f} s  mean {v['mean_s']:.3f} s  max {v['max_s']:.3f} s")
        print(f"woken ticks: {res['woken ticks']} over {args.rounds} rounds (no poll after the first tick)")
        print(f"ticks: {api['ticks']}, each median {api['tick_median_s']:.4f} s, max {api['tick_max_s']:.4f} s")
        print(f"list calls: {api['list_calls']}")
        print(f"objects listed: {api['objects_listed']} ({api['objects_listed_per_tick']} per tick)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
