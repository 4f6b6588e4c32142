"""Resume calls that never reached the daemon: names Slurm is powering up that nothing explains.

slurmctld hands a power-up to ResumeProgram once (deploy/slurm/resume.sh -> `autoscaler.slurm.hook`, a row in the
state store).  If that call fails (the store locked past the hook's 10 s, a disk full, a Python that does not
start, slurmscriptd losing the script) nothing asks again: the node stays POWERING_UP with its job CONFIGURING until
ResumeTimeout (the stacks render 1800 s), then goes DOWN and the job is requeued.  slurmctld logs only an exit
status (23.11 not even that without DebugFlags=Script).

`LostResumes.due` finds the managed names Slurm reports POWERING_UP (and not powering down: an aborted boot) that
have no open resume row, no launch intent and no instance for longer than a grace (`loop.lost_resume_grace_s`,
default 60 s: a hook call takes well under a second and waits at most 10 s for the store), so the tick queues the
resume itself, with the jobs Slurm bound to each name, as the hook would have.  The clock of each name is this
process's own (a restart begins it again).  Pure apart from that memory."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from autoscaler.daemon.snapshot import NameIndex
from autoscaler.model import Pool
from autoscaler.slurm.readers import SlurmJob, SlurmNode


@dataclass
class LostResumes:
    grace_s: float = 60.0
    _since: dict[str, float] = field(default_factory=dict)  # unexplained power-up -> first seen

    def due(
        self,
        pools: Sequence[Pool],
        snodes: Mapping[str, SlurmNode],
        explained: Collection[str],
        now: float,
    ) -> list[str]:
        """Names to resume on the hook's behalf: managed, POWERING_UP, not in `explained` (open resume rows, launch
        intents, live instances) for at least `grace_s`.  Names that became explained or stopped powering up are
        forgotten; a name returned is forgotten too (its row explains it from the next tick)."""
        index = NameIndex(pools)
        unexplained = {
            name
            for name, node in snodes.items()
            if _resuming(node) and name not in explained and index.pool_of(name) is not None
        }
        self._since = {n: self._since.get(n, now) for n in unexplained}
        due = sorted(n for n, t in self._since.items() if now - t >= self.grace_s)
        for n in due:
            del self._since[n]
        return due


def _resuming(node: SlurmNode) -> bool:
    """POWERING_UP and not on its way down: a boot aborted (`power_down_force`) or timed out may show both flags a
    while, and its instance is gone on purpose."""
    return node.powering_up and not (node.powering_down or node.down)


def bound_jobs(names: Iterable[str], jobs: Sequence[SlurmJob]) -> dict[str, list[int]]:
    """Name -> the jobs Slurm allocated it to (what SLURM_RESUME_FILE would have told the hook)."""
    wanted = set(names)
    out: dict[str, list[int]] = {}
    for j in jobs:
        for n in j.nodes:
            if n in wanted:
                out.setdefault(n, []).append(j.job_id)
    return out
