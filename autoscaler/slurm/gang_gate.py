"""The gang gate on Slurm: what the stack's job_submit.lua writes on a gang and how the daemon recognises it.

slurmctld tries a job at submission.  A gang (a multi-node job) in a pool the daemon does not hold (no strict late
binding: a reservation fleet's overflow, or `late_bind` off) then gets the nodes that need no power-up first and
powered-down names for the rest, all in one pool; the nodes that were up wait, allocated and idle, for the others'
boot (partial-gang waste), and they are lost to the single-node work they were kept warm for.  Nothing the daemon
does after the allocation undoes it: a CONFIGURING job cannot be given an `ExcNodeList`, and requeueing one breaks
its GPU steps on 22.05 (bench/probe_requeue_configuring.py).  So the daemon must see the gang first.

Where `Policy.gates_gangs` (`fleet.slurm.policy.gates_gangs`), the rendered job_submit.lua (`fleet.slurm.job_submit`)
gives each multi-node job (`-N`, or more GPUs than its partition's largest node holds: `--gpus=16` on 8-GPU nodes, the
node count `autoscaler.slurm.readers.parse_job` reads) that names no BeginTime and carries no AdminComment a BeginTime
`GANG_GATE_S` ahead and the AdminComment `GANG_GATE_MARK`, and touches the daemon's wake-up file as for every
submission.  The daemon's tick then releases it at once (`scontrol update jobid=N StartTime=now`, with an `ExcNodeList`
of the nodes that are up unless nodes ready now hold it whole: `autoscaler.core.gang_exclusion.gate_exclusion`), in one
command, so slurmctld's first try already keeps it off them: it boots whole, on powered-down names.  The gate fails
open: a daemon that is down leaves the gang to slurmctld `GANG_GATE_S` after its submission, as without the gate.

Measured on slurmctld 22.05.8 (bench/probe_gang_gate.py): the lua's BeginTime shows as reason `BeginTime`; the
update is taken at once and the gang is allocated 0.19-0.24 s later; without the gate it gets the up node plus a
powered-down one at submission, with it two powered-down names.  A user's own `--begin` (or `--begin=now`) and an
AdminComment (users cannot set one; the constrain-mode lua's `RIGHT_SIZED_MARK` is never on a gated fleet) leave
the job ungated, and neither a released gang nor a requeued one's BeginTime (slurmctld's requeue hold) is taken
for the gate: a release moves the BeginTime to its own time, and a requeued job (squeue's ``restart_cnt``) is never
the lua's (`is_gated`: its hold is cred_expire after a new submission stamp, which a cluster with
``cred_expire=30``, as the test harness, would otherwise read as the gate's 30 s).

A gang slurmctld cannot try yet for a reason of its own (a dependency not yet met, a user's or an admin's hold:
`BLOCKED_REASONS`, and `SlurmJob.blocked`) would outlive the lua's 30 s: once the dependency is met or the hold
released, slurmctld would try it at once and give it the warm nodes plus powered-down names.  So the daemon keeps
such a gang behind the gate with a *lease*: while it is blocked, each tick that finds its BeginTime within half a
lease of lapsing moves it `lease_s` ahead and writes that time into the AdminComment (`lease_mark`: the mark, ``@``
and the epoch), all the tick's gangs in one ``scontrol update jobid=<list>``.  Once unblocked, the gang shows
reason `BeginTime` behind its lease and the daemon releases it like a fresh one.  The lease fails open as the gate
does: a daemon that stops renewing it leaves the gang to slurmctld within `lease_s`.  Measured on slurmctld 22.05.8
(bench/probe_gang_lease.py): a dependent gang shows reason `Dependency` and ``dependency`` ``afterok:N(unfulfilled)``
from its submission; a lease update leaves the dependency and sets the reason to None until slurmctld's next pass
(so the dependency, not the reason, says it is blocked); once the dependency is met the ``dependency`` is empty and
the reason `BeginTime`.  A held gang shows `JobHeldUser` (priority 0) before and after a lease."""

from __future__ import annotations

