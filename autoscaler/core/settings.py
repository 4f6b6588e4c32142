"""The settings a running fleet runs with: the settings rule over what the fleet has observed so far.

The settings rule (`autoscaler.planner.rule.policy_for`) turns facts (boot time, prices, reserved nodes, the
arrival rate per shape, the mean run time) into the idle keep, the warm cap and the reservation hold.  A daemon
does not know the future: it knows the jobs it has seen.  `SettingsTracker` is the one place where those facts
are gathered and the rule is applied, and both callers use it the same way:

- the Slurm daemon (`autoscaler/daemon/tick.py`) feeds it the jobs its state store has seen in squeue
  (submit time, nodes, GPUs per node, and the run time once a job has left the queue);
- the replay's gpu-fleet (`autoscaler/replay/gpu_fleet.py`) feeds it the jobs the simulated Slurm has seen up to
  the replay's clock, never the trace's future.

What it does, on a grid of `refresh_s` (default 10 min) from `since`: the settings in force at `now` are the rule's
over the facts as they stood at the last grid point, so they do not depend on when the caller happens to ask (the
daemon ticks every 10 s, the replay when something happens; both get the same settings from the same history):

- **Arrivals** are counted over the last `window_s` (default one day, so a diurnal cycle is averaged) of
  submissions seen since `since` (when observation began: the daemon's first tick on this store, the replay's
  start), over that span.  A span shorter than `MIN_SPAN_S` is counted as `MIN_SPAN_S`, so an hour-old daemon
  does not read one early job as a high rate (it under- rather than over-keeps: the cheap side).
- **Mean run** is the mean of the runs of jobs that have ended within the window (None until one has: no
  reservation hold, no run cap on the warm pool).
- **Reserved nodes** are the reservation pools' sizes.
- **Boot time**: `boot_s` (the daemon: the config's `expected_boot_s`, else `DEFAULT_BOOT_S`; the replay:
  the scenario's boot time).
- **Explicit settings win**: a field the operator set in the config (`explicit`) is never replaced by the rule
  (pinning `idle_timeout_s: 600` pins it; leaving it out lets the rule decide).

Pure: no I/O, no clock; the callers pass `now` and the history.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace

from autoscaler.cloud import Offering
from autoscaler.model import Policy, Pool
from autoscaler.planner.reuse import MIN_SPELLS, free_gaps, standby_use
from autoscaler.planner.rule import (
    FleetFacts,
    ShapeFacts,
    break_even_idle_s,
    idle_keep_s,
    observed_facts,
    policy_for,
    right_sizer,
)
from fleet.catalog import CapacityType

#: boot time the daemon assumes when the config gives none: GCE create to slurmd registered for an A3 node with
#: the accelerator image (`fleet simulate --boot-seconds` defaults to the same figure)
DEFAULT_BOOT_S = 360.0
DEFAULT_WINDOW_S = 86_400.0
DEFAULT_REFRESH_S = 600.0
MIN_SPAN_S = 3_600.0

#: the Policy fields the rule derives (autoscaler.planner.rule.policy_for); any other field is the config's
DERIVED_FIELDS = frozenset(
    {
        "idle_timeout_s",
        "idle_timeout_by_machine",
        "idle_keep_max_by_machine",
        "standby_by_machine",
        "batch_window_s",
        "batch_idle_s",
        "defragment",
        "expected_run_s",
        "expected_boot_s",
    }
)


@dataclass(frozen=True)
class SeenJob:
    """A job as the queue source saw it: submitted at `submit` with `nodes` x `gpus_per_node`; once it left the
    queue, when (`ended_at`) and how long it ran (`run_s`: None when it never started, e.g. cancelled pending)."""

    submit: float
    nodes: int
    gpus_per_node: int
    ended_at: float | None = None
    run_s: float | None = None


def reserved_nodes(pools: Iterable[Pool]) -> int:
    """Nodes of paid-for reservation capacity: the reservation pools' maximum sizes."""
    return sum(p.max_nodes for p in pools if p.capacity_type is CapacityType.RESERVATION)


