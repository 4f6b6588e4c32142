"""Prometheus metrics and `/healthz`, served on a local port (127.0.0.1 by default).

All metrics live in one `Metrics` object with its own registry (tests make as many as they like).
`/healthz` answers 200 while the last successful tick is younger than `healthy_after_s`, 503 otherwise.
"""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest

NS = "gpu_fleet_autoscaler"


class Metrics:
    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.pending_gpus = Gauge(
            f"{NS}_pending_gpus", "GPUs asked for and not yet running, by pool", ["pool"], registry=r
        )
        self.unserved_units = Gauge(
            f"{NS}_unserved_units", "Work units the plan left unserved, by reason", ["reason"], registry=r
        )
        self.unservable_jobs = Gauge(
            f"{NS}_unservable_jobs", "Pending jobs no managed pool can ever serve, by reason", ["reason"], registry=r
        )
        self.waiting_on_boot = Gauge(
            f"{NS}_jobs_waiting_on_boot", "Jobs Slurm placed on CLOUD nodes still powering up", registry=r
        )
        self.nodes = Gauge(f"{NS}_nodes", "Nodes by pool and autoscaler state", ["pool", "state"], registry=r)
        self.hourly_usd = Gauge(f"{NS}_hourly_usd", "$/h of live nodes by capacity type", ["capacity_type"], registry=r)
        self.commands = Counter(
            f"{NS}_commands", "Commands issued, by command and outcome", ["command", "outcome"], registry=r
        )
        self.tick_seconds = Histogram(
            f"{NS}_tick_duration_seconds",
            "Wall time of one tick",
            buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
            registry=r,
        )
        self.ticks = Counter(f"{NS}_ticks", "Ticks run, by outcome", ["outcome"], registry=r)
        self.backoffs = Gauge(
            f"{NS}_offering_backoffs", "Offerings currently backed off, by reason", ["reason"], registry=r
        )
        self.offering_failures = Counter(
            f"{NS}_offering_failures", "Launch failures recorded against offerings, by kind", ["kind"], registry=r
        )
        self.power_requests = Counter(
            f"{NS}_power_requests", "Slurm power-save requests taken, by action", ["action"], registry=r
        )
        self.job_end_wakes = Counter(
            f"{NS}_job_end_wakes",
            "EpilogSlurmctld wake-ups settled: freed (a tick saw the nodes free) or gave_up (still busy after 120 s)",
            ["outcome"],
            registry=r,
        )
        self.adopted = Counter(f"{NS}_adopted_instances", "Instances adopted on reconcile", registry=r)
        self.orphans_deleted = Counter(f"{NS}_orphans_deleted", "Unwanted instances deleted", registry=r)
        self.watch_up = Gauge(
            f"{NS}_watch_up", "1 while the watch of a resource streams (Kubernetes daemon)", ["resource"], registry=r
        )
        self.woken_ticks = Counter(
            f"{NS}_woken_ticks", "Ticks started between polls by a watch event, by reason", ["reason"], registry=r
        )
        self.api_reads = Counter(
            f"{NS}_api_reads",
            "Reads of a watched resource by the Kubernetes daemon, answered from the watches' cache or listed live",
            ["resource", "source"],
            registry=r,
        )
        self.leader = Gauge(f"{NS}_leader", "1 while this daemon holds the actuation lock", registry=r)
        self.slurm_up = Gauge(f"{NS}_slurm_up", "1 when Slurm answered in the last tick", registry=r)
        self.last_success = Gauge(f"{NS}_last_success_timestamp_seconds", "When the last tick succeeded", registry=r)
        self.healthy_after_s = 120.0
        self.last_success_at = 0.0

    def tick_succeeded(self, at: float) -> None:
        self.last_success_at = at
        self.last_success.set(at)

    def healthy(self, now: float | None = None) -> bool:
        last = self.last_success_at
        return last > 0 and (now if now is not None else time.time()) - last < self.healthy_after_s

    def render(self) -> bytes:
        return generate_latest(self.registry)


class MetricsServer:
    """`/metrics` and `/healthz` on host:port in a daemon thread (port 0 picks a free one: see `.port`)."""

    def __init__(self, metrics: Metrics, host: str = "127.0.0.1", port: int = 9464) -> None:
        m = metrics

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path.split("?")[0] == "/metrics":
                    body, code, ctype = m.render(), 200, CONTENT_TYPE_LATEST
                elif self.path.split("?")[0] == "/healthz":
                    ok = m.healthy()
                    body, code, ctype = (
                        (b"ok\n" if ok else b"last tick too old or failed\n"),
                        (200 if ok else 503),
                        "text/plain",
                    )
                else:
                    body, code, ctype = b"not found\n", 404, "text/plain"
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:  # quiet: loguru logs the daemon
                return

        self.httpd = ThreadingHTTPServer((host, port), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, name="metrics", daemon=True)

    def start(self) -> MetricsServer:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