__all__ = [
    "BLOCKED_REASONS",
    "GANG_GATE_MARK",
    "GANG_GATE_S",
    "GATED_REASONS",
    "gate_time",
    "is_gated",
    "is_marked",
    "lease_due",
    "lease_mark",
    "lease_s",
]

#: the AdminComment the job_submit.lua sets on a gang it gated
GANG_GATE_MARK = "gpu-fleet:gang-gated"
#: how far ahead of its submission the lua sets a gated gang's BeginTime: how long a gang waits for a daemon
#: that is down before slurmctld tries it anyway (the daemon's submit wake-up releases it within a second or two)
GANG_GATE_S = 30
#: the reasons slurmctld 22.05.8 shows on a gated gang: `BeginTime` once its first pass has seen the job, "None"
#: before it (a submit wake-up's tick can read it then: tests/slurm_source/test_slurmrestd.py), and
#: `ReqNodeNotAvail`, set at submission when its partition's nodes are drained or down (held pools; every node of
#: the partition in tests/slurm/test_job_submit_gpus.py)
GATED_REASONS = frozenset({"BeginTime", "None", "ReqNodeNotAvail"})


#: the reasons slurmctld gives a pending job it cannot try whatever the nodes: a dependency not yet met, a hold
#: (priority 0).  A dependency is also read from the job's ``dependency``: its reason is None for a moment after any
#: update of the job
BLOCKED_REASONS = frozenset({"Dependency", "JobHeldUser", "JobHeldAdmin"})


def lease_mark(until: int) -> str:
    """The AdminComment of a gang the daemon keeps behind the gate until `until` (epoch seconds, its BeginTime)."""
    return f"{GANG_GATE_MARK}@{until}"


def is_marked(admin_comment: str) -> bool:
    """The AdminComment is the gate's: the lua's mark, or a lease's (`lease_mark`)."""
    head, at, epoch = admin_comment.partition("@")
    return head == GANG_GATE_MARK and (not at or epoch.isdigit())


def gate_time(admin_comment: str, submit_time: float, restarts: int = 0) -> float | None:
    """When the gate a gang carries lapses: `GANG_GATE_S` after its submission for the lua's mark (the lua runs at
    the submission only, so not once slurmctld requeued the job: `restarts`, squeue's ``restart_cnt``), the epoch
    of a lease (`lease_mark`); None for a job the gate never marked."""
    if not is_marked(admin_comment):
        return None
    if admin_comment == GANG_GATE_MARK:
        return submit_time + GANG_GATE_S if restarts == 0 else None
    return float(admin_comment.partition("@")[2])


def is_gated(
    reason: str, admin_comment: str, submit_time: float, eligible_time: float | None, restarts: int = 0
) -> bool:
    """Whether a pending job is a gang the lua gated (or the daemon leased) and nobody released yet: the mark, and
    the BeginTime its gate set (`gate_time`; one second of slack: the lua and slurmctld read the clock apart).  A
    release moves the BeginTime to the release's time.  A requeue stamps a new submission and holds the job
    cred_expire after it (120 s by default; 30 s, the gate's own, with the test harness's ``cred_expire=30``), so a
    requeued job (`restarts`) is never taken for the lua's gate.  The reason is one of `GATED_REASONS`.  A gang still
    blocked (`SlurmJob.blocked`) is not gated yet: it is leased."""
    at = gate_time(admin_comment, submit_time, restarts)
    return reason in GATED_REASONS and at is not None and eligible_time is not None and abs(eligible_time - at) <= 1


def lease_s(interval_s: float) -> float:
    """How far ahead a lease puts a blocked gang's BeginTime: the lua's `GANG_GATE_S`, or three polls where the
    daemon polls slower than every 10 s, so a lease renewed at half its length never lapses between two ticks."""
    return max(float(GANG_GATE_S), 3.0 * interval_s)


def lease_due(admin_comment: str, eligible_time: float | None, now: float, length_s: float) -> bool:
    """Whether a blocked gang's gate must be renewed this tick: it carries the gate's mark (`is_marked`) and its
    BeginTime lapses within half a lease (`length_s`), or has lapsed (a daemon that was down)."""
    return is_marked(admin_comment) and (eligible_time is None or eligible_time - now < length_s / 2)
