"""Which EpilogSlurmctld wake-ups a tick settles (pure: the store's open rows and this tick's Slurm reads in).

slurmctld runs EpilogSlurmctld as the job turns COMPLETING, before its nodes are free: on slurmctld 22.05 the
hook fires while `sinfo` still shows the node `mixed` (no compute-node Epilog: idle ~0.5 s later) or
`completing` (until the compute node's Epilog returns), see docs/autoscaler.md "Job end".  So a wake-up stays
open until a tick's view shows each of the job's nodes freed - no work on it (idle, powered down, powering
down), no longer known to Slurm, or busy with *another* job (that job's end brings its own wake-up) - and the
run loop's watcher keeps ticking about once a second while one is open.  The tick that settles a row is the one
whose plan saw the nodes free and scaled them down (or kept them, as the policy says).  A row older than
`give_up_s` is settled anyway (a node stuck completing: the regular poll takes over).  The rows must be read
before Slurm is: a row written after the read would otherwise be settled by a view from before its job ended.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from autoscaler.daemon.state import JobEndRow
from autoscaler.slurm.readers import SlurmJob, SlurmNode

#: a job's own states that mean it still holds its nodes for work (COMPLETING is the ended job winding down)
OTHER_WORK_STATES = frozenset({"RUNNING", "CONFIGURING", "SUSPENDED"})
#: stop waiting for a node that does not clear (a stuck Epilog, a dead slurmd): the poll frees it later
GIVE_UP_S = 120.0


def node_freed(name: str, job_id: int | None, nodes: Mapping[str, SlurmNode], working: Mapping[str, set[int]]) -> bool:
    """`name` has no work left from `job_id`: no work at all, unknown to Slurm, or a job of its own runs there."""
    node = nodes.get(name)
    if node is None or not node.has_work:
        return True
    return bool(working.get(name, set()) - {job_id})


def settled(
    rows: Sequence[JobEndRow],
    nodes: Mapping[str, SlurmNode] | None,
    jobs: Sequence[SlurmJob] | None,
    now: float,
    *,
    give_up_s: float = GIVE_UP_S,
) -> list[JobEndRow]:
    """The rows this tick's view settles (see the module docstring); none while Slurm does not answer, except
    rows past `give_up_s`."""
    working: dict[str, set[int]] = {}
    for j in jobs or ():
        if j.state in OTHER_WORK_STATES:
            for n in j.nodes:
                working.setdefault(n, set()).add(j.job_id)
    answered = nodes is not None and jobs is not None

    def freed(row: JobEndRow) -> bool:
        return answered and all(node_freed(n, row.job_id, nodes or {}, working) for n in row.names)

    return [row for row in rows if now - row.at >= give_up_s or freed(row)]
