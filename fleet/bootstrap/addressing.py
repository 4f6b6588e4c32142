"""The address plan: CIDR blocks for a new stack that overlap nothing any other stack uses.

Plan (documented in docs/bootstrap.md):

- system VPC subnets (`network.system_cidr`): /20 or larger blocks from 10.0.0.0/12;
- GPU fabric ranges (`network.gpu_cidr`, carved into one subnet per GPU NIC): blocks from
  10.128.0.0/9, sized for the pool;
- a GKE cluster's pod range (/14) and service range (/20) from 10.64.0.0/10, its control plane's /28 from
  172.16.0.0/12: the spec's defaults (10.64.0.0/14, 10.68.0.0/20, 172.16.0.0/28) when nothing uses them.

Each new block is the lowest aligned block of its size inside its supernet that overlaps none
of the used ranges (every other stack's system_cidr, gpu_cidr and reserved_cidrs, its GKE clusters' ranges, and
ranges the user reserves).  Lowest-first keeps the plan dense and deterministic: bootstrapping
regions one after another in one stacks directory gives the same answer on every machine.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from ipaddress import IPv4Network

SYSTEM_SUPERNET = IPv4Network("10.0.0.0/12")
GPU_SUPERNET = IPv4Network("10.128.0.0/9")
GKE_SUPERNET = IPv4Network("10.64.0.0/10")  # pods and services, between the system and GPU supernets
GKE_MASTER_SUPERNET = IPv4Network("172.16.0.0/12")
GKE_PODS_PREFIX = 14  # GKE's default: 1,024 nodes at 110 pods each
GKE_SERVICES_PREFIX = 20
GKE_MASTER_PREFIX = 28  # what GKE requires of a private cluster's control-plane range

SYSTEM_MIN_PREFIX = 20  # 4,092 usable addresses: nodes, controller, login, headroom
GPU_SUBNET_MIN_PREFIX = 24  # smallest GPU NIC subnet we hand out
GCE_RESERVED_PER_SUBNET = 4  # network, gateway, second-to-last and broadcast addresses
HEADROOM = 2  # subnets sized for twice the pool's max nodes, so the pool can grow in place


class AddressPlanExhausted(ValueError):
    """No free block of the wanted size is left in the supernet."""


@dataclass(frozen=True)
class UsedRange:
    """A range some other stack (or the user) already uses, and who."""

    cidr: IPv4Network
    owner: str  # e.g. "Pulumi.gcp-a3mega-slurm.yaml: network.gpu_cidr"


def prefix_for_hosts(hosts: int, min_prefix: int) -> int:
    """Longest prefix (smallest block) that holds `hosts` VMs plus GCE's reserved addresses."""
    needed = hosts + GCE_RESERVED_PER_SUBNET
    return min(min_prefix, 32 - math.ceil(math.log2(needed)))


def system_prefix(max_vms: int) -> int:
    """Prefix length of the system subnet for `max_vms` VMs (GPU nodes + controller + login)."""
    return prefix_for_hosts(HEADROOM * max_vms, SYSTEM_MIN_PREFIX)


def gpu_prefix(max_nodes: int, subnets: int) -> tuple[int, int]:
    """(gpu_cidr prefix, per-subnet prefix) for `subnets` GPU NIC subnets of `max_nodes` nodes each.

    The per-subnet block holds HEADROOM x max_nodes addresses (a GPU NIC takes one address per
    node in its own subnet); gpu_cidr is the next power of two of subnets of that size.  With no
    GPU NICs the machine uses no fabric: one minimum-size block is still reserved, so the stack's
    gpu_cidr never falls back to the schema default and collides with another stack's."""
    per_subnet = prefix_for_hosts(HEADROOM * max_nodes, GPU_SUBNET_MIN_PREFIX)
    split = math.ceil(math.log2(subnets)) if subnets > 1 else 0
    return per_subnet - split, per_subnet


