"""A pod's CPU and memory requests on the Kubernetes path (`autoscaler.kube.pod_fit`): the pools whose nodes hold
them, the nodes whose free room does, and what is said when none does.  Reading GPUs alone, the daemon launched the
smallest GPU shape for a 1-GPU pod asking more CPUs than that machine has; the pod then stayed Pending on a Ready
node and the request was Provisioned for capacity it could not use."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import pytest

from autoscaler.kube.api import KubeApi
from autoscaler.kube.build import build_kube_daemon, gke_inventory, known_labels
from autoscaler.kube.daemonsets import overhead
from autoscaler.kube.pod_fit import GIB, MIB, PodNeeds, estimated_room, gke_allocatable, pod_needs
from autoscaler.kube.source import BOOKING, CONSUMES, condition
from autoscaler.model import Policy
from fleet.inventory import InventoryPool, KubernetesSection, LeaseConfig, parse_inventory
from tests.fakes.compute_api import FakeCompute
from tests.fakes.fixtures import fake_compute_factory  # noqa: F401
from tests.fakes.kube_api import FakeKube
from tests.kube.cluster import LEASE, deployed_rbac, pod_template, provisioning_request

ZONES = ["us-central1-a", "us-central1-b"]
NODEPOOL = "cloud.google.com/gke-nodepool"


def _c(requests: dict | None = None, limits: dict | None = None, **kw: Any) -> dict:
    return {"name": "c", "image": "x", "resources": {"requests": requests or {}, "limits": limits or {}}, **kw}


@pytest.mark.parametrize(
    ("spec", "cpu_milli", "memory"),
    [
        ({"containers": [_c({"cpu": "500m", "memory": "1Gi"}), _c({"cpu": "2"})]}, 2500, GIB),
        ({"containers": [_c(limits={"cpu": "3", "memory": "2Gi"})]}, 3000, 2 * GIB),  # a limit alone is the request
        ({"containers": [_c({"cpu": "1"}, {"cpu": "8"})]}, 1000, 0),  # the request, not the limit
        ({"containers": [_c({"cpu": "1"})], "initContainers": [_c({"cpu": "6"})]}, 6000, 0),  # the larger init
        # a sidecar (restartPolicy Always) runs beside the app containers and beside the init containers after it
        (
            {
                "containers": [_c({"cpu": "1"})],
                "initContainers": [_c({"cpu": "2"}, restartPolicy="Always"), _c({"cpu": "4"})],
            },
            6000,
            0,
        ),
        (
            {"containers": [_c({"cpu": "1", "memory": "1Gi"})], "overhead": {"cpu": "250m", "memory": "120Mi"}},
            1250,
            GIB + 120 * MIB,
        ),
        ({"containers": [{"name": "c", "image": "x"}]}, 0, 0),
    ],
)
def test_what_a_pod_asks_is_what_the_scheduler_counts(spec: dict, cpu_milli: int, memory: int) -> None:
    assert pod_needs(spec) == PodNeeds(cpu_milli, memory)


def test_a_gke_node_offers_its_machine_less_gkes_documented_reservations() -> None:
    """GKE's table ("Plan GKE Standard node sizes"): memory 25 % of the first 4 GiB, 20 % of the next 4, 10 % of the
    next 8, 6 % of the next 112, 2 % above 128, plus the 100 MiB eviction threshold (150 GiB -> 140.14 GiB);
    CPU 6 % of the first core, 1 % of the next, 0.5 % of the next two, 0.25 % above four (26 cores -> 25.865)."""
    cpu, memory = gke_allocatable(26, 150)
    assert cpu == 25865
    assert memory / GIB == pytest.approx(140.1423, abs=1e-4)
    capi = estimated_room(26, 234, gke=False)  # kubeadm reserves nothing by default: the eviction threshold alone
    assert (capi.cpu_milli, capi.memory_bytes) == (26000, 234 * GIB - 100 * MIB)


def _pool(g: int, **kw: Any) -> InventoryPool:
    (p,) = parse_inventory([{
        "name": f"h{g}", "cluster": "gke1", "provider": "gcp", "project": "test-project", "region": "us-central1",
        "zones": ZONES, "machine_type": f"a3-highgpu-{g}g", "gpu_type": "nvidia-h100-80gb", "gpus_per_node": g,
        "capacity_type": "on-demand", "min_nodes": 0, "max_nodes": 4, "instance_group": f"gke-gke1-h{g}",
        "instance_group_urls": [f"https://www.googleapis.com/compute/v1/projects/test-project/zones/{z}/instanceGroupManagers/gke-gke1-h{g}-{z[-1]}" for z in ZONES],  # noqa: E501
        "node_name_prefix": f"gke-gke1-h{g}", "scheduler": "kueue", "platform": "gke", "pool_kind": "gce-mig",
        "gke_cluster": "gke1", "gke_node_pool": f"h{g}", "node_labels": {NODEPOOL: f"h{g}"},
        "vcpus": 26 * g, "memory_gib": 234 * g, **kw,
    }])  # fmt: skip
    return p


POOLS = [_pool(1), _pool(2)]


def _node(name: str, g: int, zone: str) -> dict[str, Any]:
    """A Ready GKE node of the h<g> pool with the allocatable GKE gives a3-highgpu-<g>g."""
    cpu, memory = gke_allocatable(26 * g, 234 * g)
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {NODEPOOL: f"h{g}", "topology.kubernetes.io/zone": zone}},
        "spec": {},
        "status": {"allocatable": {"nvidia.com/gpu": str(g), "cpu": f"{cpu}m", "memory": str(memory)},
                   "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-12-01T10:00:00Z"}]},
    }  # fmt: skip


@pytest.fixture
def env(fake_compute_factory: Callable[..., FakeCompute]):  # noqa: F811
    kube = FakeKube(rbac=deployed_rbac(cluster_api=False))
    kube.start()
    g_of = {f"gke-gke1-h{g}": g for g in (1, 2)}
    compute = fake_compute_factory(
        "test-project", on_boot=lambda name, zone: kube.create(_node(name, g_of[name.rsplit("-", 1)[0]], zone))
    )
    compute.add_inventory([gke_inventory(p) for p in POOLS])
    yield kube, compute
    kube.stop()
    assert not kube.forbidden, f"calls the deployed ServiceAccount may not make: {kube.forbidden}"


def _daemon(kube: FakeKube, compute: FakeCompute):  # type: ignore[no-untyped-def]
    from autoscaler.gce import GceProvider, RetryPolicy

    retry = RetryPolicy(initial=0.01, maximum=0.05, deadline=5.0, attempt_timeout=2.0)
    section = KubernetesSection(in_cluster=False, namespace="gpu-fleet-system", lease=LeaseConfig(name=LEASE))
    return build_kube_daemon(
        section, POOLS, Policy(idle_timeout_s=600.0), api=KubeApi.from_kubeconfig(kube.kubeconfig()),
        gce=lambda pools: GceProvider(pools, endpoint=compute.url, credentials="anonymous", retry=retry), identity="a",
    )  # fmt: skip


def _template(name: str, cpu: str, pool: str | None = None) -> dict[str, Any]:
    t = pod_template(name, "team-a", 1, selector={NODEPOOL: pool} if pool else None)
    t["template"]["spec"]["containers"][0]["resources"]["requests"] = {"cpu": cpu, "memory": "64Gi"}
    return t


def _provisioned(kube: FakeKube, d: Any, name: str) -> dict[str, Any]:
    for _ in range(8):
        r = d.tick()
        assert r.ok, r.error
        pr = kube.get("provisioningrequests", name, "team-a")
        if (condition(pr, "Provisioned") or {}).get("status") == "True" or condition(pr, "Failed"):
            return pr
        time.sleep(0.3)
    return pr


@pytest.mark.gce
def test_a_one_gpu_pod_asking_more_cpus_than_the_one_gpu_machine_has_gets_a_two_gpu_node(env) -> None:  # type: ignore[no-untyped-def]
    kube, compute = env
    kube.create(_template("wide", "30"))  # a3-highgpu-1g offers 25.865 CPUs
    kube.create(provisioning_request("wl-1", "team-a", "wide", 1))
    pr = _provisioned(kube, _daemon(kube, compute), "wl-1")
    assert (condition(pr, "Provisioned") or {}).get("status") == "True", pr.get("status")
    assert [e.name.rsplit("-", 1)[0] for e in compute.events_of("create")] == ["gke-gke1-h2"]


def _warm_node(kube: FakeKube, compute: FakeCompute, d: Any, *, cpu: str, phase: str) -> str:
    """A 2-GPU node the daemon launched for request wl-0 (1 GPU, pinned to h2), with wl-0's pod on it asking `cpu`
    CPUs, in `phase`; its name."""
    kube.create(_template("first", "1", "h2"))
    kube.create(provisioning_request("wl-0", "team-a", "first", 1))
    assert (condition(_provisioned(kube, d, "wl-0"), "Provisioned") or {}).get("status") == "True"
    (warm,) = [e.name for e in compute.events_of("create")]
    kube.create({"apiVersion": "v1", "kind": "Pod",
                 "metadata": {"name": "wl-0-pod", "namespace": "team-a", "annotations": {CONSUMES: "wl-0"}},
                 "spec": {"nodeName": warm, "containers": [_c({"cpu": cpu}, {"nvidia.com/gpu": "1"})]},
                 "status": {"phase": phase}})  # fmt: skip
    return warm


@pytest.mark.gce
def test_a_node_whose_free_cpus_cannot_hold_the_pod_is_not_booked_for_it(env) -> None:  # type: ignore[no-untyped-def]
    """A 2-GPU node runs a 1-GPU pod that asks 40 of its 51.8 CPUs: its other GPU is no place for a pod asking 30
    CPUs, and a second node is launched for it (before, the request was booked onto the free GPU, where the pod
    could never be scheduled)."""
    kube, compute = env
    d = _daemon(kube, compute)
    warm = _warm_node(kube, compute, d, cpu="40", phase="Running")
    kube.create(_template("wide", "30", "h2"))
    kube.create(provisioning_request("wl-1", "team-a", "wide", 1))
    pr = _provisioned(kube, d, "wl-1")
    assert (condition(pr, "Provisioned") or {}).get("status") == "True", pr.get("status")
    booked = json.loads(pr["metadata"]["annotations"][BOOKING])["names"]
    assert warm not in booked and len(compute.events_of("create")) == 2


@pytest.mark.gce
def test_a_pod_no_pools_node_holds_is_answered_failed_with_what_it_asks(env) -> None:  # type: ignore[no-untyped-def]
    kube, compute = env
    kube.create(_template("huge", "500"))
    kube.create(provisioning_request("wl-1", "team-a", "huge", 1))
    pr = _provisioned(kube, _daemon(kube, compute), "wl-1")
    failed = condition(pr, "Failed")
    assert failed is not None and failed["status"] == "True" and failed["reason"] == "CapacityIsNotFound"
    assert "500 CPUs" in failed["message"] and "h2: 500 CPUs (a node offers 51.8)" in failed["message"], failed
    assert compute.events_of("create") == []


@pytest.mark.gce
def test_two_requests_one_plan_puts_on_a_nodes_free_gpus_are_booked_there_only_if_its_cpus_hold_both(env) -> None:  # type: ignore[no-untyped-def]
    """An idle 2-GPU node (51.8 CPUs) and two 1-GPU requests asking 30 CPUs each, in one tick: the planner packs
    both onto its two GPUs; one is booked there and the other is planned again and gets a node of its own (before,
    both were booked there and the second pod could never be scheduled)."""
    kube, compute = env
    d = _daemon(kube, compute)
    warm = _warm_node(kube, compute, d, cpu="1", phase="Succeeded")
    assert d.tick().ok  # its pods arrived and finished: the node is idle, both GPUs free
    kube.create(_template("wide", "30", "h2"))
    for name in ("wl-1", "wl-2"):
        kube.create(provisioning_request(name, "team-a", "wide", 1))
    for name in ("wl-1", "wl-2"):
        assert (condition(_provisioned(kube, d, name), "Provisioned") or {}).get("status") == "True"
    on = {n: json.loads(kube.get("provisioningrequests", n, "team-a")["metadata"]["annotations"][BOOKING])["names"]
          for n in ("wl-1", "wl-2")}  # fmt: skip
    assert sorted(len(set(names) & {warm}) for names in on.values()) == [0, 1], on
    assert len(compute.events_of("create")) == 2


def _daemonset(name: str, cpu: str, memory: str = "0", **spec: Any) -> dict[str, Any]:
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": name, "namespace": "kube-system"},
        "spec": {"selector": {"matchLabels": labels},
                 "template": {"metadata": {"labels": labels},
                              "spec": {"containers": [_c({"cpu": cpu, "memory": memory})], **spec}}},
    }  # fmt: skip


EVERYWHERE = {"tolerations": [{"operator": "Exists"}]}


def _not_in_pool(pool: str) -> dict[str, Any]:
    term = {"matchExpressions": [{"key": NODEPOOL, "operator": "NotIn", "values": [pool]}]}
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}}


def test_the_daemonsets_a_pools_nodes_will_run_are_those_whose_selector_and_tolerations_let_them() -> None:
    """A DaemonSet counts on a pool when its selector matches what the pool's nodes are known to carry (the pool's
    labels, the OS, and on GKE the accelerator, machine type and spot labels GKE sets) and it tolerates the pool's
    NoSchedule / NoExecute taints; a selector on a label not known to be there is not counted."""
    gpu_taint = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
    spot = _pool(1, capacity_type="spot", node_taints=[gpu_taint])
    labels = {"h1": known_labels(spot), "h2": known_labels(_pool(2))}
    taints = {"h1": [gpu_taint], "h2": []}
    gpu_only = {"nodeSelector": {"cloud.google.com/gke-accelerator": "nvidia-h100-80gb"}, **EVERYWHERE}
    daemonsets = [
        _daemonset("logging", "100m", "200Mi", **EVERYWHERE),  # every node
        _daemonset("linux-only", "50m", nodeSelector={"kubernetes.io/os": "linux"}),  # untolerated taint on h1
        _daemonset("gpu-driver", "150m", **gpu_only),
        _daemonset("spot-agent", "1", nodeSelector={"cloud.google.com/gke-spot": "true"}, **EVERYWHERE),
        _daemonset("other-pool", "4", nodeSelector={NODEPOOL: "system"}, **EVERYWHERE),
        _daemonset("rack-agent", "2", nodeSelector={"example.com/rack": "r1"}, **EVERYWHERE),  # unknown label
        _daemonset("not-h2", "300m", affinity=_not_in_pool("h2"), **EVERYWHERE),
    ]
    got = overhead(daemonsets, labels, taints)
    assert got["h1"] == (PodNeeds(100 + 150 + 1000 + 300, 200 * MIB), 4)
    assert got["h2"] == (PodNeeds(100 + 50 + 150, 200 * MIB), 3)


@pytest.mark.gce
@pytest.mark.parametrize(("cpus", "pool"), [("25", "h2"), ("24", "h1")])
def test_a_pools_first_node_is_sized_less_the_daemonset_pods_it_will_run(env, cpus: str, pool: str) -> None:  # type: ignore[no-untyped-def]
    """No node of either pool is Ready.  a3-highgpu-1g offers 25.865 CPUs after GKE's reservations, and every node
    runs a DaemonSet pod asking 1 CPU: a 1-GPU pod asking 25 CPUs fits no such node and gets a 2-GPU one (before, a
    1-GPU node was launched where the pod could never be scheduled), while one asking 24 still gets the 1-GPU node
    (the DaemonSets push no work onto larger machines than it needs).  A DaemonSet selecting another pool's nodes
    takes nothing."""
    kube, compute = env
    kube.create(_daemonset("node-agent", "1", "200Mi", **EVERYWHERE))
    kube.create(_daemonset("system-only", "8", nodeSelector={NODEPOOL: "system"}, **EVERYWHERE))
    kube.create(_template("snug", cpus))
    kube.create(provisioning_request("wl-1", "team-a", "snug", 1))
    pr = _provisioned(kube, _daemon(kube, compute), "wl-1")
    assert (condition(pr, "Provisioned") or {}).get("status") == "True", pr.get("status")
    assert [e.name.rsplit("-", 1)[0] for e in compute.events_of("create")] == [f"gke-gke1-{pool}"]


@pytest.mark.gce
def test_a_pod_selecting_labels_gke_puts_on_every_gpu_node_is_served(env) -> None:  # type: ignore[no-untyped-def]
    """`kubernetes.io/os: linux` (the kubelet's, in most Helm charts) and the GPU model (`cloud.google.com/
    gke-accelerator`, which GKE's docs have GPU pods select) are on every node of a GKE GPU pool: a pod selecting
    them is served, by the pool of that model.  Before, only the pool's own labels were matched, and the request
    was answered Failed: no pool matched its node selector."""
    kube, compute = env
    selector = {"kubernetes.io/os": "linux", "cloud.google.com/gke-accelerator": "nvidia-h100-80gb",
                "node.kubernetes.io/instance-type": "a3-highgpu-2g"}  # fmt: skip
    kube.create(pod_template("gpu", "team-a", 1, selector=selector))
    kube.create(provisioning_request("wl-1", "team-a", "gpu", 1))
    pr = _provisioned(kube, _daemon(kube, compute), "wl-1")
    assert (condition(pr, "Provisioned") or {}).get("status") == "True", pr.get("status")
    assert [e.name.rsplit("-", 1)[0] for e in compute.events_of("create")] == ["gke-gke1-h2"]
