"""Scheduled snapshots of a zonal disk: a GCE snapshot schedule (`compute.ResourcePolicy`) attached to it.

The controller's state disk holds what a cluster cannot rebuild: slurmctld's StateSaveLocation (the queue, the
job-ID counter), the accounting database (MariaDB's datadir) and the autoscaler's store.  It outlives the VM and
Pulumi protects it, but a zonal disk is still one disk: a bad `DROP`, a corrupt database or a deleted disk loses
every job record.  A snapshot schedule keeps crash-consistent copies (InnoDB and slurmctld's state files recover
from a crash-consistent image as from a power cut), incremental after the first, for `keep_days`; they are kept
when the disk itself is deleted (`KEEP_AUTO_SNAPSHOTS`), which is when they matter most.

A schedule GCE would refuse is refused here first (`fleet.input.snapshot_schedule`, the rules the fleet spec
checks too); a disk carries one snapshot schedule at a time.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_gcp as gcp

from fleet.input.snapshot_schedule import schedule_error


@dataclass(frozen=True)
class SnapshotSchedule:
    """interval_hours: 24 (a daily schedule) or 1-23 (hourly); start_time: "HH:00" UTC; keep_days: retention."""

    interval_hours: int = 24
    start_time: str = "04:00"
    keep_days: int = 14

    def __post_init__(self) -> None:
        if error := schedule_error(self.interval_hours, self.start_time, self.keep_days):
            raise ValueError(error)


def snapshot_schedule_policy(
    schedule: SnapshotSchedule, labels: dict[str, str]
) -> gcp.compute.ResourcePolicySnapshotSchedulePolicyArgs:
    """The `snapshot_schedule_policy` argument of a `compute.ResourcePolicy` for `schedule`."""
    every = gcp.compute.ResourcePolicySnapshotSchedulePolicyScheduleArgs(
        daily_schedule=gcp.compute.ResourcePolicySnapshotSchedulePolicyScheduleDailyScheduleArgs(
            days_in_cycle=1, start_time=schedule.start_time
        )
        if schedule.interval_hours == 24
        else None,
        hourly_schedule=gcp.compute.ResourcePolicySnapshotSchedulePolicyScheduleHourlyScheduleArgs(
            hours_in_cycle=schedule.interval_hours, start_time=schedule.start_time
        )
        if schedule.interval_hours < 24
        else None,
    )
    return gcp.compute.ResourcePolicySnapshotSchedulePolicyArgs(
        schedule=every,
        retention_policy=gcp.compute.ResourcePolicySnapshotSchedulePolicyRetentionPolicyArgs(
            max_retention_days=schedule.keep_days, on_source_disk_delete="KEEP_AUTO_SNAPSHOTS"
        ),
        # guest_flush off: it asks the guest agent for an application-consistent flush (a Windows VSS feature;
        # on Linux only with a pre/post script on the VM); the state disk's contents recover from a crash image
        snapshot_properties=gcp.compute.ResourcePolicySnapshotSchedulePolicySnapshotPropertiesArgs(
            labels=labels, guest_flush=False
        ),
    )


def attach_snapshot_schedule(
    name: str,
    disk: gcp.compute.Disk,
    schedule: SnapshotSchedule,
    *,
    project: str,
    zone: str,
    labels: dict[str, str],
    parent: pulumi.Resource,
) -> tuple[gcp.compute.ResourcePolicy, gcp.compute.DiskResourcePolicyAttachment]:
    """A snapshot schedule in the disk's region and its attachment to `disk`.  A changed schedule is a new policy
    (GCE's are immutable): the old attachment goes first (`delete_before_replace`: a disk takes one schedule)."""
    policy = gcp.compute.ResourcePolicy(
        f"{name}-snapshots",
        project=project,
        region=zone.rsplit("-", 1)[0],
        description=disk.name.apply(lambda disk_name: f"scheduled snapshots of disk {disk_name} (gpu-fleet)"),
        snapshot_schedule_policy=snapshot_schedule_policy(schedule, labels),
        opts=pulumi.ResourceOptions(parent=parent),
    )
    attachment = gcp.compute.DiskResourcePolicyAttachment(
        f"{name}-snapshots",
        name=policy.name,
        disk=disk.name,
        project=project,
        zone=zone,
        opts=pulumi.ResourceOptions(parent=parent, delete_before_replace=True),
    )
    return policy, attachment
