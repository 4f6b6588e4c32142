"""The watches' copy of the cluster (an informer's store): what a tick reads instead of listing again.

The daemon's watches (`autoscaler/kube/watch.py`) list each resource once and then follow its changes.  Before
the twentieth round they kept nothing but what the wake-up filter needs, and every tick listed the cluster's
ProvisioningRequests, Nodes, Pods (all of them) and Machines again: with watch-driven ticks up to one a second,
that is up to one full list of every pod a second on a busy cluster, the load client-go's informers exist to
avoid.  `WatchCache` keeps the objects the watches list and stream, and `KubeApi`'s reads of those four
resources answer from it (`KubeApi.cache`).

A read falls back to a live list, so the cache never serves what the API server would not:

- until its watch has listed the resource (at start, and after a failure: `lost`, until the next list);
- while a write of this process to that resource has not come back on its watch (`wrote`): read your own
  writes, so a tick never reads a request without the booking the last tick wrote on it, nor a node without the
  cordon it just set.  The write's event (its resourceVersion, compared for equality only, as the API asks),
  a DELETED event or a list begun after the write settles it;
- when a write has waited more than `own_write_timeout_s` for its event: the resource is marked for a fresh list
  (`needs_list`, which the watch honours at its next event or stream), and reads stay live until it.

How stale can a copy be?  As stale as its watch stream is late.  A stream that breaks fails the watch (`lost`);
one that stalls without closing (a proxy that stops forwarding but keeps the connection) fails at its read
timeout, the stream's `timeoutSeconds` plus the client's timeout (`loop.watch_timeout_s` 60 s + 10 s by default),
and TCP keepalive (`KubeApi`) finds a dead peer.  Before the cache a tick's reads were never staler than the tick;
now a tick may act on a copy up to that old when the watch stalls silently, which costs latency only: a node is
deleted only after its pods are listed from the API server, and a booking is written on the request's
resourceVersion, so a stale copy can neither take a busy node nor launch a request twice.

What a tick gets is the API's JSON, without `metadata.managedFields` (bookkeeping of server-side apply that the
daemon never reads and that is often half of an object), shared, not copied: callers must not change it (none
does; the watch replaces objects, never edits them).  Thread-safe: the watch threads write, the loop reads.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

#: how long a write of this process may wait for its watch event before the resource is listed afresh
OWN_WRITE_TIMEOUT_S = 30.0

Key = tuple[str, str]  # (namespace, name); "" for cluster-scoped objects


def object_key(obj: Mapping[str, Any]) -> Key:
    md = obj.get("metadata") or {}
    return str(md.get("namespace") or ""), str(md.get("name") or "")


def version_of(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


def _stored(obj: dict[str, Any]) -> dict[str, Any]:
    md = obj.get("metadata")
    if isinstance(md, dict) and "managedFields" in md:
        obj = {**obj, "metadata": {k: v for k, v in md.items() if k != "managedFields"}}
    return obj


def equality_selector(selector: str) -> dict[str, str] | None:
    """`k=v,k2=v2` (or `==`) as a dict; None for any other selector syntax (the caller lists live instead)."""
    out: dict[str, str] = {}
    for term in filter(None, (t.strip() for t in selector.split(","))):
        if "!=" in term or "=" not in term or any(c in term for c in "()! "):
            return None
        k, v = term.replace("==", "=").split("=", 1)
        out[k.strip()] = v.strip()
    return out


class WatchCache:
    """The objects of each watched resource, as listed and streamed; see the module docstring."""

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.monotonic,
        own_write_timeout_s: float = OWN_WRITE_TIMEOUT_S,
        metrics: Any = None,
    ) -> None:
        """`metrics` (`autoscaler.daemon.metrics.Metrics`): `api_reads_total{resource,source}` counts the reads
        answered from the cache and those that listed live."""
        self.clock = clock
        self.own_write_timeout_s = own_write_timeout_s
        self.metrics = metrics
        self._lock = threading.Lock()
        self._objects: dict[str, dict[Key, dict[str, Any]]] = {}
        self._synced: set[str] = set()
        self._own: dict[str, dict[Key, tuple[str, float]]] = {}  # resource -> key -> (version written, when)
        self._relist: set[str] = set()

    # ---- the watch threads ------------------------------------------------------------------------------
    def replace(self, resource: str, items: Iterable[dict[str, Any]], listed_at: float) -> None:
        """A list of `resource` begun at `listed_at` (this cache's clock): its objects replace the old ones, and
        it settles the writes made before it began."""
        objs = {object_key(o): _stored(o) for o in items}
        with self._lock:
            self._objects[resource] = objs
            self._synced.add(resource)
            self._relist.discard(resource)
            own = self._own.get(resource, {})
            for k in [k for k, (_, at) in own.items() if at <= listed_at]:
                del own[k]

    def apply(self, resource: str, event: str, obj: dict[str, Any]) -> None:
        """One watch event (ADDED, MODIFIED, DELETED; BOOKMARK and ERROR change nothing)."""
        if event not in ("ADDED", "MODIFIED", "DELETED"):
            return
        key = object_key(obj)
        with self._lock:
            objs = self._objects.setdefault(resource, {})
            if event == "DELETED":
                objs.pop(key, None)
            else:
                objs[key] = _stored(obj)
            own = self._own.get(resource)
            if own and key in own and (event == "DELETED" or own[key][0] == version_of(obj)):
                del own[key]

    def lost(self, resource: str) -> None:
        """The watch of `resource` failed: reads list live until it has listed again."""
        with self._lock:
            self._synced.discard(resource)

    def needs_list(self, resource: str) -> bool:
        """Should the watch of `resource` list afresh (a write of ours never came back on it)?"""
        with self._lock:
            return resource in self._relist

    # ---- the daemon -------------------------------------------------------------------------------------
    def wrote(self, resource: str, obj: Mapping[str, Any]) -> None:
        """This process wrote `obj` (the API's answer to the write): reads of `resource` go live until its watch
        shows that version (unless it already has)."""
        key, version = object_key(obj), version_of(obj)
        with self._lock:
            cached = self._objects.get(resource, {}).get(key)
            if cached is not None and version and version_of(cached) == version:
                return
            self._own.setdefault(resource, {})[key] = (version, self.clock())

    def read(self, resource: str) -> list[dict[str, Any]] | None:
        """Every cached object of `resource`, or None when a read must list live (module docstring)."""
        with self._lock:
            items = self._fresh(resource)
        self._count(resource, items is not None)
        return items

    def _fresh(self, resource: str) -> list[dict[str, Any]] | None:
        if resource not in self._synced or resource in self._relist:
            return None
        own = self._own.get(resource)
        if own:
            oldest = min(at for _, at in own.values())
            if self.clock() - oldest > self.own_write_timeout_s:
                self._relist.add(resource)
            return None
        return list(self._objects.get(resource, {}).values())

    def _count(self, resource: str, hit: bool) -> None:
        if self.metrics is not None:
            self.metrics.api_reads.labels(resource=resource, source="cache" if hit else "live").inc()
