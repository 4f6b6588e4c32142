"""Scheduled snapshots of a zonal disk: a GCE snapshot schedule (`compute.ResourcePolicy`) attached to it.

The controller's state disk holds what a cluster cannot rebuild: slurmctld's StateSaveLocation (the queue, the
job-ID counter), the accounting database (MariaDB's datadir) and the autoscaler's store.  It outlives the VM and
Pulumi protects it, but a zonal disk is still one disk: a bad `DROP`, a corrupt database or a deleted disk loses
every job record.  A snapshot schedule keeps crash-consistent copies (InnoDB and slurmctld's state files recover
from a crash-consistent image as from a power cut), incremental after the first, for `keep_days`; they are kept
when the disk itself is deleted (`KEEP_AUTO_SNAPSHOTS`), which is when they matter most.

GCE's rules, checked here so that `pulumi up` is never the first to say so (cloud.google.com/compute/docs/disks/
scheduled-snapshots; pulumi-gcp `ResourcePolicySnapshotSchedulePolicy...Args`): a schedule starts on the hour,
in UTC; a daily one in one of the 4-hour windows 00:00, 04:00, ... 20:00 with `days_in_cycle` 1; an hourly one
every `hours_in_cycle` hours; a disk carries one snapshot schedule at a time.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import pulumi
import pulumi_gcp as gcp

#: where a daily schedule may start (UTC): GCE's 4-hour windows
DAILY_START_HOURS = (0, 4, 8, 12, 16, 20)
#: gpu-fleet's own upper bound on retention (ten years), so a typo is refused before `pulumi up`
MAX_KEEP_DAYS = 3650
_ON_THE_HOUR = re.compile(r"(?P<hour>[01]\d|2[0-3]):00")


@dataclass(frozen=True)
class SnapshotSchedule:
    """interval_hours: 24 (a daily schedule) or 1-23 (hourly); start_time: "HH:00" UTC; keep_days: retention."""

    interval_hours: int = 24
    start_time: str = "04:00"
    keep_days: int = 14

    def __post_init__(self) -> None:
        if not 1 <= self.interval_hours <= 24:
            raise ValueError(f"interval_hours: 1-23 (hourly) or 24 (daily), got {self.interval_hours}")
        on_the_hour = _ON_THE_HOUR.fullmatch(self.start_time)
        if not on_the_hour:
            raise ValueError(f"start_time: a snapshot schedule starts on the hour, UTC (HH:00): {self.start_time!r}")
        if self.interval_hours == 24 and int(on_the_hour["hour"]) not in DAILY_START_HOURS:
            windows = ", ".join(f"{h:02d}:00" for h in DAILY_START_HOURS)
            raise ValueError(f"start_time: a daily schedule starts at one of {windows} UTC, got {self.start_time!r}")
        if not 1 <= self.keep_days <= MAX_KEEP_DAYS:
            raise ValueError(f"keep_days: 1-{MAX_KEEP_DAYS}, got {self.keep_days}")


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