def facts_at(
    history: Sequence[SeenJob],
    at: float,
    *,
    offerings: Iterable[Offering],
    pools: Iterable[Pool],
    boot_s: float,
    wait_value_usd_per_gpu_hour: float | None,
    span_s: float,
    reservation_hold_max_s: float = 0.0,
) -> FleetFacts:
    """The rule's facts at `at` from `history`: the jobs seen by `at` that were submitted in the `span_s` before it
    (the caller's window); a run counts once its job ended by `at`."""
    seen = [j for j in history if j.submit <= at]
    recent = [
        (j.submit, j.nodes, j.gpus_per_node, j.run_s if j.ended_at is not None and j.ended_at <= at else None)
        for j in seen
    ]
    facts = observed_facts(
        offerings,
        boot_s,
        recent,
        now=at,
        window_s=max(span_s, MIN_SPAN_S),
        reserved_nodes=reserved_nodes(pools),
        wait_value_usd_per_gpu_hour=wait_value_usd_per_gpu_hour,
        reservation_hold_max_s=reservation_hold_max_s,
    )
    return with_reuse(facts, seen, at, max(span_s, MIN_SPAN_S))


def with_reuse(facts: FleetFacts, seen: Sequence[SeenJob], at: float, span_s: float = 0.0) -> FleetFacts:
    """`facts` with each shape's measured reuse gaps (`autoscaler.planner.reuse`): how long the nodes the seen
    jobs freed stayed idle before a job of their shape took them, over each shape's break-even time; and, when
    waiting is valued, the measured use of its standby nodes over the `span_s` the jobs were seen in."""
    horizons = {}
    for s in facts.shapes:
        t = break_even_idle_s(facts.boot_s, s.usd_per_gpu_hour, facts.wait_value(s))
        if 0 < t < math.inf:
            horizons[s.machine_type] = t
    events = []
    shape_for = right_sizer(facts.shapes)
    for j in seen:
        shape = shape_for(j.gpus_per_node)
        if shape is not None:
            events.append((shape.machine_type, j.submit, j.ended_at, j.nodes, j.gpus_per_node))
    # a job smaller than its shape's node shares one (a 1-GPU job where the family's smallest machine has 8 GPUs)
    gaps = free_gaps(events, at, horizons, {s.machine_type: s.gpus for s in facts.shapes})
    shapes = tuple(replace(s, reuse_gaps=gaps.get(s.machine_type, ())) for s in facts.shapes)
    shapes = tuple(replace(s, standby_use=_standby_use(facts, s, events, at, span_s)) for s in shapes)
    return replace(facts, shapes=shapes)


def _standby_use(
    facts: FleetFacts,
    shape: ShapeFacts,
    events: Sequence[tuple[str, float, float | None, int, int]],
    at: float,
    span_s: float,
) -> tuple[float, ...] | None:
    """The shape's measured standby use (`reuse.standby_use`) for the arrivals its idle keep (the rule's, from the
    same history) leaves waiting; None (Erlang's formula decides) with fewer than `MIN_SPELLS` nodes seen
    arriving, and not computed when waiting is not valued (no standby then)."""
    w = facts.wait_value(shape)
    if w <= 0 or span_s <= 0:
        return None
    mine = [e for e in events if e[0] == shape.machine_type]
    arrivals = [(submit, nodes) for _, submit, _, nodes, _ in mine]
    if sum(n for _, n in arrivals) < MIN_SPELLS:
        return None
    ends = [(end, nodes) for _, _, end, nodes, _ in mine if end is not None and end <= at]
    keep = idle_keep_s(shape, facts.boot_s, w)
    return standby_use(arrivals, facts.boot_s, span_s, ends, keep if math.isfinite(keep) else span_s)


def shown_settings(policy: Policy) -> tuple[object, ...]:
    """The settings an operator reads in a daemon's log: idle keep, warm cap and standby per shape, reservation hold,
    the expected run (both daemons log a change of these)."""
    return (
        dict(policy.idle_timeout_by_machine),
        dict(policy.idle_keep_max_by_machine),
        dict(policy.standby_by_machine),
        policy.batch_window_s,
        policy.expected_run_s,
    )


#: derived fields that only make sense together: setting one of a group pins the whole group (`idle_timeout_s:
#: 600` means 600 s for every shape, not 600 s overridden per shape by the rule's keep and warm cap)
PINNED_TOGETHER = (
    frozenset({"idle_timeout_s", "idle_timeout_by_machine", "idle_keep_max_by_machine"}),
    frozenset({"batch_window_s", "batch_idle_s"}),
)


