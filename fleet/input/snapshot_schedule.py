"""What GCE accepts in a disk snapshot schedule, checked before `pulumi up` would be the first to say so.

cloud.google.com/compute/docs/disks/scheduled-snapshots and pulumi-gcp's
`ResourcePolicySnapshotSchedulePolicy...Args`: a schedule starts on the hour, in UTC; a daily one (`days_in_cycle`
1) in one of the 4-hour windows 00:00, 04:00, ... 20:00; an hourly one every `hours_in_cycle` hours.  The fleet
spec (`slurm.state_snapshots`) and the Pulumi component (`components.gcp.snapshots.SnapshotSchedule`) both check
a schedule with `schedule_error`, so the two cannot drift apart.  Pure."""

from __future__ import annotations

import re

#: where a daily schedule may start (UTC): GCE's 4-hour windows
DAILY_START_HOURS = (0, 4, 8, 12, 16, 20)
#: 24: a daily schedule; fewer: an hourly one, every that many hours
MAX_INTERVAL_HOURS = 24
#: gpu-fleet's own upper bound on retention (ten years), so a typo is refused before `pulumi up`
MAX_KEEP_DAYS = 3650
#: "HH:00", UTC
START_TIME_PATTERN = r"^([01][0-9]|2[0-3]):00$"


def schedule_error(interval_hours: int, start_time: str, keep_days: int) -> str | None:
    """Why GCE (or gpu-fleet's bound) would refuse this schedule, `field: reason`; None when it would not."""
    if not 1 <= interval_hours <= MAX_INTERVAL_HOURS:
        return f"interval_hours: 1-23 (hourly) or 24 (daily), got {interval_hours}"
    if not re.fullmatch(START_TIME_PATTERN, start_time):
        return f"start_time: a snapshot schedule starts on the hour, UTC (HH:00): {start_time!r}"
    if interval_hours == MAX_INTERVAL_HOURS and int(start_time[:2]) not in DAILY_START_HOURS:
        windows = ", ".join(f"{h:02d}:00" for h in DAILY_START_HOURS[:-1]) + f" or {DAILY_START_HOURS[-1]:02d}:00"
        return f"start_time: a daily snapshot schedule starts at {windows} UTC (GCE's windows), got {start_time!r}"
    if not 1 <= keep_days <= MAX_KEEP_DAYS:
        return f"keep_days: 1-{MAX_KEEP_DAYS}, got {keep_days}"
    return None
