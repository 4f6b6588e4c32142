"""What a new project needs once, as data: APIs, the autoscaler's permissions, the nodes' roles.

One definition used by the project-bootstrap component (components/gcp/project_bootstrap.py, which
defines the custom role once per project), the Slurm cluster component (components/gcp/slurm_cluster.py,
which binds it to the cluster's own autoscaler service account with an IAM condition naming exactly the
resources that cluster's pools use: `autoscaler_condition`), their tests and docs/bootstrap.md.

The autoscaler's custom role holds exactly the permissions of the Compute API calls its GCE actuator
makes (autoscaler/gce/client.py); `API_CALLS` maps each call to its permission (per the Compute API
reference, "IAM Permissions" of each method), so a test can check both ways: every call is covered and
the role holds nothing no call needs.  Each permission also says which resources it is checked on
(`on`), which is what the binding's condition lists.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

AUTOSCALER_ROLE_ID = "gpuFleetAutoscaler"


@dataclass(frozen=True)
class Permission:
    name: str
    reason: str
    on: str = ""  # the resources the permission is checked on (the condition's resource.name paths)


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


@dataclass(frozen=True)
class AutoscalerScope:
    """The resources one cluster's autoscaler may touch: from its autoscaler inventory entries."""

    project: str
    region: str
    migs: tuple[tuple[str, str], ...]  # (zone, MIG name)
    reservations: tuple[tuple[str, str], ...] = ()  # (zone, reservation name)

    @classmethod
    def from_inventory(cls, project: str, region: str, entries: Iterable[Mapping]) -> AutoscalerScope:
        migs, reservations = [], []
        for e in entries:
            groups = e.get("instance_groups") or {}
            migs += [(z, groups[z]) for z in sorted(groups)]
            if e.get("reservation"):
                reservations += [(z, str(e["reservation"])) for z in e.get("zones") or ()]
        return cls(project, region, tuple(dict.fromkeys(migs)), tuple(dict.fromkeys(reservations)))

    @property
    def zones(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(z for z, _ in self.migs))

    def paths(self) -> dict[str, list[str]]:
        """resource.name values (or prefixes ending in '/') the binding admits, by kind."""
        p = f"projects/{self.project}"
        return {
            "instanceGroupManagers": [f"{p}/zones/{z}/instanceGroupManagers/{m}" for z, m in self.migs],
            "operations": [f"{p}/zones/{z}/operations/" for z in self.zones],
            "reservations": [f"{p}/zones/{z}/reservations/{r}" for z, r in self.reservations],
            "regions": [f"{p}/regions/{self.region}"],
        }


def autoscaler_condition(scope: AutoscalerScope) -> str:
    """CEL for the autoscaler role's binding: exactly the MIGs (and their sub-resources), the zones'
    operations, the reservations and the region of this cluster's pools.  Every clause names a full
    resource path, so nothing else in the project matches (another MIG, the controller, a template)."""
    if not scope.migs:
        raise ValueError("autoscaler_condition: the cluster has no MIG to manage")
    paths = scope.paths()
    clauses = [f'resource.name == "{m}" || resource.name.startsWith("{m}/")' for m in paths["instanceGroupManagers"]]
    clauses += [f'resource.name.startsWith("{o}")' for o in paths["operations"]]
    clauses += [f'resource.name == "{r}"' for r in paths["reservations"] + paths["regions"]]
    expr = " || ".join(clauses)
    if len(expr) > 12_800:  # IAM's limit on a condition expression
        raise ValueError(f"autoscaler_condition: {len(expr)} characters, over IAM's 12,800 (too many MIGs)")
    return expr


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

# Roles never granted by the bootstrap (basic roles, and roles that would make the role moot).
FORBIDDEN_ROLES = frozenset({"roles/owner", "roles/editor", "roles/viewer", "roles/compute.admin"})


def autoscaler_permission_names() -> list[str]:
    return [p.name for p in AUTOSCALER_PERMISSIONS]
