"""The Google identity of the in-cluster autoscaler on GKE (Workload Identity).

A Google service account that only the daemon's Kubernetes service account may act as
(`roles/iam.workloadIdentityUser` for `<project>.svc.id.goog[<namespace>/<ksa>]`), a custom role holding
exactly the permissions of the GCE actuator's calls on the node pools' MIGs, and `iam.serviceAccountUser`
on the node service account (instances created in a node pool's MIG run as it).
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_gcp as gcp


@dataclass(frozen=True)
class AutoscalerIdentityArgs:
    project: str
    cluster: str
    account_id: str
    permissions: list[str]
    kubernetes_member: str  # serviceAccount:<project>.svc.id.goog[<namespace>/<name>]
    node_service_account: pulumi.Input[str]  # its resource name (projects/.../serviceAccounts/...)


class AutoscalerIdentity(pulumi.ComponentResource):
    account: gcp.serviceaccount.Account

    def __init__(self, name: str, args: AutoscalerIdentityArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpufleet:gke:AutoscalerIdentity", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        self.account = gcp.serviceaccount.Account(
            name,
            account_id=args.account_id,
            project=args.project,
            display_name=f"gpu-fleet autoscaler of GKE cluster {args.cluster}",
            opts=child,
        )
        member = self.account.email.apply(lambda e: f"serviceAccount:{e}")
        role = gcp.projects.IAMCustomRole(
            f"{name}-role",
            project=args.project,
            role_id=f"gpuFleetAutoscaler_{args.cluster.replace('-', '_')}",
            title=f"gpu-fleet autoscaler ({args.cluster})",
            permissions=list(args.permissions),
            opts=child,
        )
        gcp.projects.IAMMember(f"{name}-role", project=args.project, role=role.name, member=member, opts=child)
        gcp.serviceaccount.IAMMember(
            f"{name}-wi",
            service_account_id=self.account.name,
            role="roles/iam.workloadIdentityUser",
            member=args.kubernetes_member,
            opts=child,
        )
        gcp.serviceaccount.IAMMember(
            f"{name}-nodesa",
            service_account_id=args.node_service_account,
            role="roles/iam.serviceAccountUser",
            member=member,
            opts=child,
        )
        self.register_outputs({"email": self.account.email})
