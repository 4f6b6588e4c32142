"""A local fake of the Kubernetes API server, for the real `kubernetes` client in tests.

A real HTTP server on 127.0.0.1 speaking the API's REST/JSON for the resources the autoscaler uses:
Nodes, Pods (+ the Eviction subresource), PodTemplates, PodDisruptionBudgets, ProvisioningRequests
(+ status), Cluster API MachineDeployments and Machines, coordination.k8s.io Leases.  Verbs: list (label and
field selectors), get, create, replace (PUT, resourceVersion preconditions -> 409), patch (merge,
strategic-merge treated as merge, JSON patch), delete, and watch (`?watch=true`: a chunked stream of
`{"type": ADDED|MODIFIED|DELETED, "object": ...}` lines after the given resourceVersion, for `timeoutSeconds`;
without a version, or with "0", the objects that exist come first as ADDED; a version older than the last
`compact()` gets the API's 410 Gone as an ERROR event; with `allowWatchBookmarks` a BOOKMARK carrying the last
version ends each stream, as the server sends one before it closes a watch).  Not served: server-side apply,
finalizers, garbage collection.

What it refuses, as the real server does (422 Invalid with a Status naming the field):
- custom resources that do not validate against the real CRD schemas (fleet.schemas: openAPIV3Schema with
  unknown fields refused, the CRDs' CEL rules);
- a field selector on a field the API does not index for that resource (400 BadRequest);
- core objects the API's generated models refuse (the `kubernetes` client's models are generated from the
  API server's OpenAPI spec: a required field missing or of the wrong kind is refused), names that are not
  DNS-1123 subdomains, a kind or apiVersion that does not match the URL, annotations larger than 256 KiB in all.

Eviction honours PodDisruptionBudgets (minAvailable / maxUnavailable over the pods their selector matches):
an eviction that would break one is 429 TooManyRequests, as the Eviction API answers.

With `rbac` set (RBAC PolicyRules, as a ClusterRole or Role carries them; a rule with a `namespace` key is a
Role's, valid in that namespace only), every request over HTTP is authorized as the API server's RBAC
authorizer does it (apiGroups, resources with `resource/subresource`, verbs get / list / watch / create /
update / patch / delete, resourceNames, `*`): what no rule allows is 403 Forbidden.  The daemon's tests run
with the rules the stack deploys for it, so a call the deployed ServiceAccount may not make fails the test.
The store's own methods (`create`, `update`, `delete`: the test playing other controllers) are not checked.

With `token` set, a request over HTTP without `Authorization: Bearer <token>` (the scheme in any case, as
RFC 7235 and the API server's bearer authenticator read it; the in-cluster client sends `bearer`) is 401
Unauthorized, as the API server answers an unknown or missing ServiceAccount token.  `start(tls=...)` serves HTTPS, as
every real API server does; the in-cluster client (`load_incluster_config`) speaks nothing else.
"""

from __future__ import annotations

import copy
import json
import re
import socket
import ssl
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

from kubernetes import client as k8s

from fleet import schemas
from tests.fakes.metadata import SocketServer

NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


@dataclass(frozen=True)
class Resource:
    group: str  # "" for the core group
    version: str
    plural: str
    kind: str
    namespaced: bool
    model: str | None = None  # kubernetes client model of a core type (None: a CRD, validated by fleet.schemas)
    subresources: tuple[str, ...] = ()

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


RESOURCES = [
    Resource("", "v1", "nodes", "Node", False, "V1Node", ("status",)),
    Resource("", "v1", "pods", "Pod", True, "V1Pod", ("status", "eviction")),
    Resource("", "v1", "podtemplates", "PodTemplate", True, "V1PodTemplate"),
    Resource("apps", "v1", "daemonsets", "DaemonSet", True, "V1DaemonSet"),
    Resource("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", True, "V1PodDisruptionBudget"),
    Resource("coordination.k8s.io", "v1", "leases", "Lease", True, "V1Lease"),
    Resource("autoscaling.x-k8s.io", "v1", "provisioningrequests", "ProvisioningRequest", True, None, ("status",)),
    Resource("cluster.x-k8s.io", "v1beta2", "machinedeployments", "MachineDeployment", True, None, ("status",)),
    Resource("cluster.x-k8s.io", "v1beta2", "machines", "Machine", True, None, ("status",)),
]
BY_PATH = {(r.group, r.version, r.plural): r for r in RESOURCES}


