"""The one error every Slurm client raises when the controller cannot be read or written: the daemon then skips
scale-down for that tick instead of acting on a stale view."""

from __future__ import annotations


class SlurmUnavailable(RuntimeError):
    """slurmctld did not answer (or answered with an error)."""
