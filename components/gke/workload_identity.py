"""Workload Identity's one binding: which Kubernetes service account of a GKE cluster may act as a Google service
account (`roles/iam.workloadIdentityUser` for `serviceAccount:<project>.svc.id.goog[<namespace>/<name>]`)."""

from __future__ import annotations

import pulumi
import pulumi_gcp as gcp

WORKLOAD_IDENTITY_USER = "roles/iam.workloadIdentityUser"


def kubernetes_may_act_as(
    name: str, account: gcp.serviceaccount.Account, kubernetes_member: str, opts: pulumi.ResourceOptions
) -> gcp.serviceaccount.IAMMember:
    """`kubernetes_member` (``serviceAccount:<project>.svc.id.goog[<namespace>/<name>]``) may act as `account`."""
    return gcp.serviceaccount.IAMMember(
        name, service_account_id=account.name, role=WORKLOAD_IDENTITY_USER, member=kubernetes_member, opts=opts
    )
