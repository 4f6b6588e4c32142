"""ProjectBootstrap: what a new GCP project needs once before fleet stacks can deploy into it.

- the Google APIs gpu-fleet uses (never disabled on destroy: other things may use them);
- a GCS bucket for Pulumi state (`pulumi login gs://<bucket>`): versioned with a bounded number
  of old versions, uniform bucket-level access, public access prevention enforced, protected
  from `pulumi destroy`;
- the autoscaler's custom role, holding exactly the permissions its GCE actuator uses
  (fleet.bootstrap.iam.AUTOSCALER_PERMISSIONS, each with its reason), defined once per project and
  bound by nobody here: each Slurm cluster binds it to its own autoscaler account with an IAM
  condition naming that cluster's MIGs, zones, reservations and region (components/gcp/slurm_cluster.py),
  which only the fleet stack knows.  A project-wide binding would reach every MIG in the project.

No nodes' account: each pool of a fleet stack creates its own, holding only its cluster's secret and bucket
(components/gcp/node_pool.py; a shared one here was bound to log and metric writing and used by nothing, until
the forty-seventh round).

No basic role (owner/editor/viewer) is ever bound; no service account key is created (the
daemon impersonates its cluster's autoscaler account with the controller VM's own credentials).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pulumi
import pulumi_gcp as gcp

from fleet.bootstrap.iam import AUTOSCALER_PERMISSIONS


@dataclass(frozen=True)
class ProjectBootstrapArgs:
    """Inputs of a ProjectBootstrap.

    project: the GCP project id.
    apis: Google API service names to enable (e.g. compute.googleapis.com).
    state_bucket_name / state_bucket_location: the Pulumi state bucket (globally unique name; a
        region or multi-region).
    keep_noncurrent_versions: older versions of each state object kept (versioning protects
        against a bad `pulumi up` overwriting state; the bound keeps the bucket small).
    force_destroy: let a destroy delete a non-empty bucket (off: state outlives mistakes).
    autoscaler_role_id: id of the autoscaler's custom role.
    labels: on the bucket.
    """

    project: str
    apis: list[str]
    state_bucket_name: str
    state_bucket_location: str
    autoscaler_role_id: str = "gpuFleetAutoscaler"
    keep_noncurrent_versions: int = 20
    force_destroy: bool = False
    labels: dict[str, str] = field(default_factory=dict)


class ProjectBootstrap(pulumi.ComponentResource):
    """APIs, Pulumi state bucket, the autoscaler's custom role."""

    services: dict[str, gcp.projects.Service]
    state_bucket: gcp.storage.Bucket
    autoscaler_role: gcp.projects.IAMCustomRole

    def __init__(self, name: str, args: ProjectBootstrapArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpufleet:gcp:ProjectBootstrap", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        project = args.project

        self.services = {
            api: gcp.projects.Service(
                f"{name}-api-{api.split('.', 1)[0]}",
                project=project,
                service=api,
                disable_on_destroy=False,
                disable_dependent_services=False,
                opts=child,
            )
            for api in args.apis
        }

        def after(*apis: str) -> pulumi.ResourceOptions:
            deps = [self.services[a] for a in apis if a in self.services]
            return pulumi.ResourceOptions(parent=self, depends_on=deps)

        self.state_bucket = gcp.storage.Bucket(
            f"{name}-state",
            name=args.state_bucket_name,
            project=project,
            location=args.state_bucket_location,
            uniform_bucket_level_access=True,
            public_access_prevention="enforced",
            versioning={"enabled": True},
            lifecycle_rules=[
                {
                    "action": {"type": "Delete"},
                    "condition": {"num_newer_versions": args.keep_noncurrent_versions, "with_state": "ARCHIVED"},
                }
            ],
            force_destroy=args.force_destroy,
            labels=args.labels,
            opts=pulumi.ResourceOptions.merge(after("storage.googleapis.com"), pulumi.ResourceOptions(protect=True)),
        )

        iam = after("iam.googleapis.com")
        self.autoscaler_role = gcp.projects.IAMCustomRole(
            f"{name}-autoscaler-role",
            project=project,
            role_id=args.autoscaler_role_id,
            title="gpu-fleet autoscaler",
            description="Only what the gpu-fleet autoscaler's GCE actuator calls; see docs/bootstrap.md",
            permissions=[p.name for p in AUTOSCALER_PERMISSIONS],
            stage="GA",
            opts=iam,
        )
        role_name = f"projects/{project}/roles/{args.autoscaler_role_id}"

        self.register_outputs(
            {
                "apis": list(args.apis),
                "state_bucket": self.state_bucket.name,
                "state_backend_url": self.state_bucket.name.apply(lambda n: f"gs://{n}"),
                "autoscaler_role": role_name,
            }
        )