def allocate(prefixlen: int, supernet: IPv4Network, used: Iterable[IPv4Network]) -> IPv4Network:
    """The lowest block of length `prefixlen`, aligned, inside `supernet`, overlapping none of `used`."""
    if prefixlen < supernet.prefixlen or prefixlen > 32:
        raise ValueError(f"a /{prefixlen} does not fit in {supernet}")
    size = 1 << (32 - prefixlen)
    start, end = int(supernet.network_address), int(supernet.broadcast_address)
    taken = sorted((int(u.network_address), int(u.broadcast_address)) for u in used)
    cursor = start
    while cursor + size - 1 <= end:
        block_end = cursor + size - 1
        clash = [t_end for t_start, t_end in taken if t_start <= block_end and t_end >= cursor]
        if not clash:
            return IPv4Network((cursor, prefixlen))
        # jump past the furthest clashing range, to the next aligned boundary
        cursor = ((max(clash) + 1 + size - 1) // size) * size
    raise AddressPlanExhausted(f"no free /{prefixlen} left in {supernet}")


@dataclass(frozen=True)
class AddressPlan:
    system_cidr: IPv4Network
    gpu_cidr: IPv4Network
    gpu_subnets: int  # GPU NIC subnets carved from gpu_cidr (0: no GPU fabric)
    gpu_subnet_prefix: int
    avoided: tuple[UsedRange, ...]
    reasons: tuple[str, ...]


def plan_addresses(max_nodes: int, extra_vms: int, gpu_subnets: int, used: list[UsedRange]) -> AddressPlan:
    """System and GPU ranges for a pool of `max_nodes` nodes (+ `extra_vms` on the system VPC)."""
    taken = [u.cidr for u in used]
    sys_prefix = system_prefix(max_nodes + extra_vms)
    system = allocate(sys_prefix, SYSTEM_SUPERNET, taken)
    g_prefix, per_subnet = gpu_prefix(max_nodes, gpu_subnets)
    gpu = allocate(g_prefix, GPU_SUPERNET, [*taken, system])
    reasons = [
        f"system_cidr {system}: lowest free /{sys_prefix} in {SYSTEM_SUPERNET} "
        f"({system.num_addresses - GCE_RESERVED_PER_SUBNET} addresses for {max_nodes + extra_vms} VMs)",
    ]
    if gpu_subnets:
        reasons.append(
            f"gpu_cidr {gpu}: lowest free /{g_prefix} in {GPU_SUPERNET}, {gpu_subnets} GPU NIC subnets of "
            f"/{per_subnet} ({(1 << (32 - per_subnet)) - GCE_RESERVED_PER_SUBNET} addresses each, "
            f"{HEADROOM}x the {max_nodes} nodes)"
        )
    else:
        reasons.append(f"gpu_cidr {gpu}: no GPU NICs on this machine type; /{g_prefix} reserved to keep the plan clean")
    if used:
        reasons.append(f"avoided {len(used)} range(s) used by other stacks or reserved")
    return AddressPlan(system, gpu, gpu_subnets, per_subnet, tuple(used), tuple(reasons))


@dataclass(frozen=True)
class GkeRanges:
    pods_cidr: IPv4Network
    services_cidr: IPv4Network
    master_cidr: IPv4Network
    reasons: tuple[str, ...]


def plan_gke_ranges(used: list[UsedRange], own: Iterable[IPv4Network]) -> GkeRanges:
    """A GKE cluster's pod, service and control-plane ranges, clear of `used` and of the stack's `own` ranges."""
    taken = [*(u.cidr for u in used), *own]
    pods = allocate(GKE_PODS_PREFIX, GKE_SUPERNET, taken)
    services = allocate(GKE_SERVICES_PREFIX, GKE_SUPERNET, [*taken, pods])
    master = allocate(GKE_MASTER_PREFIX, GKE_MASTER_SUPERNET, taken)
    return GkeRanges(
        pods,
        services,
        master,
        (
            f"gke pods_cidr {pods}, services_cidr {services}: lowest free /{GKE_PODS_PREFIX} and "
            f"/{GKE_SERVICES_PREFIX} in {GKE_SUPERNET}; master_cidr {master}: lowest free /{GKE_MASTER_PREFIX} in "
            f"{GKE_MASTER_SUPERNET}",
        ),
    )
