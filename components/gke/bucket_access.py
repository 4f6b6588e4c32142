"""Pods' access to a GCS bucket on GKE through Workload Identity (the cluster's checkpoint bucket).

A Google service account with `roles/storage.objectUser` on that one bucket, which only the named Kubernetes
service accounts may act as (`roles/iam.workloadIdentityUser` for `<project>.svc.id.goog[<namespace>/<ksa>]`).
GKE's Cloud Storage FUSE CSI driver mounts the bucket with the token of the pod's Kubernetes service account, so
a pod running as one of them can mount it (stacks/kube_storage.py declares the volumes); no other identity in the
cluster gains anything.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_gcp as gcp

from components.gcp.storage import grant_bucket_objects
from components.gke.workload_identity import kubernetes_may_act_as


@dataclass(frozen=True)
class BucketAccessArgs:
    project: str
    cluster: str
    account_id: str
    bucket: pulumi.Input[str]
    kubernetes_members: list[str]  # serviceAccount:<project>.svc.id.goog[<namespace>/<name>]


class BucketAccess(pulumi.ComponentResource):
    account: gcp.serviceaccount.Account

    def __init__(self, name: str, args: BucketAccessArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpufleet:gke:BucketAccess", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        self.account = gcp.serviceaccount.Account(
            name,
            account_id=args.account_id,
            project=args.project,
            display_name=f"pods of GKE cluster {args.cluster} reading and writing its checkpoint bucket",
            opts=child,
        )
        member = self.account.email.apply(lambda e: f"serviceAccount:{e}")
        grant_bucket_objects(f"{name}-bucket", args.bucket, member, child)
        for i, ksa in enumerate(args.kubernetes_members):
            kubernetes_may_act_as(f"{name}-wi-{i}", self.account, ksa, child)
        self.register_outputs({"email": self.account.email})
