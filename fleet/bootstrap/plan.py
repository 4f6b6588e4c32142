"""From "N GPUs of type T in region R" to a complete, validated fleet spec and the reasons for it.

`plan_region` is pure: it takes the request (fleet.bootstrap.request), the catalog, and the ranges
and cluster names other stacks use, and returns a `RegionPlan` (the spec, every decision with its
reason, quotas, prices, next steps).  Reading stack files and quotas, and writing the new stack
file, happen in the CLI.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from ipaddress import IPv4Network
from pathlib import Path

from fleet.bootstrap.addressing import (
    AddressPlan,
    AddressPlanExhausted,
    UsedRange,
    plan_addresses,
    plan_gke_ranges,
)
from fleet.bootstrap.errors import BadArgument, InvalidPlan
from fleet.bootstrap.kube import DEFAULT_TEAM, KueuePlan, plan_kueue, system_vms
from fleet.bootstrap.labels import STACK_LABEL, label_warnings
from fleet.bootstrap.machine import GPU_FAMILIES, MachineChoice, choose_machine
from fleet.bootstrap.pricing import PoolPrice, pool_price, price_table
from fleet.bootstrap.quotas import QuotaNeed, RegionQuota, ReservationInfo, quota_needs
from fleet.bootstrap.regions import nearest_offering
from fleet.bootstrap.request import BootstrapRequest, check_request
from fleet.bootstrap.sizing import SlurmPlan, StoragePlan, plan_slurm, plan_storage
from fleet.catalog import CapacityType, Catalog, MachineType
from fleet.spec.derive import fabric_subnet_count
from fleet.spec.load import SpecError, load_spec


@dataclass(frozen=True)
class RegionPlan:
    request: BootstrapRequest
    choice: MachineChoice
    zones: tuple[str, ...]
    addresses: AddressPlan
    storage: StoragePlan | None  # Slurm's /home and scratch (None for a Kueue region: the GKE stack mounts neither)
    slurm: SlurmPlan | None
    compact_placement: bool
    quotas: list[QuotaNeed]
    price: PoolPrice
    prices: dict[str, PoolPrice]
    spec: dict
    reasons: list[str]
    reservation: ReservationInfo | None = None  # as read by --check-quota
    warnings: list[str] = field(default_factory=list)  # what the stack will deploy but not do as asked
    kueue: KueuePlan | None = None  # --scheduler kueue: the GKE cluster and its Kueue teams

    def next_steps(self, stack_file: Path, project_bootstrap: str | None = None, in_project: bool = True) -> list[str]:
        """What the user runs next.  `in_project`: the stack file sits beside a Pulumi.yaml (else the steps start
        with moving it into the gpu-fleet checkout, and the pulumi commands run there)."""
        stack, project = self.request.stack_name, self.request.project
        first = []
        if project_bootstrap is None:
            first.append(
                f"once per project: fleet bootstrap-project --project {project} --region {self.request.region}"
                "   # APIs, state bucket, autoscaler identity; see docs/bootstrap.md"
            )
        else:
            first.append(f"pulumi login gs://<state bucket of stack {project_bootstrap}>   # the project's backend")
        return [
            *first,
            *(
                [f"pulumi stack init {stack}   # run in {stack_file.parent}, next to Pulumi.yaml"]
                if in_project
                else [
                    f"mv {stack_file} <your gpu-fleet checkout>/   # beside its Pulumi.yaml; run what follows there",
                    f"pulumi stack init {stack}",
                ]
            ),
            f"pulumi config set gcp:project {project} --stack {stack}",
            f"fleet synth --config {stack_file if in_project else stack_file.name} --json"
            "   # check the stack under mocks, no credentials",
            f"fleet policy check --config {stack_file if in_project else stack_file.name}"
            "   # the guardrails pulumi up enforces with policies/",
            *(
                ["gcloud components install gke-gcloud-auth-plugin   # where pulumi runs: it reaches GKE through it"]
                if self.kueue
                else []
            ),
            f"pulumi preview --stack {stack}",
            f"pulumi up --stack {stack}",
            *self._fabric_step(stack_file if in_project else Path(stack_file.name)),
        ]

    def _fabric_step(self, stack_file: Path) -> list[str]:
        """GKE pools of a GPUDirect machine: where a training job's pod template comes from (the RxDM sidecar, the
        GPU networks, the plugin's mounts), which the stack cannot add to pods it does not create."""
        if not self.kueue or self.choice.machine.gke_fabric == "none":
            return []
        pool = self.spec["clusters"][0]["pools"][0]["name"]
        return [
            f"fleet render gpudirect-pod --config {stack_file} --pool {pool} --image <your training image>"
            "   # the pod template multi-node jobs use the GPU fabric with (docs/kubernetes.md)"
        ]

    def to_json(
        self,
        stack_file: Path,
        available: dict[str, RegionQuota] | None = None,
        project_bootstrap: str | None = None,
        in_project: bool = True,
    ) -> dict:
        m = self.choice.machine
        quotas = []
        for q in self.quotas:
            row: dict = {"metric": q.metric, "needed": q.needed, "reason": q.reason, "checked": q.checked}
            if q.service != "compute.googleapis.com":
                row["service"] = q.service
            if available is not None and q.checked:
                have = available.get(q.metric, RegionQuota(0.0, 0.0))
                row |= {
                    "limit": have.limit,
                    "usage": have.usage,
                    "available": max(have.limit - have.usage, 0.0),
                    "ok": q.needed <= have.limit - have.usage,
                }
            quotas.append(row)
        return {
            "stack": self.request.stack_name,
            "cluster": self.request.cluster_name,
            "stack_file": str(stack_file),
            "project": self.request.project,
            "region": self.request.region,
            "gpu": self.request.gpu,
            "gpus_requested": self.request.gpus,
            "machine_type": m.name,
            "gpu_type": m.gpu.accelerator_type,
            "gpus_per_node": m.gpu_count,
            "nodes": self.choice.nodes,
            "gpus": self.choice.gpus,
            "capacity": str(self.request.capacity),
            "zones": list(self.zones),
            "compact_placement": self.compact_placement,
            "cidrs": {
                "system": str(self.addresses.system_cidr),
                "gpu": str(self.addresses.gpu_cidr),
                "gpu_subnets": self.addresses.gpu_subnets,
                "gpu_subnet_prefix": self.addresses.gpu_subnet_prefix,
                "avoided": [{"cidr": str(u.cidr), "owner": u.owner} for u in self.addresses.avoided],
            },
            "storage": self.spec["clusters"][0]["storage"],
            "slurm": self.spec["clusters"][0].get("slurm"),
            "gke": self.spec["clusters"][0].get("gke"),
            "kueue": self.spec["clusters"][0].get("kueue"),
            "quotas": quotas,
            "quota_checked": available is not None,
            "reservation": (
                None
                if self.reservation is None
                else {
                    "name": self.reservation.name,
                    "zone": self.reservation.zone,
                    "machine_type": self.reservation.machine_type,
                    "count": self.reservation.count,
                    "in_use": self.reservation.in_use,
                }
            ),
            "price_per_hour": {
                "currency": "USD",
                "capacity_type": str(self.request.capacity.type),
                **self.price.to_json(),
                "by_capacity_type": {k: v.to_json() for k, v in self.prices.items()},
                "covers": "GPU nodes at list price; "
                + ("GKE's fee, its system pool" if self.kueue else "controller, login")
                + ", storage and egress not included",
            },
            "reasons": self.reasons,
            "warnings": self.warnings,
            "next_steps": self.next_steps(stack_file, project_bootstrap, in_project),
            "spec": self.spec,
        }


