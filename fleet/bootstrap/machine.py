"""Which machine type and how many nodes carry a requested number of GPUs in a region.

Rules (documented in docs/bootstrap.md):

- Fewer GPUs than the largest shape holds: one node of the smallest shape that holds them all
  (fewest vCPUs among equals, which is also the cheapest).
- Otherwise nodes of the largest (8-GPU) shape, enough to hold the GPUs (rounded up).
- `h100` covers A3 High (`a3-highgpu-*`, GPUDirect-TCPX, 4 GPU NICs) and A3 Mega
  (`a3-megagpu-8g`, GPUDirect-TCPXO, 8 GPU NICs): multi-node pools get A3 Mega, whose fabric
  has twice the bandwidth, where the region offers it; a single node gets A3 High.
- A machine type the region does not offer is skipped for the next candidate; when none is
  offered, `NoZoneOffers` names the nearest regions that offer one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from fleet.bootstrap.errors import BadArgument, NoZoneOffers
from fleet.bootstrap.regions import nearest_offering
from fleet.catalog import Catalog, MachineType, UnknownMachineType
from fleet.input.limits import MAX_NODES_PER_POOL

# --gpu value -> GPU shorts (catalog `GpuSpec.short`) in order of preference for multi-node pools.
GPU_FAMILIES: dict[str, tuple[str, ...]] = {
    "h100": ("h100-mega", "h100"),
    "h100-mega": ("h100-mega",),
    "h200": ("h200",),
    "b200": ("b200",),
    "a100": ("a100",),
    "a100-80gb": ("a100-80gb",),
    "l4": ("l4",),
}


@dataclass(frozen=True)
class MachineChoice:
    machine: MachineType
    nodes: int
    gpus: int  # GPUs the pool holds at max size (>= the GPUs asked for)
    reasons: list[str] = field(default_factory=list)


def _shape_for(machines: list[MachineType], gpus: int) -> list[MachineType]:
    """Candidate machine types of one GPU model for `gpus` GPUs, best first."""
    largest = max(m.gpu_count for m in machines)
    if gpus >= largest:
        return [m for m in machines if m.gpu_count == largest]
    fits = [m for m in machines if m.gpu_count >= gpus]
    smallest = min(m.gpu_count for m in fits)
    return sorted((m for m in fits if m.gpu_count == smallest), key=lambda m: (m.vcpus, m.name))


def check_pool_size(m: MachineType, gpus: int, nodes: int) -> None:
    """`--gpus` fits one pool: at most `MAX_NODES_PER_POOL` nodes of `m` (a zonal MIG's size limit)."""
    if nodes > MAX_NODES_PER_POOL:
        raise BadArgument(
            "--gpus",
            f"{gpus:,} GPUs need {nodes:,} nodes of {m.name}; a pool holds at most {MAX_NODES_PER_POOL:,} nodes"
            f" (a zonal MIG's size limit), so at most {MAX_NODES_PER_POOL * m.gpu_count:,} GPUs of {m.name}:"
            " bootstrap several regions, or add pools to the stack",
        )


def choose_machine(
    catalog: Catalog, gpu: str, gpus: int, region: str, machine_type: str | None = None
) -> MachineChoice:
    """The machine type and node count for `gpus` GPUs of model `gpu` in `region`."""
    gpu = gpu.lower()
    if gpu not in GPU_FAMILIES:
        raise BadArgument("--gpu", f"unknown GPU {gpu!r}; known: {', '.join(GPU_FAMILIES)}")
    if gpus < 1:
        raise BadArgument("--gpus", f"must be at least 1, got {gpus}")
    shorts = GPU_FAMILIES[gpu]
    reasons: list[str] = []

    if machine_type is not None:
        try:
            m = catalog.machine(machine_type)
        except UnknownMachineType as exc:
            raise BadArgument("--machine-type", str(exc)) from None
        if m.gpu.short not in shorts:
            raise BadArgument("--machine-type", f"{m.name} carries {m.gpu.accelerator_type}, not a {gpu} GPU")
        candidates = [m]
        reasons.append(f"{m.name}: given with --machine-type")
    else:
        candidates = []
        for short in shorts:
            candidates += _shape_for(catalog.by_gpu(short), gpus)
        if gpu == "h100" and gpus <= max(m.gpu_count for m in candidates):
            # One node needs no inter-node fabric: A3 High is the cheaper 8-GPU H100 VM.
            candidates.sort(key=lambda m: m.gpu.short == "h100-mega")

    offered = [m for m in candidates if m.zones_in(region)]
    if not offered:
        alternatives = nearest_offering(region, candidates)
        raise NoZoneOffers(region, " or ".join(m.name for m in candidates), alternatives)
    m = offered[0]
    for skipped in candidates[: candidates.index(m)]:
        reasons.append(f"{skipped.name} preferred but not offered in {region} per the catalog")

    nodes = math.ceil(gpus / m.gpu_count)
    check_pool_size(m, gpus, nodes)
    if machine_type is None:
        if nodes == 1 and m.gpu_count > gpus:
            reasons.append(f"{m.name}: smallest {m.gpu.short.upper()} shape holding {gpus} GPU(s)")
        elif m.gpu.short == "h100-mega":
            reasons.append(f"{m.name}: {nodes} nodes; A3 Mega's 8 GPUDirect-TCPXO NICs double A3 High's fabric")
        else:
            reasons.append(f"{m.name}: {m.gpu_count} x {m.gpu.accelerator_type} per node")
    if nodes * m.gpu_count != gpus:
        reasons.append(f"{gpus} GPUs rounded up to {nodes} node(s) x {m.gpu_count} = {nodes * m.gpu_count} GPUs")
    else:
        reasons.append(f"{nodes} node(s) x {m.gpu_count} GPUs = {gpus} GPUs")
    return MachineChoice(machine=m, nodes=nodes, gpus=nodes * m.gpu_count, reasons=reasons)
