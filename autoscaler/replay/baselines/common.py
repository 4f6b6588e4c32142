"""Helpers the baselines share: what pending work is not covered by capacity already on the way,
first-fit packing of single-node jobs into new nodes, and picking and deleting empty nodes."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from autoscaler.model import DeleteNodes
from autoscaler.replay.state import ClusterState, Job, SimNode


def uncovered(state: ClusterState, fits: Callable[[Job, SimNode], bool] | None = None) -> tuple[list[Job], list[Job]]:
    """(single-node jobs, gang jobs) pending with no capacity coming for them.

    A job is covered by nodes nominated for it (a gang by all of them); a single-node job also by
    free GPUs of a booting node it may use (first fit, FIFO), the way a scheduler counts nodes that
    are coming up."""
    room: list[tuple[SimNode, list[int]]] = [
        (n, [n.free]) for n in state.booting.values() if n.nominated_for is None and n.free > 0
    ]
    singles: list[Job] = []
    gangs: list[Job] = []
    for job in state.pending():
        if job.is_gang:
            if len(job.nominated) < job.nodes:
                gangs.append(job)
            continue
        if job.nominated:
            continue  # the node launched for it is on the way
        for node, free in room:
            if free[0] >= job.gpus_per_node and (not node.spot or job.spot_ok) and (fits is None or fits(job, node)):
                free[0] -= job.gpus_per_node
                break
        else:
            singles.append(job)
    return singles, gangs


def first_fit(jobs: Iterable[Job], node_gpus: int) -> list[list[Job]]:
    """Pack single-node jobs, in order, into as few `node_gpus`-GPU nodes as first fit gives."""
    bins: list[tuple[int, list[Job]]] = []
    for job in jobs:
        for i, (free, members) in enumerate(bins):
            if free >= job.gpus_per_node:
                members.append(job)
                bins[i] = (free - job.gpus_per_node, members)
                break
        else:
            bins.append((node_gpus - job.gpus_per_node, [job]))
    return [members for _, members in bins]


def empty_nodes(state: ClusterState, now: float, *, idle_for_s: float, limit: int) -> list[SimNode]:
    """At most `limit` idle nodes, in idle order, with no jobs, not nominated for a job and idle for at
    least `idle_for_s` seconds at `now` (compared as the due time `since + idle_for_s <= now`, the time a
    policy's wake-up is scheduled for: `now - since >= idle_for_s` can miss it by a rounding error)."""
    out: list[SimNode] = []
    for n in state.idle.values():
        if len(out) >= limit:
            break
        if n.jobs or n.nominated_for is not None or n.since + idle_for_s > now:
            continue
        out.append(n)
    return out


def delete_per_pool(nodes: Iterable[SimNode], reason: str) -> list[DeleteNodes]:
    """One `DeleteNodes` per pool for `nodes`, pools and names in the order given."""
    victims: dict[str, list[str]] = {}
    for n in nodes:
        victims.setdefault(n.pool, []).append(n.name)
    return [DeleteNodes(p, tuple(names), reason) for p, names in victims.items()]