def fit_reservation(
    req: BootstrapRequest, plan: RegionPlan, info: ReservationInfo | None, catalog: Catalog
) -> BootstrapRequest:
    """The request adjusted to the reservation Compute reports: its zone, and its machine type when
    that carries the same GPU (an H100 reservation of a3-highgpu-8g rather than a3-megagpu-8g).

    Raises BadArgument when the reservation is missing or holds a machine of another GPU."""
    name = req.capacity.reservation
    if info is None:
        raise BadArgument("--capacity", f"reservation {name} not found in {', '.join(plan.zones)} ({req.project})")
    m = plan.choice.machine
    if info.machine_type != m.name:
        same_gpu = info.machine_type in catalog and catalog.machine(info.machine_type).gpu.short in GPU_FAMILIES.get(
            req.gpu.lower(), ()
        )
        if req.machine_type or not same_gpu:
            raise BadArgument(
                "--capacity", f"reservation {name} in {info.zone} holds {info.machine_type}, not {m.name}"
            )
        req = replace(req, machine_type=info.machine_type)
    return replace(req, zones=(info.zone,))


def free_cluster_name(req: BootstrapRequest, taken: set[str]) -> BootstrapRequest:
    """The request with a cluster name no other stack of its project uses (GCE names derive from it).

    A default name that is taken gets a `-2`, `-3` ... suffix; a taken `--cluster` is an error."""
    name = req.cluster_name
    if name not in taken:
        return req
    if req.cluster:
        raise BadArgument("--cluster", f"{name!r} is already a cluster of project {req.project} in another stack")
    for i in range(2, 100):
        candidate = f"{name[: 20 - len(str(i)) - 1]}-{i}"
        if candidate not in taken:
            return replace(req, cluster=candidate)
    raise BadArgument("--cluster", f"no free cluster name derived from {name!r}; pass --cluster")


