"""The `project-bootstrap` stack kind: validate the spec, declare ProjectBootstrap, export its outputs.

`stacks.program.main` calls `build(raw)` when the spec's `kind` is `project-bootstrap`.  The spec
is validated (fleet.spec.project) before any resource is declared; a bad spec raises
ProjectSpecError naming each field and reason.
"""

from __future__ import annotations

import pulumi

from fleet.spec.project import load_project_spec


def build(raw: dict) -> None:
    spec = load_project_spec(raw)
    from components.gcp.project_bootstrap import ProjectBootstrap, ProjectBootstrapArgs  # pulumi_gcp: slow import

    boot = ProjectBootstrap(
        "bootstrap",
        ProjectBootstrapArgs(
            project=spec.project,
            apis=list(spec.apis),
            state_bucket_name=spec.bucket_name(),
            state_bucket_location=spec.bucket_location(),
            autoscaler_role_id=spec.autoscaler_role_id,
            keep_noncurrent_versions=spec.state_bucket.keep_noncurrent_versions,
            force_destroy=spec.state_bucket.force_destroy,
            labels=dict(spec.labels),
        ),
    )
    pulumi.export("kind", "project-bootstrap")
    pulumi.export("state_bucket", boot.state_bucket.name)
    pulumi.export("state_backend_url", boot.state_bucket.name.apply(lambda n: f"gs://{n}"))
    pulumi.export("autoscaler_role", f"projects/{spec.project}/roles/{spec.autoscaler_role_id}")
    pulumi.export("apis", list(spec.apis))
