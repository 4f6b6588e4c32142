"""Slurm artefacts generated from the fleet spec (`slurm.conf`, `gres.conf`, `cgroup.conf`)."""

from fleet.slurm.conf import Nodeset, SlurmConf, node_name_prefix, render_slurm_conf

__all__ = ["Nodeset", "SlurmConf", "node_name_prefix", "render_slurm_conf"]
