"""A fake Compute Engine v1 REST server on 127.0.0.1 for the real google-cloud-compute client.

    fake = FakeCompute(project="p").start()
    fake.add_region("us-central1", ["us-central1-a"], quotas={"NVIDIA_H100_MEGA_GPUS": 16})
    client = compute_v1.RegionsClient(transport="rest", credentials=AnonymousCredentials(),
                                      client_options=ClientOptions(api_endpoint=fake.url))
    client.get(project="p", region="us-central1").quotas

It speaks the real wire format (camelCase JSON, `compute#...` kinds, selfLinks, operations,
`error.errors[].reason`), serves regions (quotas), zones, zonal instance group managers
(get/list/createInstances/deleteInstances/listManagedInstances/listErrors/resize), instances
(get/list/insert/delete), zone operations (get/wait) and reservations (get/list), and lets a
test inject faults: N x 429/503, replies stalled past the client timeout, failed operations and
stockouts reported the way GCE reports them.  State and semantics live in `compute_model`.

`start(sock=..., tls=...)` serves on a socket bound elsewhere (a test network namespace) over TLS, as
compute.googleapis.com does; with `authorize` set (the bearer token -> allowed), a request whose token it refuses
is 401 UNAUTHENTICATED, as Google's front end answers a token it did not issue.
"""

from __future__ import annotations

import json
import re
import socket
import ssl
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tests.fakes.compute_model import (
    ApiError,
    ComputeState,
    Event,
    Hook,
    HttpFault,
    Json,
    Mig,
    OperationFault,
)
from tests.fakes.compute_resize import ResizeRequestBook
from tests.fakes.metadata import SocketServer

CAPACITY_TO_PROVISIONING = {
    "spot": "SPOT",
    "flex-start": "FLEX_START",
    "on-demand": "STANDARD",
    "reservation": "STANDARD",
}
# What the stack's GpuNodePool declares (components/gcp/node_pool.py; tests/components/test_node_pool.py keeps the
# two equal): the template's termination action per provisioning model, and MIGs that repair nothing.
STACK_TERMINATION_ACTION = {"SPOT": "STOP", "FLEX_START": "DELETE"}
STACK_MIG_ON_FAILURE = "DO_NOTHING"

P = r"/compute/v1/projects/(?P<project>[^/]+)"
Z = P + r"/zones/(?P<zone>[^/]+)"
IGM = Z + r"/instanceGroupManagers/(?P<igm>[^/]+)"
RR = r"/resizeRequests/(?P<rr>[^/]+)"


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    params: dict[str, str]
    body: Json
    match: dict[str, str]

    def __getitem__(self, key: str) -> str:
        return self.match[key]

    @property
    def request_id(self) -> str | None:
        return self.params.get("requestId")


def _page(items: list[Json], req: Request, kind: str | None, key: str = "items") -> Json:
    """GCE list paging: `maxResults` (<= 500) and an opaque `pageToken`.  Some list responses
    (listManagedInstances, listErrors) carry no `kind`."""
    size = min(int(req.params.get("maxResults") or 500), 500)
    start = int(req.params.get("pageToken") or 0)
    out: Json = {key: items[start : start + size]}
    if kind:
        out["kind"] = kind
    if start + size < len(items):
        out["nextPageToken"] = str(start + size)
    return out


