"""The submit wake-up file of strict late binding: where the rendered job_submit.lua writes, where the daemon looks.

Under late binding no powered-down name is allocatable, so a submission makes slurmctld call no ResumeProgram and
the daemon would hear of the job only at its next poll.  The job_submit.lua the stack renders then rewrites this
file at every submission (`fleet.slurm.job_submit`, constrain mode) and the run loop's 1 s watcher starts a tick
when its modification time changes (`autoscaler.daemon.loop`).  It lives beside the state store, in the directory
the Slurm hooks already write to as SlurmUser (deploy/systemd: StateDirectory=gpu-fleet)."""

from __future__ import annotations

from pathlib import Path

SUBMIT_WAKE_NAME = "submit-wake"
#: the daemon's state store as the stacks deploy it: `state_path`'s default (autoscaler.daemon.config) and the
#: hooks' (autoscaler.slurm.handoff, without $GPU_FLEET_AUTOSCALER_STATE)
DEPLOYED_STATE = Path("/var/lib/gpu-fleet/autoscaler.db")


def submit_wake_path(state_path: Path = DEPLOYED_STATE) -> Path:
    """The wake-up file for the daemon whose state store is `state_path`."""
    return state_path.parent / SUBMIT_WAKE_NAME
