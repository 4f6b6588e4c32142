"""`fleet autoscaler run --config FILE` for a Kubernetes cluster: the config, the loop, /metrics and /healthz.

A config with a `kubernetes:` section (`fleet.inventory.KubernetesSection`, written by the stack into the
Deployment's ConfigMap, docs/kubernetes.md) runs the Kubernetes daemon instead of the Slurm one:

    inventory: /etc/gpu-fleet/inventory.json
    policy: {wait_value_usd_per_gpu_hour: 0}
    kubernetes: {namespace: gpu-fleet-system, lease: {name: gpu-fleet-autoscaler}}
    provider: {endpoint: null}          # GKE pools: Compute API options (a local fake in tests)
    metrics: {host: 0.0.0.0, port: 9464}
    loop: {interval_s: 10, watch: true}

Every replica ticks; only the Lease holder actuates (autoscaler/kube/lease.py).  The loop (`KubeRunLoop`) polls
every `interval_s` and, with `watch` (the default), also ticks at once on the watch events a tick would act on
(a ProvisioningRequest created, a node Ready, a GPU pod finished: `autoscaler/kube/wake.py`), at most one such
tick a second.  With `watch_cache` (the default, with `watch`) a tick reads Nodes, Pods, ProvisioningRequests and
Machines from what the watches streamed (`autoscaler/kube/cache.py`) instead of listing them again.
"""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path
from typing import Any, Literal

from loguru import logger
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from autoscaler.model.policy import SHARE_NODES_ON_KUBERNETES
from fleet.inventory import KubernetesSection, load_inventory


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class KubeProvider(_Strict):
    kind: Literal["gce", "cluster-api"] | None = None  # informative: each pool's pool_kind picks its actuator
    endpoint: str | None = None  # Compute API endpoint of GKE pools (tests: a local fake)
    anonymous: bool = False


class KubeMetrics(_Strict):
    enabled: bool = True
    host: str = "0.0.0.0"  # in a pod: the Service scrapes the pod IP
    port: int = Field(9464, ge=0, le=65535)
    healthy_after_s: float = Field(120.0, gt=0)


class KubeLoop(_Strict):
    interval_s: float = Field(10.0, gt=0)
    #: tick on watch events between polls (`autoscaler/kube/wake.py`); false: the poll alone
    watch: bool = True
    #: one watch stream's length; a stalled stream is noticed within it plus 10 s (autoscaler/kube/watch.py)
    watch_timeout_s: float = Field(60.0, ge=1)
    #: the least time between two woken ticks' starts
    watch_min_gap_s: float = Field(1.0, ge=0.1)
    #: ticks read what the watches streamed (`autoscaler/kube/cache.py`); false: every tick lists requests, nodes,
    #: pods and Machines (ignored without `watch`)
    watch_cache: bool = True


class KubeDaemonConfig(_Strict):
    inventory: Path
    pools: list[str] | None = None
    policy: dict[str, Any] = Field(default_factory=dict)
    kubernetes: KubernetesSection
    provider: KubeProvider = Field(default_factory=KubeProvider)
    metrics: KubeMetrics = Field(default_factory=KubeMetrics)
    loop: KubeLoop = Field(default_factory=KubeLoop)
    state_path: Path | None = None  # accepted for a config shared with the Slurm daemon; unused here


class KubeConfigError(ValueError):
    pass


def is_kube_config(data: Any) -> bool:
    return isinstance(data, dict) and "kubernetes" in data


