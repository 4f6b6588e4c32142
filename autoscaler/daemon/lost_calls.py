"""Power-hook calls that never reached the daemon: names whose Slurm power state nothing the daemon knows explains.

slurmctld hands each power change to its program once (deploy/slurm/resume.sh and suspend.sh ->
`autoscaler.slurm.hook`, a row in the state store).  If that call fails (the store locked past the hook's 10 s, a
disk full, a Python that does not start, slurmscriptd losing the script) nothing asks again, and slurmctld logs only
an exit status (23.11 not even that without DebugFlags=Script):

- a lost **resume**: the node stays POWERING_UP with its job CONFIGURING until ResumeTimeout (the stacks render
  1800 s), then goes DOWN and the job is requeued;
- a lost **suspend**: the node reads POWERED_DOWN, and its instance, a GPU VM, runs on unbilled to any job for as
  long as nobody looks (the daemon holds the name for it, so it is no orphan either);
- a lost **resume-fail** (ResumeFailProgram, after ResumeTimeout): the node stays DOWN, "ResumeTimeout reached",
  out of service until an admin resumes it, the offering that failed is not remembered, and an instance that came
  up too late runs on behind it.

`LostCalls.due` finds the managed names in one of those states (`resuming`, `suspended`, `resume_timed_out`) that
nothing explains (an open power row, a launch intent; for a resume also a live instance, for a suspend the lack of
one) for longer than a grace (`loop.lost_resume_grace_s`, `lost_suspend_grace_s`, `lost_resume_fail_grace_s`,
default 60 s: a hook call takes well under a second and waits at most 10 s for the store), so the tick queues the
call itself, as the hook would have.  The clock of each name is this process's own (a restart begins it again).
Pure apart from that memory."""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from autoscaler.daemon.snapshot import NameIndex
from autoscaler.model import Pool
from autoscaler.slurm.readers import SlurmJob, SlurmNode


def resuming(node: SlurmNode) -> bool:
    """POWERING_UP and not on its way down: a boot aborted (`power_down_force`) or timed out may show both flags a
    while, and its instance is gone on purpose."""
    return node.powering_up and not (node.powering_down or node.down)


def suspended(node: SlurmNode) -> bool:
    """Powered down and done with it: not powering up or down again, no job, not DOWN (a ResumeTimeout's node is
    DOWN and POWERED_DOWN, and ResumeFailProgram, not SuspendProgram, is its call)."""
    return node.powered_down and not (node.powering_up or node.powering_down or node.down or node.has_work)


#: the reason slurmctld gives the node it puts DOWN at ResumeTimeout (power_save.c, 22.05 and 23.11); 22.05 makes it
#: the node's reason, 23.11 appends it to the one the node had (`set_node_reason`: "<old> : ResumeTimeout reached")
RESUME_TIMEOUT_REASON = "ResumeTimeout reached"


def resume_timed_out(node: SlurmNode) -> bool:
    """DOWN and POWERED_DOWN for ResumeTimeout (its reason says so: an admin's DOWN is left alone)."""
    timed_out = RESUME_TIMEOUT_REASON in node.reason.split(" : ")
    return node.powered_down and node.down and not node.powering_up and timed_out


@dataclass
class LostCalls:
    in_state: Callable[[SlurmNode], bool]  # `resuming`, `suspended` or `resume_timed_out`
    grace_s: float = 60.0
    _since: dict[str, float] = field(default_factory=dict)  # unexplained name -> first seen

    def due(
        self,
        pools: Sequence[Pool],
        snodes: Mapping[str, SlurmNode],
        explained: Collection[str],
        now: float,
    ) -> list[str]:
        """Names to call the hook for: managed, `in_state`, not in `explained` for at least `grace_s`.  Names that
        became explained or left the state are forgotten; a name returned is forgotten too (its row explains it
        from the next tick)."""
        index = NameIndex(pools)
        unexplained = {
            name
            for name, node in snodes.items()
            if self.in_state(node) and name not in explained and index.pool_of(name) is not None
        }
        self._since = {n: self._since.get(n, now) for n in unexplained}
        due = sorted(n for n, t in self._since.items() if now - t >= self.grace_s)
        for n in due:
            del self._since[n]
        return due


def bound_jobs(names: Iterable[str], jobs: Sequence[SlurmJob]) -> dict[str, list[int]]:
    """Name -> the jobs Slurm allocated it to (what SLURM_RESUME_FILE would have told the hook)."""
    wanted = set(names)
    out: dict[str, list[int]] = {}
    for j in jobs:
        for n in j.nodes:
            if n in wanted:
                out.setdefault(n, []).append(j.job_id)
    return out
