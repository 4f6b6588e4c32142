"""The autoscaler inventory: every pool the autoscaler may resize, as the stacks export it.

`stacks/` builds one `InventoryPool` per node pool and exports the list as the stack output
`autoscaler_inventory`; the daemon reads it back (from `pulumi stack output autoscaler_inventory
--json` or the `outputs` of `fleet synth --json`) with `load_inventory`.  This module is the one
definition of that JSON shape.

Pools of `scheduler: kueue` clusters carry more (docs/kubernetes.md): `pool_kind` says which actuator
resizes them — `gce-mig` (Slurm pools, and GKE node pools: instances by name in the MIGs GKE reports,
`instance_group_urls` / `instance_groups`) or `capi-machinedeployment` (`capi_namespace` /
`capi_machine_deployment`: replicas up, down through the Machine of an idle node) — plus the node
labels / taints that identify a pool's Nodes, its Kueue ResourceFlavor and its $/h.  `KubernetesSection`
is the `kubernetes:` part of the daemon config the stack writes for the in-cluster Deployment.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from fleet.catalog import CapacityType


class InventoryPool(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)

    name: str  # pool name, unique within its cluster
    cluster: str
    provider: str  # "gcp" today
    project: str
    region: str
    zones: list[str]
    machine_type: str
    gpu_type: str  # accelerator type, e.g. nvidia-h100-mega-80gb
    gpus_per_node: int
    capacity_type: CapacityType
    reservation: str | None = None
    min_nodes: int
    max_nodes: int
    instance_group: str  # MIG name stem; the zonal MIG in zone Z is instance_groups[Z]
    instance_groups: dict[str, str] = Field(default_factory=dict)  # zone -> zonal MIG name
    instance_template: str | None = None
    node_name_prefix: str  # Slurm node / GCE instance names are f"{node_name_prefix}-{index}"
    slurm_nodeset: str | None = None
    slurm_partitions: list[str] = Field(default_factory=list)
    spot_tolerant: bool = False  # true when every partition this pool backs is spot-tolerant
    compact_placement: bool = False
    placement_policy: str | None = None
    # Kubernetes pools (scheduler: kueue); the defaults describe a Slurm pool.
    scheduler: Literal["slurm", "kueue"] = "slurm"
    platform: Literal["gce", "gke", "kubernetes"] = "gce"
    pool_kind: Literal["gce-mig", "capi-machinedeployment"] = "gce-mig"
    gke_cluster: str | None = None  # GKE cluster name (platform gke)
    gke_node_pool: str | None = None  # node pool name; its MIGs are instance_group_urls
    instance_group_urls: list[str] = Field(default_factory=list)  # MIG links GKE reports for the node pool
    capi_cluster: str | None = None  # Cluster API Cluster name (platform kubernetes)
    capi_namespace: str | None = None
    capi_machine_deployment: str | None = None
    failure_domain: str | None = None  # the MachineDeployment's Cluster API failure domain (its "zone")
    kueue_flavor: str | None = None  # the pool's ResourceFlavor
    node_labels: dict[str, str] = Field(default_factory=dict)  # every Node of the pool has these labels
    node_taints: list[dict[str, str]] = Field(default_factory=list)  # {key, value, effect}
    vcpus: int | None = None
    memory_gib: int | None = None
    price_per_hour: float | None = None  # $/h per node (spec or catalog); None: unknown
    price_source: str | None = None  # "spec", "list", ... (fleet.spec.kube.pool_price)


class LeaseConfig(BaseModel):
    """Leader election through a coordination.k8s.io/v1 Lease (client-go's defaults)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    duration_s: float = 15.0
    renew_deadline_s: float = 10.0
    retry_period_s: float = 2.0


class KubernetesSection(BaseModel):
    """`kubernetes:` of the in-cluster daemon's /etc/gpu-fleet/autoscaler.yaml (the stack writes it)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    in_cluster: bool = True  # the pod's service account token; else `kubeconfig`
    kubeconfig: str | None = None
    namespace: str  # where the daemon runs and its Lease lives
    lease: LeaseConfig
    identity_env: str = "POD_NAME"  # the Lease holder identity (downward API)
    provisioning_class: str = "best-effort-atomic-scale-up.autoscaling.x-k8s.io"
    cluster_api_namespace: str | None = None  # MachineDeployments / Machines (platform kubernetes)


def migs_from_urls(urls: list[str]) -> dict[str, str]:
    """`.../zones/<zone>/instanceGroupManagers/<name>` (or instanceGroups) links -> {zone: name}."""
    out: dict[str, str] = {}
    for url in urls:
        parts = url.rstrip("/").split("/")
        if "zones" in parts and len(parts) >= parts.index("zones") + 4:
            i = parts.index("zones")
            out[parts[i + 1]] = parts[i + 3]
    return out


_LIST = TypeAdapter(list[InventoryPool])


def parse_inventory(data: object) -> list[InventoryPool]:
    """Accept the bare list, `{"autoscaler_inventory": [...]}` or a whole `fleet synth --json`."""
    if isinstance(data, dict):
        if "outputs" in data:
            data = data["outputs"]
        data = data.get("autoscaler_inventory", data)
    return _LIST.validate_python(data)


def load_inventory(path: Path) -> list[InventoryPool]:
    return parse_inventory(json.loads(Path(path).read_text()))
