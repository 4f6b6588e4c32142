"""SharedStorage: Filestore for /home, a GCS bucket for checkpoints, optional Managed Lustre for scratch.

The bucket has uniform bucket-level access, versioning (the newest `keep_noncurrent_versions` overwritten
versions of an object kept), enforced public access prevention and a soft-delete window; access is granted
per service account (see GpuNodePool.bucket_names), never
to allUsers.  Filestore and Lustre attach to the system VPC by private service access / peering,
so they have no public endpoint.  Managed Lustre needs private services access on that VPC: a
reserved peering range (`VPC_PEERING` global address) and a Service Networking connection, declared
here only when scratch is asked for, with the one firewall rule Lustre needs: the system VPC allows only
its own subnet and denies the rest (components/gcp/network.py), and Lustre's servers, in that peering
range, connect back to their clients over LNet on TCP 988 (as the Toolkit's examples/gke-managed-lustre.yaml
"Firewall to allow Managed Lustre connection").

With `protect` (the default) Filestore and Lustre are Pulumi-`protect`ed and Filestore has its own deletion
protection on: their `location` cannot change in place, so a zone that moves (pools reordered, a catalog
change) would replace /home with an empty share; protected, `pulumi up` stops at the replacement instead.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pulumi
import pulumi_gcp as gcp


@dataclass(frozen=True)
class FilestoreArgs:
    """tier: BASIC_HDD | BASIC_SSD | ZONAL | REGIONAL | ENTERPRISE; share_name: the NFS export (e.g. home)."""

    tier: str = "BASIC_SSD"
    capacity_gb: int = 2560
    share_name: str = "home"


@dataclass(frozen=True)
class BucketArgs:
    """name: globally unique; location: region or multi-region; soft_delete_days: 0 disables soft delete;
    keep_noncurrent_versions: how many overwritten or deleted versions of an object are kept (older ones are
    deleted by a lifecycle rule)."""

    name: str
    location: str
    soft_delete_days: int = 7
    keep_noncurrent_versions: int = 1


@dataclass(frozen=True)
class LustreArgs:
    """Managed Lustre: capacity_gib (>= 18000), throughput MB/s per TiB, mount point on the nodes."""

    capacity_gib: int = 18000
    per_unit_storage_throughput: int = 500
    mount_point: str = "/scratch"
    filesystem: str = "scratch"
    psa_prefix_length: int = 20  # size of the private-services range GCP picks for the peering


LNET_PORT = "988"  # Lustre's LNet over TCP: clients and servers both listen and connect on it


@dataclass(frozen=True)
class SharedStorageArgs:
    """Inputs of SharedStorage.

    project, zone: Filestore (BASIC/ZONAL tiers) and Lustre are zonal; put them next to the nodes.
    network: the system VPC (id or self link) they attach to.
    name: prefix of the physical names (the cluster name).
    home, checkpoints, scratch: each optional (None: not created).
    labels: on every resource that takes labels.
    protect: Pulumi `protect` on Filestore and Lustre, and Filestore's deletion protection.
    """

    project: str
    zone: str
    network: pulumi.Input[str]
    name: str
    home: FilestoreArgs | None = field(default_factory=FilestoreArgs)
    checkpoints: BucketArgs | None = None
    scratch: LustreArgs | None = None
    labels: dict[str, str] = field(default_factory=dict)
    protect: bool = True


class SharedStorage(pulumi.ComponentResource):
    """/home on Filestore, checkpoints in GCS, optional /scratch on Managed Lustre."""

    filestore: gcp.filestore.Instance | None
    bucket: gcp.storage.Bucket | None
    lustre: gcp.lustre.Instance | None
    lustre_firewall: gcp.compute.Firewall | None
    home_ip: pulumi.Output[str] | None
    home_share: str | None

    def __init__(self, name: str, args: SharedStorageArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpufleet:gcp:SharedStorage", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        region = args.zone.rsplit("-", 1)[0]
        self.filestore = self.bucket = self.lustre = self.lustre_firewall = None
        self.home_ip = None
        self.home_share = args.home.share_name if args.home else None
        if args.home:
            location = region if args.home.tier in ("REGIONAL", "ENTERPRISE") else args.zone
            self.filestore = gcp.filestore.Instance(
                f"{name}-home",
                name=f"{args.name}-home",
                project=args.project,
                location=location,
                tier=args.home.tier,
                file_shares={"name": args.home.share_name, "capacity_gb": args.home.capacity_gb},
                networks=[{"network": args.network, "modes": ["MODE_IPV4"], "connect_mode": "DIRECT_PEERING"}],
                labels=args.labels,
                deletion_protection_enabled=args.protect,
                deletion_protection_reason=f"/home of {args.name} (gpu-fleet clusters[].deletion_protection)"
                if args.protect
                else None,
                opts=pulumi.ResourceOptions(parent=self, protect=args.protect),
            )
            self.home_ip = self.filestore.networks.apply(lambda nets: nets[0].ip_addresses[0])
        if args.checkpoints:
            self.bucket = gcp.storage.Bucket(
                f"{name}-checkpoints",
                name=args.checkpoints.name,
                project=args.project,
                location=args.checkpoints.location,
                uniform_bucket_level_access=True,
                public_access_prevention="enforced",
                versioning={"enabled": True},
                # versioning keeps an overwritten checkpoint (a job that rewrote it by mistake can go back); with no
                # rule every version of every checkpoint was kept and billed for good (found by an audit)
                lifecycle_rules=[
                    {
                        "action": {"type": "Delete"},
                        "condition": {
                            "num_newer_versions": args.checkpoints.keep_noncurrent_versions,
                            "with_state": "ARCHIVED",
                        },
                    }
                ],
                soft_delete_policy={"retention_duration_seconds": args.checkpoints.soft_delete_days * 86400},
                force_destroy=False,
                labels=args.labels,
                opts=child,
            )
        if args.scratch:
            psa_range = gcp.compute.GlobalAddress(
                f"{name}-psa-range",
                name=f"{args.name}-psa-range",
                project=args.project,
                network=args.network,
                purpose="VPC_PEERING",
                address_type="INTERNAL",
                prefix_length=args.scratch.psa_prefix_length,
                description="private services access for Managed Lustre",
                opts=child,
            )
            self.lustre_firewall = gcp.compute.Firewall(
                f"{name}-allow-lustre",
                name=f"{args.name}-allow-lustre",
                project=args.project,
                network=args.network,
                direction="INGRESS",
                priority=1000,
                description="Managed Lustre servers (the private services access range) to their clients: LNet on "
                "TCP 988; the VPC denies everything else",
                source_ranges=[psa_range.address.apply(lambda a, n=args.scratch.psa_prefix_length: f"{a}/{n}")],
                allows=[{"protocol": "tcp", "ports": [LNET_PORT]}],
                opts=child,
            )
            psa = gcp.servicenetworking.Connection(
                f"{name}-psa",
                network=args.network,
                service="servicenetworking.googleapis.com",
                reserved_peering_ranges=[psa_range.name],
                opts=child,
            )
            self.lustre = gcp.lustre.Instance(
                f"{name}-scratch",
                instance_id=f"{args.name}-scratch",
                project=args.project,
                location=args.zone,
                network=args.network,
                filesystem=args.scratch.filesystem,
                capacity_gib=str(args.scratch.capacity_gib),
                per_unit_storage_throughput=str(args.scratch.per_unit_storage_throughput),
                labels=args.labels,
                opts=pulumi.ResourceOptions(parent=self, depends_on=[psa], protect=args.protect),
            )
        self.register_outputs(
            {
                "home_ip": self.home_ip,
                "bucket": self.bucket.name if self.bucket else None,
                "scratch": self.lustre.mount_point if self.lustre else None,
            }
        )


#: what the nodes, the login VMs and a GKE cluster's pods get on the checkpoint bucket: read and write its objects,
#: nothing on the bucket itself (its settings, IAM, deletion)
BUCKET_OBJECTS_ROLE = "roles/storage.objectUser"


def grant_bucket_objects(
    name: str, bucket: pulumi.Input[str], member: pulumi.Input[str], opts: pulumi.ResourceOptions
) -> gcp.storage.BucketIAMMember:
    """`member` may read and write the objects of `bucket` alone (`BUCKET_OBJECTS_ROLE`, bound on that bucket)."""
    return gcp.storage.BucketIAMMember(name, bucket=bucket, role=BUCKET_OBJECTS_ROLE, member=member, opts=opts)
