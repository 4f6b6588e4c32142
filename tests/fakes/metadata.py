"""A fake GCE metadata server: what a VM's startup script reads at http://metadata.google.internal.

    md = FakeMetadata(project_id="p", project_number="123")
    md.add_instance(VmMetadata(name="c-controller", zone="us-central1-a", ip="10.0.0.2",
                               service_account="ctl@p.iam.gserviceaccount.com",
                               attributes={"startup-script": "...", "slurm-conf": "..."}))
    server = md.serve(("169.254.169.254", 80))          # or md.serve_socket(sock) on a pre-bound socket

One server answers for every VM and tells them apart by the caller's source address, as the real one
(one per host, reached over the VM's own link) answers each VM only about itself.  What it refuses as
the real one does: a request without `Metadata-Flavor: Google` (403), one carrying `X-Forwarded-For`
(403, the real server's defence against proxies), a caller it does not know (403 here), an unknown key
(404).  It serves the paths startup scripts and google-auth use:

- `/`: the root listing (`computeMetadata/`), which google-auth pings to tell that it runs on GCE
- `instance/{name,hostname,id,zone,machine-type}`, `instance/network-interfaces/N/{ip,network,...}`
- `instance/attributes/` (key listing) and `instance/attributes/KEY`, `project/attributes/...`
- `project/{project-id,numeric-project-id}`
- `instance/service-accounts/default/` (recursive: aliases, email, scopes) and `.../{email,scopes,token}`: the
  token is an opaque string the fake Secret Manager (`tests.fakes.metadata_secrets`) maps back to the VM's
  service account.

Every request is recorded (`requests`) with the caller address, so a test can assert who asked for a
token and whether it got one.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import socket
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

PREFIX = "/computeMetadata/v1/"
TOKEN_TTL_S = 3599


@dataclass
class VmMetadata:
    """One VM as the metadata server knows it."""

    name: str
    zone: str
    ip: str
    service_account: str
    attributes: dict[str, str] = field(default_factory=dict)
    machine_type: str = "n2-standard-4"
    network: str = "default"
    scopes: tuple[str, ...] = ("https://www.googleapis.com/auth/cloud-platform",)
    instance_id: str = ""

    def __post_init__(self) -> None:
        if not self.instance_id:
            self.instance_id = str(int.from_bytes(self.name.encode()[:7].ljust(7, b"\0"), "big"))


@dataclass(frozen=True)
class MetadataRequest:
    client: str
    path: str
    status: int


@dataclass
class TokenGrant:
    token: str
    service_account: str
    vm: str


class FakeMetadata:
    """State of the fake metadata server: project, VMs (by IP), issued tokens, request log."""

    def __init__(self, project_id: str, project_number: str = "123456789012", project_attributes=None) -> None:
        self.project_id = project_id
        self.project_number = project_number
        self.project_attributes: dict[str, str] = dict(project_attributes or {})
        self.vms: dict[str, VmMetadata] = {}  # by IP
        self.tokens: dict[str, TokenGrant] = {}
        self.requests: list[MetadataRequest] = []
        self._lock = threading.Lock()

    def add_instance(self, vm: VmMetadata) -> VmMetadata:
        if vm.ip in self.vms:
            raise ValueError(f"{vm.name}: ip {vm.ip} already belongs to {self.vms[vm.ip].name}")
        self.vms[vm.ip] = vm
        return vm

    def vm_named(self, name: str) -> VmMetadata:
        for vm in self.vms.values():
            if vm.name == name:
                return vm
        raise KeyError(name)

    def service_account_of(self, token: str) -> str | None:
        grant = self.tokens.get(token)
        return grant.service_account if grant else None

    def token_requests(self, vm_name: str) -> list[MetadataRequest]:
        ip = self.vm_named(vm_name).ip
        return [r for r in self.requests if r.client == ip and r.path.endswith("/token")]

    # --- request handling (pure: path in, status/body out) ---

    def answer(self, client: str, path: str, headers: dict[str, str]) -> tuple[int, str, str]:
        """(status, content type, body) for GET `path` from `client`."""
        status, ctype, body = self._answer(client, path, {k.lower(): v for k, v in headers.items()})
        with self._lock:
            self.requests.append(MetadataRequest(client, path, status))
        return status, ctype, body

    def _answer(self, client: str, raw_path: str, headers: dict[str, str]) -> tuple[int, str, str]:
        text = "application/text"
        if headers.get("metadata-flavor") != "Google":
            return 403, "text/html", "Missing Metadata-Flavor:Google header.\n"
        if "x-forwarded-for" in headers:
            return 403, "text/html", "Request had X-Forwarded-For header and was rejected.\n"
        vm = self.vms.get(client)
        if vm is None:
            return 403, "text/html", f"unknown caller {client}\n"
        split = urlsplit(raw_path)
        query = parse_qs(split.query)
        if split.path == "/":  # what google-auth's `_metadata.ping` reads to tell it runs on GCE
            return 200, text, "computeMetadata/\n"
        if not split.path.startswith(PREFIX):
            return 404, "text/html", "not found\n"
        path = split.path[len(PREFIX) :]
        recursive = query.get("recursive", ["false"])[0].lower() == "true"
        value = self._lookup(vm, path, recursive)
        if value is None:
            return 404, "text/html", f"{split.path} not found\n"
        if isinstance(value, dict | list):
            return 200, "application/json", json.dumps(value)
        return 200, text, value

    def _lookup(self, vm: VmMetadata, path: str, recursive: bool) -> Any:
        project = {
            "project-id": self.project_id,
            "numeric-project-id": self.project_number,
            "attributes/": self.project_attributes,
        }
        nics = [{"ip": vm.ip, "network": f"projects/{self.project_number}/networks/{vm.network}"}]
        if path.startswith("instance/service-accounts/"):
            return self._service_account(vm, path[len("instance/service-accounts/") :])
        if path in ("instance/attributes/", "instance/attributes"):
            return vm.attributes if recursive else "".join(f"{k}\n" for k in vm.attributes)
        if path.startswith("instance/attributes/"):
            return vm.attributes.get(path[len("instance/attributes/") :])
        if path in ("project/attributes/", "project/attributes"):
            return self.project_attributes if recursive else "".join(f"{k}\n" for k in self.project_attributes)
        if path.startswith("project/attributes/"):
            return self.project_attributes.get(path[len("project/attributes/") :])
        if path.startswith("project/"):
            return project.get(path[len("project/") :])
        if path.startswith("instance/network-interfaces/"):
            rest = path[len("instance/network-interfaces/") :].strip("/")
            if not rest:
                return nics if recursive else "".join(f"{i}/\n" for i in range(len(nics)))
            idx, _, key = rest.partition("/")
            if not idx.isdigit() or int(idx) >= len(nics):
                return None
            nic = nics[int(idx)]
            return nic if not key else nic.get(key)
        simple = {
            "instance/name": vm.name,
            "instance/hostname": f"{vm.name}.{vm.zone}.c.{self.project_id}.internal",
            "instance/id": vm.instance_id,
            "instance/zone": f"projects/{self.project_number}/zones/{vm.zone}",
            "instance/machine-type": f"projects/{self.project_number}/machineTypes/{vm.machine_type}",
        }
        return simple.get(path)

    def _service_account(self, vm: VmMetadata, rest: str) -> Any:
        account, _, key = rest.partition("/")
        if account not in ("default", vm.service_account):
            return None
        if key == "":  # `default/?recursive=true`: what google-auth reads before its first token
            return {"aliases": ["default"], "email": vm.service_account, "scopes": list(vm.scopes)}
        if key == "email":
            return vm.service_account
        if key == "scopes":
            return "".join(f"{s}\n" for s in vm.scopes)
        if key == "token":
            token = "ya29.fake-" + secrets.token_urlsafe(24)
            with self._lock:
                self.tokens[token] = TokenGrant(token, vm.service_account, vm.name)
            return {"access_token": token, "expires_in": TOKEN_TTL_S, "token_type": "Bearer"}
        return None

    # --- serving ---

    def serve_socket(self, sock: socket.socket) -> ThreadingHTTPServer:
        """Serve on an already bound (listening or not) socket, in a daemon thread; returns the server."""
        return _serve(sock, _handler(self))

    def serve(self, address: tuple[str, int]) -> ThreadingHTTPServer:
        sock = socket.create_server(address)
        return self.serve_socket(sock)


def _handler(md: FakeMetadata) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "Metadata Server for VM"
        sys_version = ""

        def do_GET(self) -> None:
            status, ctype, body = md.answer(self.client_address[0], self.path, dict(self.headers.items()))
            data = body.encode()
            self.send_response(status)
            self.send_header("Metadata-Flavor", "Google")
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


class SocketServer(ThreadingHTTPServer):
    """An HTTP server on a socket bound by the caller (in another network namespace: a first-boot fabric)."""

    daemon_threads = True

    def __init__(self, sock: socket.socket, handler: type[BaseHTTPRequestHandler]) -> None:
        super().__init__(sock.getsockname()[:2], handler, bind_and_activate=False)
        self.socket.close()
        self.socket = sock
        self.server_address = sock.getsockname()[:2]
        with contextlib.suppress(OSError):
            sock.listen(64)


def _serve(sock: socket.socket, handler: type[BaseHTTPRequestHandler]) -> ThreadingHTTPServer:
    server = SocketServer(sock, handler)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True).start()
    return server
