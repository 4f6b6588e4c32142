"""Best fit on the reservation: the node Weights the daemon keeps on reserved nodes.

slurmctld 22.05 with topology/tree, as the stack renders it, gives a job the node that needs no power-up with the
lowest Weight that fits, then the lowest index (tests/e2e/test_weights.py).  On a reservation whose nodes all have
the rendered Weight that is first fit: a 1-GPU job takes an empty reserved node ahead of a partly used one, and
the next 8-GPU job finds the reservation's free GPUs in pieces and overflows to on-demand.  (Without topology/tree
22.05 does pick the fuller node; with it, it does not: both measured on a real slurmctld.)  Reserved GPUs are paid
for whether used or not, so the cheapest place for small work is the fullest reserved node it fits, which keeps
whole nodes free for whole-node jobs.

So the decision core sets each registered reserved node's Weight to its rendered Weight plus its free GPUs: the
fullest node that fits wins, an empty one comes last, and a node never leaves its capacity tier (a tier spans
thousands of Weights, a node has at most 8 free GPUs).  Nodes that need a power-up keep whatever they had: slurmctld
puts them after every registered node anyway.  The daemon applies the changes each tick with `scontrol update
nodename=... weight=...` (a `scontrol reconfigure` puts the rendered Weights back; the next tick re-applies them),
and the replay's simulated Slurm gets the same Weights at the same ticks.  Between two ticks the Weights are as
the last tick left them, in both.

Pure: the callers read the nodes and apply the changes."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from autoscaler.model import Pool
from fleet.catalog import CapacityType, load_catalog
from fleet.slurm.weights import pool_weights

__all__ = ["ReservedNode", "rendered_weights", "reservation_weights", "weight_changes"]


@dataclass(frozen=True)
class ReservedNode:
    """A registered (powered-up) node as the scheduler reports it: its pool, GPUs and GPUs allocated."""

    name: str
    pool: str
    gpus: int
    gpus_used: int


def rendered_weights(pools: Sequence[Pool]) -> dict[str, int]:
    """Pool name -> the Weight `fleet render slurm-conf` gives its nodes (`fleet.slurm.weights.pool_weights` over
    the cluster's pools, priced in the pools' region)."""
    zones = [z for p in pools for z in p.zones]
    region = zones[0].rsplit("-", 1)[0] if zones else ""
    return pool_weights(((p.name, p.capacity_type, p.machine_type) for p in pools), load_catalog(), region)


def reservation_weights(
    pools: Iterable[Pool], base: Mapping[str, int], nodes: Iterable[ReservedNode]
) -> dict[str, int]:
    """Node name -> the Weight it should have, for the registered nodes of reservation pools: the pool's rendered
    Weight (`base`) plus the node's free GPUs.  Nodes of other pools are not in the result."""
    reserved = {p.name for p in pools if p.capacity_type is CapacityType.RESERVATION and p.name in base}
    return {n.name: base[n.pool] + max(0, n.gpus - n.gpus_used) for n in nodes if n.pool in reserved and n.gpus > 0}


def weight_changes(desired: Mapping[str, int], current: Mapping[str, int | None]) -> dict[int, tuple[str, ...]]:
    """Weight -> the nodes to set to it (those whose current Weight differs, or is not known), names sorted: one
    `scontrol update` per Weight."""
    out: dict[int, list[str]] = {}
    for name, w in desired.items():
        if current.get(name) != w:
            out.setdefault(w, []).append(name)
    return {w: tuple(sorted(names)) for w, names in sorted(out.items())}