def parse(data: Any, source: str, base: Path) -> KubeDaemonConfig:
    try:
        cfg = KubeDaemonConfig.model_validate(data)
    except ValidationError as exc:
        lines = [f"  {'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()]
        raise KubeConfigError(f"{source}: invalid autoscaler config\n" + "\n".join(lines)) from None
    if cfg.policy.get("share_nodes") is True:  # sharing Kueue's booked nodes is not built or measured
        raise KubeConfigError(f"{source}: policy.share_nodes: {SHARE_NODES_ON_KUBERNETES}")
    if not cfg.inventory.is_absolute():
        cfg = cfg.model_copy(update={"inventory": base / cfg.inventory})
    return cfg


def load(path: Path) -> KubeDaemonConfig:
    """Read through the input gate (size, UTF-8, duplicate keys, aliases, finite numbers), then validate."""
    from fleet.input import InputError, load_yaml
    from fleet.input.limits import MAX_CONFIG_BYTES

    try:
        data = load_yaml(path, what="autoscaler config", max_bytes=MAX_CONFIG_BYTES)
    except InputError as exc:
        raise KubeConfigError(str(exc)) from None
    return parse(data, str(path), path.parent)


def build(cfg: KubeDaemonConfig, **kw: Any) -> Any:
    from autoscaler.daemon.build import build_policy, build_settings
    from autoscaler.daemon.metrics import Metrics
    from autoscaler.kube.build import build_kube_daemon

    inv = load_inventory(cfg.inventory)
    if cfg.pools is not None:
        inv = [p for p in inv if p.name in cfg.pools]
    gce = None
    if cfg.provider.endpoint:

        def gce(pools):  # type: ignore[no-untyped-def]
            from autoscaler.gce import GceProvider

            return GceProvider(
                pools, endpoint=cfg.provider.endpoint, credentials="anonymous" if cfg.provider.anonymous else None
            )

    metrics = Metrics()
    metrics.healthy_after_s = cfg.metrics.healthy_after_s
    policy = build_policy(cfg.policy)
    kw.setdefault("settings", build_settings(cfg.policy, policy))
    return build_kube_daemon(cfg.kubernetes, inv, policy, gce=gce, metrics=metrics, **kw)


class KubeRunLoop:
    """Tick on the poll's grid and on wake-ups (`wake.next_tick_at`), until `stop`."""

    def __init__(self, daemon: Any, interval_s: float, *, min_gap_s: float = 1.0, clock: Any = time.monotonic) -> None:
        self.daemon = daemon
        self.interval_s = interval_s
        self.min_gap_s = min_gap_s
        self.clock = clock
        self.stop_event = threading.Event()
        self._signal = threading.Event()  # a wake-up or a stop: ends the wait early
        self._woken: str | None = None
        self._lock = threading.Lock()
        self.ticks = 0
        self.woken_ticks = 0

    def wake(self, reason: str) -> None:
        with self._lock:
            self._woken = self._woken or reason
        self._signal.set()

    def stop(self) -> None:
        self.stop_event.set()
        self._signal.set()

    def run(self) -> None:
        from autoscaler.kube.wake import next_poll_after, next_tick_at

        start = self.clock()
        next_poll, last = start, None
        follow_at: float | None = None  # a tick cordoned nodes: the next one deletes those still empty
        while not self.stop_event.is_set():
            now = self.clock()
            with self._lock:
                woken = self._woken
            at = next_tick_at(
                now, next_poll=next_poll, last_tick=last, woken=woken is not None, min_gap_s=self.min_gap_s
            )
            if follow_at is not None:
                at = min(at, follow_at)
            if at > now:
                self._signal.wait(at - now)
                self._signal.clear()
                continue
            with self._lock:
                self._woken = None
            if now < next_poll:
                self.woken_ticks += 1
                reason = woken or "cordoned nodes to delete"
                logger.debug("tick woken: {}", reason)
                metrics = getattr(self.daemon, "metrics", None)
                if metrics is not None:
                    metrics.woken_ticks.labels(reason=reason).inc()
            else:
                next_poll = next_poll_after(now, start, self.interval_s)
            last, follow_at = now, None
            res = self.daemon.tick()
            self.ticks += 1
            if getattr(res, "cordoned", None):
                follow_at = now + self.min_gap_s


def run_forever(daemon: Any, cfg: KubeDaemonConfig) -> int:
    from autoscaler.daemon.metrics import MetricsServer
    from autoscaler.kube.cache import WatchCache
    from autoscaler.kube.watch import Watches

    loop = KubeRunLoop(daemon, cfg.loop.interval_s, min_gap_s=cfg.loop.watch_min_gap_s)
    signal.signal(signal.SIGTERM, lambda *_: loop.stop())
    signal.signal(signal.SIGINT, lambda *_: loop.stop())
    server = MetricsServer(daemon.metrics, cfg.metrics.host, cfg.metrics.port).start() if cfg.metrics.enabled else None
    watches = None
    if cfg.loop.watch:
        cache = WatchCache(metrics=daemon.metrics) if cfg.loop.watch_cache else None
        daemon.api.cache = cache
        watches = Watches.for_daemon(
            daemon, loop.wake, timeout_s=cfg.loop.watch_timeout_s, metrics=daemon.metrics, cache=cache
        ).start()
    logger.info(
        "autoscaler (kubernetes) running: tick every {:g}s{}{}",
        cfg.loop.interval_s,
        " and on watch events" if watches is not None else "",
        ", reading the watches' cache" if watches is not None and watches.cache is not None else "",
    )
    try:
        loop.run()
    finally:
        if watches is not None:
            watches.stop()
        daemon.elector.release()  # after the last tick: the other replica leads from its next one
        if server is not None:
            server.stop()
    logger.info("autoscaler stopped")
    return 0
