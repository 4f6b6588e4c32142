"""What a new project needs once, as data: APIs, the autoscaler's permissions, the nodes' roles.

One definition used by the project-bootstrap component (components/gcp/project_bootstrap.py),
its tests and docs/bootstrap.md.  The autoscaler's custom role holds exactly the permissions of
the Compute API calls its GCE actuator makes (autoscaler/gce/client.py); `API_CALLS` maps each
call to its permission (per the Compute API reference, "IAM Permissions" of each method), so a
test can check that every call the actuator makes is covered and nothing else is granted.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Permission:
    name: str
    reason: str


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
    ),
    Permission(
        "compute.instanceGroupManagers.update",
        "createInstances / deleteInstances: add named nodes to a pool's MIG and delete exactly the drained ones; "
        "resizeRequests insert / cancel / delete: flex-start (DWS) requests "
        "(the MIG's service agent creates the VMs, so no compute.instances.* permission is needed)",
    ),
    Permission("compute.zoneOperations.get", "zoneOperations.wait: wait for those MIG operations and read errors"),
    Permission("compute.reservations.get", "reservations.get: free slots of the reservations pools consume"),
    Permission("compute.regions.get", "regions.get: the region's GPU and CPU quota, to size offerings"),
)

# Project roles of the nodes' service account (predefined, narrow; no basic roles).
NODE_ROLES: tuple[Permission, ...] = (
    Permission("roles/logging.logWriter", "ship system and job logs to Cloud Logging"),
    Permission("roles/monitoring.metricWriter", "write GPU (DCGM) and host metrics to Cloud Monitoring"),
)

# Google APIs a gpu-fleet project uses, enabled once.
APIS: tuple[Permission, ...] = (
    Permission("compute.googleapis.com", "VMs, MIGs, VPCs, reservations, quotas"),
    Permission("container.googleapis.com", "GKE clusters (scheduler: gke)"),
    Permission("file.googleapis.com", "Filestore /home"),
    Permission("lustre.googleapis.com", "Managed Lustre /scratch"),
    Permission("servicenetworking.googleapis.com", "private services access (Managed Lustre's peering)"),
    Permission("storage.googleapis.com", "GCS: Pulumi state and checkpoint buckets"),
    Permission("secretmanager.googleapis.com", "Slurm JWT / munge keys as secrets"),
    Permission("iam.googleapis.com", "service accounts and the custom role"),
    Permission("cloudresourcemanager.googleapis.com", "project IAM bindings"),
    Permission("logging.googleapis.com", "node and controller logs"),
    Permission("monitoring.googleapis.com", "GPU and autoscaler metrics"),
)

# Roles never granted by the bootstrap (basic roles, and roles that would make the role moot).
FORBIDDEN_ROLES = frozenset({"roles/owner", "roles/editor", "roles/viewer", "roles/compute.admin"})


def autoscaler_permission_names() -> list[str]:
    return [p.name for p in AUTOSCALER_PERMISSIONS]
