"""The Kubernetes daemon ticks on watch events between polls: the real `kubernetes` client's watch streams against
the fake API server (chunked `?watch=true`, 410 Gone after compaction), and the run loop serving a request long
before its next poll."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from autoscaler.daemon.metrics import Metrics
from autoscaler.kube.api import KubeApi
from autoscaler.kube.cache import WatchCache
from autoscaler.kube.loop import KubeDaemon
from autoscaler.kube.run import KubeRunLoop
from autoscaler.kube.watch import Watches
from tests.fakes.kube_api import FakeKube
from tests.kube.cluster import (
    POOL_LABEL,
    create_machine,
    machine_deployment,
    pod_template,
    provisioning_request,
    ready_node,
    reconcile_capi,
)
from tests.kube.test_capi_e2e import NS, Clock, capi_pool, cluster, cond, daemon, replicas  # noqa: F401

POLL_S = 3600.0  # no poll after the first tick within a test: whatever happens later was woken


def wait_for(pred: Callable[[], object], timeout: float = 20.0) -> None:
    end = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > end:
            raise AssertionError("condition not reached")
        time.sleep(0.05)


@contextmanager
def running(d: KubeDaemon, fake: FakeKube, *, cache: bool = True) -> Iterator[KubeRunLoop]:
    """The daemon's run loop with its watches and their cache (as `run_forever` starts them) in a thread, its first
    tick (the poll at start, with nothing to do) done and every watch streaming; stopped, and its thread ended, on
    exit.  `cache=False`: every tick lists (`loop.watch_cache: false`)."""
    loop = KubeRunLoop(d, POLL_S)
    d.api.cache = WatchCache(metrics=d.metrics) if cache else None
    watches = Watches.for_daemon(d, loop.wake, timeout_s=30, metrics=d.metrics, cache=d.api.cache).start()
    runner = threading.Thread(target=loop.run, daemon=True)
    runner.start()
    try:
        wait_for(lambda: all(fake.watches.get(r) for r in ("provisioningrequests", "nodes", "pods", "machines")))
        wait_for(lambda: loop.ticks == 1)
        yield loop
    finally:
        loop.stop()
        runner.join(10)
        watches.stop()
    assert not runner.is_alive()


def test_the_watches_wake_on_a_new_request_and_resume_after_the_server_forgot_their_version() -> None:
    fake = FakeKube(bookmarks=False)  # no bookmark keeps the idle request watch's version fresh: compaction expires it
    fake.start()
    woken: list[str] = []
    copy_at_expiry: list[object] = []
    cache = WatchCache()

    def wake(reason: str) -> None:
        woken.append(reason)
        if reason.endswith("watch expired"):  # what the tick this wakes would read: not the copy, which missed events
            copy_at_expiry.append(cache.read(reason.split()[0]))

    w = Watches(KubeApi.from_kubeconfig(fake.kubeconfig()), wake, timeout_s=1, cache=cache).start()
    try:
        wait_for(lambda: all(fake.watches.get(r) for r in ("provisioningrequests", "nodes", "pods")))
        fake.create(pod_template("train", "team-a", 8))
        fake.create(provisioning_request("wl-1", "team-a", "train", 2))
        fake.create(ready_node("n1", {}))
        wait_for(lambda: {"request created", "node ready"} <= set(woken))
        fake.compact()  # as etcd compaction: the request watch's last version is gone
        fake.create(ready_node("n2", {}))  # the node watch moves past the compaction
        wait_for(lambda: "provisioningrequests watch expired" in woken)  # 410 Gone -> listed again, one look
        assert copy_at_expiry[0] is None
        opened = fake.watches["provisioningrequests"]
        # a request created before the re-list is in the list (the tick the expiry woke reads it), not an event
        wait_for(lambda: fake.watches["provisioningrequests"] > opened)  # listed again and watching from there
        fake.create(provisioning_request("wl-2", "team-a", "train", 1))
        wait_for(lambda: woken.count("request created") == 2)
    finally:
        w.stop()
        fake.stop()


def test_bookmarks_keep_an_idle_watch_current_so_a_compaction_does_not_expire_it() -> None:
    """The daemon asks for bookmarks, and a stream's closing BOOKMARK moves its version on though nothing it watches
    changed: after etcd compacts, the idle request watch resumes where it was instead of listing again."""
    fake = FakeKube()
    fake.start()
    fake.create(ready_node("n-first", {}))  # the list's version is not "0" (which a watch resumes from anywhere)
    woken: list[str] = []
    w = Watches(KubeApi.from_kubeconfig(fake.kubeconfig()), woken.append, resources=("provisioningrequests",),
                timeout_s=1).start()  # fmt: skip
    try:
        wait_for(lambda: fake.watches.get("provisioningrequests"))
        opened = fake.watches["provisioningrequests"]
        for i in range(3):
            fake.create(ready_node(f"n{i}", {}))  # other resources move the store's version on
        wait_for(lambda: fake.watches["provisioningrequests"] >= opened + 2)  # a stream ended with its bookmark
        fake.compact()
        again = fake.watches["provisioningrequests"]
        wait_for(lambda: fake.watches["provisioningrequests"] >= again + 2)  # resumed, twice, past the compaction
        assert "provisioningrequests watch expired" not in woken
        fake.create(pod_template("train", "team-a", 8))
        fake.create(provisioning_request("wl-1", "team-a", "train", 1))
        wait_for(lambda: "request created" in woken)
    finally:
        w.stop()
        fake.stop()


def test_a_request_created_between_polls_is_launched_and_provisioned_without_waiting_for_the_poll(
    cluster: FakeKube,  # noqa: F811
) -> None:
    d = daemon(cluster, time.time)
    d.metrics = Metrics()
    with running(d, cluster) as loop:
        pod_lists = cluster.lists.get("pods", 0)
        cluster.create(pod_template("train", "team-a", 8))
        cluster.create(provisioning_request("wl-1", "team-a", "train", 2))
        wait_for(lambda: replicas(cluster) == 2)  # the request's creation woke a tick
        reconcile_capi(cluster, NS)  # Machines and Ready Nodes
        wait_for(lambda: (cond(cluster, "wl-1", "Provisioned") or {}).get("status") == "True")
        assert loop.woken_ticks >= 2
        shown = d.metrics.render().decode()  # what an operator scrapes
        assert 'gpu_fleet_autoscaler_woken_ticks_total{reason="request created"}' in shown
        # the Node's Ready or the Machine's nodeRef, whichever watch delivered first, woke the Provisioned tick
        assert re.search(r'woken_ticks_total\{reason="(node ready|machine has its node)"\} [1-9]', shown), shown
        for r in ("provisioningrequests", "nodes", "pods", "machines"):
            assert f'gpu_fleet_autoscaler_watch_up{{resource="{r}"}} 1.0' in shown
            assert re.search(rf'api_reads_total\{{resource="{r}",source="cache"\}} [1-9]', shown), shown
        assert cluster.lists.get("pods", 0) == pod_lists  # every tick read the pods from the watch's cache


def test_a_wake_up_ticks_between_polls_and_a_stop_ends_the_loop() -> None:
    ticks: list[float] = []

    class Counting:
        def tick(self) -> object:
            ticks.append(time.monotonic())
            return object()

    loop = KubeRunLoop(Counting(), POLL_S)
    runner = threading.Thread(target=loop.run, daemon=True)
    runner.start()
    wait_for(lambda: len(ticks) == 1)  # the first poll, at start
    loop.wake("request created")
    wait_for(lambda: len(ticks) == 2)
    loop.stop()
    runner.join(10)
    assert not runner.is_alive() and loop.woken_ticks == 1


def test_a_watch_that_breaks_on_an_event_is_retried_and_wakes_on_the_next() -> None:
    fake = FakeKube()
    fake.start()
    woken: list[str] = []
    w = Watches(KubeApi.from_kubeconfig(fake.kubeconfig()), woken.append, resources=("nodes",), retry_s=0.1)
    real = w.filter.wakes
    calls = {"n": 0}

    def flaky(resource: str, event: str, obj: dict) -> str | None:
        calls["n"] += 1
        if calls["n"] == 1:
            raise KeyError("status")  # e.g. an object without a field the filter reads
        return real(resource, event, obj)

    w.filter.wakes = flaky  # type: ignore[method-assign]
    w.start()
    try:
        wait_for(lambda: fake.watches.get("nodes"))
        fake.create(ready_node("n1", {}))  # breaks the stream: listed and watched again
        wait_for(lambda: fake.watches.get("nodes", 0) >= 2)
        fake.create(ready_node("n2", {}))
        wait_for(lambda: "node ready" in woken)
    finally:
        w.stop()
        fake.stop()


def test_a_watch_that_stalls_without_closing_sends_the_reads_live_within_its_read_timeout() -> None:
    """A proxy that stops forwarding a watch but keeps the connection open: no error, no event.  The stream's read
    timeout (its `timeoutSeconds` plus the client's timeout) ends it, the cache's copy is marked lost, and reads
    list live, so a tick never reads a copy staler than that (60 s + 10 s at the defaults)."""
    fake = FakeKube()
    fake.start()
    api = KubeApi.from_kubeconfig(fake.kubeconfig(), timeout_s=1)
    api.cache = WatchCache()
    w = Watches(api, lambda _: None, resources=("nodes",), timeout_s=1, retry_s=0.1, cache=api.cache)
    fake.create(ready_node("n1", {}))
    w.start()
    try:
        wait_for(lambda: api.cache is not None and api.cache.read("nodes") is not None)
        fake.stalled.add("nodes")
        opened = fake.watches.get("nodes", 0)
        wait_for(lambda: fake.watches.get("nodes", 0) > opened)  # the streams from now on stall
        fake.create(ready_node("n2", {}))  # its event never comes
        wait_for(lambda: "n2" in {n["metadata"]["name"] for n in api.nodes()}, timeout=10)
    finally:
        fake.stalled.clear()
        w.stop()
        fake.stop()


def test_a_node_ready_before_its_machine_names_it_is_provisioned_when_cluster_api_ties_them(
    cluster: FakeKube,  # noqa: F811
) -> None:
    """Cluster API sets a Machine's nodeRef only after its Node registered.  The tick the Node's Ready wakes cannot
    tie the node to the booked Machine yet; the nodeRef's arrival wakes the one that answers Provisioned (with an
    hour's poll, nothing else would)."""
    d = daemon(cluster, time.time)
    with running(d, cluster) as loop:
        cluster.create(pod_template("train", "team-a", 8))
        cluster.create(provisioning_request("wl-1", "team-a", "train", 1))
        wait_for(lambda: replicas(cluster) == 1)
        # the MachineSet controller's Machine, then its Node (Ready), and only later the Machine's nodeRef
        create_machine(cluster, cluster.get("machinedeployments", "neo-h100", NS), "neo-h100-m0")
        cluster.create(ready_node("ip-10-0-0-7", {POOL_LABEL: "h100"}))  # a node name of the infrastructure's
        wait_for(lambda: loop.ticks >= 3)  # the Node's Ready woke a tick: not yet Provisioned
        assert (cond(cluster, "wl-1", "Provisioned") or {}).get("status") != "True"
        node_ref = {"phase": "Running", "nodeRef": {"name": "ip-10-0-0-7"}}
        cluster.update("machines", "neo-h100-m0", NS, lambda m: m.setdefault("status", {}).update(node_ref))
        wait_for(lambda: (cond(cluster, "wl-1", "Provisioned") or {}).get("status") == "True")


def test_a_machine_that_fails_wakes_the_daemon_and_its_request_is_served_on_the_next_offering(
    cluster: FakeKube,  # noqa: F811
) -> None:
    """A Cluster API launch that fails after acceptance (the Machine goes Failed with a capacity failureReason):
    the Machine watch wakes the daemon, which backs the offering off and books the request on the next pool at
    once (with an hour's poll, nothing else would)."""
    cluster.create(machine_deployment("neo-h100b", NS, "h100b"))
    d = daemon(cluster, time.time, pools=[capi_pool("h100"), capi_pool("h100b", price=30.0)])
    with running(d, cluster) as loop:
        cluster.create(pod_template("train", "team-a", 8))
        cluster.create(provisioning_request("wl-1", "team-a", "train", 1))
        wait_for(lambda: replicas(cluster) == 1)  # the cheaper pool first
        create_machine(cluster, cluster.get("machinedeployments", "neo-h100", NS), "neo-h100-m0")
        failed = {"phase": "Failed",
                  "deprecated": {"v1beta1": {"failureReason": "InsufficientCapacity",
                                             "failureMessage": "no capacity in dc-1"}}}  # fmt: skip
        cluster.update("machines", "neo-h100-m0", NS, lambda m: m.setdefault("status", {}).update(failed))
        wait_for(lambda: cluster.get("machinedeployments", "neo-h100b", NS)["spec"]["replicas"] == 1)
        assert loop.woken_ticks >= 2
