"""Memory of the Kubernetes daemon's watch cache (`autoscaler/kube/cache.py`) against a full pod list per tick.

    .venv/bin/python bench/kube_cache_memory.py [--pods 10000] [--json]

Builds N pods shaped like a Kueue-admitted GPU Job's pod on a GKE node (labels, annotations, an owner, two
managedFields entries, ten env vars, three volumes, tolerations, four conditions, a container status; about
4.4 KB of JSON each), and measures with tracemalloc:

- the list a tick parsed before the twentieth round (`json.loads` of the whole list), which each tick held
  while it ran;
- what the cache keeps resident once the list is dropped (`metadata.managedFields` removed);
- the peak during a re-list (the old copy and the new list at once).

Python objects, not the process's RSS (the interpreter, the client and the rest of the daemon come on top).
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import tracemalloc
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from autoscaler.kube.cache import WatchCache

T0 = "2026-12-04T10:00:00Z"


def pod(i: int) -> dict[str, Any]:
    job = f"train-{i}"
    fields = {
        "f:metadata": {"f:labels": {"f:app": {}, "f:job-name": {}}},
        "f:spec": {"f:containers": {'k:{"name":"train"}': {".": {}, "f:image": {}, "f:resources": {}}}},
    }
    status_fields = {
        "f:status": {
            "f:conditions": {'k:{"type":"Ready"}': {".": {}, "f:status": {}}},
            "f:containerStatuses": {},
            "f:podIP": {},
            "f:startTime": {},
        }
    }
    md = {
        "name": f"{job}-abcde",
        "generateName": f"{job}-",
        "namespace": "team-a",
        "uid": f"0f3c1a2b-{i:08d}-4d5e-8f90-123456789abc",
        "resourceVersion": str(100_000 + i),
        "creationTimestamp": T0,
        "labels": {
            "app": "train",
            "batch.kubernetes.io/job-name": job,
            "kueue.x-k8s.io/queue-name": "team-a",
            "controller-uid": "c" * 36,
            "job-name": job,
            "kueue.x-k8s.io/podset": "main",
        },
        "annotations": {
            "kueue.x-k8s.io/workload": f"job-{job}-1a2b3",
            "autoscaling.x-k8s.io/consume-provisioning-request": f"job-{job}-prov-1",
            "batch.kubernetes.io/job-completion-index": "0",
        },
        "ownerReferences": [
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "name": job,
                "uid": "u" * 36,
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ],
        "managedFields": [
            {
                "manager": "kube-controller-manager",
                "operation": "Update",
                "apiVersion": "v1",
                "time": T0,
                "fieldsType": "FieldsV1",
                "fieldsV1": fields,
            },
            {
                "manager": "kubelet",
                "operation": "Update",
                "apiVersion": "v1",
                "time": T0,
                "fieldsType": "FieldsV1",
                "subresource": "status",
                "fieldsV1": status_fields,
            },
        ],
    }
    gpus = {"nvidia.com/gpu": "8", "cpu": "200", "memory": "1800Gi"}
    container = {
        "name": "train",
        "image": "us-docker.pkg.dev/proj/repo/train@sha256:" + "a" * 64,
        "command": ["python", "-m", "train"],
        "args": ["--config", "/etc/train/config.yaml"],
        "env": [{"name": f"VAR_{k}", "value": f"value-{k}"} for k in range(10)],
        "resources": {"limits": gpus, "requests": dict(gpus)},
        "volumeMounts": [
            {"name": "data", "mountPath": "/data"},
            {"name": "config", "mountPath": "/etc/train"},
            {
                "name": "kube-api-access-abcde",
                "readOnly": True,
                "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
            },
        ],
        "imagePullPolicy": "IfNotPresent",
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
    }
    spec = {
        "nodeName": f"gpu-node-{i % 500}",
        "restartPolicy": "Never",
        "schedulerName": "default-scheduler",
        "serviceAccountName": "default",
        "terminationGracePeriodSeconds": 30,
        "nodeSelector": {"cloud.google.com/gke-nodepool": "a3-highgpu-8g"},
        "tolerations": [
            {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
            {
                "key": "node.kubernetes.io/not-ready",
                "operator": "Exists",
                "effect": "NoExecute",
                "tolerationSeconds": 300,
            },
            {
                "key": "node.kubernetes.io/unreachable",
                "operator": "Exists",
                "effect": "NoExecute",
                "tolerationSeconds": 300,
            },
        ],
        "containers": [container],
        "volumes": [
            {"name": "data", "persistentVolumeClaim": {"claimName": "data"}},
            {"name": "config", "configMap": {"name": "train-config"}},
            {
                "name": "kube-api-access-abcde",
                "projected": {"sources": [{"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}}]},
            },
        ],
    }
    status = {
        "phase": "Running", "hostIP": "10.0.0.1", "podIP": "10.1.0.1", "startTime": T0, "qosClass": "Guaranteed",
        "conditions": [{"type": t, "status": "True", "lastTransitionTime": T0}
                       for t in ("Initialized", "Ready", "ContainersReady", "PodScheduled")],
        "containerStatuses": [{"name": "train", "ready": True, "restartCount": 0, "image": container["image"],
                               "imageID": "sha256:" + "b" * 64, "containerID": "containerd://" + "c" * 64,
                               "started": True, "state": {"running": {"startedAt": T0}}}],
    }  # fmt: skip
    return {"apiVersion": "v1", "kind": "Pod", "metadata": md, "spec": spec, "status": status}


def measure(pods: int) -> dict[str, float]:
    raw = json.dumps({"kind": "PodList", "items": [pod(i) for i in range(pods)]})
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    listed = json.loads(raw)["items"]
    parsed = tracemalloc.get_traced_memory()[0] - base
    cache = WatchCache()
    cache.replace("pods", listed, 0.0)
    del listed
    gc.collect()
    resident = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.reset_peak()
    cache.replace("pods", json.loads(raw)["items"], 1.0)
    relist_peak = tracemalloc.get_traced_memory()[1] - base
    tracemalloc.stop()
    mb = 1e6
    return {
        "pods": pods,
        "json_bytes_per_pod": round(len(raw) / pods),
        "list_parsed_mb": round(parsed / mb, 1),
        "cache_resident_mb": round(resident / mb, 1),
        "relist_peak_mb": round(relist_peak / mb, 1),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pods", type=int, default=10_000)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if args.pods < 1:
        ap.error("--pods must be >= 1")
    res = measure(args.pods)
    if args.json:
        print(json.dumps(res, indent=2))
    else:
        print(f"{res['pods']} pods, {res['json_bytes_per_pod']} bytes of JSON each")
        print(f"a tick's parsed list (before the cache): {res['list_parsed_mb']} MB while the tick ran")
        print(f"the cache, resident:                     {res['cache_resident_mb']} MB")
        print(f"peak during a re-list (old copy + list): {res['relist_peak_mb']} MB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
