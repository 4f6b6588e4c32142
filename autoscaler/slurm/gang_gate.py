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
for the gate: a release moves the BeginTime to its own time, the hold puts it long after (`is_gated`)."""

from __future__ import annotations

__all__ = ["GANG_GATE_MARK", "GANG_GATE_S", "GATED_REASONS", "is_gated"]

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


def is_gated(reason: str, admin_comment: str, submit_time: float, eligible_time: float | None) -> bool:
    """Whether a pending job is a gang the lua gated and nobody released yet: the mark, and the lua's BeginTime,
    `GANG_GATE_S` after its submission (one second of slack: the lua and slurmctld read the clock apart).  A release
    moves the BeginTime to the release's time, a requeue hold to long after; the reason is one of
    `GATED_REASONS`."""
    return (
        reason in GATED_REASONS
        and admin_comment == GANG_GATE_MARK
        and eligible_time is not None
        and abs(eligible_time - submit_time - GANG_GATE_S) <= 1
    )
