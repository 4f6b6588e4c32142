"""Schema of the fleet spec (key `gpu-fleet:fleet` of a Pulumi stack file).

Field-level checks only (names, ranges, CIDR syntax).  Rules that need the machine catalog or
look across fields (zones offering a type, overlapping CIDRs, capacity combinations ...) live in
`fleet.spec.rules` and run before any resource is declared.
"""

from __future__ import annotations

from ipaddress import IPv4Network
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from fleet.catalog import CapacityType
from fleet.input.policy import PolicyMapping
from fleet.input.types import (
    STRICT,
    Cidr,
    GceName,
    GcsLocation,
    GitRef,
    GitUrl,
    Image,
    MachineType,
    MountPoint,
    NodeCount,
    Reservation,
    ShareName,
    Zone,
    lax_enum,
)

# RFC 1035 label, as GCE resource names require; short so derived names stay under 63 chars.
Name = Field(pattern=r"^[a-z]([-a-z0-9]{0,18}[a-z0-9])?$", description="lower-case RFC 1035 name, <= 20 chars")


class _Spec(BaseModel):
    # strict: no "4" or true for a count, no NaN (fleet.input.types)
    model_config = ConfigDict(**STRICT, extra="forbid", frozen=True, populate_by_name=True)


class NodePoolSpec(_Spec):
    """A group of identical GPU nodes; its size between min and max belongs to the autoscaler."""

    name: str = Name
    machine_type: MachineType
    min_nodes: NodeCount = 0
    max_nodes: NodeCount = Field(description="at most 2,000: a zonal MIG's size limit")
    zones: list[Zone] | None = Field(
        None, max_length=16, description="zones for this pool; default: the fleet's zones offering the type"
    )
    capacity: lax_enum(CapacityType) = CapacityType.ON_DEMAND  # type: ignore[valid-type]
    reservation: Reservation | None = Field(None, description="reservation name; required with capacity=reservation")
    compact_placement: bool = False
    boot_disk_gb: int = Field(200, ge=50, le=65536)
    image: Image = Field("projects/debian-cloud/global/images/family/debian-12", description="boot image or family")
    labels: dict[str, str] = Field(default_factory=dict)  # syntax: rules.labels_valid


class NetworkSpec(_Spec):
    """Address plan.  The system VPC gets one subnet; GPU fabric subnets are carved from gpu_cidr."""

    system_cidr: Cidr = IPv4Network("10.0.0.0/20")
    gpu_cidr: Cidr = IPv4Network("10.128.0.0/16")
    # Ranges used by other things on the same network (peered VPCs, on-prem): must not overlap.
    reserved_cidrs: list[Cidr] = Field(default_factory=list, max_length=64)


class FilestoreSpec(_Spec):
    tier: Literal["BASIC_HDD", "BASIC_SSD", "ZONAL", "REGIONAL", "ENTERPRISE"] = "BASIC_SSD"
    capacity_gb: int = Field(2560, ge=1024)
    share_name: ShareName = "home"

    @model_validator(mode="after")
    def _basic_share_name(self) -> FilestoreSpec:
        if self.tier.startswith("BASIC_") and len(self.share_name) > 16:
            raise ValueError(f"share_name: at most 16 characters on the {self.tier} tier (Filestore's limit)")
        return self


class BucketSpec(_Spec):
    name: str | None = Field(None, description="globally unique bucket name; default: <project>-<cluster>-checkpoints")
    location: GcsLocation | None = Field(None, description="default: the fleet's region")
    soft_delete_days: int = Field(7, ge=0, le=90, description="0 disables soft delete; else 7..90 (GCS limits)")

    @field_validator("soft_delete_days")
    @classmethod
    def _gcs_retention(cls, days: int) -> int:
        if 0 < days < 7:
            raise ValueError("GCS soft-delete retention is 0 (off) or 7 to 90 days")
        return days


class LustreSpec(_Spec):
    capacity_gib: int = Field(18000, ge=18000)
    per_unit_storage_throughput: Literal[125, 250, 500, 1000] = 500
    mount_point: MountPoint = "/scratch"


class StorageSpec(_Spec):
    home: FilestoreSpec | None = Field(default_factory=FilestoreSpec)
    checkpoints: BucketSpec | None = Field(default_factory=BucketSpec)
    scratch: LustreSpec | None = None


class SlurmPartitionSpec(_Spec):
    name: str = Name
    pools: list[GceName] = Field(min_length=1, max_length=64)
    default: bool = False
    max_time: str = Field("INFINITE", max_length=32)  # syntax: rules.partition_max_time
    spot_tolerant: bool = Field(False, description="jobs here accept preemption (may run on spot pools)")


class AutoscalerSpec(_Spec):
    """The gpu-fleet autoscaler daemon on the Slurm controller: it runs Slurm's Resume/SuspendProgram.

    The controller installs this repository at /opt/gpu-fleet (with its .venv) from `source` at `ref`
    on first boot; with `source` unset the image must already carry /opt/gpu-fleet (a baked image)."""

    source: GitUrl | None = Field(
        None, description="git URL of this repository, cloned to /opt/gpu-fleet on the controller"
    )
    ref: GitRef = Field("main", description="branch, tag or commit to install")
    policy: PolicyMapping = Field(default_factory=dict, description="planner Policy fields (docs/planner.md)")
    metrics_port: int = Field(9464, ge=1024, le=65535, description="/metrics and /healthz on 127.0.0.1")


class SlurmSpec(_Spec):
    controller_machine_type: MachineType = "n2-standard-8"
    login_machine_type: MachineType = "n2-standard-4"
    login_nodes: int = Field(1, ge=0, le=8)
    partitions: list[SlurmPartitionSpec] = Field(min_length=1, max_length=64)
    suspend_time: int = Field(
        300, ge=60, le=31_536_000, description="seconds idle before Slurm powers a CLOUD node down"
    )
    resume_timeout: int = Field(1800, ge=300, le=86_400, description="seconds a CLOUD node may take to register")
    extra_config: dict[str, str] = Field(  # syntax: rules.slurm_extra_config
        default_factory=dict,
        description="site slurm.conf keys (e.g. PriorityType) added to / replacing the generated ones",
    )
    autoscaler: AutoscalerSpec = Field(default_factory=AutoscalerSpec)


class ClusterSpec(_Spec):
    name: str = Name
    scheduler: Literal["slurm", "gke"] = "slurm"
    pools: list[NodePoolSpec] = Field(min_length=1, max_length=64)
    storage: StorageSpec = Field(default_factory=StorageSpec)
    slurm: SlurmSpec | None = None


class FleetSpec(_Spec):
    """Everything one stack deploys."""

    kind: Literal["fleet"] = "fleet"  # other stack kinds (e.g. project-bootstrap) have their own spec
    provider: Literal["gcp"] = "gcp"
    project: str = Field(pattern=r"^[a-z][-a-z0-9]{4,28}[a-z0-9]$", description="GCP project id")
    region: str = Field(pattern=r"^[a-z]+-[a-z]+[0-9]+$")
    zones: list[Zone] = Field(min_length=1, max_length=16)
    network: NetworkSpec = Field(default_factory=NetworkSpec)
    clusters: list[ClusterSpec] = Field(min_length=1, max_length=32)
    labels: dict[str, str] = Field(default_factory=dict)  # syntax: rules.labels_valid