def _fits(attempt: Callable[[], object]) -> bool:
    """Whether an address plan succeeds (`attempt` raises AddressPlanExhausted when it does not)."""
    try:
        attempt()
    except AddressPlanExhausted:
        return False
    return True


def _plan_full(
    exc: AddressPlanExhausted, reserved: list[IPv4Network], fits_without: bool, what: str = ""
) -> BadArgument:
    """The argument to blame for a full address plan: `--reserve` when the plan fits without the reserved ranges,
    else `--stacks-dir` (the other stacks there use the room)."""
    if reserved and fits_without:
        cidrs = ", ".join(map(str, reserved))
        return BadArgument("--reserve", f"{what}{cidrs} leave(s) no room for this stack: {exc} (reserve less)")
    return BadArgument("--stacks-dir", f"{what}address plan full: {exc} (other stacks there, and --reserve, use it)")


def plan_region(
    req: BootstrapRequest, catalog: Catalog, used: list[UsedRange], taken_clusters: set[str] | None = None
) -> RegionPlan:
    """Every decision for a new region stack; raises BootstrapError subclasses on bad input."""
    check_request(req, catalog)
    req = free_cluster_name(req, taken_clusters or set())
    choice = choose_machine(catalog, req.gpu, req.gpus, req.region, req.machine_type)
    m, nodes, cap = choice.machine, choice.nodes, req.capacity
    reasons = list(choice.reasons)

    offered = m.zones_in(req.region)
    if req.zones:
        bad = [z for z in req.zones if z not in offered]
        if bad:
            raise BadArgument(
                "--zones", f"{', '.join(bad)} do(es) not offer {m.name}; zones that do: {', '.join(offered)}"
            )
        zones = tuple(req.zones)
        reasons.append(f"zones {', '.join(zones)}: given with --zones, each offers {m.name}")
    else:
        zones = offered
        reasons.append(f"zones {', '.join(zones)}: every zone of {req.region} offering {m.name} per the catalog")

    compact = 1 < nodes <= m.compact_placement_max_vms
    if compact and cap.type is CapacityType.SPOT:
        compact = False
        reasons.append("no compact placement: spot capacity is found more easily across zones")
    elif compact and cap.type is CapacityType.FLEX_START and not m.flex_start_compact:
        compact = False
        reasons.append(f"no compact placement: flex-start cannot combine with it on {m.name}")
    elif compact:
        reasons.append(f"compact placement: {nodes} nodes <= {m.compact_placement_max_vms} per policy on {m.name}")

    # A reservation, a compact placement policy and a RoCE (RDMA) VPC are zonal: such a pool gets one zone.
    pool_zones = zones
    single = [
        *([f"reservation {cap.reservation} is zonal"] if cap.reservation else []),
        *(["compact placement spans one zone"] if compact else []),
        *([f"{m.name}'s RDMA VPC (RoCE network profile) is zonal"] if m.nics.fabric == "rdma" else []),
    ]
    if single and len(zones) > 1:
        pool_zones = zones[:1]
        reasons.append(f"pool zone {pool_zones[0]}: {'; '.join(single)}; pass --zones to choose another")
    elif cap.type is CapacityType.RESERVATION:
        reasons.append(f"reservation {cap.reservation} must be in {zones[0]}")

    kueue = req.scheduler == "kueue"
    slurm = None if kueue else plan_slurm(m, nodes)
    if slurm:
        system = [slurm.controller_machine_type] + [slurm.login_machine_type] * slurm.login_nodes
    else:
        system = system_vms(pool_zones)
    gpu_subnets = fabric_subnet_count(m)
    reserved = [IPv4Network(c) for c in req.reserved_cidrs]
    others, used = used, [*used, *(UsedRange(c, "--reserve") for c in reserved)]
    try:
        addresses = plan_addresses(nodes, len(system), gpu_subnets, used)
    except AddressPlanExhausted as exc:
        fits_without_reserve = _fits(lambda: plan_addresses(nodes, len(system), gpu_subnets, others))
        raise _plan_full(exc, reserved, fits_without_reserve) from None
    reasons += addresses.reasons
    # what differs by scheduler: the cluster's storage and its quota, its own blocks, the warnings
    kplan: KueuePlan | None = None
    storage: StoragePlan | None = None
    if kueue:
        assert req.autoscaler_image and req.upgrade_exclusion_start  # check_request and the CLI
        own = [addresses.system_cidr, addresses.gpu_cidr]
        try:
            ranges = plan_gke_ranges(used, own)
        except AddressPlanExhausted as exc:
            raise _plan_full(exc, reserved, _fits(lambda: plan_gke_ranges(others, own)), "GKE's ranges: ") from None
        kplan = plan_kueue(
            m, nodes, m.family, pool_zones, str(addresses.system_cidr), ranges, req.teams or (DEFAULT_TEAM,),
            req.authorized_networks, req.autoscaler_image, req.upgrade_exclusion_start,
        )  # fmt: skip
        reasons += kplan.reasons
        reasons.append(f"cluster zone {pool_zones[0]}: the GPU pool's, where GKE's node locations start")
        cluster_storage, filestore, scratch = kplan.storage, None, None
        extra: dict = {"platform": "gke", "gke": kplan.gke, "kueue": kplan.kueue}
        warnings = list(kplan.warnings)
    else:
        assert slurm is not None
        storage = plan_storage(m, nodes)
        reasons += [*storage.reasons, *slurm.reasons]
        reasons.append(f"cluster zone {pool_zones[0]}: the controller, login VMs and zonal storage beside the pool")
        cluster_storage = storage.spec()
        filestore, scratch = (storage.home_tier, storage.home_capacity_gb), storage.scratch_capacity_gib
        extra = {"slurm": slurm.spec(m.family, cap.type)}
        warnings = fabric_warnings(m, nodes, req.region, GPU_FAMILIES[req.gpu.lower()], catalog)

    pool_name = m.family
    pool: dict = {
        "name": pool_name,
        "machine_type": m.name,
        "min_nodes": 0,
        "max_nodes": nodes,
        "zones": list(pool_zones),
        "capacity": str(cap.type),
    }
    if cap.reservation:
        pool["reservation"] = cap.reservation
    if compact:
        pool["compact_placement"] = True
    cluster: dict = {
        "name": req.cluster_name,
        "scheduler": req.scheduler,
        # pinned, not derived from the pool (fleet.spec.derive.cluster_zone): a later pool put first must not move
        # the controller and its zonal storage
        "zone": pool_zones[0],
        "pools": [pool],
        "storage": cluster_storage,
        **extra,
    }
    spec = {
        "kind": "fleet",
        "provider": "gcp",
        "project": req.project,
        "region": req.region,
        "zones": list(zones),
        "network": {
            "system_cidr": str(addresses.system_cidr),
            "gpu_cidr": str(addresses.gpu_cidr),
            **({"reserved_cidrs": [str(c) for c in reserved]} if reserved else {}),
        },
        "clusters": [cluster],
        "labels": {**dict(req.labels), STACK_LABEL: req.stack_name.lower().replace(".", "-")[:63]},
    }
    try:
        load_spec(spec, catalog)
    except SpecError as exc:  # a bug here, not the user's: say so plainly, write nothing
        raise InvalidPlan(exc.errors) from exc

    quotas = quota_needs(m, nodes, cap.type, system, filestore, scratch)
    price = pool_price(m, req.region, cap.type, 0, nodes)
    if price.per_node is None:
        reasons.append(f"no list price for {m.name} in {req.region} ({cap.type}): price unknown")
    warnings += label_warnings(dict(req.labels))
    return RegionPlan(
        request=req,
        choice=choice,
        zones=zones,
        addresses=addresses,
        storage=storage,
        slurm=slurm,
        compact_placement=compact,
        quotas=quotas,
        price=price,
        prices=price_table(m, req.region, 0, nodes),
        spec=spec,
        reasons=reasons,
        warnings=warnings,
        kueue=kplan,
    )


