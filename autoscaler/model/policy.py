"""Policy: the limits and knobs the planner obeys, and the memory of offerings that failed.

`UnavailableOffering` entries are an *input* to the planner: the caller (daemon, simulator)
records launch failures with `record_failure` and passes the memory to `plan()`, which ignores
expired entries and returns the still-active ones in `Plan.unavailable` for the next call.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from autoscaler.cloud import FailureKind, OfferingKey
from autoscaler.model.demand import WorkUnit
from fleet.catalog import CapacityType

#: the default value of one GPU-hour of a job waiting: 0, the cheapest settings (docs/planner.md).  None means the
#: on-demand $/GPU-h of the job's shape (a GPU-hour of work delayed is worth what the team pays to run one).
DEFAULT_WAIT_VALUE_USD_PER_GPU_HOUR: float | None = 0.0
#: the most standby nodes the settings rule keeps per shape: what slurmctld keeps up per pool (SuspendExcNodes
#: `<pool's nodes>:16`) when the daemon is down, the cost exposed then
DEFAULT_STANDBY_MAX_NODES = 16


@dataclass(frozen=True)
class Policy:
    """Knobs and limits of one planning loop (all optional; None = no limit).

    Limits: `max_nodes` / `max_gpus` (whole fleet, live nodes counted), `pool_max_nodes` /
    `pool_max_gpus` (per pool, on top of each pool's own max), `budget_usd_per_hour` (cap on the
    summed $/h of live non-reservation nodes: reservation capacity is paid whether used or not,
    so it neither counts against nor is limited by the budget).

    Timing: `batch_window_s` / `batch_idle_s` hold new launches while demand is still arriving
    (Karpenter's batch max / idle durations: launch once the newest pending unit is `batch_idle_s`
    old, or the oldest is `batch_window_s` old; 0 = launch at once).  `idle_timeout_s`: a ready-idle
    node older than this is drained, then deleted.  `backoff_s` / `backoff_max_s`: how long a failed
    offering is skipped (doubling on repeated failures).  `boot_timeout_s`: delete nodes stuck booting.

    Capacity rules: `spot_queues` (queues whose spot-tolerant units may use spot; None = any queue),
    `spot_max_node_hours` (spot only for units whose nodes x time limit is at most this many
    node-hours, where the time limit is known: a long gang restarts from scratch on every preemption),
    `flex_start_queues` (queues that may wait for flex-start capacity) and `flex_start_max_wait_s`
    (a unit that has waited longer takes immediate capacity instead), `keep_reserved_nodes`
    (never scale down reservation-backed nodes).

    Wait against cost: `wait_value_usd_per_gpu_hour` is what one GPU-hour of a job waiting is worth
    (default 0: the cheapest settings; None: the on-demand $/GPU-h of the job's shape; higher values buy
    warm capacity and shorter waits).  The planner itself only reads the settings
    derived from it (`autoscaler.planner.rule.policy_for` turns it, the boot time, the prices and the
    observed arrival rate into idle-keep times and the reservation hold; docs/planner.md).
    `idle_timeout_by_machine` (machine type -> seconds) overrides `idle_timeout_s` per shape, and
    `idle_keep_max_by_machine` (machine type -> nodes) caps how many idle nodes of a shape are kept
    warm at once (the most recently idle; the others are drained at once); `warm_cap` False (an operator's
    setting, not the rule's) leaves that cap out, so every idle node of a kept shape stays for its idle timeout.
    `standby_by_machine` (machine
    type -> nodes) keeps that many idle nodes of a shape up at all times, replenished as jobs take them
    (`autoscaler.planner.standby`; 0 unless waiting is valued), at most `standby_max_nodes` per shape (the bound
    the stack also renders into SuspendExcNodes, so that slurmctld does not power standby nodes down).
    `defragment`: small work never pins a node of a larger shape when a smaller shape costs no more
    per GPU-hour (no placement that would leave it oversized; a partly used oversized node is
    cordoned: it takes no new work and is deleted once its running work ends).  `expected_run_s` /
    `expected_boot_s` (observed mean run time, launch-to-ready time): a single unit reuses a running
    node only when that is cheaper over its expected run than new capacity it may use (an idle
    on-demand node for a long spot-tolerant job is not: spot costs less, boot and wait included)."""

    max_nodes: int | None = None
    max_gpus: int | None = None
    pool_max_nodes: Mapping[str, int] = field(default_factory=dict)
    pool_max_gpus: Mapping[str, int] = field(default_factory=dict)
    budget_usd_per_hour: float | None = None
    batch_window_s: float = 0.0
    batch_idle_s: float = 0.0
    idle_timeout_s: float = 300.0
    backoff_s: float = 600.0
    backoff_max_s: float = 3600.0
    boot_timeout_s: float | None = None
    spot_queues: frozenset[str] | None = None
    spot_max_node_hours: float | None = None
    flex_start_queues: frozenset[str] = frozenset()
    flex_start_max_wait_s: float = 0.0
    keep_reserved_nodes: bool = True
    #: launch every slot of a reservation pool up front and keep it (`autoscaler.planner.minimum.pool_floor`), as
    #: Cluster Toolkit's reservation blueprints run reserved nodes static: the reservation bills either way, and a
    #: reserved node that is up spares its jobs a boot and a gang the wait of reserved nodes for its other nodes
    #: (only while `keep_reserved_nodes`)
    launch_reserved_nodes: bool = True
    wait_value_usd_per_gpu_hour: float | None = DEFAULT_WAIT_VALUE_USD_PER_GPU_HOUR
    idle_timeout_by_machine: Mapping[str, float] = field(default_factory=dict)
    idle_keep_max_by_machine: Mapping[str, int] = field(default_factory=dict)
    #: False: the settings rule sets no warm-node cap (`idle_keep_max_by_machine` stays empty): every idle node of a
    #: shape the rule keeps stays for the break-even time.  Buys the tail of the wait (p95) at high wait values.
    warm_cap: bool = True
    standby_by_machine: Mapping[str, int] = field(default_factory=dict)
    standby_max_nodes: int = DEFAULT_STANDBY_MAX_NODES
    defragment: bool = True
    expected_run_s: float | None = None
    expected_boot_s: float = 0.0
    #: the operator's hold budget: how long the settings rule may hold a unit for reserved capacity on top of its
    #: boot (0, the default: never; autoscaler/planner/rule.py `reservation_hold_s`)
    reservation_hold_max_s: float = 0.0
    #: take reserved capacity back from spot-tolerant work: the stack renders Slurm's partition-priority preemption
    #: (spot-tolerant partitions at a lower PriorityTier, `PreemptMode=REQUEUE`) and, with a reservation and a spot
    #: pool, the daemon holds the on-demand overflow pools (`autoscaler.core.hold`) so that a job that may not use
    #: spot and finds the reservation full requeues spot-tolerant jobs off it (they resume from their checkpoint on
    #: spot) instead of powering up on-demand capacity; a job preemption cannot place is released to the overflow
    #: at the daemon's next tick
    preempt_spot: bool = True
    #: strict late binding, on a fleet without reservation pools (`autoscaler.core.hold.late_binding`): every pool is
    #: held (powered-down names drained), the stack's job_submit.lua gives each GPU job its right-sized machine type
    #: as a hard `--constraint`, and for a job Slurm could not place the daemon boots held names *drained* and
    #: undrains each once it registered, so a pending job takes whichever node of its shape frees or comes up first
    #: (docs/autoscaler.md "Late binding")
    late_bind: bool = True
    #: small work shares larger nodes (an operator's setting, off by default; docs/planner.md "Shared nodes"): among
    #: shapes of one machine series at one $/GPU-h, the settings rule keeps the largest warm for the GPU-weighted
    #: arrivals of them all, the planner packs single-node work onto the free GPUs of any of them (no placement cap,
    #: no cordon: `defragment` is off) and launches the largest for it, and under strict late binding the stack's
    #: job_submit.lua lets each job take any of them (`fleet.slurm.job_submit`).  Buys short waits for small jobs at
    #: a wait value where right-sized warm nodes of each shape would cost more; costs fragmentation at a wait
    #: value of 0
    share_nodes: bool = False
    #: gangs wait for the daemon before slurmctld first tries them, wherever a pool may not be held (no strict late
    #: binding: `gates_gangs`): the stack's job_submit.lua gives a multi-node job a BeginTime `GANG_GATE_S` ahead
    #: (fail-open) and the daemon's next tick releases it at once, with an `ExcNodeList` of the nodes that are up
    #: unless nodes ready now hold it whole (`autoscaler.core.gang_exclusion.gate_exclusion`): slurmctld would
    #: otherwise give it the nodes that are up plus powered-down names, and the up nodes would wait, allocated and
    #: idle, for the others' boot (docs/autoscaler.md "The gang gate")
    gang_gate: bool = True

    def __post_init__(self) -> None:
        flags = ("keep_reserved_nodes", "launch_reserved_nodes", "defragment", "warm_cap", "preempt_spot", "late_bind")
        for name in (*flags, "share_nodes", "gang_gate"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"Policy.{name}: must be true or false, got {getattr(self, name)!r}")
        for name in (
            "max_nodes",
            "max_gpus",
            "budget_usd_per_hour",
            "boot_timeout_s",
            "spot_max_node_hours",
            "expected_run_s",
            "wait_value_usd_per_gpu_hour",
        ):
            v = getattr(self, name)
            if v is not None:
                _check_number(name, v, whole=name in COUNT_FIELDS)
        for name in (
            "batch_window_s",
            "batch_idle_s",
            "idle_timeout_s",
            "backoff_s",
            "backoff_max_s",
            "expected_boot_s",
            "reservation_hold_max_s",
            "standby_max_nodes",
        ):
            _check_number(name, getattr(self, name), whole=name in COUNT_FIELDS)
        for name in (
            "pool_max_nodes",
            "pool_max_gpus",
            "idle_timeout_by_machine",
            "idle_keep_max_by_machine",
            "standby_by_machine",
        ):
            m = getattr(self, name)
            if not isinstance(m, Mapping):
                raise ValueError(f"Policy.{name}: must be a mapping of names to numbers, got {m!r}")
            for key, v in m.items():
                if not isinstance(key, str):
                    raise ValueError(f"Policy.{name}: keys must be names, got {key!r}")
                _check_number(f"{name}[{key!r}]", v, whole=name in COUNT_FIELDS)
        if self.spot_queues is not None and not isinstance(self.spot_queues, frozenset):
            object.__setattr__(self, "spot_queues", frozenset(self.spot_queues))
        if not isinstance(self.flex_start_queues, frozenset):
            object.__setattr__(self, "flex_start_queues", frozenset(self.flex_start_queues))

    def binds_late(self, capacity_types: Iterable[CapacityType]) -> bool:
        """Strict late binding is on for a fleet whose pools have `capacity_types`: `late_bind` and no reservation
        pool.  With a reservation the hold decides which overflow to release, and a reserved node a booting job takes
        is one the next arrival would have taken (measured worse: docs/simulate.md "Strict late binding").  The one
        rule behind the daemon's hold (`autoscaler.core.hold.late_binding`) and the stack's job_submit.lua
        (`fleet.slurm.policy.late_binding_constrains`)."""
        return self.late_bind and CapacityType.RESERVATION not in set(capacity_types)

    def may_hold(self, capacity_types: Iterable[CapacityType]) -> bool:
        """Whether the daemon may keep pools of a fleet whose pools have `capacity_types` unavailable to Slurm
        (`autoscaler.core.hold.held_pools`): every pool under strict late binding (`binds_late`); with a reservation
        pool, the other pools under the reservation hold or the preemption hold, which the settings rule can turn on
        and off while the daemon runs.  With `gates_gangs`, the rule for what the daemon releases to slurmctld
        (`releases_jobs`)."""
        kinds = set(capacity_types)
        return self.binds_late(kinds) or (CapacityType.RESERVATION in kinds and len(kinds) > 1)

    def gates_gangs(self, capacity_types: Iterable[CapacityType]) -> bool:
        """Whether gangs wait for the daemon before slurmctld first tries them (`gang_gate`) on a fleet whose pools
        have `capacity_types`: wherever strict late binding is off (`binds_late`), since only then may a pool be
        unheld, its powered-down names allocatable at submission; not on a fleet of reservation pools whose nodes
        are all launched up front (`launch_reserved_nodes`: no name waits powered down).  The one rule behind the
        stack's job_submit.lua gate, the daemon's release and the replay's model of them."""
        kinds = set(capacity_types)
        if not self.gang_gate or self.binds_late(kinds):
            return False
        up_front = self.keep_reserved_nodes and self.launch_reserved_nodes
        return bool(kinds - {CapacityType.RESERVATION}) or not up_front

    def releases_jobs(self, capacity_types: Iterable[CapacityType]) -> bool:
        """Whether the daemon may release jobs to slurmctld on a fleet whose pools have `capacity_types`: names of
        pools it holds (`may_hold`) or gangs it gated (`gates_gangs`).  Then the stack's job_submit.lua wakes it at
        every submission and slurm.conf has `batch_sched_delay=0`, so a release is served within a second and
        allocated at slurmctld's next pass (`fleet.slurm.policy.submit_wakes_daemon`, `hold_settings`); the one rule
        behind both and the replay's model of them."""
        kinds = list(capacity_types)
        return self.may_hold(kinds) or self.gates_gangs(kinds)

    def share_nodes_refusal(self, capacity_types: Iterable[CapacityType]) -> str | None:
        """Why `share_nodes` cannot work on a Slurm fleet of pools of `capacity_types` (None: it can, or it is off):
        without strict late binding (`binds_late`) Slurm binds each job to a right-sized powered-down node at
        submit and never to a larger node's free GPUs.  The spec rule and the daemon refuse the same."""
        if not self.share_nodes or self.binds_late(capacity_types):
            return None
        return (
            "needs strict late binding (late_bind on and no reservation pool): otherwise Slurm binds each job to a "
            "right-sized powered-down node at submit and never to a larger node's free GPUs"
        )

    def caps_on_unknown_pools(self, pools: Iterable[str]) -> list[tuple[str, str]]:
        """(field, pool name) of the per-pool caps (`pool_max_nodes`, `pool_max_gpus`) that name none of `pools`:
        such a cap would never apply.  The spec rule and the daemon refuse the same."""
        known = set(pools)
        return [
            (field, name)
            for field in ("pool_max_nodes", "pool_max_gpus")
            for name in sorted(getattr(self, field))
            if name not in known
        ]

    def idle_timeout_for(self, machine_type: str) -> float:
        """Seconds a ready-idle node of `machine_type` is kept before it is drained."""
        return self.idle_timeout_by_machine.get(machine_type, self.idle_timeout_s)

    def keeps_warm(self, machine_type: str) -> bool:
        """Does the policy keep idle nodes of `machine_type` up (an idle keep, or standby nodes)?  When it does not,
        a node of that shape that is, or becomes, idle is scaled down at once: what a surplus held boot
        (`autoscaler.core.hold.surplus_held_boots`) and a cordoned oversized node
        (`autoscaler.planner.defrag.cordon_oversized`) rely on."""
        return self.idle_timeout_for(machine_type) > 0 or bool(self.standby_by_machine.get(machine_type))

    def spot_allowed(self, queue: str) -> bool:
        return self.spot_queues is None or queue in self.spot_queues

    def spot_ok(self, unit: WorkUnit) -> bool:
        """May `unit` run on spot: tolerant, its queue allowed, and not too long a job (where known)."""
        if not (unit.spot_ok and self.spot_allowed(unit.queue)):
            return False
        if self.spot_max_node_hours is None or unit.time_limit_s is None:
            return True
        return unit.nodes * unit.time_limit_s / 3600.0 <= self.spot_max_node_hours

    def flex_start_allowed(self, queue: str, waited_s: float) -> bool:
        return queue in self.flex_start_queues and waited_s <= self.flex_start_max_wait_s


#: fields (and per-name mappings) that count nodes or GPUs: whole numbers only
COUNT_FIELDS = frozenset(
    {
        "max_nodes",
        "max_gpus",
        "pool_max_nodes",
        "pool_max_gpus",
        "idle_keep_max_by_machine",
        "standby_by_machine",
        "standby_max_nodes",
    }
)


def _check_number(name: str, v: object, *, whole: bool) -> None:
    """`v` is a number >= 0 (a whole one for counts); the error names `Policy.<name>`."""
    if isinstance(v, bool) or not isinstance(v, int | float) or (whole and not float(v).is_integer()):
        raise ValueError(f"Policy.{name}: must be {'a whole number' if whole else 'a number'}, got {v!r}")
    if v < 0:
        raise ValueError(f"Policy.{name}: must be >= 0, got {v}")


class PolicyError(ValueError):
    """A policy mapping that does not make a Policy; `errors` lists (field, reason)."""

    def __init__(self, errors: list[tuple[str, str]]) -> None:
        self.errors = errors
        super().__init__("; ".join(f"{f}: {r}" for f, r in errors))


#: why a Kubernetes (Kueue) fleet's policy may not set `share_nodes`: the Kueue spec rule and the Kubernetes daemon
SHARE_NODES_ON_KUBERNETES = (
    "shared nodes are the Slurm daemon's (its job_submit.lua lets a job take any shape of its family); the "
    "Kubernetes daemon books whole nodes per workload"
)


def policy_from_mapping(raw: Mapping[str, object]) -> Policy:
    """Build a Policy from config data (YAML / the fleet spec), naming the offending field on error."""
    fields = {f.name for f in dataclasses.fields(Policy)}
    unknown = sorted(set(raw) - fields)
    if unknown:
        raise PolicyError([(k, f"unknown policy field (known: {', '.join(sorted(fields))})") for k in unknown])
    vals = dict(raw)
    for k in ("spot_queues", "flex_start_queues"):
        if vals.get(k) is not None:
            if isinstance(vals[k], str) or not isinstance(vals[k], Iterable):
                raise PolicyError([(k, "must be a list of queue (partition) names")])
            vals[k] = frozenset(vals[k])
    try:
        return Policy(**vals)  # type: ignore[arg-type]
    except (TypeError, ValueError) as exc:
        msg = str(exc)
        name = msg.split(":")[0].removeprefix("Policy.") if msg.startswith("Policy.") else "(policy)"
        raise PolicyError([(name, msg.split(": ", 1)[-1])]) from None


@dataclass(frozen=True)
class UnavailableOffering:
    """Offering `key` is not to be used before `until` (epoch s) because of `reason`.
    `failures` counts consecutive failures (the backoff doubles with each)."""

    key: OfferingKey
    until: float
    reason: FailureKind | str
    failures: int = 1
    message: str = ""


def active_unavailable(memory: Iterable[UnavailableOffering], now: float) -> tuple[UnavailableOffering, ...]:
    """The entries still in force at `now` (the memory expires), latest per offering."""
    latest: dict[OfferingKey, UnavailableOffering] = {}
    for u in memory:
        if u.until > now and (u.key not in latest or u.until > latest[u.key].until):
            latest[u.key] = u
    return tuple(sorted(latest.values(), key=lambda u: u.key))


def record_failure(
    memory: Iterable[UnavailableOffering],
    key: OfferingKey,
    kind: FailureKind | str,
    now: float,
    policy: Policy,
    message: str = "",
) -> tuple[UnavailableOffering, ...]:
    """The memory after `key` failed at `now` with `kind`: back off for `policy.backoff_s`,
    doubling (up to `backoff_max_s`) while the previous entry for the key is still in force.
    INVALID / NOT_FOUND failures are not capacity problems and are not remembered."""
    active = {u.key: u for u in active_unavailable(memory, now)}
    if FailureKind(kind) in (FailureKind.INVALID, FailureKind.NOT_FOUND):
        return tuple(sorted(active.values(), key=lambda u: u.key))
    prev = active.get(key)
    failures = prev.failures + 1 if prev else 1
    duration = min(policy.backoff_s * 2 ** (failures - 1), max(policy.backoff_s, policy.backoff_max_s))
    active[key] = UnavailableOffering(key, now + duration, FailureKind(kind), failures, message)
    return tuple(sorted(active.values(), key=lambda u: u.key))
