"""The quotas a stack needs at its maximum size, and how they compare with a region's quota.

Metric names are the Compute Engine regional quota metrics (`Region.quotas[].metric`):
GPU metrics per model (`NVIDIA_H100_MEGA_GPUS` ...), with the `PREEMPTIBLE_` variants for spot
and flex-start VMs (flex-start VMs "consume preemptible quota": Google Cloud blog, "Introducing
Flex-start VMs"); CPU metrics per series where the Compute API's `Quota.Metric` enum has one
(`A2_CPUS`, `N2_CPUS` ...), else `CPUS`; `IN_USE_ADDRESSES` for the Cloud NAT's external
addresses (no GPU node gets a public IP).  Reservation capacity draws quota when the reservation
is created, so its GPUs and CPUs are listed but not checked.  Filestore / Lustre capacity and
the project-wide `GPUS_ALL_REGIONS` are not regional Compute metrics: listed, not checked.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from fleet.catalog import CapacityType, MachineType

# Machine series with their own regional CPU metric (google.cloud.compute_v1 Quota.Metric).
FAMILY_CPU_METRICS = {"a2", "c2", "c2d", "c3", "e2", "m1", "m2", "m3", "n2", "n2d", "t2a", "t2d"}
NAT_PORTS_PER_ADDRESS = 64512  # ports one NAT address offers (1024-65535)
NAT_MIN_PORTS_PER_VM = 1024  # min_ports_per_vm of the system VPC's Cloud NAT (components/gcp/network.py)
PREEMPTIBLE = (CapacityType.SPOT, CapacityType.FLEX_START)


@dataclass(frozen=True)
class QuotaNeed:
    metric: str
    needed: float
    reason: str
    checked: bool = True  # compared with the region's quota by --check-quota
    service: str = "compute.googleapis.com"


@dataclass(frozen=True)
class QuotaShortfall:
    metric: str
    needed: float
    limit: float
    usage: float

    @property
    def available(self) -> float:
        return max(self.limit - self.usage, 0.0)


@dataclass(frozen=True)
class RegionQuota:
    limit: float
    usage: float


@dataclass(frozen=True)
class ReservationInfo:
    """A specific reservation as Compute reports it."""

    name: str
    zone: str
    machine_type: str
    count: int
    in_use: int

    @property
    def free(self) -> int:
        return max(self.count - self.in_use, 0)


def reservation_shortfall(info: ReservationInfo, nodes: int) -> list[QuotaShortfall]:
    """A pool of `nodes` on a reservation with fewer free slots cannot reach its max size."""
    if info.free >= nodes:
        return []
    return [QuotaShortfall(f"reservation {info.name} ({info.zone})", nodes, info.count, info.in_use)]


def cpu_metric(machine_type: str, capacity: CapacityType = CapacityType.ON_DEMAND) -> str:
    if capacity in PREEMPTIBLE:
        return "PREEMPTIBLE_CPUS"
    series = machine_type.split("-", 1)[0]
    return f"{series.upper()}_CPUS" if series in FAMILY_CPU_METRICS else "CPUS"


def vcpus_of(machine_type: str) -> int:
    """vCPUs of a predefined general-purpose type such as n2-standard-8 (its last number)."""
    match = re.fullmatch(r"[a-z0-9]+-[a-z]+-(\d+)", machine_type)
    if not match:
        raise ValueError(f"cannot tell the vCPUs of machine type {machine_type!r}")
    return int(match.group(1))


def quota_needs(
    machine: MachineType,
    nodes: int,
    capacity: CapacityType,
    system_vms: list[str],
    filestore: tuple[str, int] | None,
    lustre_gib: int | None,
) -> list[QuotaNeed]:
    """What the stack needs at max size: `nodes` GPU VMs plus the `system_vms` (machine types)."""
    needs: dict[str, QuotaNeed] = {}

    def add(need: QuotaNeed) -> None:
        old = needs.get(need.metric)
        if old:
            need = QuotaNeed(need.metric, old.needed + need.needed, f"{old.reason}; {need.reason}", need.checked)
        needs[need.metric] = need

    reserved = capacity is CapacityType.RESERVATION
    note = " (drawn when the reservation is created; not checked)" if reserved else ""
    gpu_metric = machine.gpu.quota_metric
    if capacity in PREEMPTIBLE:
        gpu_metric = f"PREEMPTIBLE_{gpu_metric}"
    gpus = nodes * machine.gpu_count
    add(QuotaNeed(gpu_metric, gpus, f"{nodes} x {machine.name} ({capacity}){note}", checked=not reserved))
    add(
        QuotaNeed(
            cpu_metric(machine.name, capacity),
            nodes * machine.vcpus,
            f"{nodes} x {machine.vcpus} vCPUs of {machine.name}{note}",
            checked=not reserved,
        )
    )
    for vm in system_vms:
        add(QuotaNeed(cpu_metric(vm), vcpus_of(vm), f"1 x {vm}"))
    total_vms = nodes + len(system_vms)
    add(
        QuotaNeed(
            "IN_USE_ADDRESSES",
            max(1, math.ceil(total_vms * NAT_MIN_PORTS_PER_VM / NAT_PORTS_PER_ADDRESS)),
            f"Cloud NAT addresses for {total_vms} VMs at {NAT_MIN_PORTS_PER_VM} ports each (no public IPs on VMs)",
        )
    )
    add(QuotaNeed("GPUS_ALL_REGIONS", gpus, "project-wide GPU quota (global, not checked)", checked=False))
    if filestore:
        tier, gb = filestore
        add(
            QuotaNeed(
                f"filestore {tier} capacity (GB)",
                gb,
                "Filestore /home (Filestore API quota, not checked)",
                checked=False,
                service="file.googleapis.com",
            )
        )
    if lustre_gib:
        add(
            QuotaNeed(
                "lustre capacity (GiB)",
                lustre_gib,
                "Managed Lustre /scratch (Lustre API quota, not checked)",
                checked=False,
                service="lustre.googleapis.com",
            )
        )
    return list(needs.values())


def shortfalls(needs: list[QuotaNeed], quotas: dict[str, RegionQuota]) -> list[QuotaShortfall]:
    """The checked needs the region's free quota (limit - usage) cannot cover.

    A checked metric the region does not report at all counts as a limit of 0: GCE lists
    every metric it enforces for the project, and a GPU model without a quota entry cannot be
    launched there."""
    out = []
    for need in needs:
        if not need.checked:
            continue
        q = quotas.get(need.metric, RegionQuota(0.0, 0.0))
        if need.needed > q.limit - q.usage:
            out.append(QuotaShortfall(need.metric, need.needed, q.limit, q.usage))
    return out