def _routes(s: ComputeState, rr: ResizeRequestBook) -> list[tuple[str, re.Pattern[str], Callable[[Request], Json]]]:
    table: list[tuple[str, str, Callable[[Request], Json]]] = [
        (
            "POST",
            IGM + r"/resizeRequests",
            lambda r: rr.insert_resize_request(r["project"], r["zone"], r["igm"], r.body, r.request_id),
        ),
        (
            "GET",
            IGM + r"/resizeRequests",
            lambda r: _page(
                rr.list_resize_requests(r["project"], r["zone"], r["igm"]),
                r,
                "compute#instanceGroupManagerResizeRequestList",
            ),
        ),
        ("GET", IGM + RR, lambda r: rr.get_resize_request(r["project"], r["zone"], r["igm"], r["rr"])),
        (
            "POST",
            IGM + RR + "/cancel",
            lambda r: rr.cancel_resize_request(r["project"], r["zone"], r["igm"], r["rr"], r.request_id),
        ),
        (
            "DELETE",
            IGM + RR,
            lambda r: rr.delete_resize_request(r["project"], r["zone"], r["igm"], r["rr"], r.request_id),
        ),
        ("GET", P + r"/regions/(?P<region>[^/]+)", lambda r: s.get_region(r["project"], r["region"])),
        ("GET", P + r"/zones", lambda r: s.list_zones(r["project"])),
        ("GET", Z, lambda r: s.get_zone(r["project"], r["zone"])),
        ("GET", Z + r"/instanceGroupManagers", lambda r: s.list_migs(r["project"], r["zone"])),
        ("GET", IGM, lambda r: s.get_mig(r["project"], r["zone"], r["igm"])),
        (
            "POST",
            IGM + r"/createInstances",
            lambda r: s.create_instances(r["project"], r["zone"], r["igm"], r.body, r.request_id),
        ),
        (
            "POST",
            IGM + r"/deleteInstances",
            lambda r: s.delete_instances(r["project"], r["zone"], r["igm"], r.body, r.request_id),
        ),
        (
            "POST",
            IGM + r"/listManagedInstances",
            lambda r: _page(
                s.list_managed_instances(r["project"], r["zone"], r["igm"]),
                r,
                None,
                "managedInstances",
            ),
        ),
        (
            "GET",
            IGM + r"/listErrors",
            lambda r: _page(
                s.list_mig_errors(r["project"], r["zone"], r["igm"]),
                r,
                None,
            ),
        ),
        (
            "POST",
            IGM + r"/resize",
            lambda r: s.resize(r["project"], r["zone"], r["igm"], int(r.params["size"]), r.request_id),
        ),
        (
            "GET",
            Z + r"/instances",
            lambda r: _page(s.list_instances(r["project"], r["zone"]), r, "compute#instanceList"),
        ),
        ("POST", Z + r"/instances", lambda r: s.insert_instance(r["project"], r["zone"], r.body, r.request_id)),
        ("GET", Z + r"/instances/(?P<name>[^/]+)", lambda r: s.get_instance(r["project"], r["zone"], r["name"])),
        (
            "DELETE",
            Z + r"/instances/(?P<name>[^/]+)",
            lambda r: s.delete_instance(r["project"], r["zone"], r["name"], r.request_id),
        ),
        ("GET", Z + r"/operations/(?P<op>[^/]+)", lambda r: s.get_operation(r["project"], r["zone"], r["op"])),
        ("POST", Z + r"/operations/(?P<op>[^/]+)/wait", lambda r: s.wait_operation(r["project"], r["zone"], r["op"])),
        (
            "GET",
            Z + r"/reservations",
            lambda r: _page(s.list_reservations(r["project"], r["zone"]), r, "compute#reservationList"),
        ),
        (
            "GET",
            Z + r"/reservations/(?P<name>[^/]+)",
            lambda r: s.get_reservation(r["project"], r["zone"], r["name"]),
        ),
    ]
    return [(m, re.compile(p + r"/?$"), fn) for m, p, fn in table]


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    fake: FakeCompute


class _BoundServer(SocketServer):
    """`_Server` on a socket bound by the caller (a test's network namespace: tests/fakes/metadata.py)."""

    block_on_close = False
    fake: FakeCompute


class _Handler(BaseHTTPRequestHandler):
    server: _Server | _BoundServer
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out as two writes: avoid the 40 ms delayed-ACK stall

    def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
        pass

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_DELETE(self) -> None:
        self._handle("DELETE")

    def do_PATCH(self) -> None:
        self._handle("PATCH")

    def _handle(self, method: str) -> None:
        fake = self.server.fake
        split = urlsplit(self.path)
        params = {k: v[-1] for k, v in parse_qs(split.query).items()}
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if fake.authorize is not None:
            scheme, _, token = (self.headers.get("Authorization") or "").partition(" ")
            if scheme.lower() != "bearer" or not fake.authorize(token.strip()):
                err = ApiError(401, "authError", "Request had invalid authentication credentials.")
                fake.log_request(method, split.path, 401)
                self._reply(401, err.body())
                return
        fault = fake.state.take_http_fault(method, split.path)
        if fault is not None and fault.delay and not fault.delay_after:
            fake.sleep(fault.delay)
        if fault is not None and fault.status is not None:
            err = ApiError(fault.status, fault.reason, f"Injected fault: HTTP {fault.status}")
            status, payload = err.status, err.body()
        else:
            status, payload = fake.dispatch(method, split.path, params, raw)
        fake.log_request(method, split.path, status)
        if fault is not None and fault.delay and fault.delay_after:
            fake.sleep(fault.delay)
        self._reply(status, payload)

    def _reply(self, status: int, payload: Json) -> None:
        data = json.dumps(payload).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json; charset=UTF-8")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):  # the client gave up (timeout)
            pass


