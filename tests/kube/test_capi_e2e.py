"""End to end on a Cluster API pool: a pending Kueue workload's ProvisioningRequest -> the daemon raises the
MachineDeployment's replicas -> Machines and Nodes appear -> the request is Provisioned; too big -> Failed;
idle -> the marked Machine goes, never a busy one.  The real `kubernetes` client against the fake API server."""

from __future__ import annotations

import datetime
import json
import time

import pytest
from loguru import logger

from autoscaler.cloud import LaunchRequest, shared_reads
from autoscaler.kube.api import KubeApi
from autoscaler.kube.build import build_kube_daemon
from autoscaler.kube.loop import KubeDaemon
from autoscaler.kube.source import ARRIVED, BOOKING, CONSUMES, condition
from autoscaler.model import Policy
from fleet.inventory import InventoryPool, KubernetesSection, LeaseConfig
from tests.fakes.kube_api import FakeKube
from tests.kube.cluster import (
    LEASE,
    POOL_LABEL,
    bound_pod,
    create_machine,
    deployed_rbac,
    machine_deployment,
    pod_template,
    provisioning_request,
    ready_node,
    reconcile_capi,
)

NS = "capi-system"


def capi_pool(name: str = "h100", max_nodes: int = 4, price: float = 24.0) -> InventoryPool:
    return InventoryPool(
        name=name, cluster="neo", provider="neocloud", project="neo-project", region="us-central1", zones=[],
        failure_domain="dc-1",
        machine_type=f"{name}-8x", gpu_type="nvidia-h100-80gb", gpus_per_node=8, capacity_type="on-demand",
        min_nodes=0, max_nodes=max_nodes, instance_group=f"neo-{name}", node_name_prefix=name, scheduler="kueue",
        platform="kubernetes", pool_kind="capi-machinedeployment", capi_namespace=NS,
        capi_machine_deployment=f"neo-{name}", node_labels={POOL_LABEL: name}, price_per_hour=price,
        price_source="spec",
    )  # fmt: skip


class Clock:
    def __init__(self) -> None:
        self.t = time.time()  # the fake stamps creationTimestamp with the real clock

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def cluster():
    fake = FakeKube(rbac=deployed_rbac(cluster_api=True))  # the daemon may do only what the stack lets it
    fake.start()
    fake.create(machine_deployment("neo-h100", NS, "h100"))
    yield fake
    fake.stop()
    assert not fake.forbidden, f"calls the deployed ServiceAccount may not make: {fake.forbidden}"


def daemon(fake: FakeKube, clock: Clock, identity: str = "a", pools: list[InventoryPool] | None = None, **policy):
    section = KubernetesSection(in_cluster=False, namespace="gpu-fleet-system", lease=LeaseConfig(name=LEASE))
    return build_kube_daemon(
        section,
        pools or [capi_pool()],
        Policy(idle_timeout_s=policy.pop("idle_timeout_s", 0.0), **policy),
        api=KubeApi.from_kubeconfig(fake.kubeconfig()),
        identity=identity,
        clock=clock,
    )


def replicas(fake: FakeKube) -> int:
    return int(fake.get("machinedeployments", "neo-h100", NS)["spec"]["replicas"])


def cond(fake: FakeKube, name: str, kind: str, ns: str = "team-a") -> dict | None:
    return condition(fake.get("provisioningrequests", name, ns), kind)


def served(cluster: FakeKube, clock: Clock, nodes: int) -> tuple[KubeDaemon, list[str]]:
    """A daemon that served request wl-1 for `nodes` 8-GPU pods (launched, Machines and Nodes up, Provisioned), and
    the Machines' names, sorted."""
    d = daemon(cluster, clock)
    cluster.create(pod_template("train", "team-a", 8))
    cluster.create(provisioning_request("wl-1", "team-a", "train", nodes))
    d.tick()
    reconcile_capi(cluster, NS)
    d.tick()
    return d, sorted(m["metadata"]["name"] for m in cluster.list("machines", NS))


def test_a_workload_gets_its_nodes_and_the_request_is_provisioned(cluster: FakeKube) -> None:
    clock = Clock()
    d = daemon(cluster, clock)
    cluster.create(pod_template("train", "team-a", 8))
    cluster.create(provisioning_request("wl-1", "team-a", "train", 2))

    r = d.tick()
    assert r.ok and r.leader, r.error
    assert replicas(cluster) == 2
    assert cond(cluster, "wl-1", "Accepted")["status"] == "True"
    assert cond(cluster, "wl-1", "Provisioned") is None  # not before the nodes are Ready

    clock.t += 10
    d.tick()
    assert replicas(cluster) == 2  # no second launch while Machines are on the way
    reconcile_capi(cluster, NS)
    clock.t += 10
    d.tick()
    prov = cond(cluster, "wl-1", "Provisioned")
    assert prov["status"] == "True" and prov["reason"] == "Provisioned"
    assert replicas(cluster) == 2


def test_a_request_s_pod_template_is_read_once_not_at_every_tick_while_the_request_lives(cluster: FakeKube) -> None:
    """A Provisioned request lives as long as its workload runs (Kueue deletes it at the end), so reading the
    PodTemplates of every request at every tick was one GET per running workload per tick.  Kueue names a
    template per request attempt and never changes it: it is read once, and forgotten with its request."""
    clock = Clock()
    d, _ = served(cluster, clock, 1)
    assert (cond(cluster, "wl-1", "Provisioned") or {}).get("status") == "True"
    read = cluster.gets.get("podtemplates", 0)
    assert read == 1
    for _ in range(5):
        clock.t += 10
        assert d.tick().ok
    assert cluster.gets.get("podtemplates", 0) == read
    cluster.delete("provisioningrequests", "wl-1", "team-a")  # the workload finished
    clock.t += 10
    d.tick()
    cluster.create(provisioning_request("wl-1", "team-a", "train", 1))  # a new request naming the same template
    clock.t += 10
    d.tick()
    assert cluster.gets.get("podtemplates", 0) == read + 1  # read again: the first request's copy went with it


