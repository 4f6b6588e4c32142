"""The Kubernetes API as the autoscaler uses it, through the maintained `kubernetes` client library.

Only `autoscaler/kube` imports `kubernetes` (tests/kube/test_layering.py).  Every call returns plain
dicts (the API's JSON: `_preload_content=False`), so the pure modules (`source`, `provisioning`) work on
the wire format and the fake API server in tests serves the same bytes a real one does.  A refused call
raises `KubeError` with the HTTP status and the API's reason (409 Conflict, 422 Invalid, 429 from an
eviction a PodDisruptionBudget forbids, ...).

Connections use TCP keepalive at client-go's timings (`Configuration.keep_alive`): a watch through a proxy or
load balancer that drops idle connections is probed rather than dropped silently.

With `cache` set (a `WatchCache`, which the daemon's watches fill), the reads of Nodes, Pods, DaemonSets,
ProvisioningRequests and Machines answer from it whenever it may (`autoscaler/kube/cache.py`), and this
client's writes to those resources are recorded there, so a read never misses one of them.  `listing`, and a
read with a field selector (`pods_on`), always ask the API server.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import urllib3
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes import watch as k8s_watch
from kubernetes.client.exceptions import ApiException

from autoscaler.kube.cache import WatchCache, equality_selector

PR_GROUP, PR_VERSION, PR_PLURAL = "autoscaling.x-k8s.io", "v1", "provisioningrequests"
CAPI_GROUP, CAPI_VERSION = "cluster.x-k8s.io", "v1beta2"
MERGE = "application/merge-patch+json"
#: the custom APIs the daemon lists, and what serves them: a 404 on their collection means that is missing
UNSERVED = {
    PR_PLURAL: (
        f"{PR_GROUP}/{PR_VERSION} provisioningrequests: the ProvisioningRequest CRD is not installed (the stack "
        "installs it on `platform: kubernetes` unless clusters[].kubernetes.provisioning_request_crd is `present`; "
        "GKE serves it itself); Kueue, which looks for it only when it starts, must be restarted once it is there"
    ),
    "machines": f"{CAPI_GROUP}/{CAPI_VERSION} machines: Cluster API >= 1.11 is not installed on this cluster",
}


class KubeError(Exception):
    """The API server refused a call (or could not be reached: status 0)."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status, self.reason, self.message = status, reason, message


def _error(exc: ApiException) -> KubeError:
    try:
        body = json.loads(exc.body or "{}")
    except (TypeError, ValueError):
        body = {}
    return KubeError(int(exc.status or 0), str(body.get("reason") or exc.reason), str(body.get("message") or exc))


def _json(resp: Any) -> dict[str, Any]:
    return json.loads(resp.data)


