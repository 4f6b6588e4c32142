"""The Google identity of the in-cluster autoscaler on GKE (Workload Identity).

A Google service account that only the daemon's Kubernetes service account may act as
(`roles/iam.workloadIdentityUser` for `<project>.svc.id.goog[<namespace>/<ksa>]`) and a custom role holding
exactly the permissions of the GCE actuator's calls on the node pools' MIGs, bound on the project: IAM evaluates
no `resource.name` of MIGs, so no condition could scope it (fleet/bootstrap/iam.py).  No
`iam.serviceAccountUser` on the node service account: `createInstances` checks only
`compute.instanceGroupManagers.update` on the MIG, whose service agent creates the VMs from the template (the
Compute API reference; the Slurm clusters' autoscaler has never held it).  Until the thirty-fifth round it was
granted, letting the daemon's identity act as the nodes' account.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_gcp as gcp

from components.gke.workload_identity import kubernetes_may_act_as


@dataclass(frozen=True)
class AutoscalerIdentityArgs:
    project: str
    cluster: str
    account_id: str
    permissions: list[str]
    kubernetes_member: str  # serviceAccount:<project>.svc.id.goog[<namespace>/<name>]


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
        kubernetes_may_act_as(f"{name}-wi", self.account, args.kubernetes_member, child)
        self.register_outputs({"email": self.account.email})
