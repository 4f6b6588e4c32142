"""The watches' cache (`autoscaler/kube/cache.py`): what a tick may read from it, and when it must list live."""

from __future__ import annotations

from autoscaler.kube.cache import WatchCache, equality_selector


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def obj(name: str, rv: int, ns: str = "", **extra: object) -> dict:
    md = {"name": name, "resourceVersion": str(rv), **({"namespace": ns} if ns else {})}
    return {"metadata": md, **extra}


def names(items: list[dict] | None) -> list[str] | None:
    return None if items is None else sorted(o["metadata"]["name"] for o in items)


def test_nothing_is_read_from_a_resource_before_its_watch_listed_it_nor_after_the_watch_failed() -> None:
    c = WatchCache(clock=Clock())
    assert c.read("nodes") is None
    c.replace("nodes", [obj("n1", 1)], listed_at=0)
    assert names(c.read("nodes")) == ["n1"]
    assert c.read("pods") is None  # another resource: not listed yet
    c.lost("nodes")
    assert c.read("nodes") is None
    c.replace("nodes", [], listed_at=1)
    assert c.read("nodes") == []  # listed and empty: an answer, not a miss


def test_events_add_change_and_delete_objects_and_bookmarks_change_nothing() -> None:
    c = WatchCache(clock=Clock())
    c.replace("pods", [obj("a", 1, "ns")], listed_at=0)
    c.apply("pods", "ADDED", obj("b", 2, "ns"))
    c.apply("pods", "MODIFIED", obj("a", 3, "ns", status={"phase": "Succeeded"}))
    c.apply("pods", "BOOKMARK", {"metadata": {"resourceVersion": "4"}})
    assert names(c.read("pods")) == ["a", "b"]
    assert next(o for o in c.read("pods") or [] if o["metadata"]["name"] == "a")["status"]["phase"] == "Succeeded"
    c.apply("pods", "DELETED", obj("b", 5, "ns"))
    assert names(c.read("pods")) == ["a"]
    c.apply("pods", "ADDED", obj("a", 6, "other"))  # the same name in another namespace is another object
    assert len(c.read("pods") or []) == 2


def test_an_own_write_sends_reads_live_until_its_version_comes_back_on_the_watch() -> None:
    c = WatchCache(clock=Clock())
    c.replace("provisioningrequests", [obj("wl-1", 1, "team-a")], listed_at=0)
    c.wrote("provisioningrequests", obj("wl-1", 7, "team-a"))  # the booking patch, answered at version 7
    assert c.read("provisioningrequests") is None  # the copy does not have the booking yet
    c.apply("provisioningrequests", "MODIFIED", obj("wl-1", 5, "team-a"))  # someone else's earlier change
    assert c.read("provisioningrequests") is None
    c.apply("provisioningrequests", "MODIFIED", obj("wl-1", 7, "team-a"))
    assert names(c.read("provisioningrequests")) == ["wl-1"]


def test_an_own_write_whose_event_came_first_is_settled_and_a_deletion_settles_one() -> None:
    c = WatchCache(clock=Clock())
    c.replace("nodes", [obj("n1", 1), obj("n2", 1)], listed_at=0)
    c.apply("nodes", "MODIFIED", obj("n1", 2))  # the cordon's event, before the patch call returned
    c.wrote("nodes", obj("n1", 2))
    assert names(c.read("nodes")) == ["n1", "n2"]
    c.wrote("nodes", obj("n2", 3))
    c.apply("nodes", "DELETED", obj("n2", 4))
    assert names(c.read("nodes")) == ["n1"]


def test_a_list_begun_after_an_own_write_settles_it_and_one_begun_before_does_not() -> None:
    clock = Clock()
    c = WatchCache(clock=clock)
    c.replace("machines", [], listed_at=clock.t)
    clock.t = 110.0
    c.wrote("machines", obj("m1", 9, "capi"))
    c.replace("machines", [obj("m1", 8, "capi")], listed_at=105.0)  # began before the write returned
    assert c.read("machines") is None
    c.replace("machines", [obj("m1", 9, "capi")], listed_at=111.0)
    assert names(c.read("machines")) == ["m1"]


def test_a_write_whose_event_never_comes_asks_the_watch_for_a_fresh_list() -> None:
    clock = Clock()
    c = WatchCache(clock=clock, own_write_timeout_s=30)
    c.replace("nodes", [obj("n1", 1)], listed_at=clock.t)
    c.wrote("nodes", obj("n1", 2))
    clock.t += 29
    assert c.read("nodes") is None and not c.needs_list("nodes")
    clock.t += 2
    assert c.read("nodes") is None and c.needs_list("nodes")
    c.replace("nodes", [obj("n1", 2)], listed_at=clock.t)
    assert not c.needs_list("nodes") and names(c.read("nodes")) == ["n1"]


def test_managed_fields_are_not_kept() -> None:
    c = WatchCache(clock=Clock())
    big = obj("n1", 1)
    big["metadata"]["managedFields"] = [{"manager": "kubelet", "fieldsV1": {"f:status": {}}}]
    c.replace("nodes", [big], listed_at=0)
    (kept,) = c.read("nodes") or []
    assert "managedFields" not in kept["metadata"] and kept["metadata"]["name"] == "n1"
    assert "managedFields" in big["metadata"]  # the caller's object is not changed


def test_only_plain_equality_selectors_are_answered_from_the_cache() -> None:
    assert equality_selector("") == {}
    assert equality_selector("a=b, c==d") == {"a": "b", "c": "d"}
    for other in ("a!=b", "a in (b,c)", "!a", "a"):
        assert equality_selector(other) is None, other
