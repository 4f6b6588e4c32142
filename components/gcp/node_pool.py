"""GpuNodePool: a GPU instance template and one zonal managed instance group per zone.

The pool's size belongs to the autoscaler: every MIG is declared with `target_size=0` and
`ignore_changes=["target_size"]`, so `pulumi up` never resets what the daemon set.  The daemon adds
nodes with `createInstances` (named like the Slurm nodes) and removes them by name with
`deleteInstances`; the MIG's own repair is off (`default_action_on_failure=DO_NOTHING`) so the
cloud never picks victims or recreates a node the scheduler gave up on.

Template: accelerators, every NIC without an access config (no public IP; egress through Cloud
NAT), Shielded VM, OS Login, a dedicated service account, `on_host_maintenance=TERMINATE`
(required for GPUs), and the capacity type mapped onto GCE scheduling:

| capacity     | provisioning_model | reservation affinity          | termination                      |
|--------------|--------------------|-------------------------------|----------------------------------|
| reservation  | STANDARD           | SPECIFIC_RESERVATION (name)   | -                                |
| spot         | SPOT               | NO_RESERVATION                | STOP on preemption               |
| flex-start   | FLEX_START         | NO_RESERVATION                | DELETE after max_run_duration    |
| on-demand    | STANDARD           | NO_RESERVATION                | -                                |

Non-reservation pools use NO_RESERVATION so they never consume a reservation bought for another pool.
A preempted spot VM is stopped, not deleted (see `scheduling_for`); the daemon deletes it.

Placement (`compact_placement`), as slurm-gcp does it:

| capacity    | what the pool declares                                                                  |
|-------------|-----------------------------------------------------------------------------------------|
| reservation | nothing: a specific reservation refuses an external policy; it brings its own (a compact |
|             | or dense reservation is placed by GCE, `RESERVATION_BOUND` instances)                    |
| flex-start  | a `HIGH_THROUGHPUT` workload policy on the MIGs (DWS places the resize request's VMs)   |
| spot, on-demand | a `COLLOCATED` group placement policy on the template                               |

Image: the catalog's GPU image for the machine family (an accelerator image whose NVIDIA driver is
signed) or the user's baked image; Secure Boot is on only when the image's driver is signed.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import pulumi
import pulumi_gcp as gcp

from components.gcp.storage import grant_bucket_objects
from fleet.bootstrap.iam import NODE_ROLES as NODE_PERMISSIONS
from fleet.catalog import CapacityType

RESERVATION_KEY = "compute.googleapis.com/reservation-name"
FLEX_START_MAX_RUN_SECONDS = 7 * 24 * 3600  # GCE's upper bound for a flex-start VM's run duration
NODE_ROLES = tuple(role.name for role in NODE_PERMISSIONS)  # log and metric writer, with their reasons there
# Secret Manager has no narrower OAuth scope than cloud-platform; the SA's IAM roles (log/metric
# writer on the project, accessor on one secret, object user on one bucket) are the real limit.
NODE_SCOPES = ("https://www.googleapis.com/auth/cloud-platform",)


@dataclass(frozen=True)
class NicArgs:
    """One network interface: `nic_type` GVNIC for host/GPUDirect NICs, MRDMA for RoCE NICs."""

    network: pulumi.Input[str]
    subnetwork: pulumi.Input[str]
    nic_type: str = "GVNIC"


@dataclass(frozen=True)
class GpuNodePoolArgs:
    """Inputs of a GpuNodePool (provider-level; `stacks/` maps the fleet spec onto them).

    project, region, zones: one zonal MIG per zone (instance_groups maps zone -> MIG name).
    instance_group: MIG name stem; the MIG in zone Z is `<instance_group>-<Z>`.
    base_instance_name: GCE needs one; unused, the daemon creates instances by explicit name.
    machine_type, accelerator_type, accelerator_count: e.g. a3-megagpu-8g, nvidia-h100-mega-80gb, 8.
    capacity: reservation | spot | flex-start | on-demand (see the module table).
    reservation: the reservation name (capacity=reservation only).
    compact_placement: the nodes must be close together (see the module table; requires a single zone).
    nics: every NIC in order (the first is the system VPC).
    boot_disk_gb, boot_disk_type, image: the boot disk (image: a GPU image, NVIDIA driver included).
    secure_boot: Shielded VM Secure Boot (only when the image's NVIDIA driver is signed).
    account_id: the pool's dedicated service account id (6-30 chars).
    sa_users: IAM members allowed to launch VMs as the pool's SA (the Slurm controller).
    secret_ids: Secret Manager secrets the nodes may read (the munge key).
    bucket_names: GCS buckets the nodes may read/write (checkpoints).
    metadata: instance metadata (startup script, Slurm config); OS Login keys are always set.
    labels: on every VM.
    """

    project: str
    region: str
    zones: list[str]
    instance_group: str
    machine_type: str
    accelerator_type: str
    accelerator_count: int
    capacity: CapacityType
    nics: list[NicArgs]
    account_id: str
    base_instance_name: str = "gpu"
    reservation: str | None = None
    compact_placement: bool = False
    boot_disk_gb: int = 200
    boot_disk_type: str = "pd-balanced"
    image: str = (
        "projects/ubuntu-os-accelerator-images/global/images/family/ubuntu-accelerator-2404-amd64-with-nvidia-580"
    )
    secure_boot: bool = True
    sa_users: list[pulumi.Input[str]] = field(default_factory=list)
    secret_ids: list[pulumi.Input[str]] = field(default_factory=list)
    bucket_names: list[pulumi.Input[str]] = field(default_factory=list)
    metadata: dict[str, pulumi.Input[str]] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.zones:
            raise ValueError(f"{self.instance_group}: zones: at least one zone is required")
        if not self.nics:
            raise ValueError(f"{self.instance_group}: nics: at least one NIC (the system VPC) is required")
        if (self.capacity is CapacityType.RESERVATION) != bool(self.reservation):
            raise ValueError(f"{self.instance_group}: reservation: required with capacity=reservation, and only then")
        if self.compact_placement and len(self.zones) != 1:
            raise ValueError(f"{self.instance_group}: zones: compact placement needs exactly one zone")
        if not 6 <= len(self.account_id) <= 30:
            raise ValueError(f"{self.instance_group}: account_id: must be 6-30 characters, got {self.account_id!r}")


def service_account_id(*parts: str) -> str:
    """A GCE service account id (6-30 chars) from name parts, hashed when too long."""
    full = "-".join(parts)
    if len(full) <= 30:
        return full.ljust(6, "x")
    digest = hashlib.sha1(full.encode()).hexdigest()[:6]
    return f"{full[:23].rstrip('-')}-{digest}"


def scheduling_for(capacity: CapacityType) -> dict[str, object]:
    """GCE scheduling block for a capacity type (GPU VMs cannot live-migrate: TERMINATE).

    Spot: a preempted VM is stopped (`STOP`, GCE's default and the Cluster Toolkit's), not deleted.  The MIGs
    repair nothing (`default_action_on_failure: DO_NOTHING`), so the member stays, TERMINATED with no current
    action, which is how the daemon tells a preemption (`autoscaler.gce.translate.node_status`, as slurm-gcp's
    slurmsync does); with DELETE the VM would vanish and the preemption would go unnoticed until SlurmdTimeout.
    The daemon deletes the stopped VM once Slurm has let the node go (a tick or two): until then only its disk
    costs.  Flex-start keeps DELETE: its VMs end at `max_run_duration` and cannot be stopped."""
    base: dict[str, object] = {"on_host_maintenance": "TERMINATE", "automatic_restart": False}
    if capacity is CapacityType.SPOT:
        return {**base, "provisioning_model": "SPOT", "preemptible": True, "instance_termination_action": "STOP"}
    if capacity is CapacityType.FLEX_START:
        return {
            **base,
            "provisioning_model": "FLEX_START",
            "instance_termination_action": "DELETE",
            "max_run_duration": {"seconds": FLEX_START_MAX_RUN_SECONDS},
        }
    return {**base, "provisioning_model": "STANDARD", "automatic_restart": True}


def reservation_affinity_for(capacity: CapacityType, reservation: str | None) -> dict[str, object]:
    if capacity is CapacityType.RESERVATION:
        return {
            "type": "SPECIFIC_RESERVATION",
            "specific_reservation": {"key": RESERVATION_KEY, "values": [reservation]},
        }
    return {"type": "NO_RESERVATION"}


def placement_kind(capacity: CapacityType, compact: bool) -> str:
    """none | collocated | workload: the policy a pool declares itself (see the module table)."""
    if not compact or capacity is CapacityType.RESERVATION:
        return "none"
    return "workload" if capacity is CapacityType.FLEX_START else "collocated"


class GpuNodePool(pulumi.ComponentResource):
    """Instance template + zonal MIGs (sized by the autoscaler) + the pool's service account."""

    service_account: gcp.serviceaccount.Account
    template: gcp.compute.InstanceTemplate
    placement_policy: gcp.compute.ResourcePolicy | None
    workload_policy: gcp.compute.ResourcePolicy | None
    migs: dict[str, gcp.compute.InstanceGroupManager]

    def __init__(self, name: str, args: GpuNodePoolArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpufleet:gcp:GpuNodePool", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        self.service_account = gcp.serviceaccount.Account(
            f"{name}-sa",
            account_id=args.account_id,
            project=args.project,
            display_name=f"gpu-fleet nodes of {args.instance_group}",
            opts=child,
        )
        member = self.service_account.email.apply(lambda e: f"serviceAccount:{e}")
        for role in NODE_ROLES:
            gcp.projects.IAMMember(
                f"{name}-sa-{role.split('/')[-1]}", project=args.project, role=role, member=member, opts=child
            )
        for i, secret_id in enumerate(args.secret_ids):
            gcp.secretmanager.SecretIamMember(
                f"{name}-sa-secret-{i}",
                project=args.project,
                secret_id=secret_id,
                role="roles/secretmanager.secretAccessor",
                member=member,
                opts=child,
            )
        for i, bucket in enumerate(args.bucket_names):
            grant_bucket_objects(f"{name}-sa-bucket-{i}", bucket, member, child)
        for i, user in enumerate(args.sa_users):
            gcp.serviceaccount.IAMMember(
                f"{name}-sa-user-{i}",
                service_account_id=self.service_account.name,
                role="roles/iam.serviceAccountUser",
                member=user,
                opts=child,
            )

        self.placement_policy = self.workload_policy = None
        kind = placement_kind(args.capacity, args.compact_placement)
        if kind == "collocated":
            self.placement_policy = gcp.compute.ResourcePolicy(
                f"{name}-placement",
                name=f"{args.instance_group}-compact",
                project=args.project,
                region=args.region,
                group_placement_policy={"collocation": "COLLOCATED"},
                opts=child,
            )
        elif kind == "workload":
            self.workload_policy = gcp.compute.ResourcePolicy(
                f"{name}-workload",
                name=f"{args.instance_group}-workload",
                project=args.project,
                region=args.region,
                workload_policy={"type": "HIGH_THROUGHPUT"},
                opts=child,
            )

        self.template = gcp.compute.InstanceTemplate(
            f"{name}-template",
            name_prefix=f"{args.instance_group}-",
            project=args.project,
            region=args.region,
            machine_type=args.machine_type,
            guest_accelerators=[{"type": args.accelerator_type, "count": args.accelerator_count}],
            disks=[
                {
                    "boot": True,
                    "auto_delete": True,
                    "source_image": args.image,
                    "disk_size_gb": args.boot_disk_gb,
                    "disk_type": args.boot_disk_type,
                }
            ],
            network_interfaces=[
                # No access_configs: no external IP on any NIC.
                {"network": nic.network, "subnetwork": nic.subnetwork, "nic_type": nic.nic_type}
                for nic in args.nics
            ],
            scheduling=scheduling_for(args.capacity),
            reservation_affinity=reservation_affinity_for(args.capacity, args.reservation),
            resource_policies=self.placement_policy.self_link if self.placement_policy else None,
            shielded_instance_config={
                "enable_secure_boot": args.secure_boot,
                "enable_vtpm": True,
                "enable_integrity_monitoring": True,
            },
            service_account={"email": self.service_account.email, "scopes": list(NODE_SCOPES)},
            metadata={"enable-oslogin": "TRUE", "block-project-ssh-keys": "TRUE", **args.metadata},
            labels={**args.labels, "gpu-fleet-pool": args.instance_group},
            can_ip_forward=False,
            opts=child,
        )

        self.migs = {}
        for zone in args.zones:
            self.migs[zone] = gcp.compute.InstanceGroupManager(
                f"{name}-{zone}",
                name=f"{args.instance_group}-{zone}",
                project=args.project,
                zone=zone,
                base_instance_name=args.base_instance_name,
                versions=[{"name": "primary", "instance_template": self.template.self_link_unique}],
                target_size=0,
                update_policy={
                    # Never recreate busy GPU nodes for a template change; new nodes get the new template.
                    "type": "OPPORTUNISTIC",
                    "minimal_action": "REPLACE",
                    "max_surge_fixed": 0,
                    "max_unavailable_fixed": 1,
                },
                instance_lifecycle_policy={"default_action_on_failure": "DO_NOTHING", "force_update_on_repair": "NO"},
                resource_policies={"workload_policy": self.workload_policy.self_link} if self.workload_policy else None,
                wait_for_instances=False,
                opts=pulumi.ResourceOptions(parent=self, ignore_changes=["target_size"]),
            )
        self.register_outputs(
            {
                "service_account": self.service_account.email,
                "template": self.template.self_link,
                "instance_groups": {z: m.name for z, m in self.migs.items()},
            }
        )
