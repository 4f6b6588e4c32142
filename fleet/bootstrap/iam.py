"""What a new project needs once, as data: APIs, the autoscaler's permissions, the nodes' roles.

One definition used by the project-bootstrap component (components/gcp/project_bootstrap.py, which
defines the custom role once per project), the Slurm cluster component (components/gcp/slurm_cluster.py,
which binds it to the cluster's own autoscaler service account), their tests and docs/bootstrap.md.

The autoscaler's custom role holds exactly the permissions of the Compute API calls its GCE actuator
makes (autoscaler/gce/client.py); `API_CALLS` maps each call to its permission (per the Compute API
reference, "IAM Permissions" of each method), so a test can check both ways: every call is covered and
the role holds nothing no call needs.  Each permission also says which resources it is checked on (`on`).

**The binding carries no IAM condition.**  Until the thirty-fifth round it did: `resource.name` clauses naming
the cluster's MIGs, its zones' operations, its reservations and its region.  Google's "Resource attributes for
IAM Conditions" lists the resource types whose `resource.name` IAM evaluates ("Other services and resource types
do not recognize resource attributes"): instance group managers, zone operations, reservations and regions are not
among them, and "if part of a condition uses an attribute that isn't available for a resource, then that part of
the condition is never interpreted as granting access".  Every clause was such a part, so the binding granted
nothing: the daemon's first `listManagedInstances` would have been refused.  Scoping the role to one cluster's
MIGs is not something IAM can enforce for these types; what limits the account is the role (five read/resize
permissions: no instance, disk, template or service-account right) and the project, so a team that needs one
cluster's autoscaler kept from another's MIGs gives each cluster its own project.  `CONDITION_TYPES` is the
documented list, and a test refuses any generated condition on a `resource.name` of another type.
"""

from __future__ import annotations

from dataclasses import dataclass

AUTOSCALER_ROLE_ID = "gpuFleetAutoscaler"


@dataclass(frozen=True)
class Permission:
    name: str
    reason: str
    on: str = ""  # the resources the permission is checked on


# Compute API calls of the GCE actuator (client attribute, method) -> the permission it needs.
API_CALLS: dict[tuple[str, str], str] = {
    ("migs", "list_managed_instances"): "compute.instanceGroupManagers.get",
    ("migs", "create_instances_unary"): "compute.instanceGroupManagers.update",
    ("migs", "delete_instances_unary"): "compute.instanceGroupManagers.update",
    ("resize_requests", "list"): "compute.instanceGroupManagers.get",
    ("resize_requests", "insert_unary"): "compute.instanceGroupManagers.update",
    ("resize_requests", "cancel_unary"): "compute.instanceGroupManagers.update",
    ("resize_requests", "delete_unary"): "compute.instanceGroupManagers.update",
    ("zone_operations", "wait"): "compute.zoneOperations.get",
    ("reservations", "get"): "compute.reservations.get",
    ("regions", "get"): "compute.regions.get",
}

AUTOSCALER_PERMISSIONS: tuple[Permission, ...] = (
    Permission(
        "compute.instanceGroupManagers.get",
        "listManagedInstances: the pool's VMs, their current action and last-attempt errors (stockouts, quota); "
        "resizeRequests.list: the state of queued flex-start requests",
        "the pools' zonal MIGs: projects/P/zones/Z/instanceGroupManagers/<cluster>-<pool>-<zone>",
    ),
    Permission(
        "compute.instanceGroupManagers.update",
        "createInstances / deleteInstances: add named nodes to a pool's MIG and delete exactly the drained ones; "
        "resizeRequests insert / cancel / delete: flex-start (DWS) requests "
        "(the MIG's service agent creates the VMs from the template, so no compute.instances.*, template, "
        "subnetwork or iam.serviceAccounts.actAs permission is needed)",
        "the pools' zonal MIGs (and their resizeRequests sub-resources)",
    ),
    Permission(
        "compute.zoneOperations.get",
        "zoneOperations.wait: wait for those MIG operations and read errors",
        "operations in the pools' zones: projects/P/zones/Z/operations/",
    ),
    Permission(
        "compute.reservations.get",
        "reservations.get: free slots of the reservations pools consume",
        "the reservation pools' reservations: projects/P/zones/Z/reservations/R",
    ),
    Permission(
        "compute.regions.get",
        "regions.get: the region's GPU and CPU quota, to size offerings",
        "the fleet's region: projects/P/regions/R",
    ),
)


#: Compute Engine resource types whose `resource.name` IAM Conditions evaluate (Google, "Resource attributes for
#: IAM Conditions", resource type values); a condition on the name of any other is never interpreted as granting
COMPUTE_CONDITION_TYPES = frozenset({
    "BackendService", "Disk", "Firewall", "ForwardingRule", "GlobalForwardingRule", "Image", "Instance",
    "InstanceTemplate", "Snapshot", "TargetHttpProxy", "TargetHttpsProxy", "TargetSslProxy", "TargetTcpProxy",
})  # fmt: skip
#: the resource type each of the autoscaler's permissions is checked on: none is one IAM evaluates a name of
PERMISSION_TYPES = {
    "compute.instanceGroupManagers.get": "InstanceGroupManager",
    "compute.instanceGroupManagers.update": "InstanceGroupManager",
    "compute.zoneOperations.get": "ZoneOperation",
    "compute.reservations.get": "Reservation",
    "compute.regions.get": "Region",
}


# Project roles of each pool's nodes' service account (predefined, narrow; no basic roles; components/gcp/node_pool.py).
NODE_ROLES: tuple[Permission, ...] = (
    Permission("roles/logging.logWriter", "ship system and job logs to Cloud Logging"),
    Permission("roles/monitoring.metricWriter", "write GPU (DCGM) and host metrics to Cloud Monitoring"),
)

# Google APIs a gpu-fleet project uses, enabled once.
APIS: tuple[Permission, ...] = (
    Permission("compute.googleapis.com", "VMs, MIGs, VPCs, reservations, quotas"),
    Permission("container.googleapis.com", "GKE clusters (platform: gke)"),
    Permission("file.googleapis.com", "Filestore /home"),
    Permission("lustre.googleapis.com", "Managed Lustre /scratch"),
    Permission("servicenetworking.googleapis.com", "private services access (Managed Lustre's peering)"),
    Permission("storage.googleapis.com", "GCS: Pulumi state and checkpoint buckets"),
    Permission("secretmanager.googleapis.com", "Slurm JWT / munge keys as secrets"),
    Permission("iam.googleapis.com", "service accounts and the custom role"),
    # google-auth's impersonated_credentials: "Enable the IAMCredentials API on the source project"; without it
    # the Slurm daemon's first Compute call fails with 403 SERVICE_DISABLED and no node is ever created
    Permission(
        "iamcredentials.googleapis.com",
        "short-lived tokens: the Slurm autoscaler impersonates its <cluster>-autoscaler account, and GKE's "
        "Workload Identity mints the GKE autoscaler's",
    ),
    Permission("cloudresourcemanager.googleapis.com", "project IAM bindings"),
    Permission("logging.googleapis.com", "node and controller logs"),
    Permission("monitoring.googleapis.com", "GPU and autoscaler metrics"),
)


def autoscaler_permission_names() -> list[str]:
    return [p.name for p in AUTOSCALER_PERMISSIONS]
