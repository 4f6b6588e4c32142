"""Schema of the fleet spec (key `gpu-fleet:fleet` of a Pulumi stack file).

Field-level checks only (names, ranges, CIDR syntax).  Rules that need the machine catalog or
look across fields (zones offering a type, overlapping CIDRs, capacity combinations ...) live in
`fleet.spec.rules` and run before any resource is declared.
"""

from __future__ import annotations

from ipaddress import IPv4Network
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from fleet.catalog import CapacityType

# RFC 1035 label, as GCE resource names require; short so derived names stay under 63 chars.
Name = Field(pattern=r"^[a-z]([-a-z0-9]{0,18}[a-z0-9])?$", description="lower-case RFC 1035 name, <= 20 chars")


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class NodePoolSpec(_Spec):
    """A group of identical GPU nodes; its size between min and max belongs to the autoscaler."""

    name: str = Name
    machine_type: str
    min_nodes: int = Field(0, ge=0)
    max_nodes: int = Field(ge=0)
    zones: list[str] | None = Field(
        None, description="zones for this pool; default: the fleet's zones offering the type"
    )
    capacity: CapacityType = CapacityType.ON_DEMAND
    reservation: str | None = Field(None, description="reservation name; required with capacity=reservation")
    compact_placement: bool = False
    boot_disk_gb: int = Field(200, ge=50, le=65536)
    image: str | None = Field(
        None,
        description="boot image or family with an NVIDIA driver; default: the catalog's accelerator image for the "
        "machine family (a baked image: docs/stacks.md 'Baking an image')",
    )
    secure_boot: bool | None = Field(
        None, description="Shielded VM Secure Boot; default: on (the accelerator image's driver is signed)"
    )
    labels: dict[str, str] = Field(default_factory=dict)


class NetworkSpec(_Spec):
    """Address plan.  The system VPC gets one subnet; GPU fabric subnets are carved from gpu_cidr."""

    system_cidr: IPv4Network = IPv4Network("10.0.0.0/20")
    gpu_cidr: IPv4Network = IPv4Network("10.128.0.0/16")
    # Ranges used by other things on the same network (peered VPCs, on-prem): must not overlap.
    reserved_cidrs: list[IPv4Network] = Field(default_factory=list)


class FilestoreSpec(_Spec):
    tier: Literal["BASIC_HDD", "BASIC_SSD", "ZONAL", "REGIONAL", "ENTERPRISE"] = "BASIC_SSD"
    capacity_gb: int = Field(2560, ge=1024)
    share_name: str = "home"


class BucketSpec(_Spec):
    name: str | None = Field(None, description="globally unique bucket name; default: <project>-<cluster>-checkpoints")
    location: str | None = Field(None, description="default: the fleet's region")
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
    mount_point: str = "/scratch"


class StorageSpec(_Spec):
    home: FilestoreSpec | None = Field(default_factory=FilestoreSpec)
    checkpoints: BucketSpec | None = Field(default_factory=BucketSpec)
    scratch: LustreSpec | None = None


class SlurmPartitionSpec(_Spec):
    name: str = Name
    pools: list[str] = Field(min_length=1)
    default: bool = False
    max_time: str = "INFINITE"
    spot_tolerant: bool = Field(False, description="jobs here accept preemption (may run on spot pools)")


class AutoscalerSpec(_Spec):
    """The gpu-fleet autoscaler daemon on the Slurm controller: it runs Slurm's Resume/SuspendProgram.

    The controller installs this repository at /opt/gpu-fleet (with its .venv) from `source` at `ref`
    on first boot; with `source` unset the image must already carry /opt/gpu-fleet (a baked image)."""

    source: str | None = Field(
        None, description="git URL of this repository, cloned to /opt/gpu-fleet on the controller"
    )
    ref: str | None = Field(
        None,
        pattern=r"^(?:[A-Za-z0-9][A-Za-z0-9._/-]*@)?[0-9a-f]{40}$",
        description="pinned release to install: a 40-hex commit, or <tag>@<40-hex commit> (checked on install)",
    )
    policy: dict[str, Any] = Field(default_factory=dict, description="planner Policy fields (docs/planner.md)")

    @model_validator(mode="after")
    def _pinned(self) -> AutoscalerSpec:
        if self.source and not self.ref:
            raise ValueError("ref: required with source: a 40-hex commit or <tag>@<40-hex commit> (never a branch)")
        return self

    metrics_port: int = Field(9464, ge=1024, le=65535, description="/metrics and /healthz on 127.0.0.1")


class SlurmSpec(_Spec):
    controller_machine_type: str = "n2-standard-8"
    login_machine_type: str = "n2-standard-4"
    login_nodes: int = Field(1, ge=0, le=8)
    partitions: list[SlurmPartitionSpec] = Field(min_length=1)
    suspend_time: int = Field(300, ge=60, description="seconds idle before Slurm powers a CLOUD node down")
    resume_timeout: int = Field(1800, ge=300, description="seconds a CLOUD node may take to register")
    extra_config: dict[str, str] = Field(
        default_factory=dict,
        description="site slurm.conf keys (e.g. PriorityType) added to / replacing the generated ones",
    )
    autoscaler: AutoscalerSpec = Field(default_factory=AutoscalerSpec)


class ClusterSpec(_Spec):
    name: str = Name
    scheduler: Literal["slurm", "gke"] = "slurm"
    pools: list[NodePoolSpec] = Field(min_length=1)
    storage: StorageSpec = Field(default_factory=StorageSpec)
    slurm: SlurmSpec | None = None


class FleetSpec(_Spec):
    """Everything one stack deploys."""

    kind: Literal["fleet"] = "fleet"  # other stack kinds (e.g. project-bootstrap) have their own spec
    provider: Literal["gcp"] = "gcp"
    project: str = Field(pattern=r"^[a-z][-a-z0-9]{4,28}[a-z0-9]$", description="GCP project id")
    region: str = Field(pattern=r"^[a-z]+-[a-z]+[0-9]+$")
    zones: list[str] = Field(min_length=1)
    network: NetworkSpec = Field(default_factory=NetworkSpec)
    clusters: list[ClusterSpec] = Field(min_length=1)
    labels: dict[str, str] = Field(default_factory=dict)
