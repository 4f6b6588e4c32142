"""The daemon reading the watches' cache (`autoscaler/kube/cache.py`), with the real `kubernetes` client against the
fake API server: ticks list nothing once the watches have, a tick after the daemon's own write reads live until
the write comes back on the watch, and a node whose new pod the cache has not seen is never deleted.

The cache is filled here by hand from the API's own lists and change events (what the watch threads do), so
each test decides exactly what the cache has seen when the daemon ticks."""

from __future__ import annotations

from autoscaler.kube.api import PR_PLURAL, KubeApi
from autoscaler.kube.cache import WatchCache
from autoscaler.kube.wake import WATCHED_CAPI
from tests.fakes.kube_api import FakeKube
from tests.kube.cluster import bound_pod, pod_template, provisioning_request, reconcile_capi
from tests.kube.test_capi_e2e import NS, Clock, cluster, cond, daemon, replicas  # noqa: F401


class Feed:
    """The watch threads' part, by hand: list every watched resource into the cache, then deliver the API's change
    events up to now when told."""

    def __init__(self, fake: FakeKube, api: KubeApi, clock: Clock) -> None:
        self.fake, self.cache = fake, WatchCache(clock=clock)
        api.cache = self.cache
        self.seen = fake.version  # events after it may be in the lists too: applied again, they end the same
        for r in WATCHED_CAPI:
            items, _ = api.listing(r)
            self.cache.replace(r, items, clock())

    def deliver(self) -> None:
        with self.fake.lock:
            events = [e for e in self.fake.events if e[0] > self.seen]
            self.seen = self.fake.version
        for _, kind, plural, _, obj in events:
            self.cache.apply(plural, kind, obj)


def lists(fake: FakeKube) -> dict[str, int]:
    return {r: fake.lists.get(r, 0) for r in WATCHED_CAPI}


def test_ticks_read_the_cache_and_a_tick_after_an_own_write_lists_live_until_the_watch_shows_it(
    cluster: FakeKube,  # noqa: F811
) -> None:
    clock = Clock()
    d = daemon(cluster, clock)
    cluster.create(pod_template("train", "team-a", 8))
    cluster.create(provisioning_request("wl-1", "team-a", "train", 2))
    feed = Feed(cluster, d.api, clock)
    before = lists(cluster)

    r = d.tick()  # books the request (a patch the cache has not seen) and launches two nodes
    assert r.ok and r.launched and replicas(cluster) == 2
    assert lists(cluster) == before  # requests, nodes, pods and Machines all read from the cache

    clock.t += 1
    d.tick()
    after = lists(cluster)
    assert after[PR_PLURAL] == before[PR_PLURAL] + 1  # the booking is not in the cache yet: listed live
    assert after["pods"] == before["pods"] and after["nodes"] == before["nodes"]  # nothing written there
    assert replicas(cluster) == 2  # and not launched again

    feed.deliver()  # the watch catches up: the booking's version is in the cache
    reconcile_capi(cluster, NS)  # Machines and Ready Nodes
    feed.deliver()
    clock.t += 1
    before = lists(cluster)
    d.tick()
    assert (cond(cluster, "wl-1", "Provisioned") or {}).get("status") == "True"
    assert lists(cluster) == before
    assert replicas(cluster) == 2


def test_a_node_whose_new_pod_the_cache_has_not_seen_is_not_deleted(cluster: FakeKube) -> None:  # noqa: F811
    clock = Clock()
    d = daemon(cluster, clock)
    cluster.create(pod_template("train", "team-a", 8))
    cluster.create(provisioning_request("wl-1", "team-a", "train", 1))
    feed = Feed(cluster, d.api, clock)
    d.tick()
    reconcile_capi(cluster, NS)
    feed.deliver()
    clock.t += 1
    d.tick()
    (node,) = [m["metadata"]["name"] for m in cluster.list("machines", NS)]
    cluster.delete("provisioningrequests", "wl-1", "team-a")  # the workload finished
    feed.deliver()
    clock.t += 60
    d.tick()  # idle: cordoned
    feed.deliver()
    assert cluster.get("nodes", node)["spec"].get("unschedulable") is True
    # a pod bound to the node before the cordon took effect: on the API server, not yet in the cache
    cluster.create(bound_pod("late-0", "team-a", node))
    clock.t += 10
    r = d.tick()
    assert r.ok and r.deleted == []  # the check before deletion asked the API server for the node's pods
    assert replicas(cluster) == 1
    marks = cluster.get("machines", node, NS)["metadata"].get("annotations") or {}
    assert "cluster.x-k8s.io/delete-machine" not in marks
    assert cluster.lists.get("pods?fieldSelector", 0) >= 1
