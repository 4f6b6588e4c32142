"""Storage and Slurm defaults sized for a pool, each with the reason it was chosen.

The thresholds are rules of thumb from the public GPU cluster blueprints (Cluster Toolkit A3
Mega / A3 Ultra / A4 Slurm blueprints): a small Filestore /home for a few nodes, a zonal
instance when tens of nodes share it, a Managed Lustre scratch when many 8-GPU nodes read
training data at once, and a larger Slurm controller as the node count grows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from fleet.catalog import CapacityType, MachineType

FLEX_START_MAX_TIME = "7-00:00:00"  # flex-start (DWS) VMs run for at most 7 days
LUSTRE_MIN_NODES = 32  # 8-GPU nodes with a GPU fabric from which a scratch file system pays off
LUSTRE_GIB_PER_32_NODES = 18000  # Managed Lustre's minimum size, per 32 nodes


@dataclass(frozen=True)
class StoragePlan:
    home_tier: str
    home_capacity_gb: int
    scratch_capacity_gib: int | None  # None: no Lustre scratch
    reasons: tuple[str, ...]

    def spec(self) -> dict:
        out: dict = {"home": {"tier": self.home_tier, "capacity_gb": self.home_capacity_gb}, "checkpoints": {}}
        if self.scratch_capacity_gib:
            out["scratch"] = {"capacity_gib": self.scratch_capacity_gib}
        return out


@dataclass(frozen=True)
class SlurmPlan:
    controller_machine_type: str
    login_machine_type: str
    login_nodes: int
    suspend_time: int | None  # None: left to the default (the settings rule's longest idle keep + one tick)
    resume_timeout: int
    reasons: tuple[str, ...]

    @property
    def vms(self) -> int:
        return 1 + self.login_nodes

    def spec(self, pool: str, capacity: CapacityType) -> dict:
        return {
            "controller_machine_type": self.controller_machine_type,
            "login_machine_type": self.login_machine_type,
            "login_nodes": self.login_nodes,
            **({"suspend_time": self.suspend_time} if self.suspend_time is not None else {}),
            "resume_timeout": self.resume_timeout,
            "partitions": [
                {
                    "name": "gpu",
                    "pools": [pool],
                    "default": True,
                    "spot_tolerant": capacity is CapacityType.SPOT,
                    # a flex-start VM lives at most 7 days: no job may be promised longer
                    **({"max_time": FLEX_START_MAX_TIME} if capacity is CapacityType.FLEX_START else {}),
                }
            ],
        }


def plan_storage(machine: MachineType, nodes: int) -> StoragePlan:
    if nodes <= 8:
        tier, gb, why = "BASIC_SSD", 2560, f"{nodes} node(s): Basic SSD Filestore, its minimum 2.5 TB"
    elif nodes <= 64:
        tier, gb, why = "ZONAL", 5120, f"{nodes} nodes: zonal Filestore (5 TB) for /home shared by tens of nodes"
    else:
        tier, gb, why = "ZONAL", 10240, f"{nodes} nodes: zonal Filestore at 10 TB, where its throughput scales up"
    reasons = [f"/home {why}", "checkpoints: a GCS bucket in the region (soft delete 7 days)"]
    scratch = None
    if nodes >= LUSTRE_MIN_NODES and machine.nics.fabric != "none":
        scratch = LUSTRE_GIB_PER_32_NODES * math.ceil(nodes / 32)
        reasons.append(f"/scratch Managed Lustre {scratch:,} GiB ({LUSTRE_GIB_PER_32_NODES:,} GiB per 32 nodes)")
    else:
        reasons.append(f"no Lustre scratch (pays off from {LUSTRE_MIN_NODES} fabric-attached 8-GPU nodes)")
    return StoragePlan(tier, gb, scratch, tuple(reasons))


def plan_slurm(machine: MachineType, nodes: int) -> SlurmPlan:
    if nodes <= 64:
        controller = "n2-standard-8"
    elif nodes <= 512:
        controller = "n2-standard-16"
    else:
        controller = "n2-standard-32"
    login = 1 if nodes <= 64 else 2
    big = machine.gpu_count == 8 and machine.nics.fabric != "none"
    # 8-GPU fabric VMs take minutes to boot (large images, GPU NIC set-up): a longer idle time
    # before power-down avoids paying boot time again for the next job, and registration waits longer.
    # Other machines keep the default SuspendTime: the settings rule's longest idle keep + one tick.
    suspend = 600 if big else None
    resume = 1800 if big else 900
    why = "8-GPU fabric VMs boot slowly" if big else "small VMs"
    shown = f"SuspendTime {suspend}s" if suspend is not None else "SuspendTime the autoscaler's longest idle keep"
    reasons = (
        f"controller {controller} for {nodes} node(s), {login} login node(s)",
        f"{shown}, ResumeTimeout {resume}s ({why})",
    )
    return SlurmPlan(controller, "n2-standard-4", login, suspend, resume, reasons)