def test_a_workload_no_pool_can_hold_fails_with_the_reason_and_nothing_runs(cluster: FakeKube) -> None:
    d = daemon(cluster, Clock())
    cluster.create(pod_template("huge", "team-a", 8))
    cluster.create(provisioning_request("wl-big", "team-a", "huge", 6))  # the pool holds at most 4 nodes
    d.tick()
    failed = cond(cluster, "wl-big", "Failed")
    assert failed is not None and failed["status"] == "True", cluster.get("provisioningrequests", "wl-big", "team-a")
    assert failed["reason"] == "CapacityIsNotFound" and "holds 4 nodes" in failed["message"]
    assert replicas(cluster) == 0 and not cluster.list("machines", NS)


def test_idle_nodes_go_by_their_marked_machine_and_busy_ones_stay(cluster: FakeKube) -> None:
    clock = Clock()
    d, (busy, idle) = served(cluster, clock, 2)
    # the workload ran; one pod is still running on `busy`, and Kueue deleted the request when it finished
    cluster.create(bound_pod("train-0", "team-a", busy))
    cluster.delete("provisioningrequests", "wl-1", "team-a")
    clock.t += 60
    d.tick()  # idle timeout 0: cordon the idle node
    assert cluster.get("nodes", idle)["spec"].get("unschedulable") is True
    assert not cluster.get("nodes", busy)["spec"].get("unschedulable")
    clock.t += 10
    d.tick()  # delete: mark the Machine, then one replica less
    assert cluster.get("machines", idle, NS)["metadata"]["annotations"]["cluster.x-k8s.io/delete-machine"] == "yes"
    assert replicas(cluster) == 1
    reconcile_capi(cluster, NS)
    assert [m["metadata"]["name"] for m in cluster.list("machines", NS)] == [busy]
    clock.t += 10
    d.tick()
    assert replicas(cluster) == 1  # the busy node is never touched


def test_a_node_left_with_a_finished_job_pod_and_a_static_pod_is_idle_and_goes(cluster: FakeKube) -> None:
    """A Job's pods stay listed after they succeed (until the Job or its `ttlSecondsAfterFinished` removes them),
    and kubelet's static pods (kube-proxy on GKE) show as mirror pods on every node: neither keeps a node busy,
    in the inventory nor in the check before the node goes, and neither is evicted."""
    clock = Clock()
    d, (node,) = served(cluster, clock, 1)
    cluster.create(bound_pod("train-0", "team-a", node, "Succeeded"))
    cluster.create(bound_pod(f"kube-proxy-{node}", "kube-system", node, **{"kubernetes.io/config.mirror": "0f3c"}))
    cluster.delete("provisioningrequests", "wl-1", "team-a")  # the workload finished: Kueue deleted its request
    clock.t += 60
    d.tick()  # idle timeout 0: cordon
    assert cluster.get("nodes", node)["spec"].get("unschedulable") is True
    clock.t += 10
    r = d.tick()  # delete: mark the Machine, one replica less
    assert r.deleted == [node]
    assert cluster.get("machines", node, NS)["metadata"]["annotations"]["cluster.x-k8s.io/delete-machine"] == "yes"
    assert replicas(cluster) == 0
    assert not [w for w in cluster.writes if w[0] == "evict"]  # nothing evicted


def test_the_fake_refuses_what_the_real_schema_refuses(cluster: FakeKube) -> None:
    api = KubeApi.from_kubeconfig(cluster.kubeconfig())
    from autoscaler.kube.api import KubeError

    cluster.create(provisioning_request("ok", "team-a", "t", 1))
    with pytest.raises(KubeError) as err:
        api.patch_provisioning_request_status("team-a", "ok", {"status": {"conditions": [{"type": "Provisioned"}]}})
    assert err.value.status == 422 and "lastTransitionTime" in err.value.message
    with pytest.raises(KubeError) as err:
        api.patch_machine_deployment(NS, "neo-h100", {"spec": {"replicas": "two"}})
    assert err.value.status == 422


def test_the_fake_refuses_what_the_deployed_rbac_does_not_grant(cluster: FakeKube) -> None:
    """The daemon's tests run bound to the rules the stack deploys (`deployed_rbac`): a call outside them is 403
    Forbidden, as the API server's RBAC authorizer answers.  Before the twentieth round the deployed ClusterRole
    granted neither reading PodTemplates nor patching a request's booking annotation, so the daemon as deployed
    could serve no request; the fake allowed everything."""
    from autoscaler.kube.api import KubeError

    api = KubeApi.from_kubeconfig(cluster.kubeconfig())
    cluster.create(pod_template("train", "team-a", 8))
    assert api.pod_template("team-a", "train")["metadata"]["name"] == "train"
    cluster.create(ready_node("n1", {}))
    delete_node = api.core.delete_node  # the daemon never deletes a Node object: the cloud's controller does
    for call in (lambda: api._call(delete_node, "n1"), lambda: api.lease("gpu-fleet-system", "another-lease")):
        with pytest.raises(KubeError) as err:
            call()
        assert err.value.status == 403 and err.value.reason == "Forbidden"
    assert [f[:2] for f in cluster.forbidden] == [("delete", "nodes"), ("get", "leases")]
    cluster.forbidden.clear()  # refused on purpose here


def test_the_fake_refuses_annotations_past_the_api_servers_256_kib(cluster: FakeKube) -> None:
    """The settings history rides on the Lease as an annotation (`autoscaler.kube.leader_state`), kept under half of
    what the API server takes for all of an object's annotations; past 256 KiB the write is 422, here as there."""
    from autoscaler.kube.api import KubeError

    api = KubeApi.from_kubeconfig(cluster.kubeconfig())
    cluster.create(provisioning_request("big", "team-a", "t", 1))
    patch = {"metadata": {"annotations": {"example.com/blob": "x" * (256 * 1024)}}}
    with pytest.raises(KubeError) as err:
        api.patch_provisioning_request("team-a", "big", patch)
    assert err.value.status == 422 and "metadata.annotations" in err.value.message
    api.patch_provisioning_request("team-a", "big", {"metadata": {"annotations": {"example.com/blob": "x" * 1024}}})


