"""A GKE Standard cluster for GPU work: private nodes, Workload Identity, a release channel whose node upgrades
wait behind a maintenance exclusion, multi-networking for GPUDirect, and a small system node pool.

The cluster is regional (control plane in three zones) with nodes only in `node_zones`.  The default node
pool is removed; the system pool runs Kueue, the autoscaler and other controllers.  A firewall rule lets the
control plane reach admission webhooks on the nodes (Kueue's on 9443) and Kueue's visibility API server (8082):
private clusters allow only 443 and 10250 by default.  `kubeconfig` (a secret Output) authenticates with
`gke-gcloud-auth-plugin`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pulumi
import pulumi_gcp as gcp

# Predefined role bundling what a GKE node needs (logs, metrics, resource metadata); plus image pulls.
NODE_ROLES = ("roles/container.defaultNodeServiceAccount", "roles/artifactregistry.reader")
#: what the control plane calls on the nodes' pods beyond 443 and 10250: Kueue's and JobSet's admission webhooks
#: (9443, controller-runtime's default) and Kueue's visibility API server (8082: the chart's APIService
#: v1beta1.visibility.kueue.x-k8s.io, whose Service targets the manager's port 8082; unreachable, every API
#: discovery call reports it unavailable and namespace deletion can hang on it)
CONTROL_PLANE_PORTS = ("9443", "8082")
UPGRADE_EXCLUSION = "gpu-no-minor-or-node-upgrades"
#: instance metadata of every node: no project-wide SSH key reaches a node (the Slurm VMs block them too), and the
#: legacy metadata endpoints stay off (GKE's default, stated since a node pool's metadata is then set in full)
NODE_METADATA = {"block-project-ssh-keys": "true", "disable-legacy-endpoints": "true"}


@dataclass(frozen=True)
class GkeClusterArgs:
    """Inputs of a GkeCluster.

    name: the GKE cluster name.  network / subnetwork: self links of the fleet's system VPC and subnet.
    node_zones: zones of every node pool.  pods_cidr / services_cidr: GKE-managed secondary ranges of the
    subnet.  master_cidr: the control plane's /28.  master_authorized_networks: who may reach the API
    server (nobody outside the VPC when empty).  upgrade_exclusion_start: from then until the version's
    end of support, no minor or node upgrades (the team upgrades GPU pools when it chooses).
    multi_networking: additional node networks (GPUDirect NICs) on GPU pools.
    """

    project: str
    region: str
    name: str
    network: pulumi.Input[str]
    subnetwork: pulumi.Input[str]
    node_zones: list[str]
    release_channel: str
    upgrade_exclusion_start: str
    maintenance_window_start: str
    master_cidr: str
    pods_cidr: str
    services_cidr: str
    master_authorized_networks: list[str] = field(default_factory=list)
    private_endpoint: bool = False
    multi_networking: bool = False
    system_machine_type: str = "e2-standard-8"
    system_nodes_per_zone: int = 1
    labels: dict[str, str] = field(default_factory=dict)


def kubeconfig(name: str, endpoint: str, ca: str) -> str:
    """A kubeconfig for the cluster that gets tokens from gke-gcloud-auth-plugin (no static credentials)."""
    return f"""apiVersion: v1
kind: Config
clusters:
- name: {name}
  cluster:
    server: https://{endpoint}
    certificate-authority-data: {ca}
contexts:
- name: {name}
  context: {{cluster: {name}, user: {name}}}
current-context: {name}
users:
- name: {name}
  user:
    exec:
      apiVersion: client.authentication.k8s.io/v1beta1
      command: gke-gcloud-auth-plugin
      provideClusterInfo: true
      installHint: gcloud components install gke-gcloud-auth-plugin
