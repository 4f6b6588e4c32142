"""Declare a Kubernetes manifest (a plain dict) as one pulumi-kubernetes resource, whatever its kind.

`KubeObject` registers the type token pulumi-kubernetes uses for the kind (`kubernetes:<group>/<version>:<Kind>`,
`core/v1` for the core group) with the manifest as its inputs, so the provider sees exactly the object that
`fleet.schemas.validate` checked, and `fleet synth --json` shows it unchanged.  Typed resource classes would
add nothing here: the manifests are built and validated as data.
"""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi_kubernetes as k8s


def type_token(api_version: str, kind: str) -> str:
    group_version = api_version if "/" in api_version else f"core/{api_version}"
    return f"kubernetes:{group_version}:{kind}"


def resource_name(prefix: str, manifest: dict[str, Any]) -> str:
    """A Pulumi name unique per object: `<prefix>-<kind>-[<namespace>-]<name>` (lower-case kind)."""
    meta = manifest["metadata"]
    ns = f"{meta['namespace']}-" if meta.get("namespace") else ""
    return f"{prefix}-{manifest['kind'].lower()}-{ns}{meta['name']}"


class KubeObject(pulumi.CustomResource):
    """One Kubernetes object; `opts.provider` chooses the cluster."""

    def __init__(self, name: str, manifest: dict[str, Any], opts: pulumi.ResourceOptions | None = None) -> None:
        version = k8s._utilities.get_version()
        opts = pulumi.ResourceOptions.merge(pulumi.ResourceOptions(version=version), opts)
        super().__init__(type_token(manifest["apiVersion"], manifest["kind"]), name, dict(manifest), opts)


def declare(
    prefix: str, manifests: list[dict[str, Any]], opts: pulumi.ResourceOptions, after: list[pulumi.Resource] = ()
) -> dict[tuple[str, str | None, str], KubeObject]:
    """Declare manifests in order, each depending on `after`; returns them by (kind, namespace, name).
    A namespaced object also waits for its Namespace when that is in the same list."""
    out: dict[tuple[str, str | None, str], KubeObject] = {}
    for m in manifests:
        meta = m["metadata"]
        deps = list(after)
        ns = out.get(("Namespace", None, meta.get("namespace") or ""))
        if ns is not None:
            deps.append(ns)
        out[(m["kind"], meta.get("namespace"), meta["name"])] = KubeObject(
            resource_name(prefix, m), m, pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=deps))
        )
    return out


class Manifests(pulumi.ComponentResource):
    """A group of manifests declared together (e.g. a cluster's GPUDirect networks, its MachineDeployments)."""

    objects: dict[tuple[str, str | None, str], KubeObject]

    def __init__(
        self,
        name: str,
        manifests: list[dict[str, Any]],
        opts: pulumi.ResourceOptions | None = None,
        after: list[pulumi.Resource] = (),
        object_opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("gpufleet:kubernetes:Manifests", name, None, opts)
        child = pulumi.ResourceOptions.merge(pulumi.ResourceOptions(parent=self), object_opts)
        self.objects = declare(name, manifests, child, after=list(after))
        self.register_outputs({"objects": [f"{k}/{n}" for k, _, n in self.objects]})


class Connection(pulumi.ComponentResource):
    """The pulumi-kubernetes provider of one cluster (server-side apply), from a secret kubeconfig."""

    provider: k8s.Provider

    def __init__(self, name: str, kubeconfig: pulumi.Input[str], opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpufleet:kubernetes:Connection", name, None, opts)
        self.provider = k8s.Provider(
            name, kubeconfig=kubeconfig, enable_server_side_apply=True, opts=pulumi.ResourceOptions(parent=self)
        )
        self.register_outputs({})