def test_the_fake_refuses_a_field_selector_the_api_server_does_not_index(cluster: FakeKube) -> None:
    """The daemon lists a node's pods by `spec.nodeName`, which the API server indexes; a field it does not (a
    Pod's `status.hostIP`) is 400 BadRequest there, and here."""
    from autoscaler.kube.api import KubeError

    api = KubeApi.from_kubeconfig(cluster.kubeconfig())
    cluster.create(bound_pod("p-0", "team-a", "n1"))
    assert [p["metadata"]["name"] for p in api.pods_on("n1")] == ["p-0"] and api.pods_on("n2") == []
    with pytest.raises(KubeError) as err:
        api._call(api.core.list_pod_for_all_namespaces, field_selector="status.hostIP=10.0.0.1")
    assert err.value.status == 400 and "field label not supported: status.hostIP" in err.value.message


def test_the_fake_refuses_a_lease_the_api_servers_lease_validation_refuses(cluster: FakeKube) -> None:
    """A released Lease says 1 s (`LeaseElector.release`, as client-go's release record): the API server refuses a
    duration of 0 or less, and negative transitions (pkg/apis/coordination/validation), here as there."""
    from autoscaler.kube.api import KubeError

    api = KubeApi.from_kubeconfig(cluster.kubeconfig())
    metadata = {"name": LEASE, "namespace": "gpu-fleet-system"}
    body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": metadata, "spec": {}}
    body["spec"] = {"leaseDurationSeconds": 0}
    with pytest.raises(KubeError) as err:
        api.create_lease("gpu-fleet-system", body)
    assert err.value.status == 422 and "spec.leaseDurationSeconds" in err.value.message
    body["spec"] = {"leaseDurationSeconds": 1, "leaseTransitions": -1}
    with pytest.raises(KubeError) as err:
        api.create_lease("gpu-fleet-system", body)
    assert err.value.status == 422 and "spec.leaseTransitions" in err.value.message
    body["spec"] = {"leaseDurationSeconds": 1}
    api.create_lease("gpu-fleet-system", body)


def test_the_fake_refuses_a_request_without_its_service_account_token_over_tls(tmp_path) -> None:
    """The in-cluster client speaks HTTPS with the pod's token (`bearer`, lower case, as the client sends it):
    with `token` set the fake answers anything else 401 Unauthorized, as the API server's authenticator does."""
    from autoscaler.kube.api import KubeError
    from tests.fakes.metadata_secrets import make_tls

    ca, tls = make_tls(tmp_path, ("127.0.0.1",))
    fake = FakeKube(token="the-pods-token")
    fake.start(tls=tls)
    try:
        assert fake.url.startswith("https://127.0.0.1:")
        config = fake.kubeconfig()
        config["clusters"][0]["cluster"]["certificate-authority"] = str(ca)
        assert KubeApi.from_kubeconfig(config).lease("gpu-fleet-system", LEASE) is None  # 404: allowed, absent
        config["users"][0]["user"]["token"] = "someone-elses"
        with pytest.raises(KubeError) as err:
            KubeApi.from_kubeconfig(config).lease("gpu-fleet-system", LEASE)
        assert err.value.status == 401
    finally:
        fake.stop()