class KubeApi:
    """One API server.  Build with `from_kubeconfig` (a dict or a file) or `in_cluster`."""

    def __init__(self, api_client: k8s.ApiClient) -> None:
        self.api_client = api_client
        self.core = k8s.CoreV1Api(api_client)
        self.custom = k8s.CustomObjectsApi(api_client)
        self.coordination = k8s.CoordinationV1Api(api_client)
        self.policy = k8s.PolicyV1Api(api_client)
        self.apps = k8s.AppsV1Api(api_client)

    @classmethod
    def from_kubeconfig(cls, kubeconfig: dict[str, Any] | str, *, timeout_s: float = 10.0) -> KubeApi:
        cfg = k8s.Configuration()
        if isinstance(kubeconfig, dict):
            k8s_config.load_kube_config_from_dict(kubeconfig, client_configuration=cfg)
        else:
            k8s_config.load_kube_config(config_file=kubeconfig, client_configuration=cfg)
        cfg.retries = 1
        cfg.keep_alive = True
        api = cls(k8s.ApiClient(cfg))
        api.timeout_s = timeout_s
        return api

    @classmethod
    def in_cluster(cls, *, timeout_s: float = 10.0) -> KubeApi:
        cfg = k8s.Configuration()
        k8s_config.load_incluster_config(client_configuration=cfg)
        cfg.keep_alive = True
        api = cls(k8s.ApiClient(cfg))
        api.timeout_s = timeout_s
        return api

    timeout_s: float = 10.0
    #: the watches' copy of the cluster, read instead of listing when it may be (None: every read lists)
    cache: WatchCache | None = None
    #: the namespace of the Cluster API pools' MachineDeployments: Machines are listed and watched there only
    #: (None: cluster-wide)
    capi_namespace: str | None = None

    def _read(self, resource: str) -> list[dict[str, Any]]:
        items = self.cache.read(resource) if self.cache is not None else None
        return self.listing(resource)[0] if items is None else items

    def _wrote(self, resource: str, obj: dict[str, Any]) -> dict[str, Any]:
        if self.cache is not None:
            self.cache.wrote(resource, obj)
        return obj

    def _call(self, fn: Any, *args: Any, **kw: Any) -> dict[str, Any]:
        try:
            return _json(fn(*args, _preload_content=False, _request_timeout=self.timeout_s, **kw))
        except ApiException as exc:
            raise _error(exc) from None
        except OSError as exc:  # urllib3's connection errors are OSErrors
            raise KubeError(0, "Unreachable", str(exc)) from None

    # ---- core ---------------------------------------------------------------------------------------------
    def nodes(self) -> list[dict[str, Any]]:
        return self._read("nodes")

    def pods(self) -> list[dict[str, Any]]:
        return self._read("pods")

    def daemonsets(self) -> list[dict[str, Any]]:
        """Every DaemonSet: what a pool's nodes run besides work (`autoscaler/kube/daemonsets.py`)."""
        return self._read("daemonsets")

    def pods_on(self, node: str) -> list[dict[str, Any]]:
        """The pods bound to `node`, from the API server (never the cache): what a node's deletion is checked
        against."""
        return self._call(self.core.list_pod_for_all_namespaces, field_selector=f"spec.nodeName={node}")["items"]

    def pod_template(self, namespace: str, name: str) -> dict[str, Any]:
        return self._call(self.core.read_namespaced_pod_template, name, namespace)

    def cordon(self, node: str) -> dict[str, Any]:
        return self._wrote("nodes", self._call(self.core.patch_node, node, {"spec": {"unschedulable": True}}))

    def uncordon(self, node: str) -> dict[str, Any]:
        return self._wrote("nodes", self._call(self.core.patch_node, node, {"spec": {"unschedulable": False}}))

    def evict(self, namespace: str, pod: str) -> None:
        body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": pod, "namespace": namespace}}
        self._call(self.core.create_namespaced_pod_eviction, pod, namespace, body)

    # ---- watches (autoscaler/kube/watch.py) ---------------------------------------------------------
    def _lister(self, resource: str) -> tuple[Any, tuple[str, ...]]:
        if resource == "nodes":
            return self.core.list_node, ()
        if resource == "pods":
            return self.core.list_pod_for_all_namespaces, ()
        if resource == "daemonsets":
            return self.apps.list_daemon_set_for_all_namespaces, ()
        if resource == PR_PLURAL:
            return self.custom.list_cluster_custom_object, (PR_GROUP, PR_VERSION, PR_PLURAL)
        if resource == "machines":  # in the pools' namespace, all the deployed Role lets the daemon read
            if self.capi_namespace is not None:
                return self.custom.list_namespaced_custom_object, (
                    CAPI_GROUP,
                    CAPI_VERSION,
                    self.capi_namespace,
                    "machines",
                )
            return self.custom.list_cluster_custom_object, (CAPI_GROUP, CAPI_VERSION, "machines")
        raise ValueError(f"no watch of {resource!r}")

    def listing(self, resource: str) -> tuple[list[dict[str, Any]], str]:
        """Every object of `resource` (cluster-wide) and the list's resourceVersion, to watch from."""
        fn, args = self._lister(resource)
        try:
            out = self._call(fn, *args)
        except KubeError as exc:
            if exc.status == 404 and resource in UNSERVED:
                raise KubeError(404, "NotFound", f"the cluster does not serve {UNSERVED[resource]}") from None
            raise
        return out["items"], str((out.get("metadata") or {}).get("resourceVersion") or "")

    @staticmethod
    def watcher() -> k8s_watch.Watch:
        """A watch handle for `watch` (its `stop()` ends the stream from another thread); events stay the API's
        JSON (`raw_object`), not the client's models."""
        return k8s_watch.Watch(return_type="object")

    def watch(
        self, resource: str, resource_version: str, timeout_s: float, handle: k8s_watch.Watch
    ) -> Iterator[tuple[str, dict[str, Any]]]:
        """(event type, object) for each change to `resource` after `resource_version`, for up to `timeout_s`
        (the server ends the stream then).  410 Gone (the version is too old: list again) and every other
        refusal raise `KubeError`."""
        fn, args = self._lister(resource)
        try:
            for ev in handle.stream(
                fn,
                *args,
                resource_version=resource_version,
                timeout_seconds=max(1, int(timeout_s)),
                allow_watch_bookmarks=True,
                _request_timeout=(self.timeout_s, timeout_s + self.timeout_s),
            ):
                yield str(ev.get("type")), ev.get("raw_object") or {}
        except ApiException as exc:
            raise _error(exc) from None
        except (OSError, urllib3.exceptions.HTTPError) as exc:
            raise KubeError(0, "Unreachable", str(exc)) from None

    # ---- ProvisioningRequests -------------------------------------------------------------------------
    def provisioning_requests(self) -> list[dict[str, Any]]:
        return self._read(PR_PLURAL)

    def patch_provisioning_request(self, namespace: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        return self._wrote(
            PR_PLURAL,
            self._call(
                self.custom.patch_namespaced_custom_object, PR_GROUP, PR_VERSION, namespace, PR_PLURAL, name, body
            ),
        )

    def patch_provisioning_request_status(self, namespace: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        fn = self.custom.patch_namespaced_custom_object_status
        return self._wrote(PR_PLURAL, self._call(fn, PR_GROUP, PR_VERSION, namespace, PR_PLURAL, name, body))

    # ---- Cluster API ----------------------------------------------------------------------------------
    def machine_deployment(self, namespace: str, name: str) -> dict[str, Any]:
        return self._call(
            self.custom.get_namespaced_custom_object, CAPI_GROUP, CAPI_VERSION, namespace, "machinedeployments", name
        )

    def patch_machine_deployment(self, namespace: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        """A merge patch; put `metadata.resourceVersion` in `body` to make it conditional (409 on a race)."""
        return self._call(
            self.custom.patch_namespaced_custom_object,
            CAPI_GROUP,
            CAPI_VERSION,
            namespace,
            "machinedeployments",
            name,
            body,
        )

    def machines(self, namespace: str, label_selector: str = "") -> list[dict[str, Any]]:
        """The Machines of `namespace` matching `label_selector`: from the cache when it may answer and the
        selector is plain equality (`k=v,...`), else listed."""
        labels = equality_selector(label_selector)
        cached = self.cache.read("machines") if self.cache is not None and labels is not None else None
        if cached is not None and labels is not None:
            return [m for m in cached if _matches(m, namespace, labels)]
        return self._call(
            self.custom.list_namespaced_custom_object,
            CAPI_GROUP,
            CAPI_VERSION,
            namespace,
            "machines",
            label_selector=label_selector,
        )["items"]

    def patch_machine(self, namespace: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        fn = self.custom.patch_namespaced_custom_object
        return self._wrote("machines", self._call(fn, CAPI_GROUP, CAPI_VERSION, namespace, "machines", name, body))

    # ---- Leases -----------------------------------------------------------------------------------------
    def lease(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return self._call(self.coordination.read_namespaced_lease, name, namespace)
        except KubeError as exc:
            if exc.status == 404:
                return None
            raise

    def create_lease(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        return self._call(self.coordination.create_namespaced_lease, namespace, body)

    def replace_lease(self, namespace: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        return self._call(self.coordination.replace_namespaced_lease, name, namespace, body)


def _matches(obj: dict[str, Any], namespace: str, labels: dict[str, str]) -> bool:
    """Is `obj` in `namespace` with every one of `labels`?"""
    md = obj.get("metadata") or {}
    have = md.get("labels") or {}
    return md.get("namespace") == namespace and all(have.get(k) == v for k, v in labels.items())
