"""Reusable test harnesses (real Slurm on this host: `tests.harness.slurm`)."""
