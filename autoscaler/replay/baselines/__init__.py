"""Baseline scaling policies the replay compares gpu-fleet against, each imitating a real system.

- `static-peak` (static_peak.py): a fixed fleet sized to the trace's peak, always on.
- `slurm-power-save` (slurm_power_save.py): slurm-gcp power saving on 8-GPU nodes.
- `ca-like` (ca_like.py): Kubernetes Cluster Autoscaler with fixed 8-GPU node groups.
- `karpenter-like` (karpenter_like.py): Karpenter's provisioner and consolidation.
- `exact-fit` (exact_fit.py): one node of the smallest fitting shape per job, deleted at its end (the floor)."""

from autoscaler.replay.baselines.ca_like import CaLikePolicy
from autoscaler.replay.baselines.exact_fit import ExactFitPolicy
from autoscaler.replay.baselines.karpenter_like import KarpenterLikePolicy
from autoscaler.replay.baselines.slurm_power_save import SlurmPowerSavePolicy
from autoscaler.replay.baselines.static_peak import StaticPeakPolicy

__all__ = ["CaLikePolicy", "ExactFitPolicy", "KarpenterLikePolicy", "SlurmPowerSavePolicy", "StaticPeakPolicy"]
