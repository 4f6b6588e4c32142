"""The Kubernetes daemon's watches: one thread per watched resource, each waking the run loop on the events
`autoscaler.kube.wake.WakeFilter` picks (a request created, a node Ready, a GPU pod finished, ...).

Each thread lists its resource (seeding the filter), then watches from the list's resourceVersion in streams of
`timeout_s`, resuming from the last version it saw (bookmarks included).  410 Gone (the version is older than the
API server keeps) lists again; after a re-list the loop is woken once, since an event may have been missed.  An
unreachable or refusing API server is retried every `retry_s`, logged once per outage: the loop's poll goes on
regardless, so a broken watch costs latency, never a decision.

With a `cache` (`autoscaler/kube/cache.py`), each list and each event also goes into it, which the daemon's
reads answer from: a failure marks the resource's copy lost (reads list live) until the next list, and a
resource whose copy missed one of the daemon's own writes (`WatchCache.needs_list`) is listed afresh.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from loguru import logger

from autoscaler.kube.api import KubeApi, KubeError
from autoscaler.kube.cache import WatchCache
from autoscaler.kube.wake import WATCHED, WATCHED_CAPI, WakeFilter
from fleet.provisioning_class import GPU_FLEET_CLASS

#: one watch stream (`timeoutSeconds`); the stream's read timeout is this plus the client's timeout, so a stream
#: that stalls without closing (a proxy that stops forwarding) fails within that, and the cache's reads go live.
#: client-go's reflectors use 5-10 min; one minute bounds how stale a stalled stream leaves the cache, at the cost
#: of one watch request a minute per resource (a resumed stream, not a list)
DEFAULT_TIMEOUT_S = 60.0
DEFAULT_RETRY_S = 5.0


class Watches:
    """Watch `resources` on `api`; call `wake(reason)` for every event that wakes the loop."""

    def __init__(
        self,
        api: KubeApi,
        wake: Callable[[str], None],
        *,
        resources: tuple[str, ...] = WATCHED,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        retry_s: float = DEFAULT_RETRY_S,
        metrics: Any = None,
        provisioning_class: str = GPU_FLEET_CLASS,
        cache: WatchCache | None = None,
    ) -> None:
        """`metrics` (`autoscaler.daemon.metrics.Metrics`): `watch_up{resource}` is 1 while a resource's stream is
        open, 0 from a failure until it is open again.  `cache`: filled from the lists and events."""
        self.api = api
        self.cache = cache
        self.metrics = metrics
        self.wake = wake
        self.resources = resources
        self.timeout_s = timeout_s
        self.retry_s = retry_s
        self.filter = WakeFilter(provisioning_class=provisioning_class)
        self._filter_lock = threading.Lock()
        self._stop = threading.Event()
        self._handles: dict[str, Any] = {}
        self._threads: list[threading.Thread] = []

    @classmethod
    def for_daemon(cls, daemon: Any, wake: Callable[[str], None], **kw: Any) -> Watches:
        """The watches a `KubeDaemon` needs: requests of its class, nodes, pods, and Machines when it manages
        Cluster API pools; `kw` as the constructor's (timeout_s, retry_s, metrics, cache)."""
        resources = WATCHED_CAPI if daemon.kp.capi_pools else WATCHED
        return cls(daemon.api, wake, resources=resources, provisioning_class=daemon.provisioning_class, **kw)

    def start(self) -> Watches:
        for r in self.resources:
            t = threading.Thread(target=self._run, args=(r,), name=f"watch-{r}", daemon=True)
            t.start()
            self._threads.append(t)
        return self

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        for h in list(self._handles.values()):
            h.stop()
        for t in self._threads:
            t.join(timeout_s)

    def _run(self, resource: str) -> None:
        failing = False
        while not self._stop.is_set():
            try:
                self._follow(resource)
                failing = False
            except KubeError as exc:
                if exc.status == 410 and not self._stop.is_set():  # too old a version: list again, and look
                    if self.cache is not None:  # (an event may have been lost: the look lists, not the copy)
                        self.cache.lost(resource)
                    self.wake(f"{resource} watch expired")
                    continue
                failing = self._failed(resource, exc, failing, unexpected=False)
            except Exception as exc:  # a malformed event or a client bug: never end the thread silently
                failing = self._failed(resource, exc, failing, unexpected=True)

    def _failed(self, resource: str, exc: Exception, failing: bool, *, unexpected: bool) -> bool:
        """Log the first failure of an outage (with the traceback when `unexpected`), mark the watch down, wait
        `retry_s` (not when stopping: the stream ended because we stop).  Returns the new `failing`."""
        if self._stop.is_set():
            return failing
        if self.cache is not None:
            self.cache.lost(resource)
        if not failing:
            log = logger.bind(resource=resource, error=repr(exc))
            (log.exception if unexpected else log.warning)(
                "watch of {} failed ({}); retrying every {:g}s, the poll goes on", resource, exc, self.retry_s
            )
        self._up(resource, False)
        self._stop.wait(self.retry_s)
        return True

    def _up(self, resource: str, up: bool) -> None:
        if self.metrics is not None:
            self.metrics.watch_up.labels(resource=resource).set(1 if up else 0)

    def _follow(self, resource: str) -> None:
        """List, then watch from the list's version until stopped or the cache asks for a fresh list (raises on
        a refusal or 410)."""
        cache = self.cache
        listed_at = cache.clock() if cache is not None else 0.0
        items, version = self.api.listing(resource)
        with self._filter_lock:
            self.filter.seed(resource, items)
        if cache is not None:
            cache.replace(resource, items, listed_at)
        while not self._stop.is_set():
            handle = self.api.watcher()
            self._handles[resource] = handle
            self._up(resource, True)
            for event, obj in self.api.watch(resource, version, self.timeout_s, handle):
                if self._stop.is_set():
                    return
                version = str((obj.get("metadata") or {}).get("resourceVersion") or version)
                if cache is not None:
                    cache.apply(resource, event, obj)
                with self._filter_lock:
                    reason = self.filter.wakes(resource, event, obj)
                if reason is not None:
                    self.wake(reason)
                if cache is not None and cache.needs_list(resource):
                    return  # `_run` lists again
            if cache is not None and cache.needs_list(resource):
                return
