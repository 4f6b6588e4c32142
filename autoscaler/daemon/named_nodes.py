"""Pending jobs whose nodes are fixed, under a hold: which held names to release for them.

A job that names its nodes (``-w``/``--nodelist``: all of them) or was submitted to an advanced reservation
(``--reservation``: any of its nodes) runs there or not at all.  A plan by pool would boot the lowest free name of a
pool, which such a job cannot use: it stayed pending for good, and the booted node idled (shown on slurmctld 22.05.8,
docs/autoscaler.md "Jobs whose nodes are fixed").  So the daemon plans no unit for it (`SlurmJob.nodes_fixed`) and,
where its nodes are held powered-down names, releases them, as slurmctld would have allocated them at its submission
without the hold.  Only for a job slurmctld has tried (its first pass may start it on nodes that are up) and that
can run (no dependency or hold).  Pure."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Sequence

from autoscaler.slurm.readers import SlurmJob


def waiting_on_fixed_nodes(job: SlurmJob) -> bool:
    """Pending on nodes it fixed, tried by slurmctld, and able to run."""
    return job.pending and job.nodes_fixed and job.tried and not job.blocked


def fixed_node_releases(
    jobs: Sequence[SlurmJob], candidates: Sequence[str], outstanding: Collection[str] = ()
) -> list[str]:
    """The held names to release, in `candidates`' order (held powered-down names the daemon drained, lowest first):
    every candidate a waiting job names; and per reservation as many of its candidates as its waiting jobs need
    nodes, less its names released already and not allocated yet (`outstanding`: slurmctld takes them within a
    second; counted, they are not released twice)."""
    waiting = [j for j in jobs if waiting_on_fixed_nodes(j)]
    named = {n for j in waiting for n in j.required_nodes}
    need: dict[str, int] = defaultdict(int)
    members: dict[str, frozenset[str]] = {}
    for j in waiting:
        if j.reservation and not j.required_nodes:
            need[j.reservation] += j.node_count
            members[j.reservation] = frozenset(j.reservation_nodes)
    out = [n for n in candidates if n in named]
    taken = set(out)
    for resv, count in need.items():
        count -= sum(1 for n in outstanding if n in members[resv])
        for n in candidates:
            if count <= 0:
                break
            if n in members[resv] and n not in taken:
                out.append(n)
                taken.add(n)
                count -= 1
    order = {n: i for i, n in enumerate(candidates)}
    return sorted(out, key=order.__getitem__)
