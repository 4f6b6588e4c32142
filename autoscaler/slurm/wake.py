"""The submit wake-up file of held pools: where the rendered job_submit.lua writes, where the daemon looks.

A held pool's powered-down names are not allocatable (strict late binding holds every pool; the reservation and
preemption holds the overflow: `autoscaler.core.hold`), so a submission for one makes slurmctld call no ResumeProgram
and the daemon would hear of the job only at its next poll. Wherever the daemon may hold pools
(`fleet.slurm.policy.submit_wakes_daemon`) the job_submit.lua the stack renders rewrites this file at every submission
(`fleet.slurm.job_submit`), and while the daemon holds a pool its run loop's 1 s watcher starts a tick when the file's
modification time changes (`autoscaler.daemon.loop`; before the twenty-sixth round only under late binding, so a job for
the held overflow waited up to a poll, 10 s, for its release). It lives beside the state store, in the directory the
Slurm hooks already write to as SlurmUser (deploy/systemd: StateDirectory=gpu-fleet)."""

from __future__ import annotations

from pathlib import Path

SUBMIT_WAKE_NAME = "submit-wake"
#: the daemon's state store as the stacks deploy it: `state_path`'s default (autoscaler.daemon.config) and the
#: hooks' (autoscaler.slurm.handoff, without $GPU_FLEET_AUTOSCALER_STATE)
DEPLOYED_STATE = Path("/var/lib/gpu-fleet/autoscaler.db")


def submit_wake_path(state_path: Path = DEPLOYED_STATE) -> Path:
    """The wake-up file for the daemon whose state store is `state_path`."""
    return state_path.parent / SUBMIT_WAKE_NAME
