"""End to end on a GKE node pool: a ProvisioningRequest -> the daemon creates named instances in the node
pool's MIGs (the real google-cloud-compute client against the fake Compute server) -> Nodes register (the
fake's boot hook plays the kubelet) -> Provisioned; a stockout in one zone falls back to the other, the gang
whole in one zone."""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import pytest

from autoscaler.kube.api import KubeApi
from autoscaler.kube.build import build_kube_daemon
from autoscaler.kube.leader_state import BACKOFF
from autoscaler.kube.source import condition
from autoscaler.model import Policy
from fleet.inventory import InventoryPool, KubernetesSection, LeaseConfig, parse_inventory
from tests.fakes.compute_api import FakeCompute
from tests.fakes.fixtures import fake_compute_factory  # noqa: F401
from tests.fakes.kube_api import FakeKube
from tests.kube.cluster import LEASE, deployed_rbac, pod_template, provisioning_request, ready_node

ZONES = ["us-central1-a", "us-central1-b"]
NODEPOOL = "cloud.google.com/gke-nodepool"

pytestmark = pytest.mark.gce


def gke_pool() -> InventoryPool:
    (p,) = parse_inventory([{
        "name": "h200", "cluster": "gke1", "provider": "gcp", "project": "test-project", "region": "us-central1",
        "zones": ZONES, "machine_type": "a3-ultragpu-8g", "gpu_type": "nvidia-h200-141gb", "gpus_per_node": 8,
        "capacity_type": "on-demand", "min_nodes": 0, "max_nodes": 8, "instance_group": "gke-gke1-h200",
        "instance_group_urls": [f"https://www.googleapis.com/compute/v1/projects/test-project/zones/{z}/instanceGroupManagers/gke-gke1-h200-{z[-1]}" for z in ZONES],  # noqa: E501
        "node_name_prefix": "gke-gke1-h200", "scheduler": "kueue", "platform": "gke", "pool_kind": "gce-mig",
        "gke_cluster": "gke1", "gke_node_pool": "h200", "node_labels": {NODEPOOL: "h200"},
    }])  # fmt: skip
    return p


@pytest.fixture
def env(fake_compute_factory: Callable[..., FakeCompute]):  # noqa: F811
    kube = FakeKube(rbac=deployed_rbac(cluster_api=False))
    kube.start()

    def boot(name: str, zone: str) -> None:
        kube.create(ready_node(name, {NODEPOOL: "h200"}, zone=zone))

    def gone(name: str, zone: str) -> None:
        kube.delete("nodes", name)

    compute = fake_compute_factory("test-project", on_boot=boot, on_delete=gone)
    from autoscaler.kube.build import gke_inventory

    compute.add_inventory([gke_inventory(gke_pool())])
    yield kube, compute
    kube.stop()
    assert not kube.forbidden, f"calls the deployed ServiceAccount may not make: {kube.forbidden}"


def make_daemon(kube: FakeKube, compute: FakeCompute, identity: str = "a", clock: Callable[[], float] = time.time):
    from autoscaler.gce import GceProvider, RetryPolicy

    retry = RetryPolicy(initial=0.01, maximum=0.05, deadline=5.0, attempt_timeout=2.0)
    section = KubernetesSection(in_cluster=False, namespace="gpu-fleet-system", lease=LeaseConfig(name=LEASE))
    return build_kube_daemon(
        section,
        [gke_pool()],
        Policy(idle_timeout_s=600.0),
        api=KubeApi.from_kubeconfig(kube.kubeconfig()),
        gce=lambda pools: GceProvider(pools, endpoint=compute.url, credentials="anonymous", retry=retry),
        identity=identity,
        clock=clock,
    )


