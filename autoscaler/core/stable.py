"""Until when the decision core's answer stays the same if nothing but the clock moves.

`queue_depth`, `serve_resumes` and the plan under them read the clock only through thresholds, each crossed at
one instant:

- a pending unit's batch window and batch idle time (`planner.core.batch_hold`, `core.decide.queue_depth`'s
  bound work), its flex-start wait (`Policy.flex_start_allowed`) and the preemption grace
  (`core.hold.preemption_places`): `submit_time` + each of them;
- a node's boot timeout (`planner.scale_down.boot_timeouts`) and idle timeout (`scale_down_idle`): `since` + each;
- a backed-off offering's expiry (`model.policy.active_unavailable`): `until`;
- a released held name's grace (`core.hold.RELEASE_GRACE_S`, the caller's outstanding count): when + grace.

So with the same queue, nodes, offerings, backoff memory and policy, the commands at any instant before the earliest
of those (taken at or after `now`: a threshold crossed exactly at `now` may flip just after it) are the commands at
`now`.  A caller that has seen a decision issue nothing, and knows nothing else changed, may take that decision
as made again until `stable_until`: the replay does, for the daemon's 10 s polls while jobs wait for their boots
(`autoscaler/replay/gpu_fleet.py`).  Settings that a rule refreshes on a grid (`core.settings`) are the caller's
to add: the policy is an input here.

Pure: no I/O, no clock.  A new clock-reading rule in the core must add its threshold here;
tests/planner/test_stable.py replays the core at instants just before and at each bound to keep this list honest.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from autoscaler.core.hold import PREEMPT_GRACE_S, RELEASE_GRACE_S
from autoscaler.model import Node, Policy, UnavailableOffering, WorkUnit


def stable_until(
    now: float,
    units: Iterable[WorkUnit],
    nodes: Iterable[Node],
    policy: Policy,
    memory: Iterable[UnavailableOffering] = (),
    released_at: Iterable[float] = (),
) -> float:
    """The earliest instant at or after `now` at which a clock threshold of the decision core is crossed for these
    pending `units`, live `nodes`, backoff `memory` and held names released at `released_at` (inf: none)."""
    waits = [policy.batch_window_s, policy.batch_idle_s, PREEMPT_GRACE_S]
    if policy.flex_start_queues:
        waits.append(policy.flex_start_max_wait_s)
    first = math.inf
    for u in units:
        for w in waits:
            t = u.submit_time + w
            if now <= t < first:
                first = t
    timeouts: dict[str, tuple[float, ...]] = {}  # machine type -> its boot and idle timeouts
    boot = () if policy.boot_timeout_s is None else (policy.boot_timeout_s,)
    for n in nodes:
        m = n.offering.machine_type
        node_waits = timeouts.get(m)
        if node_waits is None:
            node_waits = timeouts[m] = (*boot, policy.idle_timeout_for(m))
        for w in node_waits:
            t = n.since + w
            if now <= t < first:
                first = t
    for u in memory:
        if now <= u.until < first:
            first = u.until
    for at in released_at:
        t = at + RELEASE_GRACE_S
        if now <= t < first:
            first = t
    return first
