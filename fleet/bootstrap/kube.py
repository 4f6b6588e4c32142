"""The GKE and Kueue parts of a region stack (`fleet bootstrap-region --scheduler kueue`), each with its reason (pure).

On Google Cloud a Kueue cluster is a GKE Standard cluster (`platform: gke`, docs/kubernetes.md): private nodes on
the fleet's VPC, Workload Identity, GKE's own GPU driver, the gpu-fleet autoscaler as a Deployment serving Kueue's
ProvisioningRequests.  What a Slurm region gets instead (controller, login VMs, partitions) is not written.

Decided here:
- the API server's authorized networks: the fleet's system range, where the cluster's own machines are, plus what
  `--authorized-network` adds; without one, `pulumi up` (which creates Kubernetes objects through that API server)
  must run from inside the VPC, and the plan warns so;
- the upgrade exclusion: from the instant the file is written (`--upgrade-exclusion-start` to choose), so GKE
  upgrades no GPU node under a running job until the team lifts it in a window it picks;
- the pod, service and control-plane ranges: planned by fleet.bootstrap.addressing (`plan_gke_ranges`) clear of
  every other stack's ranges and `--reserve`, and written into the file;
- the teams: one Kueue team (namespace, LocalQueue, ClusterQueue) per `--team`, equal shares of the pool's GPUs; two
  or more share one cohort, so each may borrow what the others leave idle;
- storage: no Filestore /home and no Lustre scratch (the GKE stack creates them but mounts neither into pods: the
  Filestore is only exported as `filestore_ip`), the checkpoint bucket, which every team namespace gets as a GCS
  FUSE claim.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from fleet.bootstrap.addressing import GkeRanges
from fleet.bootstrap.errors import BadArgument
from fleet.catalog import MachineType
from fleet.spec.model import GkeSpec, GkeSystemPoolSpec, KueueSpec

DEFAULT_TEAM = "ml"
COHORT = "gpu"


def system_vms(zones: tuple[str, ...]) -> list[str]:
    """The GKE system pool's machines over the cluster's node locations (the spec's default pool)."""
    system = GkeSystemPoolSpec()
    return [system.machine_type] * (system.nodes_per_zone * len(zones))


@dataclass(frozen=True)
class KueuePlan:
    gke: dict
    kueue: dict
    storage: dict
    reasons: tuple[str, ...]
    warnings: tuple[str, ...]


def plan_kueue(
    machine: MachineType,
    nodes: int,
    pool: str,
    zones: tuple[str, ...],
    system_cidr: str,
    ranges: GkeRanges,
    teams: tuple[str, ...],
    authorized_networks: tuple[str, ...],
    autoscaler_image: str,
    upgrade_exclusion_start: str,
) -> KueuePlan:
    """The cluster's `gke`, `kueue` and `storage` blocks for one pool of `nodes` x `machine` in `zones`."""
    system = GkeSystemPoolSpec()
    reasons = [
        f"GKE Standard cluster {GkeSpec().release_channel} channel: private nodes on the fleet's VPC, Workload "
        "Identity, GKE's GPU driver; the gpu-fleet autoscaler serves Kueue's ProvisioningRequests (docs/kubernetes.md)",
        f"system pool {len(zones)} x {system.machine_type} ({system.nodes_per_zone} per zone of {', '.join(zones)}): "
        "Kueue, the autoscaler and cluster services, never on GPU nodes",
        f"upgrade exclusion from {upgrade_exclusion_start}: GKE upgrades no node under a running job until you lift "
        "gke.upgrade_exclusion_start in a window you choose",
    ]
    authorized = [system_cidr, *(c for c in authorized_networks if c != system_cidr)]
    warnings = []
    if authorized_networks:
        reasons.append(f"API server reachable from {', '.join(authorized)} (the system range and --authorized-network)")
    else:
        reasons.append(f"API server reachable from {system_cidr} only: the cluster's own VPC")
        warnings.append(
            f"the API server accepts only {system_cidr} (the cluster's VPC), and `pulumi up` creates Kueue and the "
            "autoscaler through it: run it from inside the VPC (a bastion, a Cloud Build private pool) or pass "
            "--authorized-network <the address it runs from>/32"
        )
    reasons += ranges.reasons
    gpus = nodes * machine.gpu_count
    share = round(1.0 / len(teams), 4)
    if math.floor(share * gpus) < 1:
        raise BadArgument("--team", f"{len(teams)} teams share {gpus} GPUs: each team's quota must be a GPU at least")
    team_specs: list[dict] = []
    for name in teams:
        team: dict = {"name": name, "quotas": {pool: share}}
        if len(teams) > 1:
            team["cohort"] = COHORT
        team_specs.append(team)
    if len(teams) == 1:
        reasons.append(f"team {teams[0]}: namespace, LocalQueue and ClusterQueue with all {gpus} GPUs of {pool}")
    else:
        reasons.append(
            f"teams {', '.join(teams)}: {share:g} of {pool}'s {gpus} GPUs each, in cohort {COHORT}, each borrowing "
            "what the others leave idle"
        )
    version = KueueSpec.model_fields["version"].default
    reasons.append(f"Kueue {version}, the autoscaler image {autoscaler_image} (--autoscaler-image, pinned by digest)")
    reasons.append(
        "no Filestore /home and no Lustre scratch: the GKE stack mounts neither into pods; each team namespace gets "
        "the checkpoint bucket as a GCS FUSE claim"
    )
    return KueuePlan(
        gke={
            "release_channel": GkeSpec().release_channel,
            "upgrade_exclusion_start": upgrade_exclusion_start,
            "master_authorized_networks": authorized,
            "pods_cidr": str(ranges.pods_cidr),
            "services_cidr": str(ranges.services_cidr),
            "master_cidr": str(ranges.master_cidr),
        },
        kueue={"version": version, "teams": team_specs, "autoscaler": {"image": autoscaler_image}},
        storage={"home": None, "checkpoints": {}},
        reasons=tuple(reasons),
        warnings=tuple(warnings),
    )