class ApiError(Exception):
    def __init__(self, code: int, reason: str, message: str, causes: list[dict[str, str]] | None = None) -> None:
        super().__init__(message)
        self.code, self.reason, self.message, self.causes = code, reason, message, causes or []

    def status(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.causes:
            out["details"] = {"causes": self.causes}
        return out


_DESERIALIZER = k8s.ApiClient()
#: apimachinery's TotalAnnotationSizeLimitB: an object's annotations, keys and values, at most 256 KiB
ANNOTATIONS_MAX_BYTES = 256 * 1024


def validate(res: Resource, obj: dict[str, Any]) -> list[tuple[str, str]]:
    """(field, reason) for every reason the API server would refuse `obj` for `res`."""
    if not isinstance(obj, dict):
        return [("", "the body must be a JSON object")]
    problems: list[tuple[str, str]] = []
    if obj.get("kind") != res.kind:
        problems.append(("kind", f"must be {res.kind!r}, got {obj.get('kind')!r}"))
    if obj.get("apiVersion") != res.api_version:
        problems.append(("apiVersion", f"must be {res.api_version!r}, got {obj.get('apiVersion')!r}"))
    name = (obj.get("metadata") or {}).get("name")
    if not isinstance(name, str) or len(name) > 253 or not NAME.fullmatch(name):
        problems.append(("metadata.name", f"{name!r} is not a DNS-1123 subdomain"))
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    size = sum(len(k) + len(v) for k, v in annotations.items() if isinstance(k, str) and isinstance(v, str))
    if size > ANNOTATIONS_MAX_BYTES:  # apimachinery's ValidateAnnotations: keys and values together
        problems.append(("metadata.annotations", f"Too long: must have at most {ANNOTATIONS_MAX_BYTES} bytes"))
    if problems:
        return problems
    if res.model is None:
        return schemas.validate(obj)
    try:
        _DESERIALIZER.deserialize(json.dumps(obj), res.model, "application/json")
    except (ValueError, TypeError) as exc:
        return [("(object)", str(exc))]
    return _lease_spec(obj) if res.kind == "Lease" else []


def _lease_spec(obj: dict[str, Any]) -> list[tuple[str, str]]:
    """What kubernetes pkg/apis/coordination/validation `ValidateLeaseSpec` refuses beyond the schema: a duration
    that is not positive (so a released Lease says 1 s, never 0) and negative transitions."""
    spec = obj.get("spec") or {}
    problems = []
    if spec.get("leaseDurationSeconds") is not None and spec["leaseDurationSeconds"] <= 0:
        problems.append(
            ("spec.leaseDurationSeconds", f"Invalid value: {spec['leaseDurationSeconds']}: must be greater than 0")
        )
    if spec.get("leaseTransitions") is not None and spec["leaseTransitions"] < 0:
        problems.append(
            ("spec.leaseTransitions", f"Invalid value: {spec['leaseTransitions']}: must be greater than or equal to 0")
        )
    return problems


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge_patch(out.get(k), v)
    return out


def _pointer(path: str) -> list[str]:
    return [p.replace("~1", "/").replace("~0", "~") for p in path.lstrip("/").split("/")] if path else []


def json_patch(doc: Any, ops: list[dict[str, Any]]) -> Any:
    """RFC 6902 add / replace / remove / test (what clients send for annotations and replicas)."""
    doc = copy.deepcopy(doc)
    for op in ops:
        parts = _pointer(op.get("path", ""))
        parent = doc
        for p in parts[:-1]:
            parent = parent[int(p)] if isinstance(parent, list) else parent.setdefault(p, {})
        last = parts[-1] if parts else ""
        kind = op.get("op")
        if kind == "test":
            cur = parent[int(last)] if isinstance(parent, list) else parent.get(last)
            if cur != op.get("value"):
                raise ApiError(422, "Invalid", f"json patch test failed at {op.get('path')}")
        elif kind in ("add", "replace"):
            if isinstance(parent, list):
                i = len(parent) if last == "-" else int(last)
                parent.insert(i, op["value"]) if kind == "add" else parent.__setitem__(i, op["value"])
            else:
                if kind == "replace" and last not in parent:
                    raise ApiError(422, "Invalid", f"json patch replace of a missing path {op.get('path')}")
                parent[last] = op["value"]
        elif kind == "remove":
            if isinstance(parent, list):
                del parent[int(last)]
            elif last in parent:
                del parent[last]
            else:
                raise ApiError(422, "Invalid", f"json patch remove of a missing path {op.get('path')}")
        else:
            raise ApiError(400, "BadRequest", f"unsupported json patch op {kind!r}")
    return doc


def _labels_match(labels: dict[str, str], selector: str) -> bool:
    for term in filter(None, (t.strip() for t in selector.split(","))):
        if "!=" in term:
            k, v = term.split("!=", 1)
            if labels.get(k.strip()) == v.strip():
                return False
        elif "=" in term:
            k, v = term.replace("==", "=").split("=", 1)
            if labels.get(k.strip()) != v.strip():
                return False
        elif term.startswith("!"):
            if term[1:] in labels:
                return False
        elif term not in labels:
            return False
    return True


def _field(obj: dict[str, Any], dotted: str) -> Any:
    cur: Any = obj
    for p in dotted.split("."):
        cur = cur.get(p) if isinstance(cur, dict) else None
    return cur


#: the field selectors the API server supports beyond metadata.name / metadata.namespace (kubernetes.io/docs,
#: "Field Selectors", "List of supported fields"); any other field is 400 BadRequest, as the server answers
SELECTABLE_FIELDS = {
    "pods": {
        "spec.nodeName", "spec.restartPolicy", "spec.schedulerName", "spec.serviceAccountName", "spec.hostNetwork",
        "status.phase", "status.podIP", "status.nominatedNodeName",
    },
    "nodes": {"spec.unschedulable"},
}  # fmt: skip


def _check_field_selector(plural: str, selector: str) -> None:
    allowed = {"metadata.name", "metadata.namespace", *SELECTABLE_FIELDS.get(plural, ())}
    for term in filter(None, (t.strip() for t in selector.split(","))):
        key = term.split("!=" if "!=" in term else "=", 1)[0].strip()
        if key not in allowed:
            raise ApiError(400, "BadRequest", f"field label not supported: {key}")


def _fields_match(obj: dict[str, Any], selector: str) -> bool:
    for term in filter(None, (t.strip() for t in selector.split(","))):
        neg = "!=" in term
        k, v = term.split("!=" if neg else "=", 1)
        val = _field(obj, k.lstrip("=").strip())
        val = "" if val is None else str(val)
        if (val == v.strip()) == neg:
            return False
    return True


def _selector_matches(sel: dict[str, Any] | None, labels: dict[str, str]) -> bool:
    if not sel:
        return False
    for k, v in (sel.get("matchLabels") or {}).items():
        if labels.get(k) != v:
            return False
    for expr in sel.get("matchExpressions") or []:
        has = expr["key"] in labels
        vals = expr.get("values") or []
        op = expr["operator"]
        if (op == "In" and labels.get(expr["key"]) not in vals) or (op == "NotIn" and labels.get(expr["key"]) in vals):
            return False
        if (op == "Exists" and not has) or (op == "DoesNotExist" and has):
            return False
    return True


@dataclass
class FakeKube:
    """The store and the server.  `url` once started; every write is logged in `writes`."""

    objects: dict[tuple[str, str, str], dict[str, Any]] = field(default_factory=dict)  # (plural, ns, name)
    writes: list[tuple[str, str, str]] = field(default_factory=list)  # (verb, plural, ns/name)
    version: int = 0
    #: called before a write is applied: (verb, plural, namespace, name, body) -> an ApiError to answer, or None
    before_write: Callable[[str, str, str, str, Any], ApiError | None] | None = None
    #: the bearer token every HTTP request must carry (None: any, or none)
    token: str | None = None
    lock: threading.RLock = field(default_factory=threading.RLock)
    #: (resourceVersion, type, plural, namespace, object) of every change since the last `compact()`, for watches
    events: list[tuple[int, str, str, str, dict[str, Any]]] = field(default_factory=list)
    compacted: int = 0
    #: watch streams served (opened), by plural
    watches: dict[str, int] = field(default_factory=dict)
    #: end each stream with a BOOKMARK when the client allows them (False: a server that sends none, so an idle
    #: watch's version goes stale and a compaction expires it)
    bookmarks: bool = True
    #: plurals whose watch streams stall: held open without a byte (no event, no end at timeoutSeconds), as behind
    #: a proxy that stops forwarding, until taken out of the set
    stalled: set[str] = field(default_factory=set)
    #: list calls served, by plural (with a fieldSelector: counted under "plural?fieldSelector"), and the objects
    #: they returned in all
    lists: dict[str, int] = field(default_factory=dict)
    listed_objects: dict[str, int] = field(default_factory=dict)
    #: reads of one object (GET by name) served, by plural
    gets: dict[str, int] = field(default_factory=dict)
    #: plurals whose API the server does not serve (their CRD is not installed): 404 on every path, as there
    unserved: set[str] = field(default_factory=set)
    #: every client request served (watches included): (verb, path)
    served: list[tuple[str, str]] = field(default_factory=list)
    #: RBAC PolicyRules the client is bound to (None: everything is allowed); see the module docstring
    rbac: list[dict[str, Any]] | None = None
    #: requests refused by `rbac`: (verb, resource, namespace/name)
    forbidden: list[tuple[str, str, str]] = field(default_factory=list)
    _changed: threading.Condition | None = None
    _stopping: bool = False
    _server: ThreadingHTTPServer | None = None
    _scheme: str = "http"
    _thread: threading.Thread | None = None

    # ---- the store, for tests (the same code paths as the HTTP verbs) ------------------------------------
    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        res = next(r for r in RESOURCES if r.kind == obj["kind"] and r.api_version == obj["apiVersion"])
        ns = (obj.get("metadata") or {}).get("namespace", "default") if res.namespaced else ""
        return self._create(res, ns, obj)

    def get(self, plural: str, name: str, namespace: str = "") -> dict[str, Any] | None:
        with self.lock:
            obj = self.objects.get((plural, namespace, name))
            return copy.deepcopy(obj) if obj is not None else None

    def list(self, plural: str, namespace: str | None = None) -> list[dict[str, Any]]:
        with self.lock:
            return [
                copy.deepcopy(o)
                for (p, ns, _), o in sorted(self.objects.items())
                if p == plural and (namespace is None or ns == namespace)
            ]

    def update(self, plural: str, name: str, namespace: str, fn: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
        """Change a stored object in place (a test playing a controller), bumping its resourceVersion."""
        with self.lock:
            obj = self.objects[(plural, namespace, name)]
            fn(obj)
            self.version += 1
            obj["metadata"]["resourceVersion"] = str(self.version)
            self._event("MODIFIED", plural, namespace, obj)
            return copy.deepcopy(obj)

    def delete(self, plural: str, name: str, namespace: str = "") -> None:
        with self.lock:
            obj = self.objects.pop((plural, namespace, name), None)
            if obj is not None:
                self._deleted(plural, namespace, obj)

    def compact(self) -> None:
        """Forget the changes so far, as etcd compaction does: a watch from an older version gets 410 Gone."""
        with self.lock:
            self.compacted = self.version
            self.events.clear()

    # ---- watch ------------------------------------------------------------------------------------------
    def _event(self, kind: str, plural: str, ns: str, obj: dict[str, Any]) -> None:
        self.events.append((int(obj["metadata"]["resourceVersion"]), kind, plural, ns, copy.deepcopy(obj)))
        if self._changed is not None:
            self._changed.notify_all()

    def _deleted(self, plural: str, ns: str, obj: dict[str, Any]) -> None:
        self.version += 1
        gone = copy.deepcopy(obj)
        gone["metadata"]["resourceVersion"] = str(self.version)
        self._event("DELETED", plural, ns, gone)

    def stream(self, url: str) -> Iterator[dict[str, Any]]:
        """The events of a watch request (raises ApiError before the first one for a bad URL)."""
        parsed = urlparse(url)
        q = {k: v[0] for k, v in parse_qs(parsed.query).items()}
        res, ns, name, _ = self.route(parsed.path)
        if name is not None:
            raise ApiError(405, "MethodNotAllowed", "watch a collection (a name is a fieldSelector)")
        self.served.append(("watch", parsed.path))
        self._authorize("watch", res, None, ns, None)
        labels, fields = q.get("labelSelector", ""), q.get("fieldSelector", "")
        _check_field_selector(res.plural, fields)
        deadline = time.monotonic() + float(q.get("timeoutSeconds") or 1800)
        with self.lock:
            self.watches[res.plural] = self.watches.get(res.plural, 0) + 1

        def matches(plural: str, ons: str, obj: dict[str, Any]) -> bool:
            return (
                plural == res.plural
                and (not ns or ons == ns)
                and _labels_match(obj["metadata"].get("labels") or {}, labels)
                and _fields_match(obj, fields)
            )

        with self.lock:
            if self._changed is None:
                self._changed = threading.Condition(self.lock)
            rv_arg = q.get("resourceVersion") or "0"
            if rv_arg == "0":
                after = self.version
                first = [
                    {"type": "ADDED", "object": copy.deepcopy(o)}
                    for (p, ons, _), o in sorted(self.objects.items())
                    if matches(p, ons, o)
                ]
            else:
                after, first = int(rv_arg), []
                if after < self.compacted:
                    gone = ApiError(410, "Expired", f"too old resource version: {after} ({self.compacted})")
                    first = [{"type": "ERROR", "object": gone.status()}]
                    deadline = 0.0
        yield from first
        while True:
            with self.lock:
                assert self._changed is not None
                new = []
                while not self._stopping:
                    stalled = res.plural in self.stalled
                    new = [] if stalled else [e for e in self.events if e[0] > after]
                    if new or (not stalled and time.monotonic() >= deadline):
                        break
                    self._changed.wait(0.1 if stalled else max(0.0, min(0.5, deadline - time.monotonic())))
            if not new:
                if self.bookmarks and q.get("allowWatchBookmarks") in ("true", "1") and not self._stopping:
                    # the server's last word before it closes a stream: how far the client has seen
                    yield {"type": "BOOKMARK", "object": {"kind": res.kind, "apiVersion": res.api_version,
                                                          "metadata": {"resourceVersion": str(after)}}}  # fmt: skip
                return
            for rv, kind, plural, ons, obj in new:
                after = rv
                if matches(plural, ons, obj):
                    yield {"type": kind, "object": obj}

    # ---- verbs ------------------------------------------------------------------------------------------
    def _stamp(self, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        self.version += 1
        md = obj.setdefault("metadata", {})
        md["resourceVersion"] = str(self.version)
        md["uid"] = (old or {}).get("metadata", {}).get("uid") or str(uuid.uuid4())
        md["creationTimestamp"] = (old or {}).get("metadata", {}).get("creationTimestamp") or time.strftime(
            "%Y-%m-%dT%H:%M:%SZ", time.gmtime()
        )
        gen = int((old or {}).get("metadata", {}).get("generation") or 0)
        if old is None or old.get("spec") != obj.get("spec"):
            gen += 1
        md["generation"] = max(gen, 1)

    def _check(self, res: Resource, obj: dict[str, Any]) -> None:
        problems = validate(res, obj)
        if problems:
            name = (obj.get("metadata") or {}).get("name") if isinstance(obj, dict) else None
            causes = [{"field": f, "message": m, "reason": "FieldValueInvalid"} for f, m in problems]
            detail = "; ".join(f"{f}: {m}" for f, m in problems)
            raise ApiError(422, "Invalid", f'{res.kind} "{name}" is invalid: {detail}', causes)

    def _hook(self, verb: str, res: Resource, ns: str, name: str, body: Any) -> None:
        if self.before_write is not None:
            err = self.before_write(verb, res.plural, ns, name, body)
            if err is not None:
                raise err

    def _create(self, res: Resource, ns: str, body: dict[str, Any]) -> dict[str, Any]:
        obj = copy.deepcopy(body)
        if isinstance(obj, dict) and res.namespaced:
            obj.setdefault("metadata", {})["namespace"] = ns
        self._check(res, obj)
        name = obj["metadata"]["name"]
        with self.lock:
            self._hook("create", res, ns, name, body)
            if (res.plural, ns, name) in self.objects:
                raise ApiError(409, "AlreadyExists", f'{res.plural} "{name}" already exists')
            self._stamp(obj, None)
            self.objects[(res.plural, ns, name)] = obj
            self._event("ADDED", res.plural, ns, obj)
            self.writes.append(("create", res.plural, f"{ns}/{name}"))
            return copy.deepcopy(obj)

    def _existing(self, res: Resource, ns: str, name: str) -> dict[str, Any]:
        obj = self.objects.get((res.plural, ns, name))
        if obj is None:
            raise ApiError(404, "NotFound", f'{res.plural} "{name}" not found')
        return obj

    def _write(self, verb: str, res: Resource, ns: str, name: str, new: dict[str, Any], sub: str | None) -> dict:
        with self.lock:
            old = self._existing(res, ns, name)
            want_rv = (new.get("metadata") or {}).get("resourceVersion")
            if want_rv and want_rv != old["metadata"]["resourceVersion"]:
                raise ApiError(
                    409,
                    "Conflict",
                    f'Operation cannot be fulfilled on {res.plural} "{name}": the object has been modified; '
                    "please apply your changes to the latest version and try again",
                )
            if sub == "status":  # the status subresource changes status only
                new = {**copy.deepcopy(old), "status": new.get("status")}
            elif "status" in res.subresources:  # the main resource ignores status changes
                new = {**new, "status": copy.deepcopy(old.get("status"))}
                if new["status"] is None:
                    new.pop("status")
            new.setdefault("metadata", {})
            for k in ("uid", "creationTimestamp", "namespace", "name"):
                if k in old["metadata"]:
                    new["metadata"][k] = old["metadata"][k]
            self._check(res, new)
            self._hook(verb, res, ns, name, new)
            self._stamp(new, old)
            self.objects[(res.plural, ns, name)] = new
            self._event("MODIFIED", res.plural, ns, new)
            self.writes.append((verb + (f"/{sub}" if sub else ""), res.plural, f"{ns}/{name}"))
            return copy.deepcopy(new)

    def _evict(self, ns: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        if not isinstance(body, dict) or body.get("kind") != "Eviction":
            raise ApiError(400, "BadRequest", "the body must be a policy/v1 Eviction")
        with self.lock:
            pod = self._existing(BY_PATH[("", "v1", "pods")], ns, name)
            labels = pod["metadata"].get("labels") or {}
            for (p, pns, _), pdb in self.objects.items():
                if p != "poddisruptionbudgets" or pns != ns:
                    continue
                spec = pdb.get("spec") or {}
                if not _selector_matches(spec.get("selector"), labels):
                    continue
                matched = [
                    o
                    for (q, qns, _), o in self.objects.items()
                    if q == "pods"
                    and qns == ns
                    and _selector_matches(spec.get("selector"), o["metadata"].get("labels") or {})
                    and (o.get("status") or {}).get("phase", "Running") == "Running"
                ]
                healthy = len(matched)
                if "minAvailable" in spec:
                    allowed = healthy - int(spec["minAvailable"]) > 0
                else:
                    allowed = int(spec.get("maxUnavailable", 0)) > 0
                if not allowed:
                    raise ApiError(
                        429,
                        "TooManyRequests",
                        f"Cannot evict pod as it would violate the pod's disruption budget {pdb['metadata']['name']}.",
                    )
            self._hook("evict", BY_PATH[("", "v1", "pods")], ns, name, body)
            pod = self.objects.pop(("pods", ns, name))
            self._deleted("pods", ns, pod)
            self.writes.append(("evict", "pods", f"{ns}/{name}"))
            return {"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 201}

    # ---- HTTP -------------------------------------------------------------------------------------------
    def route(self, path: str) -> tuple[Resource, str, str | None, str | None]:
        """URL path -> (resource, namespace, name, subresource)."""
        parts = [p for p in path.split("/") if p]
        if parts[:2] == ["api", "v1"]:
            group, version, rest = "", "v1", parts[2:]
        elif parts[:1] == ["apis"] and len(parts) >= 3:
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            raise ApiError(404, "NotFound", f"the server could not find the requested resource ({path})")
        ns = ""
        if len(rest) >= 2 and rest[0] == "namespaces":
            ns, rest = rest[1], rest[2:]
        if not rest:
            raise ApiError(404, "NotFound", f"the server could not find the requested resource ({path})")
        res = BY_PATH.get((group, version, rest[0]))
        if res is None or res.plural in self.unserved:
            raise ApiError(404, "NotFound", f"the server could not find the requested resource ({path})")
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else None
        if sub is not None and sub not in res.subresources:
            raise ApiError(404, "NotFound", f"{res.plural} has no subresource {sub!r}")
        if res.namespaced and name is not None and not ns:
            raise ApiError(404, "NotFound", f"{res.plural} are namespaced")
        return res, ns, name, sub

    def _authorize(self, verb: str, res: Resource, sub: str | None, ns: str, name: str | None) -> None:
        """403 Forbidden unless a rule of `rbac` allows `verb` on the resource (module docstring)."""
        if self.rbac is None:
            return
        resource = f"{res.plural}/{sub}" if sub else res.plural
        for rule in self.rbac:
            if (
                ({res.group, "*"} & set(rule.get("apiGroups") or ()))
                and ({resource, "*"} & set(rule.get("resources") or ()))
                and ({verb, "*"} & set(rule.get("verbs") or ()))
                and (not rule.get("resourceNames") or name in rule["resourceNames"])
                and (rule.get("namespace") is None or rule["namespace"] == ns)
            ):
                return
        with self.lock:
            self.forbidden.append((verb, resource, f"{ns}/{name or ''}"))
        group = f' in API group "{res.group}"' if res.group else ' in API group ""'
        where = f' in the namespace "{ns}"' if ns else " at the cluster scope"
        raise ApiError(
            403,
            "Forbidden",
            f'{resource} "{name or ""}" is forbidden: User "system:serviceaccount:gpu-fleet-system:'
            f'gpu-fleet-autoscaler" cannot {verb} resource "{resource}"{group}{where}',
        )

    def handle(self, method: str, url: str, body: Any, content_type: str) -> tuple[int, dict[str, Any]]:
        parsed = urlparse(url)
        q = {k: v[0] for k, v in parse_qs(parsed.query).items()}
        res, ns, name, sub = self.route(parsed.path)
        verb = {"GET": "get" if name else "list", "POST": "create", "PUT": "update", "PATCH": "patch",
                "DELETE": "delete" if name else "deletecollection"}.get(method, method.lower())  # fmt: skip
        self.served.append((verb, parsed.path))
        self._authorize(verb, res, sub, ns, name)
        if method == "GET" and name is None:
            _check_field_selector(res.plural, q.get("fieldSelector", ""))
            with self.lock:
                items = [
                    copy.deepcopy(o)
                    for (p, ons, _), o in sorted(self.objects.items())
                    if p == res.plural
                    and (not ns or ons == ns)
                    and _labels_match(o["metadata"].get("labels") or {}, q.get("labelSelector", ""))
                    and _fields_match(o, q.get("fieldSelector", ""))
                ]
                rv = str(self.version)
                key = res.plural + ("?fieldSelector" if q.get("fieldSelector") else "")
                self.lists[key] = self.lists.get(key, 0) + 1
                self.listed_objects[key] = self.listed_objects.get(key, 0) + len(items)
            return 200, {
                "kind": f"{res.kind}List",
                "apiVersion": res.api_version,
                "metadata": {"resourceVersion": rv},
                "items": items,
            }
        if method == "GET":
            with self.lock:
                self.gets[res.plural] = self.gets.get(res.plural, 0) + 1
                return 200, copy.deepcopy(self._existing(res, ns, name))  # type: ignore[arg-type]
        if method == "POST" and name is None:
            return 201, self._create(res, ns, body)
        if method == "POST" and sub == "eviction":
            return 201, self._evict(ns, name, body)  # type: ignore[arg-type]
        if method == "PUT" and name is not None:
            return 200, self._write("replace", res, ns, name, body, sub)
        if method == "PATCH" and name is not None:
            with self.lock:
                old = copy.deepcopy(self._existing(res, ns, name))
                if "json-patch" in content_type:
                    new = json_patch(old, body)
                    if "resourceVersion" not in json.dumps(body):
                        new.setdefault("metadata", {}).pop("resourceVersion", None)
                else:
                    new = merge_patch(old, body)
                    if not (isinstance(body, dict) and (body.get("metadata") or {}).get("resourceVersion")):
                        new["metadata"].pop("resourceVersion", None)
                return 200, self._write("patch", res, ns, name, new, sub)
        if method == "DELETE" and name is not None:
            with self.lock:
                obj = self._existing(res, ns, name)
                self._hook("delete", res, ns, name, None)
                del self.objects[(res.plural, ns, name)]
                self._deleted(res.plural, ns, obj)
                self.writes.append(("delete", res.plural, f"{ns}/{name}"))
                return 200, obj
        raise ApiError(405, "MethodNotAllowed", f"{method} is not allowed on {parsed.path}")

    def start(self, sock: socket.socket | None = None, tls: ssl.SSLContext | None = None) -> str:
        """Serve on 127.0.0.1 (an ephemeral port), or on `sock`, a socket bound elsewhere (a first-boot VM's
        fabric: tests/firstboot/netns.py `Fabric.bind`); over TLS with `tls` (a server context)."""
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as the client's connection pool expects

            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def _watch(self) -> None:
                try:
                    events = fake.stream(self.path)
                    first = next(events, None)
                except ApiError as exc:
                    self._send(exc.code, exc.status())
                    return
                self.close_connection = True
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                try:
                    for ev in () if first is None else _chain(first, events):
                        data = json.dumps(ev).encode() + b"\n"
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                        self.wfile.flush()
                    self.wfile.write(b"0\r\n\r\n")
                except (BrokenPipeError, ConnectionResetError):
                    return

            def _serve(self) -> None:
                scheme, _, presented = (self.headers.get("Authorization") or "").partition(" ")
                if fake.token is not None and (scheme.lower() != "bearer" or presented.strip() != fake.token):
                    self._send(401, ApiError(401, "Unauthorized", "Unauthorized").status())
                    return
                if self.command == "GET" and parse_qs(urlparse(self.path).query).get("watch", [""])[0] in ("true", "1"):
                    self._watch()
                    return
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body = json.loads(raw) if raw else None
                except json.JSONDecodeError:
                    self._send(400, ApiError(400, "BadRequest", "the body is not JSON").status())
                    return
                try:
                    code, out = fake.handle(self.command, self.path, body, self.headers.get("Content-Type", ""))
                except ApiError as exc:
                    code, out = exc.code, exc.status()
                self._send(code, out)

            def _send(self, code: int, out: dict[str, Any]) -> None:
                data = json.dumps(out).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _serve

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler) if sock is None else SocketServer(sock, Handler)
        if tls is not None:
            self._server.socket = tls.wrap_socket(self._server.socket, server_side=True)
            self._scheme = "https"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self.url

    @property
    def url(self) -> str:
        assert self._server is not None
        host, port = self._server.server_address[:2]
        return f"{self._scheme}://{host}:{port}"

    def stop(self) -> None:
        with self.lock:
            self._stopping = True
            if self._changed is not None:
                self._changed.notify_all()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def kubeconfig(self) -> dict[str, Any]:
        """A kubeconfig for the real client: plain http on loopback, a static token (`token`, when set)."""
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "fake", "user": {"token": self.token or "fake-token"}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}],
            "current-context": "fake",
        }


def _chain(first: dict[str, Any], rest: Iterator[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    yield first
    yield from rest
