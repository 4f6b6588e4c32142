"""SlurmCluster: controller and login VMs, the munge and slurmrestd JWT keys, and the generated config.

Keys are generated with pulumi-random, kept as Pulumi secrets and stored as Secret Manager secret
versions; each VM reads them with its own service account.  `slurm.conf` / `gres.conf` (rendered
by `fleet.slurm.conf` in `stacks/`, one CLOUD nodeset per pool) reach the VMs as metadata and are
written by the startup script (components/gcp/startup.py); every key is listed in
components/gcp/metadata.py.  The script itself is the `startup-script` metadata key, not
`metadata_startup_script`, which would replace the VM on every change of it: a changed script (a new
autoscaler ref, a new slurm.conf) updates the metadata in place, and runs at the next boot or when
`sudo google_metadata_script_runner startup` runs it (docs/stacks.md "Changing a running cluster").

The controller's Slurm state (StateSaveLocation: the queue, the job-ID counter) and the autoscaler's
store live on a separate persistent disk, `<cluster>-controller-state` (pd-ssd, or Hyperdisk Balanced
where the machine series takes no Persistent Disk; 50 GB as the Toolkit's `controller_state_disk`),
attached without auto-delete and protected (`protect`): a re-created controller mounts it again.  A snapshot
schedule (`state_snapshots`, components/gcp/snapshots.py; daily, kept 14 days, by default) keeps copies of it
that outlive the disk.

The controller sits on a reserved static internal address (`gcp.compute.Address`, INTERNAL) that
slurm.conf names in `SlurmctldHost=name(ip)`.

Service accounts, one per role:
- controller (the VM's runtime account): log/metric writer, accessor on the two keys, and
  `iam.serviceAccountTokenCreator` on the cluster's autoscaler account only.  No Compute role.
- autoscaler (`<cluster>-autoscaler`, no VM runs as it): the project's custom role
  `gpuFleetAutoscaler` (defined once by the project-bootstrap stack: exactly the permissions of the
  GCE actuator's calls, fleet/bootstrap/iam.py), bound on the project without a condition: IAM evaluates no
  `resource.name` of MIGs, operations, reservations or regions, so the condition this binding carried until the
  thirty-fifth round granted nothing (fleet/bootstrap/iam.py).
  The daemon on the controller impersonates it (`provider.impersonate_service_account`), so the
  controller's own token, which the VM's other processes use (startup script, agents), carries no
  Compute right, every Compute call is audited as the autoscaler's, and the grant can move to another
  runtime (GKE workload identity) unchanged.
- login: log/metric writer, accessor on the munge key.
The GPU nodes' accounts (components/gcp/node_pool.py) read the munge key only; the JWT key is the
controller's alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pulumi
import pulumi_gcp as gcp
import pulumi_random as random

from components.gcp import metadata as md
from components.gcp.disks import boot_disk_type, state_disk_type
from components.gcp.node_pool import service_account_id
from components.gcp.snapshots import SnapshotSchedule, attach_snapshot_schedule
from components.gcp.startup import STATE_DISK_DEVICE, SlurmHostConfig, startup_script
from components.gcp.storage import grant_bucket_objects
from fleet.bootstrap.iam import AUTOSCALER_ROLE_ID

BASE_ROLES = ("roles/logging.logWriter", "roles/monitoring.metricWriter")
VM_SCOPES = ("https://www.googleapis.com/auth/cloud-platform",)  # narrowed by IAM, see the module docstring


@dataclass(frozen=True)
class SlurmClusterArgs:
    """Inputs of a SlurmCluster.

    name: the cluster name (VMs are `<name>-controller`, `<name>-login-<i>`).
    project, zone: where the controller and login VMs run.
    network, subnetwork: the system VPC and subnet (no access config: NAT gives egress).
    slurm_conf, gres_conf, cgroup_conf, topology_conf: the rendered files (cgroup/topology optional).
    controller_ip: the controller's static internal address in the subnetwork (reserved here; the
      rendered slurm.conf names it in SlurmctldHost).
    node_name_prefixes: one per pool (`<cluster>-<pool>`).
    autoscaler_role_id: the project's custom role for the autoscaler (made by the project-bootstrap stack).
    home: Filestore "IP:/share" mounted on /home; scratch: Lustre mount source, scratch_mount: where.
    checkpoint_bucket: the checkpoint bucket the login VMs mount on checkpoints_mount for their users (their account
      gets `storage.objectUser` on it, as the GPU nodes' has); None: not mounted.
    controller_metadata: extra metadata on the controller only (e.g. the autoscaler inventory).
    slurmdbd_conf: the controller's slurmdbd.conf: the controller then runs slurmdbd and its MariaDB, their data on
      the state disk (components/gcp/startup.py `accounting_lines`); None: no accounting.
    autoscaler_source, autoscaler_ref: git URL and pinned ref (40-hex commit or tag@commit) of
      gpu-fleet for the controller's autoscaler (installed at /opt/gpu-fleet; None: the image carries it).
    state_disk_gb: size of the controller's state disk (StateSaveLocation, the autoscaler's store).
    protect_state: Pulumi `protect` on the state disk (no `pulumi up` or `destroy` deletes or replaces it).
    state_snapshots: the state disk's snapshot schedule (components/gcp/snapshots.py); None: no snapshots.
    boot_after: resources declared outside the cluster that the VMs' first boot needs, created before the VMs
      (the Cloud NAT of their subnet: the startup script's apt-get has no other way out).
    image: the controller/login boot image: the same Ubuntu release as the GPU image, so slurmctld is
      never older than slurmd.
    """

    name: str
    project: str
    zone: str
    network: pulumi.Input[str]
    subnetwork: pulumi.Input[str]
    slurm_conf: pulumi.Input[str]
    gres_conf: pulumi.Input[str]
    node_name_prefixes: list[str]
    cgroup_conf: pulumi.Input[str] | None = None
    topology_conf: pulumi.Input[str] | None = None
    controller_ip: str | None = None
    controller_machine_type: str = "n2-standard-8"
    login_machine_type: str = "n2-standard-4"
    login_nodes: int = 1
    image: str = "projects/ubuntu-os-cloud/global/images/family/ubuntu-2404-lts-amd64"
    boot_disk_gb: int = 100
    home: pulumi.Input[str] | None = None
    scratch: pulumi.Input[str] | None = None
    scratch_mount: str = "/scratch"
    checkpoint_bucket: pulumi.Input[str] | None = None
    checkpoints_mount: str = "/checkpoints"
    controller_metadata: dict[str, pulumi.Input[str]] = field(default_factory=dict)
    slurmdbd_conf: pulumi.Input[str] | None = None
    labels: dict[str, str] = field(default_factory=dict)
    state_disk_gb: int = 50
    protect_state: bool = True
    state_snapshots: SnapshotSchedule | None = field(default_factory=SnapshotSchedule)
    autoscaler_source: str | None = None
    #: deploy/slurm's hooks by name -> the paths the rendered slurm.conf names (written before slurmctld starts)
    slurm_hooks: dict[str, str] = field(default_factory=dict)
    autoscaler_ref: str | None = None
    autoscaler_role_id: str = AUTOSCALER_ROLE_ID
    boot_after: list[pulumi.Resource] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.node_name_prefixes:
            raise ValueError(f"{self.name}: node_name_prefixes: at least one pool is required")
        if not 0 <= self.login_nodes <= 8:
            raise ValueError(f"{self.name}: login_nodes: must be 0..8, got {self.login_nodes}")


def autoscaler_account_email(cluster: str, project: str) -> str:
    """The cluster's autoscaler service account (deterministic: the daemon's config names it)."""
    return f"{service_account_id(cluster, 'autoscaler')}@{project}.iam.gserviceaccount.com"


class SlurmCluster(pulumi.ComponentResource):
    """Controller + login VMs, keys in Secret Manager, config delivered by startup script."""

    controller: gcp.compute.Instance
    logins: list[gcp.compute.Instance]
    controller_sa: gcp.serviceaccount.Account
    login_sa: gcp.serviceaccount.Account
    autoscaler_sa: gcp.serviceaccount.Account
    munge_secret: gcp.secretmanager.Secret
    jwt_secret: gcp.secretmanager.Secret

    def __init__(self, name: str, args: SlurmClusterArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpufleet:gcp:SlurmCluster", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)

        # Keys: random bytes, secret from creation on, stored in Secret Manager.
        munge_key = random.RandomBytes(f"{name}-munge-key", length=1024, opts=child)
        jwt_key = random.RandomBytes(f"{name}-jwt-key", length=32, opts=child)
        self.munge_secret, munge_version = self._secret(name, args, "munge-key", munge_key, child)
        self.jwt_secret, jwt_version = self._secret(name, args, "jwt-key", jwt_key, child)

        self.controller_sa = self._account(name, args, "ctl", "Slurm controller", child)
        ctl_member = self.controller_sa.email.apply(lambda e: f"serviceAccount:{e}")
        self.controller_member = ctl_member
        for role in BASE_ROLES:
            gcp.projects.IAMMember(
                f"{name}-ctl-{role.split('/')[-1]}", project=args.project, role=role, member=ctl_member, opts=child
            )
        self._autoscaler_identity(name, args, ctl_member, child)
        ctl_reads = [
            self._accessor(f"{name}-ctl-{label}", args, secret, ctl_member, child)
            for secret, label in ((self.munge_secret, "munge"), (self.jwt_secret, "jwt"))
        ]

        self.login_sa = login_sa = self._account(name, args, "login", "Slurm login nodes", child)
        login_member = login_sa.email.apply(lambda e: f"serviceAccount:{e}")
        for role in BASE_ROLES:
            gcp.projects.IAMMember(
                f"{name}-login-{role.split('/')[-1]}", project=args.project, role=role, member=login_member, opts=child
            )
        login_reads: list[pulumi.Resource] = [
            self._accessor(f"{name}-login-munge", args, self.munge_secret, login_member, child)
        ]
        if args.checkpoint_bucket is not None:  # the login VMs' gcsfuse mount of it, for their users
            login_reads.append(
                grant_bucket_objects(f"{name}-login-checkpoints", args.checkpoint_bucket, login_member, child)
            )

        def script(role: str) -> pulumi.Output[str]:
            return pulumi.Output.all(
                self.munge_secret.secret_id, self.jwt_secret.secret_id, args.home, args.scratch, args.checkpoint_bucket
            ).apply(
                lambda v: startup_script(
                    SlurmHostConfig(
                        role=role,
                        munge_secret=v[0],
                        jwt_secret=v[1] if role == "controller" else None,
                        home=v[2],
                        scratch=v[3],
                        scratch_mount=args.scratch_mount,
                        checkpoints=v[4] if role == "login" else None,
                        checkpoints_mount=args.checkpoints_mount,
                        autoscaler_source=args.autoscaler_source,
                        autoscaler_ref=args.autoscaler_ref,
                        state_disk=STATE_DISK_DEVICE if role == "controller" else None,
                        accounting=role == "controller" and args.slurmdbd_conf is not None,
                        slurm_hooks=args.slurm_hooks if role == "controller" else {},
                    )
                )
            )

        self.controller_name = f"{args.name}-controller"
        self.controller_address = gcp.compute.Address(
            f"{name}-controller-ip",
            name=f"{args.name}-controller-ip",
            project=args.project,
            region=args.zone.rsplit("-", 1)[0],
            subnetwork=args.subnetwork,
            address_type="INTERNAL",
            purpose="GCE_ENDPOINT",
            address=args.controller_ip,
            description=f"static address of {self.controller_name} (slurm.conf SlurmctldHost)",
            opts=child,
        )
        # The first boot runs once (until a reboot) under set -e: the VMs wait for the NAT their apt-get goes out
        # through, the key versions they fetch and their accounts' accessor bindings (the script still retries a
        # 403/404 while a binding propagates).
        self.state_disk = gcp.compute.Disk(
            f"{name}-controller-state",
            name=f"{args.name}-controller-state",
            project=args.project,
            zone=args.zone,
            type=state_disk_type(args.controller_machine_type),
            size=args.state_disk_gb,
            labels={**args.labels, "gpu-fleet-cluster": args.name},
            description=f"Slurm StateSaveLocation and autoscaler state of {self.controller_name}",
            opts=pulumi.ResourceOptions(parent=self, protect=args.protect_state),
        )
        if args.state_snapshots:
            attach_snapshot_schedule(
                f"{name}-controller-state",
                self.state_disk,
                args.state_snapshots,
                project=args.project,
                zone=args.zone,
                labels={**args.labels, "gpu-fleet-cluster": args.name},
                parent=self,
            )
        self.controller = self._vm(
            f"{name}-controller",
            self.controller_name,
            args.controller_machine_type,
            self.controller_sa,
            script("controller"),
            args,
            pulumi.ResourceOptions(parent=self, depends_on=[*args.boot_after, munge_version, jwt_version, *ctl_reads]),
            extra_metadata={
                **args.controller_metadata,
                **({md.SLURMDBD_CONF: args.slurmdbd_conf} if args.slurmdbd_conf is not None else {}),
            },
            network_ip=self.controller_address.address,
            # attached, not auto-deleted: it outlives the VM (GCE deletes only disks marked auto-delete)
            attached_disks=[{"source": self.state_disk.self_link, "device_name": STATE_DISK_DEVICE}],
        )
        self.login_names = [f"{args.name}-login-{i}" for i in range(args.login_nodes)]
        # and after the address is reserved, so no login VM takes it first
        login_opts = pulumi.ResourceOptions(
            parent=self, depends_on=[self.controller_address, *args.boot_after, munge_version, *login_reads]
        )
        self.logins = [
            self._vm(f"{name}-login-{i}", vm, args.login_machine_type, login_sa, script("login"), args, login_opts)
            for i, vm in enumerate(self.login_names)
        ]
        self.register_outputs(
            {
                "controller": self.controller.name,
                "controller_ip": self.controller_address.address,
                "controller_state_disk": self.state_disk.name,
                "logins": [vm.name for vm in self.logins],
                "munge_secret": self.munge_secret.id,
                "jwt_secret": self.jwt_secret.id,
                "controller_service_account": self.controller_sa.email,
                "autoscaler_service_account": self.autoscaler_sa.email,
            }
        )

    def _autoscaler_identity(
        self, name: str, args: SlurmClusterArgs, ctl_member: pulumi.Input[str], child: pulumi.ResourceOptions
    ) -> None:
        """The autoscaler's own account, its role binding, and the controller's right to
        impersonate it (a binding on that one account, not on the project)."""
        self.autoscaler_sa = self._account(name, args, "autoscaler", "autoscaler (impersonated by the daemon)", child)
        member = self.autoscaler_sa.email.apply(lambda e: f"serviceAccount:{e}")
        gcp.projects.IAMMember(
            f"{name}-autoscaler-role",
            project=args.project,
            role=f"projects/{args.project}/roles/{args.autoscaler_role_id}",
            member=member,
            opts=child,
        )
        gcp.serviceaccount.IAMMember(
            f"{name}-ctl-impersonates-autoscaler",
            service_account_id=self.autoscaler_sa.name,
            role="roles/iam.serviceAccountTokenCreator",
            member=ctl_member,
            opts=child,
        )

    def _secret(
        self, name: str, args: SlurmClusterArgs, what: str, key: random.RandomBytes, child: pulumi.ResourceOptions
    ) -> tuple[gcp.secretmanager.Secret, gcp.secretmanager.SecretVersion]:
        secret = gcp.secretmanager.Secret(
            f"{name}-{what}",
            secret_id=f"{args.name}-slurm-{what}",
            project=args.project,
            replication={"auto": {}},
            labels=args.labels,
            opts=child,
        )
        version = gcp.secretmanager.SecretVersion(
            f"{name}-{what}-v",
            secret=secret.id,
            secret_data=pulumi.Output.secret(key.base64),
            opts=child,
        )
        return secret, version

    def _account(
        self, name: str, args: SlurmClusterArgs, role: str, what: str, child: pulumi.ResourceOptions
    ) -> gcp.serviceaccount.Account:
        return gcp.serviceaccount.Account(
            f"{name}-{role}-sa",
            account_id=service_account_id(args.name, role),
            project=args.project,
            display_name=f"gpu-fleet {what} of {args.name}",
            opts=child,
        )

    def _accessor(
        self,
        resource_name: str,
        args: SlurmClusterArgs,
        secret: gcp.secretmanager.Secret,
        member: pulumi.Input[str],
        child: pulumi.ResourceOptions,
    ) -> gcp.secretmanager.SecretIamMember:
        return gcp.secretmanager.SecretIamMember(
            resource_name,
            project=args.project,
            secret_id=secret.secret_id,
            role="roles/secretmanager.secretAccessor",
            member=member,
            opts=child,
        )

    def _vm(
        self,
        resource_name: str,
        vm_name: str,
        machine_type: str,
        sa: gcp.serviceaccount.Account,
        script: pulumi.Output[str],
        args: SlurmClusterArgs,
        child: pulumi.ResourceOptions,
        extra_metadata: dict[str, pulumi.Input[str]] | None = None,
        network_ip: pulumi.Input[str] | None = None,
        attached_disks: list[dict[str, pulumi.Input[str]]] | None = None,
    ) -> gcp.compute.Instance:
        nic: dict[str, object] = {"network": args.network, "subnetwork": args.subnetwork, "nic_type": "GVNIC"}
        if network_ip is not None:
            nic["network_ip"] = network_ip
        return gcp.compute.Instance(
            resource_name,
            name=vm_name,
            project=args.project,
            zone=args.zone,
            machine_type=machine_type,
            boot_disk={
                "auto_delete": True,
                "initialize_params": {
                    "image": args.image,
                    "size": args.boot_disk_gb,
                    "type": boot_disk_type(machine_type),
                },
            },
            attached_disks=attached_disks or [],
            network_interfaces=[nic],
            shielded_instance_config={
                "enable_secure_boot": True,
                "enable_vtpm": True,
                "enable_integrity_monitoring": True,
            },
            service_account={"email": sa.email, "scopes": list(VM_SCOPES)},
            metadata={
                **md.OS_LOGIN,
                **md.slurm_metadata(args.slurm_conf, args.gres_conf, args.cgroup_conf, args.topology_conf),
                **(extra_metadata or {}),
                # the metadata key, updated in place: `metadata_startup_script` would replace the VM on each change
                md.STARTUP_SCRIPT: script,
            },
            labels={**args.labels, "gpu-fleet-cluster": args.name},
            allow_stopping_for_update=True,
            opts=child,
        )