def test_unschedulable_pods_of_an_admitted_workload_get_capacity(cluster: FakeKube) -> None:
    """A workload whose request was Provisioned lost a node: its pods are Unschedulable again and no request
    stands for them; the daemon launches for them (one gang, both pods) and not twice."""
    d = daemon(cluster, Clock())
    for i in range(2):
        cluster.create({
            "apiVersion": "v1", "kind": "Pod",
            # what Kueue puts on an admitted pod: the podset label and the request it consumes (podSetUpdates)
            "metadata": {"name": f"train-{i}", "namespace": "team-a", "labels": {"kueue.x-k8s.io/podset": "main"},
                         "annotations": {CONSUMES: "wl-9-prov-1"}},
            "spec": {"containers": [{"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "8"}}}]},
            "status": {"phase": "Pending", "conditions": [
                {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]},
        })  # fmt: skip
    clock = d.clock
    r = d.tick()
    assert r.ok, r.error
    assert replicas(cluster) == 2
    clock.t += 10  # a later tick (the launch's request id is new), before the MachineSet controller acted
    d.tick()
    assert replicas(cluster) == 2  # the replicas on their way hold the pods' place
    reconcile_capi(cluster, NS)
    clock.t += 10
    d.tick()
    assert replicas(cluster) == 2  # and so do their Machines


def test_replicas_no_machine_stands_for_are_counted_as_on_their_way(cluster: FakeKube) -> None:
    """What the daemon counts as in flight beyond its bookings: raised replicas without Machines, a Machine someone
    deleted (the controller replaces it), never a Machine the daemon took off the replicas, never below zero."""
    d, (m0, m1) = served(cluster, Clock(), 2)
    capi = d.kp.providers["h100"]
    assert capi.unseen_replicas("h100")[0] == 0
    cluster.update("machines", m0, NS, lambda m: m["metadata"].update(deletionTimestamp="2026-01-01T00:00:00Z"))
    assert capi.unseen_replicas("h100")[0] == 1  # its replacement is on its way
    capi.delete("h100", [m1])  # marked and taken off the replicas, still listed until the controller acts
    assert replicas(cluster) == 1 and len(cluster.list("machines", NS)) == 2
    assert capi.unseen_replicas("h100")[0] == 1  # still only m0's replacement
    reconcile_capi(cluster, NS)
    create_machine(cluster, cluster.get("machinedeployments", "neo-h100", NS), "surge-0")  # a rollout's surge
    assert capi.unseen_replicas("h100") == (0, capi.key(capi.pools["h100"]))


def test_a_tick_reads_each_machine_deployment_once_and_afresh_for_its_own_writes(cluster: FakeKube) -> None:
    """The offerings and the replicas on their way read the MachineDeployment once per tick (`shared_reads`); a
    launch reads it afresh for its conditional patch, and a read after that write sees the new replicas."""
    clock = Clock()
    d, _ = served(cluster, clock, 2)
    before = cluster.gets.get("machinedeployments", 0)
    clock.t += 10
    assert d.tick().ok
    assert cluster.gets.get("machinedeployments", 0) == before + 1  # a quiet tick: one GET, not one per reader
    capi = d.kp.providers["h100"]
    with shared_reads([capi]):
        assert capi.unseen_replicas("h100")[0] == 0
        capi.launch(LaunchRequest("rq-1", "h100", capi.key(capi.pools["h100"]), ("h100-2",)))
        assert capi.unseen_replicas("h100")[0] == 1  # its own write dropped the shared copy
    assert replicas(cluster) == 3


def test_a_pool_floor_is_launched_once_while_its_machines_are_not_listed_yet(cluster: FakeKube) -> None:
    """`min_nodes: 1`: the first tick raises replicas to 1; the ticks before the MachineSet controller creates
    the Machine see the replica on its way and launch nothing more (they raised it to 2, 3, ... before)."""
    clock = Clock()
    d = daemon(cluster, clock, pools=[capi_pool().model_copy(update={"min_nodes": 1})])
    assert d.tick().ok
    assert replicas(cluster) == 1
    for _ in range(3):
        clock.t += 10
        assert d.tick().ok
    assert replicas(cluster) == 1
    reconcile_capi(cluster, NS)
    clock.t += 10
    d.tick()
    assert replicas(cluster) == 1 and len(cluster.list("machines", NS)) == 1


def test_replicas_that_never_get_machines_are_named_in_one_warning_and_not_launched_again(cluster: FakeKube) -> None:
    """A MachineSet controller that creates nothing (paused, broken template): the floor's replica stays on its way,
    nothing more is launched, and after two minutes one warning names the pool."""
    clock = Clock()
    d = daemon(cluster, clock, pools=[capi_pool().model_copy(update={"min_nodes": 1})])
    warnings: list[str] = []
    sink = logger.add(lambda m: warnings.append(str(m)), level="WARNING", format="{message}")
    try:
        for _ in range(30):  # five minutes of 10 s ticks
            assert d.tick().ok
            clock.t += 10
        assert replicas(cluster) == 1
        assert len([w for w in warnings if "have had no Machine" in w]) == 1, warnings
        assert "pool h100: 1 replica(s)" in warnings[-1]
        reconcile_capi(cluster, NS)  # the controller recovers: the spell ends
        d.tick()
        assert replicas(cluster) == 1
    finally:
        logger.remove(sink)


def test_a_request_planned_onto_a_replica_on_its_way_is_booked_on_its_machine_once_it_appears(
    cluster: FakeKube,
) -> None:
    """The floor's replica is on its way, no Machine yet: a 1-node request is planned onto it, not launched for
    and not booked on a name no Machine will have; once the Machine is listed, the request is booked on it."""
    clock = Clock()
    d = daemon(cluster, clock, pools=[capi_pool().model_copy(update={"min_nodes": 1})])
    d.tick()
    cluster.create(pod_template("train", "team-a", 8))
    cluster.create(provisioning_request("wl-1", "team-a", "train", 1))
    clock.t += 10
    d.tick()
    assert replicas(cluster) == 1
    assert BOOKING not in (cluster.get("provisioningrequests", "wl-1", "team-a")["metadata"].get("annotations") or {})
    reconcile_capi(cluster, NS)
    clock.t += 10
    d.tick()
    (machine,) = [m["metadata"]["name"] for m in cluster.list("machines", NS)]
    booking = json.loads(cluster.get("provisioningrequests", "wl-1", "team-a")["metadata"]["annotations"][BOOKING])
    assert booking["names"] == [machine] and replicas(cluster) == 1
    assert cond(cluster, "wl-1", "Provisioned")["status"] == "True"


def _unschedulable_pod(name: str, workload: str, selector: dict[str, str]) -> dict:
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "team-a", "labels": {"kueue.x-k8s.io/podset": "main"},
                     "annotations": {CONSUMES: f"{workload}-prov-1"}},
        "spec": {"nodeSelector": selector,
                 "containers": [{"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "8"}}}]},
        "status": {"phase": "Pending", "conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]},
    }  # fmt: skip


def test_a_workload_whose_pods_select_a_pool_gets_nodes_in_that_pool_not_the_cheapest(cluster: FakeKube) -> None:
    """Two pools; the pods' nodeSelector names the dearer one.  The request and the unschedulable pods of another
    workload both grow that pool: a node of the cheaper pool is one the pods could never be scheduled on (before
    the tenth round the selector reached only the failure message, and the cheaper pool grew).  Both nodes come
    in one tick: before the eleventh round the pods' share of the shared scale-up waited a tick for its own plan."""
    cluster.create(machine_deployment("neo-h200", NS, "h200"))
    pools = [capi_pool(), capi_pool("h200", price=30.0)]
    d = daemon(cluster, Clock(), pools=pools)
    cluster.create(pod_template("train", "team-a", 8, selector={POOL_LABEL: "h200"}))
    cluster.create(provisioning_request("wl-1", "team-a", "train", 1))
    cluster.create(_unschedulable_pod("lost-0", "wl-9", {POOL_LABEL: "h200"}))
    r = d.tick()  # one scale-up for both: the request books and launches its node, the pods' share launches too
    assert r.ok, r.error
    assert replicas(cluster) == 0
    assert int(cluster.get("machinedeployments", "neo-h200", NS)["spec"]["replicas"]) == 2


def test_a_busy_node_oversized_for_its_pods_is_cordoned_nothing_evicted_and_goes_once_empty(cluster: FakeKube) -> None:
    """Issue 8, item 4 on Kubernetes: an 8-GPU node whose only pod uses 1 GPU, where a 1-GPU shape costs the same
    per GPU and no idle node is kept, is cordoned (`spec.unschedulable`) while the pod runs: nothing is evicted and
    the Machine stays; once the pod is gone the node goes by its marked Machine."""
    cluster.create(machine_deployment("neo-h1", NS, "h1"))
    small = capi_pool("h1", price=3.0).model_copy(update={"gpus_per_node": 1, "machine_type": "h1-1x"})
    clock = Clock()
    d = daemon(cluster, clock, pools=[capi_pool(), small])
    cluster.create(pod_template("train", "team-a", 8))
    cluster.create(provisioning_request("wl-1", "team-a", "train", 1))
    d.tick()
    reconcile_capi(cluster, NS)
    d.tick()
    (node,) = [m["metadata"]["name"] for m in cluster.list("machines", NS)]
    # the workload ran and left one 1-GPU pod behind on the 8-GPU node; Kueue deleted the request
    cluster.create({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "eval-0", "namespace": "team-a"},
                    "spec": {"nodeName": node, "containers": [{"name": "c", "image": "x",
                             "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
                    "status": {"phase": "Running"}})  # fmt: skip
    cluster.delete("provisioningrequests", "wl-1", "team-a")
    clock.t += 60
    r = d.tick()
    assert r.ok, r.error
    assert cluster.get("nodes", node)["spec"].get("unschedulable") is True  # cordoned while its pod runs
    assert cluster.get("pods", "eval-0", "team-a")["status"]["phase"] == "Running"  # nothing evicted
    assert "annotations" not in cluster.get("machines", node, NS)["metadata"] and replicas(cluster) == 1
    cluster.delete("pods", "eval-0", "team-a")  # the pod finished
    clock.t += 10
    d.tick()
    assert cluster.get("machines", node, NS)["metadata"]["annotations"]["cluster.x-k8s.io/delete-machine"] == "yes"
    assert replicas(cluster) == 0


def _one_workload_provisioned(cluster: FakeKube, d, clock: Clock) -> str:  # type: ignore[no-untyped-def]
    """Request wl-1 (one 8-GPU pod) served: its Machine up, the request Provisioned; the Machine's name."""
    cluster.create(pod_template("train", "team-a", 8))
    cluster.create(provisioning_request("wl-1", "team-a", "train", 1))
    d.tick()
    reconcile_capi(cluster, NS)
    clock.t += 10
    d.tick()
    assert cond(cluster, "wl-1", "Provisioned")["status"] == "True"
    (machine,) = [m["metadata"]["name"] for m in cluster.list("machines", NS)]
    return machine


def test_the_pods_arriving_are_marked_on_the_request_for_any_leader(cluster: FakeKube) -> None:
    """Once a Provisioned request's pods are all bound, the leader marks the request (its booking is consumed),
    through the deployed RBAC: a later leader reads that, not the first one's memory."""
    clock = Clock()
    d = daemon(cluster, clock)
    node = _one_workload_provisioned(cluster, d, clock)
    pr = cluster.get("provisioningrequests", "wl-1", "team-a")
    assert ARRIVED not in (pr["metadata"].get("annotations") or {})
    cluster.create(bound_pod("wl-1-0", "team-a", node, **{CONSUMES: "wl-1"}))
    clock.t += 10
    d.tick()
    annotations = cluster.get("provisioningrequests", "wl-1", "team-a")["metadata"]["annotations"]
    assert annotations[ARRIVED] and annotations[BOOKING]  # marked; the booking stays for the record
    # and Kueue is told, as the Cluster Autoscaler tells it: were the workload evicted and admitted again, it would
    # ask anew instead of taking this request's capacity as still held
    expired = cond(cluster, "wl-1", "BookingExpired")
    assert (expired["status"], expired["reason"]) == ("True", "CapacityBookingConsumed")
    assert cond(cluster, "wl-1", "Provisioned")["status"] == "True"


def test_a_booking_whose_pods_never_come_expires_after_ten_minutes_and_says_so(cluster: FakeKube) -> None:
    """A Provisioned request whose pods are not bound within the booking TTL: the capacity is no longer held for
    it, and the request says BookingExpired (CapacityReservationTimeExpired), as the Cluster Autoscaler writes it;
    not before."""
    clock = Clock()
    d = daemon(cluster, clock)
    _one_workload_provisioned(cluster, d, clock)
    clock.t += 300
    d.tick()
    assert cond(cluster, "wl-1", "BookingExpired") is None
    clock.t += 310
    d.tick()
    expired = cond(cluster, "wl-1", "BookingExpired")
    assert (expired["status"], expired["reason"]) == ("True", "CapacityReservationTimeExpired")


def test_the_daemon_times_a_workload_from_its_pods_and_the_rule_learns_the_mean_run(cluster: FakeKube) -> None:
    """With the settings rule on: a request is Provisioned, Kueue releases its pods (annotated with the request's
    name by the admission check), they run 15 minutes and succeed; at the next refresh of the settings grid the
    rule's `expected_run_s` is that run (before this round the Kubernetes daemon saw no run times at all)."""
    from autoscaler.core.settings import SettingsTracker

    clock = Clock()
    clock.t = float(int(clock.t))  # the fake stamps whole seconds: the request is not created before the first tick
    section = KubernetesSection(in_cluster=False, namespace="gpu-fleet-system", lease=LeaseConfig(name=LEASE))
    d = build_kube_daemon(
        section, [capi_pool()], Policy(), api=KubeApi.from_kubeconfig(cluster.kubeconfig()), identity="a",
        clock=clock, settings=SettingsTracker(base=Policy(), boot_s=360.0),
    )  # fmt: skip
    node = _one_workload_provisioned(cluster, d, clock)
    iso = lambda t: time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))  # noqa: E731
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "wl-1-0", "namespace": "team-a",
                        "annotations": {"autoscaling.x-k8s.io/consume-provisioning-request": "wl-1"}},
           "spec": {"nodeName": node, "containers": [{"name": "c", "image": "x",
                    "resources": {"limits": {"nvidia.com/gpu": "8"}}}]},
           "status": {"phase": "Running", "startTime": iso(clock.t)}}  # fmt: skip
    cluster.create(pod)
    start = int(clock.t)
    clock.t += 10
    d.tick()
    assert d.policy.expected_run_s is None  # running: not a run yet
    clock.t += 900

    def succeeded(p: dict) -> None:
        p["status"] = {"phase": "Succeeded", "startTime": iso(start), "containerStatuses": [
            {"name": "c", "state": {"terminated": {"exitCode": 0, "finishedAt": iso(start + 900)}}}]}  # fmt: skip

    cluster.update("pods", "wl-1-0", "team-a", succeeded)
    d.tick()
    clock.t += 600  # the next point of the settings grid
    d.tick()
    assert d.policy.expected_run_s == 900.0


def test_the_settings_history_rides_on_the_lease_to_the_next_leader(cluster: FakeKube) -> None:
    """With the settings rule on, the leader writes its history on its Lease (through the deployed RBAC and the
    API server's annotation size rule) at each refresh of the settings grid; replica b, taking the Lease over,
    starts from it: the same arrival and the same start of observation, where it would have started from nothing."""
    from autoscaler.core.settings import SettingsTracker
    from autoscaler.kube.leader_state import HISTORY, history_from_text

    clock = Clock()
    clock.t = float(int(clock.t))
    section = KubernetesSection(in_cluster=False, namespace="gpu-fleet-system", lease=LeaseConfig(name=LEASE))
    a, b = (
        build_kube_daemon(
            section, [capi_pool()], Policy(), api=KubeApi.from_kubeconfig(cluster.kubeconfig()), identity=i,
            clock=clock, settings=SettingsTracker(base=Policy(), boot_s=360.0),
        )
        for i in ("a", "b")
    )  # fmt: skip
    _one_workload_provisioned(cluster, a, clock)
    annotations = cluster.get("leases", LEASE, "gpu-fleet-system")["metadata"]["annotations"]
    since, entries = history_from_text(annotations[HISTORY])
    assert since == a._since and list(entries) == ["pr/team-a/wl-1"]

    assert b.tick().leader is False  # the standby ticks beside the leader: it has seen the Lease's record
    clock.t += 30  # a stops renewing; its 15 s lease expires (by b's clock, since b last saw it change)
    r = b.tick()
    assert r.ok and r.leader, r.error
    assert b._since == a._since and set(b._arrivals.entries) == {"pr/team-a/wl-1"}
    assert b._arrivals.entries["pr/team-a/wl-1"][1] == a._arrivals.entries["pr/team-a/wl-1"][1]


def test_small_requests_share_a_booting_node_and_a_whole_node_request_gets_its_own(cluster: FakeKube) -> None:
    """A booking holds the GPUs its request asks for, not the whole node: a 1-GPU request booked onto a booting
    8-GPU node leaves 7 GPUs for the next 1-GPU request (one Machine for both, both Provisioned when it is Ready),
    while an 8-GPU request gets a Machine of its own.  Before the eighteenth round every 1-GPU request arriving
    during a boot launched another 8-GPU node."""
    clock = Clock()
    d = daemon(cluster, clock)
    cluster.create(pod_template("one", "team-a", 1))
    cluster.create(pod_template("eight", "team-a", 8))
    cluster.create(provisioning_request("wl-a", "team-a", "one", 1))
    assert d.tick().ok
    assert replicas(cluster) == 1
    clock.t += 10
    cluster.create(provisioning_request("wl-b", "team-a", "one", 1))
    r = d.tick()  # (wl-a's launch is retried, idempotent by its request id, until its Machine appears)
    assert r.ok and [x["request"] for x in r.launched] == ["pr/team-a/wl-a"], r
    assert replicas(cluster) == 1  # wl-b is booked onto the free GPUs of the node on its way
    clock.t += 10
    r = d.tick()  # the Machine has still not appeared: wl-b keeps its booking (not "gone before ready")
    assert "pr/team-a/wl-b" not in r.answered and replicas(cluster) == 1, r.answered
    clock.t += 10
    cluster.create(provisioning_request("wl-c", "team-a", "eight", 1))
    d.tick()
    assert replicas(cluster) == 2  # no room for 8 GPUs on the shared node
    reconcile_capi(cluster, NS)
    clock.t += 10
    d.tick()
    assert [cond(cluster, w, "Provisioned")["status"] for w in ("wl-a", "wl-b", "wl-c")] == ["True"] * 3
    booked = {w: json.loads(cluster.get("provisioningrequests", w, "team-a")["metadata"]["annotations"][BOOKING])
              for w in ("wl-a", "wl-b", "wl-c")}  # fmt: skip
    assert booked["wl-a"]["names"] == booked["wl-b"]["names"] != booked["wl-c"]["names"]
    clock.t += 10
    cluster.create(provisioning_request("wl-d", "team-a", "one", 1))
    r = d.tick()  # onto the Ready shared node's free GPUs: Provisioned in the same tick, Kueue admits at once
    assert r.answered["pr/team-a/wl-d"] == "Provisioned=True (Provisioned)" and replicas(cluster) == 2


def test_a_booked_node_lost_after_provisioned_is_not_capacity_revoked_and_the_recreated_pod_gets_a_node(
    cluster: FakeKube,
) -> None:
    """The node a Provisioned request was booked on is reclaimed while its workload runs: no CapacityRevoked (Kueue
    would deactivate the unfinished workload for good, KEP-1136); the pod its Job controller recreates is
    unschedulable and gets a node of its own, as the replay serves a preempted workload.  Before the eighteenth
    round the daemon answered CapacityRevoked."""
    clock = Clock()
    d = daemon(cluster, clock)
    machine = _one_workload_provisioned(cluster, d, clock)
    cluster.delete("machines", machine, NS)  # reclaimed under the running workload
    cluster.delete("nodes", machine)
    cluster.update("machinedeployments", "neo-h100", NS, lambda md: md["spec"].update(replicas=0))
    cluster.create(_unschedulable_pod("wl-1-0", "wl-1", {POOL_LABEL: "h100"}))  # recreated by the Job controller
    clock.t += 700  # past the booking time too
    r = d.tick()
    assert r.ok, r.error
    assert cond(cluster, "wl-1", "CapacityRevoked") is None
    assert replicas(cluster) == 1  # a node for the recreated pod


def test_a_machine_that_fails_before_any_tick_saw_it_releases_its_request_to_the_next_pool(cluster: FakeKube) -> None:
    """An infrastructure provider that fails a Machine at once (no capacity) before the daemon's next tick: the
    failure still reaches the launch it belonged to, the offering is backed off and the request is booked on the
    next pool.  Before the nineteenth round such a Machine was never bound to its launch (failed Machines were
    skipped), so the request was retried in the failing pool for good."""
    cluster.create(machine_deployment("neo-h100b", NS, "h100b"))
    clock = Clock()
    d = daemon(cluster, clock, pools=[capi_pool("h100"), capi_pool("h100b", price=30.0)])
    cluster.create(pod_template("train", "team-a", 8))
    cluster.create(provisioning_request("wl-1", "team-a", "train", 1))
    d.tick()
    assert replicas(cluster) == 1  # the cheaper pool
    create_machine(cluster, cluster.get("machinedeployments", "neo-h100", NS), "neo-h100-m0")
    failed = {"phase": "Failed", "deprecated": {"v1beta1": {"failureReason": "InsufficientCapacity"}}}
    cluster.update("machines", "neo-h100-m0", NS, lambda m: m.setdefault("status", {}).update(failed))
    clock.t += 10
    d.tick()
    assert cluster.get("machinedeployments", "neo-h100b", NS)["spec"]["replicas"] == 1
    assert replicas(cluster) == 0  # the failed Machine marked and its replica given back (all or nothing)
    booking = json.loads(cluster.get("provisioningrequests", "wl-1", "team-a")["metadata"]["annotations"][BOOKING])
    assert booking["pool"] == "h100b"


def test_a_machine_deployment_opted_into_the_cluster_autoscaler_is_named_in_one_warning(cluster: FakeKube) -> None:
    """The Cluster Autoscaler's clusterapi provider resizes every MachineDeployment carrying its node-group
    annotations; the stack sets none, so one found on a pool means two autoscalers: the daemon says so, once, and
    goes on serving (it cannot stop the other one)."""
    from loguru import logger

    from autoscaler.kube.capi import CA_NODE_GROUP_SIZE

    def opt_in(md: dict) -> None:
        md["metadata"]["annotations"] = {CA_NODE_GROUP_SIZE[0]: "0", CA_NODE_GROUP_SIZE[1]: "4"}

    cluster.update("machinedeployments", "neo-h100", NS, opt_in)
    warnings: list[str] = []
    sink = logger.add(lambda m: warnings.append(str(m)), level="WARNING", format="{message}")
    try:
        clock = Clock()
        d = daemon(cluster, clock)
        cluster.create(pod_template("train", "team-a", 8))
        cluster.create(provisioning_request("wl-1", "team-a", "train", 1))
        for _ in range(3):
            d.tick()
            clock.t += 10
    finally:
        logger.remove(sink)
    assert replicas(cluster) == 1  # still served
    named = [w for w in warnings if f"{NS}/neo-h100" in w]
    assert len(named) == 1 and "Cluster Autoscaler" in named[0] and CA_NODE_GROUP_SIZE[1] in named[0], warnings


def test_a_node_of_a_pool_without_the_pool_s_taints_is_named_once(cluster: FakeKube) -> None:
    """Taints keep CPU pods off GPU nodes and non-tolerating work off spot ones; on Cluster API they reach a node
    only through the MachineDeployment (with Cluster API's alpha propagation gate) or the bootstrap template. A
    Ready node of a pool that lacks them is named, with what it lacks, once; a node that has them is not."""
    from loguru import logger

    gpu = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
    pool = capi_pool().model_copy(update={"node_taints": [gpu]})
    clock = Clock()  # now; the fake's nodes turned Ready on 2026-12-01 (tests/kube/cluster.py NOW): settled
    warnings: list[str] = []
    sink = logger.add(lambda m: warnings.append(str(m)), level="WARNING", format="{message}")
    try:
        d = daemon(cluster, clock, pools=[pool])
        cluster.create(pod_template("train", "team-a", 8))
        cluster.create(provisioning_request("wl-1", "team-a", "train", 2))
        d.tick()
        reconcile_capi(cluster, NS)  # two nodes, registered without taints (no propagation)
        tainted, bare = sorted(n["metadata"]["name"] for n in cluster.list("nodes"))
        cluster.update("nodes", tainted, "", lambda n: n["spec"].update(taints=[gpu]))
        for _ in range(3):
            clock.t += 10
            d.tick()
    finally:
        logger.remove(sink)
    named = [w for w in warnings if "lacks the pool's taints" in w]
    assert len(named) == 1, warnings
    assert bare in named[0] and "nvidia.com/gpu=present:NoSchedule" in named[0] and tainted not in named[0]


def test_a_workload_that_tolerates_only_the_gpu_taint_is_not_put_on_spot(cluster: FakeKube) -> None:
    """Kueue's flavors (and GKE's ExtendedResourceToleration) add the `nvidia.com/gpu` toleration to GPU pods; the
    spot pool carries that taint too, but only its spot taint says who may run there. A workload tolerating the
    GPU taint alone gets the on-demand pool, even where spot is cheaper."""
    gpu = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
    spot_taint = {"key": "gpu-fleet/spot", "value": "true", "effect": "NoSchedule"}
    on_demand = capi_pool().model_copy(update={"node_taints": [gpu]})
    spot = capi_pool("spot", price=8.0).model_copy(
        update={"capacity_type": "spot", "node_taints": [gpu, spot_taint], "spot_tolerant": True}
    )
    cluster.create(machine_deployment("neo-spot", NS, "spot"))
    d = daemon(cluster, Clock(), pools=[on_demand, spot])
    template = pod_template("train", "team-a", 8)
    template["template"]["spec"]["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists"}]
    cluster.create(template)
    cluster.create(provisioning_request("wl-1", "team-a", "train", 1))
    assert d.tick().ok
    assert replicas(cluster) == 1  # neo-h100, on demand
    assert int(cluster.get("machinedeployments", "neo-spot", NS)["spec"].get("replicas") or 0) == 0
    tolerant = pod_template("train-spot", "team-a", 8)
    tolerant["template"]["spec"]["tolerations"] = [
        {"key": "nvidia.com/gpu", "operator": "Exists"},
        {"key": "gpu-fleet/spot", "operator": "Exists", "effect": "NoSchedule"},
    ]
    cluster.create(tolerant)
    cluster.create(provisioning_request("wl-2", "team-a", "train-spot", 1))
    assert d.tick().ok
    assert int(cluster.get("machinedeployments", "neo-spot", NS)["spec"]["replicas"]) == 1  # the cheaper spot pool
    assert replicas(cluster) == 1


@pytest.mark.parametrize("apart_s", [0, 1])
def test_two_small_requests_packed_onto_one_new_node_raise_the_replicas_once(cluster: FakeKube, apart_s: int) -> None:
    """Two 1-GPU workloads admitted together on an 8-GPU pool: the plan packs both onto one new node, so one replica
    is launched and both requests are booked on its Machine and Provisioned when it is Ready.  Until the
    twenty-seventh round each request launched the node under a booking of its own: requests created in the same
    second got one request id, so one replica, whose Machine went to the first booking only (the second request
    was launched again at every tick and never Provisioned); a second apart, two replicas for one planned node.
    tests/kube/test_one_path.py found it."""
    clock = Clock()
    d = daemon(cluster, clock)
    cluster.create(pod_template("small", "team-a", 1))
    cluster.create(provisioning_request("wl-1", "team-a", "small", 1))
    cluster.create(provisioning_request("wl-2", "team-a", "small", 1))
    with cluster.lock:
        md = cluster.objects[("provisioningrequests", "team-a", "wl-2")]["metadata"]
        first = cluster.objects[("provisioningrequests", "team-a", "wl-1")]["metadata"]["creationTimestamp"]
        t = datetime.datetime.fromisoformat(first.replace("Z", "+00:00")) + datetime.timedelta(seconds=apart_s)
        md["creationTimestamp"] = t.strftime("%Y-%m-%dT%H:%M:%SZ")
    assert d.tick().ok
    assert replicas(cluster) == 1
    clock.t += 10
    reconcile_capi(cluster, NS)
    assert d.tick().ok
    [machine] = [m["metadata"]["name"] for m in cluster.list("machines", NS)]
    for wl in ("wl-1", "wl-2"):
        assert (cond(cluster, wl, "Provisioned") or {}).get("status") == "True", wl
        booked = json.loads(cluster.get("provisioningrequests", wl, "team-a")["metadata"]["annotations"][BOOKING])
        assert booked["names"] == [machine], booked
    assert replicas(cluster) == 1


def test_a_booked_node_whose_room_other_pods_took_is_not_provisioned_and_the_request_is_planned_again(
    cluster: FakeKube,
) -> None:
    """Nothing pins a booked node to its request: kube-scheduler may bind other pending pods there (a reclaimed
    workload's new pods) as soon as it is Ready.  Then it is not answered Provisioned on it (its pods could not be
    scheduled): the booking goes and the request gets capacity again, in the same tick, as the replay does.
    Before the twenty-seventh round it was answered Provisioned (tests/kube/test_one_path.py found it)."""
    clock = Clock()
    d = daemon(cluster, clock)
    cluster.create(pod_template("train", "team-a", 8))
    cluster.create(provisioning_request("wl-1", "team-a", "train", 1))
    assert d.tick().ok
    reconcile_capi(cluster, NS)
    [machine] = [m["metadata"]["name"] for m in cluster.list("machines", NS)]
    other = bound_pod("other-0", "team-b", machine)
    other["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "8"}}
    cluster.create(other)  # bound before the daemon's next tick
    clock.t += 10
    assert d.tick().ok
    assert (cond(cluster, "wl-1", "Provisioned") or {}).get("status") != "True"
    assert replicas(cluster) == 2  # planned again: a node of its own
    booked = json.loads(cluster.get("provisioningrequests", "wl-1", "team-a")["metadata"]["annotations"][BOOKING])
    assert machine not in booked["names"]
    reconcile_capi(cluster, NS)
    clock.t += 10
    assert d.tick().ok
    assert cond(cluster, "wl-1", "Provisioned")["status"] == "True"


def test_a_request_stamped_ahead_of_the_daemon_s_clock_is_held_only_for_the_batch_window(cluster: FakeKube) -> None:
    """The API server stamps a request's creation with its own clock, which may run ahead of the daemon's.  With a
    batch window (the reservation hold's), the planner holds launches while the newest unit is younger than the
    batch idle time; a creation after the daemon's `now` counted as younger than any, so the skew was added to the
    hold, and a request stamped a day ahead was never launched.  It is planned from when the daemon first saw it."""
    clock = Clock()
    d = daemon(cluster, clock, batch_window_s=30.0, batch_idle_s=5.0)
    cluster.create(pod_template("train", "team-a", 8))
    cluster.create(provisioning_request("wl-1", "team-a", "train", 1))
    ahead = datetime.datetime.fromtimestamp(clock.t + 86400, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    with cluster.lock:
        cluster.objects[("provisioningrequests", "team-a", "wl-1")]["metadata"]["creationTimestamp"] = ahead
    assert d.tick().ok
    assert replicas(cluster) == 0  # the batch idle time has not passed since the daemon first saw it
    clock.t += 10
    assert d.tick().ok
    assert replicas(cluster) == 1
