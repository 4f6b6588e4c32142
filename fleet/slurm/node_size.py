"""What a node of a machine type offers Slurm jobs: its RealMemory as `fleet render slurm-conf` writes it.

One definition for the slurm.conf NodeName lines (`fleet.slurm.conf`) and the job_submit.lua's right-sizing
(`fleet.slurm.job_submit`, which must not constrain a job to a machine type whose nodes lack the memory it asks)."""

from __future__ import annotations

from fleet.catalog import MachineType

__all__ = ["MEMORY_HEADROOM", "MEMORY_RESERVED_MIB", "real_memory_mib"]

MEMORY_HEADROOM = 0.05  # guest kernel + OS daemons; a node reporting less than RealMemory is drained
MEMORY_RESERVED_MIB = 1024


def real_memory_mib(machine: MachineType) -> int:
    """RealMemory for a machine type: the catalog memory less headroom (never more than the guest sees)."""
    return int(machine.memory_gib * 1024 * (1 - MEMORY_HEADROOM)) - MEMORY_RESERVED_MIB