"""


def _ca(master_auth: object) -> str:
    """The CA of `master_auth` (an output type from the engine; a dict with snake_case keys under mocks)."""
    if isinstance(master_auth, dict):
        return str(master_auth.get("cluster_ca_certificate") or "")
    return str(getattr(master_auth, "cluster_ca_certificate", "") or "")


class GkeCluster(pulumi.ComponentResource):
    cluster: gcp.container.Cluster
    node_sa: gcp.serviceaccount.Account
    system_pool: gcp.container.NodePool
    kubeconfig: pulumi.Output[str]

    def __init__(self, name: str, args: GkeClusterArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpufleet:gke:Cluster", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        self.node_sa = gcp.serviceaccount.Account(
            f"{name}-nodes",
            account_id=f"{args.name[:20]}-gke-nodes",
            project=args.project,
            display_name=f"GKE nodes of {args.name}",
            opts=child,
        )
        member = self.node_sa.email.apply(lambda e: f"serviceAccount:{e}")
        for role in NODE_ROLES:
            gcp.projects.IAMMember(
                f"{name}-nodes-{role.split('/')[-1]}", project=args.project, role=role, member=member, opts=child
            )
        exclusion = {
            "exclusion_name": UPGRADE_EXCLUSION,
            "start_time": args.upgrade_exclusion_start,
            "exclusion_options": {"scope": "NO_MINOR_OR_NODE_UPGRADES", "end_time_behavior": "UNTIL_END_OF_SUPPORT"},
        }
        self.cluster = gcp.container.Cluster(
            name,
            name=args.name,
            project=args.project,
            location=args.region,
            node_locations=list(args.node_zones),
            network=args.network,
            subnetwork=args.subnetwork,
            networking_mode="VPC_NATIVE",
            ip_allocation_policy={
                "cluster_ipv4_cidr_block": args.pods_cidr,
                "services_ipv4_cidr_block": args.services_cidr,
            },
            private_cluster_config={
                "enable_private_nodes": True,
                "enable_private_endpoint": args.private_endpoint,
                "master_ipv4_cidr_block": args.master_cidr,
                "master_global_access_config": {"enabled": False},
            },
            master_authorized_networks_config={
                "cidr_blocks": [
                    {"cidr_block": c, "display_name": f"allowed-{i}"}
                    for i, c in enumerate(args.master_authorized_networks)
                ],
                "gcp_public_cidrs_access_enabled": False,
            },
            workload_identity_config={"workload_pool": f"{args.project}.svc.id.goog"},
            release_channel={"channel": args.release_channel},
            maintenance_policy={
                "daily_maintenance_window": {"start_time": args.maintenance_window_start},
                "maintenance_exclusions": [exclusion],
            },
            datapath_provider="ADVANCED_DATAPATH",
            enable_multi_networking=args.multi_networking or None,
            enable_shielded_nodes=True,
            remove_default_node_pool=True,
            initial_node_count=1,
            addons_config={
                "gcs_fuse_csi_driver_config": {"enabled": True},
                "gcp_filestore_csi_driver_config": {"enabled": True},
            },
            resource_labels=dict(args.labels),
            deletion_protection=True,
            opts=child,
        )
        self.system_pool = gcp.container.NodePool(
            f"{name}-system",
            name="system",
            project=args.project,
            cluster=self.cluster.id,
            location=args.region,
            node_locations=list(args.node_zones),
            node_count=args.system_nodes_per_zone,
            node_config={
                "machine_type": args.system_machine_type,
                "service_account": self.node_sa.email,
                "oauth_scopes": ["https://www.googleapis.com/auth/cloud-platform"],
                "workload_metadata_config": {"mode": "GKE_METADATA"},
                "shielded_instance_config": {"enable_secure_boot": True, "enable_integrity_monitoring": True},
                "gvnic": {"enabled": True},
                "metadata": dict(NODE_METADATA),
                "labels": {"gpu-fleet/role": "system"},
                "resource_labels": dict(args.labels),
            },
            management={"auto_repair": True, "auto_upgrade": True},
            opts=child,
        )
        gcp.compute.Firewall(
            f"{name}-webhooks",
            project=args.project,
            network=args.network,
            direction="INGRESS",
            priority=1000,
            description="GKE control plane -> admission webhooks (Kueue, JobSet: 9443), Kueue visibility API (8082)",
            source_ranges=[args.master_cidr],
            target_service_accounts=[self.node_sa.email],
            allows=[{"protocol": "tcp", "ports": list(CONTROL_PLANE_PORTS)}],
            opts=child,
        )
        self.kubeconfig = pulumi.Output.secret(
            pulumi.Output.all(self.cluster.endpoint, self.cluster.master_auth).apply(
                lambda v: kubeconfig(args.name, v[0], _ca(v[1]))
            )
        )
        self.register_outputs(
            {"cluster": self.cluster.id, "endpoint": self.cluster.endpoint, "node_service_account": self.node_sa.email}
        )