def wait_for(pred, timeout: float = 20.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return
        time.sleep(0.1)
    raise AssertionError("condition not reached")


def test_stockout_in_one_zone_falls_back_to_the_other_and_the_request_is_provisioned(env) -> None:
    kube, compute = env
    compute.stockout("us-central1-a", "a3-ultragpu-8g")
    kube.create(pod_template("train", "team-a", 8))
    kube.create(provisioning_request("wl-1", "team-a", "train", 2))
    d = make_daemon(kube, compute)

    for _ in range(6):
        r = d.tick()
        assert r.ok, r.error
        pr = kube.get("provisioningrequests", "wl-1", "team-a")
        prov = condition(pr, "Provisioned")
        if prov and prov["status"] == "True":
            break
        time.sleep(0.3)
    assert prov and prov["status"] == "True", pr.get("status")
    nodes = kube.list("nodes")
    assert len(nodes) == 2
    assert {n["metadata"]["labels"]["topology.kubernetes.io/zone"] for n in nodes} == {"us-central1-b"}
    created = compute.create_counts()
    assert sum(created.values()) >= 2
    assert all(c == 1 for name, c in created.items() if name in {n["metadata"]["name"] for n in nodes})


def test_a_vm_reclaimed_while_it_boots_is_released_and_the_request_served_again(
    fake_compute_factory: Callable[..., FakeCompute],  # noqa: F811
) -> None:
    """A booked VM is preempted before it is Ready (GCE: TERMINATED, the MIG member RECREATING, which waits for the
    same capacity to come back): the booking is released, the preempted VM deleted, and the request served again
    at once on a new VM, as the replay serves a booked node that vanished.  Before the twenty-seventh round the
    launch was repeated under its request id, so the request waited for the MIG's recreation or for its
    ValidUntilSeconds (tests/kube/test_one_path.py found it)."""
    kube = FakeKube(rbac=deployed_rbac(cluster_api=False))
    kube.start()
    try:
        compute = fake_compute_factory(
            "test-project",
            boot_delay=3600.0,  # nothing boots in this test: the reclaim comes first
            on_delete=lambda name, zone: None,
        )
        from autoscaler.kube.build import gke_inventory

        compute.add_inventory([gke_inventory(gke_pool())])
        kube.create(pod_template("train", "team-a", 8))
        kube.create(provisioning_request("wl-1", "team-a", "train", 1))
        d = make_daemon(kube, compute)
        assert d.tick().ok
        first = [e.name for e in compute.events_of("create")]
        assert len(first) == 1
        assert d.tick().ok  # listed, booting
        compute.preempt(next(z for z in ZONES if compute.events_of("create")[0].zone == z), first[0])
        r = d.tick()
        assert r.ok, r.error
        prov = condition(kube.get("provisioningrequests", "wl-1", "team-a"), "Provisioned")
        assert prov is not None and prov["status"] == "False" and "gone before they were ready" in prov["message"]
        assert first[0] in r.deleted
        assert len(r.launched) == 1, r.launched  # served again in the same tick
        assert len(compute.events_of("create")) == 2  # a new VM (the reclaimed one's name was free again)
    finally:
        kube.stop()
    assert not kube.forbidden


def test_the_next_leader_starts_from_the_stockouts_the_last_one_met(env) -> None:
    """Replica a meets the stockout in us-central1-a and falls back; replica b takes the Lease over and serves the
    next request: it reads a's backoff memory from the Lease and goes straight to us-central1-b, where a replica
    starting from nothing would try the stocked-out zone first (before the twenty-eighth round the memory lived in
    the leader's process)."""
    kube, compute = env
    compute.stockout("us-central1-a", "a3-ultragpu-8g")
    clock = [1_800_000_000.0]
    a, b = (make_daemon(kube, compute, identity=i, clock=lambda: clock[0]) for i in ("a", "b"))
    kube.create(pod_template("train", "team-a", 8))
    kube.create(provisioning_request("wl-1", "team-a", "train", 1))
    for _ in range(4):
        assert a.tick().ok
        assert b.tick().leader is False  # the standby ticks beside the leader, seeing the Lease renewed
        clock[0] += 5
        time.sleep(0.3)
    tried = lambda: [e for e in compute.events if e.kind.startswith("create") and e.zone == "us-central1-a"]  # noqa: E731
    in_a = tried()
    assert any(e.kind == "create-failed" for e in in_a), "replica a met the stockout"
    lease = kube.get("leases", LEASE, "gpu-fleet-system")
    memory = json.loads(lease["metadata"]["annotations"][BACKOFF])
    assert [m["offering"]["zone"] for m in memory] == ["us-central1-a"]

    clock[0] += 20  # a stops renewing; its 15 s lease expires
    kube.create(provisioning_request("wl-2", "team-a", "train", 1))
    r = b.tick()
    assert r.ok and r.leader, r.error
    assert b.memory and b.memory[0].key.zone == "us-central1-a"
    assert tried() == in_a  # not tried again
    assert len([e for e in compute.events_of("create") if e.zone == "us-central1-b"]) == 2  # wl-1's, wl-2's
