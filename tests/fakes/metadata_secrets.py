"""A fake Secret Manager (v1 REST, `versions/*:access`) that trusts only tokens the fake metadata server issued.

    sm = FakeSecretManager(md, project_id="p", project_number="123")
    sm.add_secret("c-slurm-munge-key", b"...", accessors={"serviceAccount:ctl@p.iam.gserviceaccount.com"})
    server = sm.serve_socket(tls_sock)   # HTTPS as secretmanager.googleapis.com (see tls_context)

`GET /v1/projects/{project}/secrets/{secret}/versions/{version}:access` with `Authorization: Bearer T`
answers as the real API does: 401 UNAUTHENTICATED without a token the metadata server issued, 403
PERMISSION_DENIED when the token's service account is not an accessor of the secret (the real API
says the same for a secret that does not exist), 404 NOT_FOUND for a secret with no version yet, and otherwise
`{"name": ..., "payload": {"data": base64(data), "dataCrc32c": "..."}}`.
`accessors` are IAM members, as the stack's `SecretIamMember` resources grant them.
Every access is recorded (`accesses`: who, which secret, the status).
"""

from __future__ import annotations

import base64
import ipaddress
import json
import re
import socket
import ssl
import subprocess
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

from tests.fakes.metadata import FakeMetadata, _serve

HOST = "secretmanager.googleapis.com"
_ACCESS = re.compile(r"^/v1/projects/(?P<project>[^/]+)/secrets/(?P<secret>[^/]+)/versions/(?P<version>[^/:]+):access$")


@dataclass
class Secret:
    secret_id: str
    versions: list[bytes]
    accessors: set[str] = field(default_factory=set)


@dataclass(frozen=True)
class Access:
    service_account: str | None
    secret_id: str
    status: int


def crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli), as Secret Manager reports `dataCrc32c`."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


class FakeSecretManager:
    def __init__(self, metadata: FakeMetadata, project_id: str, project_number: str) -> None:
        self.metadata = metadata
        self.project_ids = {project_id, project_number}
        self.project_number = project_number
        self.secrets: dict[str, Secret] = {}
        self.accesses: list[Access] = []
        self._lock = threading.Lock()

    def add_secret(self, secret_id: str, data: bytes, accessors: set[str] | None = None) -> Secret:
        self.secrets[secret_id] = Secret(secret_id, [data], set(accessors or ()))
        return self.secrets[secret_id]

    def answer(self, path: str, headers: dict[str, str]) -> tuple[int, dict[str, Any]]:
        status, body, who, secret = self._answer(path, {k.lower(): v for k, v in headers.items()})
        with self._lock:
            self.accesses.append(Access(who, secret, status))
        return status, body

    def _answer(self, path: str, headers: dict[str, str]) -> tuple[int, dict[str, Any], str | None, str]:
        m = _ACCESS.match(path.split("?")[0])
        if not m:
            return 404, _error(404, "NOT_FOUND", f"{path} is not a Secret Manager method"), None, ""
        secret_id = m["secret"]
        auth = headers.get("authorization", "")
        token = auth[len("Bearer ") :] if auth.startswith("Bearer ") else ""
        who = self.metadata.service_account_of(token) if token else None
        if who is None:
            msg = "Request had invalid authentication credentials. Expected OAuth 2 access token."
            return 401, _error(401, "UNAUTHENTICATED", msg), None, secret_id
        resource = f"projects/{m['project']}/secrets/{secret_id}/versions/{m['version']}"
        secret = self.secrets.get(secret_id)
        if m["project"] not in self.project_ids or secret is None or f"serviceAccount:{who}" not in secret.accessors:
            msg = f"Permission 'secretmanager.versions.access' denied for resource '{resource}' (or it may not exist)."
            return 403, _error(403, "PERMISSION_DENIED", msg), who, secret_id
        version = m["version"]
        if not secret.versions:  # declared, but no version added yet
            msg = f"Secret [projects/{self.project_number}/secrets/{secret_id}] not found or has no versions."
            return 404, _error(404, "NOT_FOUND", msg), who, secret_id
        if version == "latest":
            index = len(secret.versions)
        elif version.isdigit() and 1 <= int(version) <= len(secret.versions):
            index = int(version)
        else:
            return 404, _error(404, "NOT_FOUND", f"Secret Version [{resource}] not found."), who, secret_id
        data = secret.versions[index - 1]
        body = {
            "name": f"projects/{self.project_number}/secrets/{secret_id}/versions/{index}",
            "payload": {"data": base64.b64encode(data).decode(), "dataCrc32c": str(crc32c(data))},
        }
        return 200, body, who, secret_id

    def serve_socket(self, sock: socket.socket, context: ssl.SSLContext):
        sock.listen(64)
        return _serve(context.wrap_socket(sock, server_side=True), _handler(self))

    def serve_http(self, sock: socket.socket):
        """Plain HTTP on `sock`: for running the scripts' own functions on this machine (GPU_FLEET_SECRETMANAGER)."""
        sock.listen(64)
        return _serve(sock, _handler(self))


def _error(code: int, status: str, message: str) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "status": status}}


def _handler(sm: FakeSecretManager) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            status, body = sm.answer(self.path, dict(self.headers.items()))
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json; charset=UTF-8")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


def _san_kind(host: str) -> str:
    """`IP` for an address (a client checks an IP against IP entries only), `DNS` for a name."""
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return "DNS"
    return "IP"


def make_tls(directory: Path, hosts: tuple[str, ...] = (HOST,)) -> tuple[Path, ssl.SSLContext]:
    """A throwaway CA and a server certificate for `hosts` (openssl CLI); returns (CA pem, server context).

    The VMs under test trust the CA the way a real VM trusts Google's: it is in their CA bundle."""
    directory.mkdir(parents=True, exist_ok=True)
    ca_key, ca_pem = directory / "ca.key", directory / "ca.pem"
    key, csr, pem, ext = directory / "server.key", directory / "server.csr", directory / "server.pem", directory / "ext"
    run = lambda *a: subprocess.run(a, check=True, capture_output=True, timeout=60)  # noqa: E731
    run("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", ca_key, "-out", ca_pem,
        "-days", "2", "-subj", "/CN=gpu-fleet first-boot test CA")  # fmt: skip
    run("openssl", "req", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", csr, "-subj", f"/CN={hosts[0]}")
    ext.write_text("subjectAltName=" + ",".join(f"{_san_kind(h)}:{h}" for h in hosts) + "\n")
    run("openssl", "x509", "-req", "-in", csr, "-CA", ca_pem, "-CAkey", ca_key, "-CAcreateserial",
        "-out", pem, "-days", "2", "-extfile", ext)  # fmt: skip
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(pem, key)
    return ca_pem, context