def fabric_warnings(m: MachineType, nodes: int, region: str, gpus: tuple[str, ...], catalog: Catalog) -> list[str]:
    """A multi-node pool of a machine whose GPU fabric the Slurm stack sets up no software for (A3 High's
    GPUDirect-TCPX: `MachineType.fabric_not_set_up`) trains across nodes without it: say so, with the nearest regions
    offering a machine of the asked-for GPU (`gpus`: its `GPU_FAMILIES` shorts) whose fabric is set up, and that the
    GKE stack sets it up."""
    if nodes < 2 or not m.fabric_not_set_up:
        return []
    others = [o for o in catalog.machines() if o.gpu.short in gpus and o.gpu_count == m.gpu_count
              and o.nics.fabric != "none" and not o.fabric_not_set_up]  # fmt: skip
    where = [f"{o.name} in {alt.region} ({alt.city})" for o, alt in nearest_offering(region, others)]
    return [
        f"{m.name}: the stack sets up no software for its GPUDirect-TCPX NICs (its kernel needs access credentials "
        f'from Google: docs/stacks.md "Known limits"), so multi-node NCCL across these {nodes} nodes runs over its '
        "sockets transport, not GPUDirect"
        + (f"; a fabric the stack sets up is nearest as {', '.join(where)}" if where else "")
        + "; or `--scheduler kueue`: the GKE stack sets TCPX up on these machines"
    ]
