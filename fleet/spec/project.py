"""Schema of the `project-bootstrap` stack kind: what a new project (or region) needs once.

A stack file whose `gpu-fleet:fleet` value has `kind: project-bootstrap` deploys the Google APIs,
a GCS bucket for Pulumi state and the autoscaler's custom role (components/gcp/project_bootstrap.py).  Defaults
come from `fleet.bootstrap.iam`.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from fleet.bootstrap.iam import APIS
from fleet.input.errors import format_loc
from fleet.input.types import STRICT, GcsLocation, LabelKey, LabelValue
from fleet.spec.locations import bucket_location_problem

ROLE_ID = r"^[a-zA-Z0-9_.]{3,64}$"  # custom role ids
BUCKET = r"^[a-z0-9][a-z0-9_-]{1,61}[a-z0-9]$"  # GCS names without dots (no domain verification)
API = r"^[a-z0-9-]+\.googleapis\.com$"


class _Spec(BaseModel):
    model_config = ConfigDict(**STRICT, extra="forbid", frozen=True)  # no coercion, no NaN (fleet.input.types)


class StateBucketSpec(_Spec):
    """A bucket fit for `pulumi login gs://<name>`: versioned, uniform access, never public."""

    name: str | None = Field(None, pattern=BUCKET, description="default: <project>-pulumi-state")
    location: GcsLocation | None = Field(None, description="default: the spec's region")
    keep_noncurrent_versions: int = Field(20, ge=1, le=1000, description="older state versions kept per object")
    force_destroy: bool = Field(False, description="allow `pulumi destroy` to delete a non-empty state bucket")


class ProjectBootstrapSpec(_Spec):
    kind: Literal["project-bootstrap"]
    provider: Literal["gcp"] = "gcp"
    project: str = Field(pattern=r"^[a-z][-a-z0-9]{4,28}[a-z0-9]$", description="GCP project id")
    region: str = Field(pattern=r"^[a-z]+-[a-z]+[0-9]+$")
    apis: list[str] = Field(default_factory=lambda: [a.name for a in APIS], min_length=1, max_length=200)
    state_bucket: StateBucketSpec = Field(default_factory=StateBucketSpec)
    autoscaler_role_id: str = Field("gpuFleetAutoscaler", pattern=ROLE_ID)
    labels: dict[LabelKey, LabelValue] = Field(default_factory=dict, max_length=64)  # GCE label syntax

    def bucket_name(self) -> str:
        return self.state_bucket.name or f"{self.project}-pulumi-state"

    def bucket_location(self) -> str:
        return (self.state_bucket.location or self.region).upper()


class ProjectSpecError(ValueError):
    """A project-bootstrap spec that must not be deployed: `.errors` lists (field path, reason)."""

    def __init__(self, errors: list[tuple[str, str]]) -> None:
        self.errors = errors
        super().__init__("\n".join(f"{path}: {reason}" for path, reason in errors))


def load_project_spec(data: object) -> ProjectBootstrapSpec:
    """Validate a raw `kind: project-bootstrap` spec; raises ProjectSpecError naming each field."""
    if not isinstance(data, dict):
        raise ProjectSpecError([("gpu-fleet:fleet", f"must be a mapping, got {type(data).__name__}")])
    try:
        spec = ProjectBootstrapSpec.model_validate(data)
    except ValidationError as exc:
        errors = []
        for err in exc.errors(include_url=False):
            path = format_loc(err["loc"])
            reason = "unknown field" if err["type"] == "extra_forbidden" else str(err["msg"])
            reason = reason.removeprefix("Value error, ")
            errors.append((path or "gpu-fleet:fleet", reason))
        raise ProjectSpecError(errors) from None
    bad = [f"apis[{i}]" for i, api in enumerate(spec.apis) if not _is_api(api)]
    dupes = {a for a in spec.apis if spec.apis.count(a) > 1}
    errors = _location_problems(spec)
    errors += [(p, "not a Google API service name (<name>.googleapis.com)") for p in bad]
    errors += [("apis", f"{a} listed more than once") for a in sorted(dupes)]
    if errors:
        raise ProjectSpecError(errors)
    return spec


def _location_problems(spec: ProjectBootstrapSpec) -> list[tuple[str, str]]:
    """The region is one the catalog or the region table names; the state bucket's location is a Cloud Storage
    location (`fleet.spec.locations`)."""
    from fleet.bootstrap.regions import UnknownRegion, check_region, known_regions
    from fleet.catalog import load_catalog

    catalog = load_catalog(spec.provider)
    errors = []
    try:
        check_region(spec.region, catalog)
    except UnknownRegion as exc:
        errors.append(("region", str(exc)))
    location = spec.state_bucket.location
    if location is not None and (why := bucket_location_problem(location, known_regions(catalog))):
        errors.append(("state_bucket.location", why))
    return errors


def _is_api(name: str) -> bool:
    return re.fullmatch(API, name) is not None
