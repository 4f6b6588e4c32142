"""Schema of the fleet spec (key `gpu-fleet:fleet` of a Pulumi stack file).

Field-level checks only (names, ranges, CIDR syntax).  Rules that need the machine catalog or
look across fields (zones offering a type, overlapping CIDRs, capacity combinations ...) live in
`fleet.spec.rules` and run before any resource is declared.
"""

from __future__ import annotations

import re
from datetime import datetime
from ipaddress import IPv4Network
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from fleet.catalog import CapacityType
from fleet.input import snapshot_schedule as snapshots
from fleet.input.policy import PolicyMapping
from fleet.input.types import (
    STRICT,
    Cidr,
    GceName,
    GcsLocation,
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
    image: Image | None = Field(
        None,
        description="boot image or family with an NVIDIA driver; default: the catalog's accelerator image for the "
        "machine family (a baked image: docs/stacks.md 'Baking an image')",
    )
    secure_boot: bool | None = Field(
        None,
        description="Shielded VM Secure Boot; default: the catalog's (on: the accelerator image's driver is signed; "
        "off for A3 Mega, whose TCPXO kernel module is built on the node)",
    )
    labels: dict[str, str] = Field(default_factory=dict)  # syntax: rules.labels_valid
    # Kubernetes platforms (docs/kubernetes.md): a $/h price for machines the catalog lacks, and the
    # Cluster API templates of a pool on `platform: kubernetes`.
    price_per_hour: float | None = Field(
        None, gt=0, le=1000, description="$/h per node; required when the catalog has no price for the type"
    )
    cluster_api: ClusterApiPoolSpec | None = None


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
    keep_noncurrent_versions: int = Field(
        1, ge=1, le=100, description="overwritten versions of an object kept (older ones deleted by a lifecycle rule)"
    )
    mount_point: MountPoint | None = Field(
        "/checkpoints",
        description="where a Slurm cluster's GPU nodes and login VMs mount the bucket (gcsfuse, as root); on GKE any "
        "value declares each team namespace's claim `checkpoints`; null: neither",
    )

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
    ref: str | None = Field(
        None,
        pattern=r"^(?:[A-Za-z0-9][A-Za-z0-9._/-]*@)?[0-9a-f]{40}$",
        description="pinned release to install: a 40-hex commit, or <tag>@<40-hex commit> (checked on install)",
    )
    policy: PolicyMapping = Field(default_factory=dict, description="planner Policy fields (docs/planner.md)")

    @model_validator(mode="after")
    def _pinned(self) -> AutoscalerSpec:
        if self.source and not self.ref:
            raise ValueError("ref: required with source: a 40-hex commit or <tag>@<40-hex commit> (never a branch)")
        return self

    metrics_port: int = Field(9464, ge=1024, le=65535, description="/metrics and /healthz on 127.0.0.1")


#: the Slurm releases the rendered slurm.conf is run against (22.05: Debian 12; 23.11: Ubuntu 24.04)
SlurmRelease = Literal["22.05", "23.11"]


class StateSnapshotsSpec(_Spec):
    """Scheduled snapshots of the controller's state disk (slurmctld's state, the accounting database, the
    autoscaler's store): a GCE snapshot schedule, kept when the disk is deleted (components/gcp/snapshots.py)."""

    interval_hours: int = Field(
        24, ge=1, le=snapshots.MAX_INTERVAL_HOURS, description="hours between snapshots: 24 (daily) or 1-23 (hourly)"
    )
    start_time: str = Field(
        "04:00",
        pattern=snapshots.START_TIME_PATTERN,
        description="UTC, on the hour; a daily schedule starts at 00:00, 04:00, 08:00, 12:00, 16:00 or 20:00",
    )
    keep_days: int = Field(14, ge=1, le=snapshots.MAX_KEEP_DAYS, description="days each snapshot is kept")

    @model_validator(mode="after")
    def _gce_accepts_it(self) -> StateSnapshotsSpec:
        """The rule across fields (a daily schedule's window), as the component checks it."""
        if error := snapshots.schedule_error(self.interval_hours, self.start_time, self.keep_days):
            raise ValueError(error)
        return self


class SlurmSpec(_Spec):
    controller_machine_type: MachineType = "n2-standard-8"
    login_machine_type: MachineType = "n2-standard-4"
    login_nodes: int = Field(1, ge=0, le=8)
    partitions: list[SlurmPartitionSpec] = Field(min_length=1, max_length=64)
    suspend_time: int | None = Field(
        None,
        ge=60,
        le=31_536_000,
        description="seconds idle before Slurm powers a CLOUD node down; default (and minimum): the settings rule's "
        "longest idle keep + one daemon tick (fleet.slurm.suspend)",
    )
    resume_timeout: int = Field(1800, ge=300, le=86_400, description="seconds a CLOUD node may take to register")
    release: SlurmRelease = Field(
        "23.11",
        description="the Slurm release the images install (Ubuntu 24.04, the stacks' images: 23.11; Debian 12: "
        "22.05): slurm.conf gets the keys that release needs and none it calls defunct (fleet.slurm.conf)",
    )
    extra_config: dict[str, str] = Field(  # syntax: rules.slurm_extra_config
        default_factory=dict,
        description="site slurm.conf keys (e.g. PriorityType) added to / replacing the generated ones",
    )
    accounting: Literal["slurmdbd", "none"] = Field(
        "slurmdbd",
        description="job accounting: slurmdbd with a MariaDB on the controller, its data on the state disk (sacct, "
        "sreport, fairshare; as slurm-gcp's controller runs it), or none (a job completion log only)",
    )
    autoscaler: AutoscalerSpec = Field(default_factory=AutoscalerSpec)
    state_snapshots: StateSnapshotsSpec | None = Field(
        default_factory=StateSnapshotsSpec,
        description="snapshots of the controller's state disk (default: daily at 04:00 UTC, kept 14 days); null: none",
    )


# ---------------------------------------------------------------- Kubernetes platforms and Kueue

Platform = Literal["gce", "gke", "kubernetes"]
# A CIDR from YAML text under the strict models (a string, never an int): fleet.input's Cidr.
KubeCidr = Cidr
#: a DNS-1123 label (Kubernetes namespaces, object names that double as label values), and an RFC 3339 UTC instant
DNS1123_LABEL = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"
RFC3339_UTC = r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$"


def rfc3339_utc(value: str) -> str:
    """`value` if it is a real RFC 3339 UTC instant to the second (`2026-12-01T00:00:00Z`); ValueError saying what
    is wrong otherwise, a month 13 or a 31 April as well as the wrong shape (GKE would refuse it at deploy)."""
    example = "e.g. 2026-12-01T00:00:00Z"
    if not re.fullmatch(RFC3339_UTC, value):
        raise ValueError(f"{value!r} is not RFC 3339 UTC, {example}")
    try:  # year, month, day, hour, minute, second: "month must be in 1..12", "day is out of range for month"
        datetime(*(int(part) for part in re.findall(r"\d+", value)))
    except ValueError as exc:
        raise ValueError(f"{value!r} is not a real date and time ({exc}), {example}") from None
    return value


K8sName = Field(pattern=DNS1123_LABEL, description="DNS-1123 label")
NamespaceName = Annotated[str, Field(pattern=DNS1123_LABEL, description="a Kubernetes namespace")]


class TemplateRef(_Spec):
    """A Cluster API template object (provider-specific) by API group, kind and name, in the pool's namespace."""

    api_group: str = Field(
        pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$", description="e.g. infrastructure.cluster.x-k8s.io"
    )
    kind: str = Field(pattern=r"^[A-Z][A-Za-z0-9]{0,62}$", description="e.g. AWSMachineTemplate")
    name: str = Field(pattern=r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")


class ClusterApiPoolSpec(_Spec):
    """A GPU pool on `platform: kubernetes`: one Cluster API MachineDeployment cloning these templates.

    The catalog does not know the provider's machine types: the GPU and size of a node are stated here,
    the price in the pool's `price_per_hour`."""

    infrastructure_template: TemplateRef
    bootstrap_template: TemplateRef | None = Field(
        None, description="a bootstrap config template (e.g. KubeadmConfigTemplate); default: the cluster's"
    )
    gpu_type: str = Field(pattern=r"^[a-z0-9][-a-z0-9]{1,62}$", description="e.g. nvidia-h100-80gb")
    gpus_per_node: int = Field(ge=1, le=16)
    vcpus: int = Field(ge=1, le=1024)
    memory_gib: int = Field(ge=1, le=32768)
    failure_domain: str | None = Field(None, description="the Cluster API failure domain (zone) of the pool")


# NVIDIA publishes the GPU Operator chart as v<YY.MM.PP> (calendar versions: `helm install ... --version=v26.7.0`).
GPU_OPERATOR_CHART_VERSION = re.compile(r"v\d+\.\d+\.\d+")


class GpuOperatorSpec(_Spec):
    """NVIDIA's GPU Operator on an existing cluster (components/kubernetes/gpu_operator.py): the driver, container
    toolkit and device plugin that make a GPU node show `nvidia.com/gpu`.  The defaults give working GPUs on a
    plain node image; on an image that already has the driver the driver container stands down by itself."""

    version: str = Field("v26.7.0", description="GPU Operator release = its Helm chart version, v<YY.MM.PP>")
    driver: bool = Field(True, description="deploy the driver container; false: the nodes' image has the driver")
    toolkit: bool = Field(
        True, description="deploy the NVIDIA Container Toolkit; false: the image has it, containerd set up for it"
    )
    nfd: bool = Field(
        True, description="deploy the Node Feature Discovery the chart bundles; false: the cluster already runs NFD"
    )

    @field_validator("version")
    @classmethod
    def _chart_version(cls, version: str) -> str:
        if not GPU_OPERATOR_CHART_VERSION.fullmatch(version):
            raise ValueError(
                f"not a GPU Operator chart version: NVIDIA publishes v<YY.MM.PP> (e.g. v26.7.0), got {version!r}"
            )
        return version


class KubernetesSpec(_Spec):
    """An existing cluster (any provider) reached through a kubeconfig held as a Pulumi secret.

    The cluster is its own Cluster API management cluster (self-hosted / pivoted): its MachineDeployments
    live in `namespace` next to the CAPI Cluster `cluster_name`."""

    kubeconfig: str = Field(
        "kubeconfig", pattern=r"^[a-z][-a-z0-9_]{0,62}$", description="secret stack config key gpu-fleet:<this>"
    )
    namespace: str = Field("default", pattern=DNS1123_LABEL, description="CAPI namespace")
    cluster_name: str = Field(pattern=DNS1123_LABEL, description="the CAPI Cluster")
    version: str = Field(pattern=r"^v1\.[0-9]+\.[0-9]+$", description="Kubernetes version of the machines")
    bootstrap_template: TemplateRef | None = Field(None, description="default bootstrap template of every pool")
    # How the pools' nodes get their taints (GPU; spot): Cluster API propagates a MachineDeployment's taints only
    # with its alpha MachineTaintPropagation feature gate on (off by default; without it the webhook refuses them).
    taint_propagation: Literal["cluster-api", "bootstrap"] = Field(
        "cluster-api",
        description="cluster-api: the MachineDeployments carry the pools' taints (Cluster API >= 1.12 with "
        "--feature-gates=MachineTaintPropagation=true); bootstrap: they carry none and each pool's bootstrap "
        "template registers its nodes with them (kubeadm: joinConfiguration.nodeRegistration.taints)",
    )
    # Cluster API copies a Machine's labels to its Node only in its managed domains (fleet.spec.kube.capi_synced),
    # and those the core manager's --additional-sync-machine-labels regexes match: the same regexes here.
    additional_sync_machine_labels: list[str] = Field(
        default_factory=list,
        max_length=32,
        description="the management cluster's --additional-sync-machine-labels regexes: pool labels they match "
        "reach the Nodes (besides node-role.kubernetes.io, node-restriction.kubernetes.io, node.cluster.x-k8s.io)",
    )
    # Kueue's ProvisioningRequest admission check needs the ProvisioningRequest API, and Kueue looks for it once,
    # when its manager starts: without it every ClusterQueue of the stack stays inactive (docs/kubernetes.md).
    provisioning_request_crd: Literal["install", "present"] = Field(
        "install",
        description="install: the stack declares the ProvisioningRequest CRD (kubernetes/autoscaler, pinned) before "
        "Kueue; present: the cluster already serves autoscaling.x-k8s.io/v1 ProvisioningRequests (e.g. from a "
        "Cluster Autoscaler install) and the stack leaves the CRD alone",
    )
    # Nothing else puts the NVIDIA driver, container toolkit and device plugin on a new node of such a cluster, and
    # a node without the device plugin never shows nvidia.com/gpu: the daemon never counts it (docs/kubernetes.md).
    gpu_operator: GpuOperatorSpec | None = Field(
        default_factory=GpuOperatorSpec,
        description="NVIDIA's GPU Operator, installed from its chart; null: the nodes already run the NVIDIA stack "
        "(the team's own image or operator) and advertise nvidia.com/gpu",
    )


class GkeSystemPoolSpec(_Spec):
    machine_type: str = "e2-standard-8"
    nodes_per_zone: int = Field(1, ge=1, le=10)


class GkeSpec(_Spec):
    """A GKE Standard cluster on the fleet's network: private nodes, Workload Identity, release channel."""

    release_channel: Literal["RAPID", "REGULAR", "STABLE", "EXTENDED"] = "REGULAR"
    # Node upgrades of GPU pools only in a window the team picks: no minor or node upgrades from this
    # instant until the version's end of support (GKE maintenance exclusion).
    upgrade_exclusion_start: str | None = Field(
        None, pattern=RFC3339_UTC, description="RFC 3339 UTC, e.g. 2026-12-01T00:00:00Z"
    )
    maintenance_window_start: str = Field("03:00", pattern=r"^([01]\d|2[0-3]):[0-5]\d$", description="daily, UTC")
    master_cidr: KubeCidr = IPv4Network("172.16.0.0/28")
    pods_cidr: KubeCidr = IPv4Network("10.64.0.0/14")
    services_cidr: KubeCidr = IPv4Network("10.68.0.0/20")
    master_authorized_networks: list[KubeCidr] = Field(default_factory=list)
    private_endpoint: bool = Field(False, description="control plane reachable only from the VPC")
    system_pool: GkeSystemPoolSpec = Field(default_factory=GkeSystemPoolSpec)
    gpu_driver_version: Literal["DEFAULT", "LATEST"] = "LATEST"

    @field_validator("upgrade_exclusion_start")
    @classmethod
    def _real_instant(cls, value: str | None) -> str | None:
        return None if value is None else rfc3339_utc(value)


class KueueTeamSpec(_Spec):
    """One team: a namespace, a LocalQueue, a ClusterQueue with a share of pools, optionally in a cohort."""

    name: str = K8sName
    namespace: str | None = Field(None, pattern=DNS1123_LABEL, description="default: name")
    quotas: dict[str, float] = Field(
        min_length=1, description="pool name -> share (0..1] of the pool's GPUs at max_nodes; flavor order = order here"
    )
    cohort: str | None = Field(None, pattern=DNS1123_LABEL)
    borrowing_limit: float | None = Field(None, ge=0, description="may borrow this fraction of its nominal quota")
    lending_limit: float | None = Field(None, ge=0, le=1, description="lends at most this fraction of its nominal")
    fair_share_weight: float = Field(1.0, gt=0, le=1000)


class WorkloadPriorityClassSpec(_Spec):
    name: str = K8sName
    value: int = Field(ge=-(2**31), le=10**9)
    description: str = ""


class KueueAutoscalerSpec(_Spec):
    """The gpu-fleet autoscaler Deployment in the cluster (it serves Kueue's ProvisioningRequests)."""

    image: str = Field(description="container image pinned by digest: <repo>@sha256:<64 hex>")
    replicas: int = Field(2, ge=1, le=5, description="leader election through a Lease: one acts")
    namespace: str = Field("gpu-fleet-system", pattern=DNS1123_LABEL)
    policy: PolicyMapping = Field(default_factory=dict, description="planner Policy fields (docs/planner.md)")
    metrics_port: int = Field(9464, ge=1024, le=65535)
    # The pods admit only the metrics port, and that only from these namespaces (a NetworkPolicy; kubelet's
    # probes come from the node, which a NetworkPolicy never blocks).  Empty: nothing in the cluster scrapes it.
    metrics_from_namespaces: list[NamespaceName] = Field(
        default_factory=list, max_length=16, description="namespaces whose pods may scrape /metrics (e.g. gmp-system)"
    )


def _default_priorities() -> list[WorkloadPriorityClassSpec]:
    return [
        WorkloadPriorityClassSpec(name="low", value=100, description="best effort, preempted first"),
        WorkloadPriorityClassSpec(name="normal", value=1000, description="default"),
        WorkloadPriorityClassSpec(name="high", value=10000, description="preempts lower priorities in its queue"),
    ]


class KueueSpec(_Spec):
    version: str = Field("0.14.8", pattern=r"^\d+\.\d+\.\d+$", description="Kueue release (Helm chart version)")
    # JobSet is what multi-node GPU training on Kubernetes is submitted as: installed before Kueue (older Kueue
    # releases set an integration up only if its API was there at start); null: the team installs its own
    jobset_version: str | None = Field(
        "0.10.0", pattern=r"^\d+\.\d+\.\d+$", description="JobSet release (Helm chart version), or null"
    )
    teams: list[KueueTeamSpec] = Field(min_length=1)
    # Pools of one GPU model behind one ResourceFlavor: Kueue admits on the flavor's quota and the autoscaler
    # picks the pool (shape, capacity type) per request; a pool named in no flavor gets a flavor of its own.
    flavors: dict[str, list[str]] = Field(
        default_factory=dict, description="flavor name -> the pools it spans (one ResourceFlavor, one quota)"
    )
    priority_classes: list[WorkloadPriorityClassSpec] = Field(default_factory=_default_priorities)
    fair_sharing: bool = True
    provisioning: bool = Field(True, description="admission check: Kueue asks the autoscaler before admitting")
    autoscaler: KueueAutoscalerSpec


class ClusterSpec(_Spec):
    name: str = Name
    scheduler: Literal["slurm", "kueue"] = "slurm"
    platform: Platform = Field("gce", description="gce (Slurm on VMs), gke, or kubernetes (an existing cluster)")
    pools: list[NodePoolSpec] = Field(min_length=1, max_length=64)
    zone: Zone | None = Field(
        None,
        description="zone of the controller and login VMs and of the zonal storage (Filestore BASIC/ZONAL, Lustre, "
        "the controller's state disk); default: the first zone of the first pool (gke: the first fleet zone a pool "
        "uses), which moves when pools are reordered (fleet.spec.derive.cluster_zone)",
    )
    deletion_protection: bool = Field(
        True,
        description="Pulumi protect on /home (Filestore), /scratch (Lustre) and the controller's state disk, and "
        "Filestore's own deletion protection: no pulumi up or destroy deletes or replaces them",
    )
    storage: StorageSpec = Field(default_factory=StorageSpec)
    slurm: SlurmSpec | None = None
    gke: GkeSpec | None = None  # platform: gke (defaults apply when omitted)
    kubernetes: KubernetesSpec | None = None  # platform: kubernetes (required there)
    kueue: KueueSpec | None = None  # scheduler: kueue (required there)


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


NodePoolSpec.model_rebuild()  # its cluster_api field names a model declared below it