def settings_policy(base: Policy, explicit: Iterable[str], facts: FleetFacts) -> Policy:
    """`policy_for(facts)` on top of `base`, with the fields the operator set explicitly kept as set (and the
    rest of their `PINNED_TOGETHER` group as `base` has it)."""
    given = set(explicit) & DERIVED_FIELDS
    for group in PINNED_TOGETHER:
        if given & group:
            given |= group
    derived = policy_for(facts, base=base)
    pinned = {f: getattr(base, f) for f in given}
    return replace(derived, **pinned) if pinned else derived


@dataclass
class ArrivalLog:
    """Arrivals a queue source saw, by its own key (a ProvisioningRequest): when first seen, and the `SeenJob`
    (with its end and run once the source saw it end: `ended`).
    `history` is what `SettingsTracker.current` reads; it also forgets what was submitted before the window it is
    asked for (the window's start only moves forward)."""

    entries: dict[str, tuple[float, SeenJob]] = field(default_factory=dict)

    def see(self, key: str, now: float, job: SeenJob) -> None:
        self.entries.setdefault(key, (now, job))

    def ended(self, key: str, at: float, run_s: float) -> None:
        """The arrival `key` was seen ended at `at` after running `run_s` (its first report stands; an arrival
        not seen, or forgotten, is not added: its submission is unknown)."""
        entry = self.entries.get(key)
        if entry is not None and entry[1].ended_at is None:
            self.entries[key] = (entry[0], replace(entry[1], ended_at=at, run_s=run_s))

    def history(self, start: float, at: float) -> list[SeenJob]:
        """The jobs seen by `at` and submitted in [start, at], by submit time."""
        self.entries = {k: e for k, e in self.entries.items() if e[1].submit >= start}
        seen = (j for first, j in self.entries.values() if first <= at and j.submit <= at)
        return sorted(seen, key=lambda j: j.submit)


@dataclass
class SettingsTracker:
    """The current settings, refreshed every `refresh_s` from the observed history (see the module doc)."""

    base: Policy
    boot_s: float = DEFAULT_BOOT_S
    explicit: frozenset[str] = frozenset()
    window_s: float = DEFAULT_WINDOW_S
    refresh_s: float = DEFAULT_REFRESH_S
    policy: Policy | None = None
    facts: FleetFacts | None = None
    computed_at: float | None = None
    refreshes: int = 0
    changes: int = 0
    #: (when, settings) at each change, the latest `log_limit` of them (a daemon runs for months)
    log: list[tuple[float, Policy]] = field(default_factory=list)
    log_limit: int = 10_000

    def grid_point(self, now: float, since: float) -> float:
        """The last refresh point at or before `now`: `since` + k * `refresh_s`."""
        if now <= since:
            return since
        return since + ((now - since) // self.refresh_s) * self.refresh_s

    def current(
        self,
        now: float,
        since: float,
        *,
        offerings: Callable[[], Iterable[Offering]] | Iterable[Offering],
        pools: Iterable[Pool],
        history: Callable[[float, float], Sequence[SeenJob]],
    ) -> Policy:
        """The settings at `now`: the rule's at the last grid point `at`.  `history(start, at)` gives the jobs seen
        by `at` that were submitted in [start, at] (start: `since` or one window before `at`); it and a callable
        `offerings` are only called when the grid point is new."""
        at = self.grid_point(now, since)
        if self.policy is not None and at == self.computed_at:
            return self.policy
        offs = offerings() if callable(offerings) else offerings
        start = max(since, at - self.window_s)
        self.facts = facts_at(
            history(start, at),
            at,
            offerings=offs,
            pools=pools,
            boot_s=self.boot_s,
            wait_value_usd_per_gpu_hour=self.base.wait_value_usd_per_gpu_hour,
            span_s=at - start,
            reservation_hold_max_s=self.base.reservation_hold_max_s,
        )
        policy = settings_policy(self.base, self.explicit, self.facts)
        if policy != self.policy:
            self.changes += 1
            self.log.append((at, policy))
            if len(self.log) > self.log_limit:
                del self.log[0]
        self.policy, self.computed_at = policy, at
        self.refreshes += 1
        return policy