class FakeCompute:
    """The fake server plus conveniences bound to one default project.  Use `start()`/`stop()`
    or a `with` block; `url` is the `api_endpoint` for `ClientOptions`."""

    def __init__(
        self,
        project: str = "test-project",
        *,
        boot_delay: float = 0.0,
        delete_delay: float = 0.0,
        operation_delay: float = 0.0,
        mig_retry_interval: float | None = None,
        flex_start_delay: float = 0.0,
        flex_start_max_wait: float | None = None,
        on_boot: Hook = None,
        on_delete: Hook = None,
    ) -> None:
        self.project = project
        self.state = ComputeState(
            boot_delay=boot_delay,
            delete_delay=delete_delay,
            operation_delay=operation_delay,
            mig_retry_interval=mig_retry_interval,
            on_boot=on_boot,
            on_delete=on_delete,
        )
        self.resize_requests = ResizeRequestBook(
            self.state, flex_start_delay=flex_start_delay, flex_start_max_wait=flex_start_max_wait
        )
        self._routes = _routes(self.state, self.resize_requests)
        self._stopping = threading.Event()
        self._server: _Server | _BoundServer | None = None
        self._thread: threading.Thread | None = None
        self.requests: list[tuple[str, str, int]] = []
        self._log_lock = threading.Lock()
        #: the bearer token of a request -> whether it is allowed (None: no authentication, as an emulator)
        self.authorize: Callable[[str], bool] | None = None
        self._scheme = "http"

    # ----------------------------------------------------------------- lifecycle

    def start(self, port: int = 0, sock: socket.socket | None = None, tls: ssl.SSLContext | None = None) -> FakeCompute:
        """Serve on 127.0.0.1:`port` (0: any), or on `sock` (bound and listening elsewhere); over TLS with `tls`."""
        server = _Server(("127.0.0.1", port), _Handler) if sock is None else _BoundServer(sock, _Handler)
        if tls is not None:
            server.socket = tls.wrap_socket(server.socket, server_side=True)
            self._scheme = "https"
        server.fake = self
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05}, name="fake-compute-http", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        self.state.close()

    def __enter__(self) -> FakeCompute:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        assert self._server is not None, "FakeCompute.start() first"
        return self._server.server_address[1]

    @property
    def url(self) -> str:
        assert self._server is not None, "FakeCompute.start() first"
        host, port = self._server.server_address[:2]
        return f"{self._scheme}://{host}:{port}"

    def sleep(self, seconds: float) -> None:
        self._stopping.wait(seconds)

    # ----------------------------------------------------------------- HTTP plumbing

    def dispatch(self, method: str, path: str, params: dict[str, str], raw: bytes) -> tuple[int, Json]:
        try:
            body = json.loads(raw) if raw else {}
        except ValueError:
            return 400, ApiError(400, "parseError", "Parse Error").body()
        for route_method, pattern, fn in self._routes:
            m = pattern.match(path)
            if m and route_method == method:
                try:
                    return 200, fn(Request(method, path, params, body, m.groupdict()))
                except ApiError as e:
                    return e.status, e.body()
                except (KeyError, ValueError, TypeError) as e:
                    return 400, ApiError(400, "invalid", f"Invalid request: {e!r}").body()
        return 404, ApiError(404, "notFound", f"fake compute: no route for {method} {path}").body()

    def log_request(self, method: str, path: str, status: int) -> None:
        with self._log_lock:
            self.requests.append((method, path, status))

    def request_counts(self) -> Counter[tuple[str, int]]:
        """(API method name, HTTP status) -> count, e.g. ("createInstances", 429)."""
        with self._log_lock:
            return Counter((p.rsplit("/", 1)[-1] if m == "POST" else f"{m} {p}", s) for m, p, s in self.requests)

    # ----------------------------------------------------------------- state setup

    def add_region(self, region: str, zones: Iterable[str], quotas: dict[str, float] | None = None) -> None:
        self.state.add_region(self.project, region, zones, quotas)

    def set_quota(self, region: str, metric: str, limit: float, usage: float | None = None) -> None:
        self.state.set_quota(self.project, region, metric, limit, usage)

    def add_mig(self, zone: str, name: str, machine_type: str, **kw: Any) -> Mig:
        return self.state.add_mig(self.project, zone, name, machine_type=machine_type, **kw)

    def add_reservation(self, zone: str, name: str, machine_type: str, count: int, in_use: int = 0) -> None:
        self.state.add_reservation(self.project, zone, name, machine_type, count, in_use)

    def add_inventory(self, pools: Iterable[Any]) -> None:
        """One region per pool region and one zonal MIG per (pool, zone), as the stacks create them
        (pools are `fleet.inventory.InventoryPool`): a Slurm stack's pool (platform gce) with its template's
        termination action and no repair, as GpuNodePool declares them; a GKE node pool's with GCE's defaults
        (the MIG repairs: a preempted VM shows RECREATING)."""
        for pool in pools:
            self.state.add_region(pool.project, pool.region, pool.zones)
            model = CAPACITY_TO_PROVISIONING[str(pool.capacity_type)]
            stack: dict[str, Any] = {}
            if pool.platform == "gce":
                stack = {
                    "instance_termination_action": STACK_TERMINATION_ACTION.get(model),
                    "default_action_on_failure": STACK_MIG_ON_FAILURE,
                }
            for zone in pool.zones:
                self.state.add_mig(
                    pool.project,
                    zone,
                    pool.instance_groups.get(zone) or f"{pool.instance_group}-{zone}",
                    machine_type=pool.machine_type,
                    provisioning_model=model,
                    accelerator=pool.gpu_type,
                    gpu_count=pool.gpus_per_node,
                    reservation=pool.reservation,
                    base_instance_name=pool.node_name_prefix,
                    **stack,
                )

    # ----------------------------------------------------------------- faults

    def fail_next(
        self, status: int, count: int = 1, *, method: str | None = None, path_contains: str | None = None
    ) -> None:
        """Answer the next `count` matching requests with HTTP `status` (429 -> rateLimitExceeded)."""
        reason = {429: "rateLimitExceeded", 403: "rateLimitExceeded"}.get(status, "backendError")
        with self.state.lock:
            self.state.http_faults.append(
                HttpFault(count, status=status, reason=reason, method=method, path_contains=path_contains)
            )

    def delay_next(
        self,
        seconds: float,
        count: int = 1,
        *,
        after: bool = True,
        method: str | None = None,
        path_contains: str | None = None,
    ) -> None:
        """Stall the next `count` matching replies by `seconds`; with `after` the request is
        processed first (so a client that times out and retries must rely on requestId)."""
        with self.state.lock:
            self.state.http_faults.append(
                HttpFault(count, delay=seconds, delay_after=after, method=method, path_contains=path_contains)
            )

    def fail_operations(
        self, code: str, message: str = "", count: int = 1, *, operation_type: str | None = None, http_status: int = 400
    ) -> None:
        """Complete the next `count` operations (of `operation_type`) with `error.errors[0].code = code`."""
        with self.state.lock:
            self.state.operation_faults.append(
                OperationFault(count, code, message or f"Injected operation error {code}", http_status, operation_type)
            )

    def stockout(self, zone: str, machine_type: str, provisioning_model: str | None = None) -> None:
        """Creations of `machine_type` in `zone` (only `provisioning_model` when given) fail with
        ZONE_RESOURCE_POOL_EXHAUSTED: per instance in a MIG, in the operation for instances.insert."""
        self.state.stockout(zone, machine_type, provisioning_model)

    def clear_stockouts(self, *, retry: bool = True) -> None:
        self.state.clear_stockouts(retry=retry)

    def preempt(self, zone: str, name: str) -> None:
        self.state.preempt(self.project, zone, name)

    # ----------------------------------------------------------------- assertions

    @property
    def events(self) -> list[Event]:
        with self.state.lock:
            return list(self.state.events)

    def events_of(self, kind: str) -> list[Event]:
        return self.state.events_of(kind)

    def create_counts(self) -> Counter[str]:
        return self.state.create_counts()

    def duplicates(self) -> dict[str, int]:
        return self.state.duplicates()

    @property
    def faults_injected(self) -> Counter[str]:
        with self.state.lock:
            return Counter(self.state.faults_injected)

    def instance_names(self, zone: str | None = None) -> set[str]:
        with self.state.lock:
            return {n for (p, z, n) in self.state.instances if p == self.project and zone in (None, z)}

    def instance_status(self, zone: str, name: str) -> str | None:
        with self.state.lock:
            inst = self.state.instances.get((self.project, zone, name))
            return None if inst is None else inst.status

    def wait_idle(self, timeout: float = 10.0) -> None:
        """Block until every scheduled boot/delete/retry has run (not for `mig_retry_interval` loops)."""
        deadline = time.monotonic() + timeout
        while not self.state.scheduler.idle():
            if time.monotonic() > deadline:
                raise TimeoutError("fake compute: scheduled work still pending")
            time.sleep(0.01)
