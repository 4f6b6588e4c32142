"""The settings rule: facts about a fleet and its workload -> the gpu-fleet `Policy`, no sweep.

`policy_for(facts)` is pure and is what both the daemon and the replay call, so both run with the
same settings for the same facts.  Its reasoning (docs/planner.md, "Settings from a rule"):

- **Wait value** `w` ($ per GPU-hour of a job waiting; default 0, the cheapest settings: a job waits
  what its boot imposes; None: the shape's on-demand $/GPU-h, a GPU-hour of work delayed being worth
  what the team pays to run one).
- **Idle keep, per shape** (ski rental).  Keeping an idle node of g GPUs at price p per GPU-hour
  costs g*p per hour; the next job it serves is spared a boot, worth g * boot * (p + w) (the
  boot it is not billed for, and the wait it does not have).  Keeping pays off in expectation iff
  jobs for that shape arrive faster than one per break-even time T = boot * (1 + w / p) (for
  Poisson arrivals keep-or-not is all or nothing); then the node is kept for T, the deterministic
  ski-rental choice, which never loses more than one boot's worth per idle spell when arrivals
  stop.  Otherwise it is deleted at once.  Jobs end about as often as they arrive, so the warm
  pool only absorbs the fluctuation of the busy count over T, about sqrt(lambda * min(T, mean run))
  (Poisson): at most that many idle nodes of the shape are kept (the lowest-numbered: Slurm
  allocates the lowest free name first).  That cap is one standard deviation: it is what keeps the
  cheapest settings cheap, and it is also why higher wait values alone stop shortening the tail of the
  wait (the window stops growing at the mean run).  `Policy.warm_cap = False` (an operator's setting)
  drops it: every idle node of a kept shape stays for T (docs/planner.md, "The frontier").
- **Standby nodes, per shape** (a loss system: each standby node is a server busy for one boot).  Keeping k
  idle nodes of a shape up, and launching a replacement whenever a job takes one, lets a job start at once
  unless all k were taken within the last boot (their replacements are still booting; that job boots its own
  node and waits, as without standby).  Serve arrivals from the lowest-numbered free standby node: node j is
  taken often enough to be replenishing a fraction u_j of the time, and idles the rest.  Each take spares a job
  a boot's wait, worth u_j * w per GPU-hour of the node; its idle time costs (1 - u_j) * p (while it is
  replenishing, the boot billed is the one the job would have caused).  It pays iff u_j > p / (p + w).  Boots
  are not added: every job still causes one (its own, or its replacement's).  u_j is measured by replaying the
  arrivals seen (`reuse.standby_use`); with fewer than `MIN_SPELLS` arrivals it is Erlang's for Poisson
  arrivals of load lambda * boot.  At w = 0 (the default) there are none; at most `Policy.standby_max_nodes`
  (what slurmctld is told to keep up, SuspendExcNodes, and so what stays up if the daemon stops).
- **Reservation hold.**  With paid-for reserved capacity, a unit may wait up to H for a reserved
  node to free up instead of launching overflow.  What the wait saves is not the job's whole run
  (the freed reserved node would soon serve the next arrival anyway) but the idle gap until that
  arrival, about 1/lambda of reserved GPU time, worth S = p / lambda per GPU; reserved nodes free
  up at rate mu = reserved nodes / mean run time.  Waiting h costs w*h; the chance a node frees
  within h is 1 - exp(-mu*h); the expected gain S*(1 - exp(-mu*h)) - w*h is largest at
  H = ln(mu*S / w) / mu when mu*S > w, else 0 (launch at once).  A held job that does not get a
  reserved node waits H *plus* its boot, so H is also capped by the operator's hold budget
  (`FleetFacts.reservation_hold_max_s`), which is 0 by default: "no worse wait" (a job never waits
  longer than the boot launching at once imposes) is the product's promise, S is one idle gap per
  freed node (cents per GPU on a busy reservation), and Slurm hands a released overflow name to the
  first pending job it fits, not the one the plan sized it for.  Measured (docs/simulate.md, "The
  reservation runs"): a 60 s hold already puts p95 over the issue's 60 s margin, longer holds save at
  most 0.3 % on a few runs and cost up to 11 % on others, and even a clairvoyant hold is no cheaper
  than none.  Raising the budget (at most one boot is ever used) trades wait for the chance of a
  reserved node.
- **Batching** otherwise 0: boots take minutes, so a launch batch window only adds wait.
- **Shared nodes** (`Policy.share_nodes`, an operator's setting, off by default).  Small work may take the free GPUs
  of a larger node of its machine family at the same $/GPU-h, so a warm node of the family's largest shape serves
  every size: that shape's idle keep and warm cap count the GPU-weighted arrivals of the whole family, in nodes of
  it (`shared_arrivals`), and the placement cap that keeps small work off large nodes is off (`defragment` False).
  The ski-rental test is unchanged; only what one warm node can serve grows.  Standby nodes stay sized on each
  shape's own arrivals.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace

from autoscaler.cloud import Offering
from autoscaler.model import Policy
from autoscaler.model.policy import DEFAULT_WAIT_VALUE_USD_PER_GPU_HOUR
from autoscaler.planner.reuse import keep_pays
from fleet.catalog import CapacityType, machine_family
from fleet.catalog.price_ties import price_tiers

#: the default hold budget: 0, a job never waits for the reservation beyond its own boot (see the module doc)
DEFAULT_RESERVATION_HOLD_MAX_S = 0.0


@dataclass(frozen=True)
class ShapeFacts:
    """One machine type the fleet can launch: its GPUs, on-demand $/h per node, and how many jobs
    per hour arrive whose right-sized shape it is (the cheapest shape per GPU that fits, smallest
    on ties; a gang of n nodes counts n arrivals)."""

    machine_type: str
    gpus: int
    usd_per_hour: float
    arrivals_per_hour: float = 0.0
    #: measured times from a node of this shape freeing up to the next arrival taking it, capped at the shape's
    #: break-even T (`reuse.free_gaps`); None: not measured (the Poisson test decides)
    reuse_gaps: tuple[float, ...] | None = field(default=None, compare=False, repr=False)
    #: measured use of the j-th standby node of this shape (`reuse.standby_use`); None: not measured (Erlang's
    #: formula for Poisson arrivals decides)
    standby_use: tuple[float, ...] | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.gpus < 1:
            raise ValueError(f"ShapeFacts.gpus: must be >= 1, got {self.gpus} ({self.machine_type})")
        if self.usd_per_hour < 0 or self.arrivals_per_hour < 0:
            raise ValueError(f"ShapeFacts: price and arrival rate must be >= 0 ({self.machine_type})")

    @property
    def usd_per_gpu_hour(self) -> float:
        return self.usd_per_hour / self.gpus


@dataclass(frozen=True)
class FleetFacts:
    """What the rule needs to know: boot time (launch request to ready), the shapes, the reserved
    nodes (0: none) and the observed workload (arrival rate of jobs, mean run time)."""

    boot_s: float
    shapes: tuple[ShapeFacts, ...]
    reserved_nodes: int = 0
    arrivals_per_hour: float = 0.0  # all jobs
    mean_run_s: float | None = None
    wait_value_usd_per_gpu_hour: float | None = DEFAULT_WAIT_VALUE_USD_PER_GPU_HOUR  # None: each shape's price
    #: the longest a unit may be held for reserved capacity on top of its boot (the hold budget; 0: never held)
    reservation_hold_max_s: float = DEFAULT_RESERVATION_HOLD_MAX_S
    notes: tuple[str, ...] = field(default=(), compare=False)

    def __post_init__(self) -> None:
        if self.boot_s < 0:
            raise ValueError(f"FleetFacts.boot_s: must be >= 0, got {self.boot_s}")
        if self.reserved_nodes < 0:
            raise ValueError(f"FleetFacts.reserved_nodes: must be >= 0, got {self.reserved_nodes}")
        if self.reservation_hold_max_s < 0:
            raise ValueError(f"FleetFacts.reservation_hold_max_s: must be >= 0, got {self.reservation_hold_max_s}")
        w = self.wait_value_usd_per_gpu_hour
        if w is not None and w < 0:
            raise ValueError(f"FleetFacts.wait_value_usd_per_gpu_hour: must be >= 0, got {w}")

    def wait_value(self, shape: ShapeFacts) -> float:
        """The wait value for `shape`: the one given, else the shape's on-demand $/GPU-h."""
        w = self.wait_value_usd_per_gpu_hour
        return shape.usd_per_gpu_hour if w is None else w


def break_even_idle_s(boot_s: float, usd_per_gpu_hour: float, wait_value: float) -> float:
    """T = boot * (1 + w / p): idle time that costs as much as one boot saved (billing + wait)."""
    if usd_per_gpu_hour <= 0:
        return math.inf
    return boot_s * (1.0 + wait_value / usd_per_gpu_hour)


def idle_keep_s(shape: ShapeFacts, boot_s: float, wait_value: float) -> float:
    """How long an idle node of `shape` is kept: T when keeping pays, else 0.  Keeping pays when the measured
    reuse says so (`reuse.keep_pays`: E[min(d, T)] < T * P(d < T) over the freed nodes seen), else, with too
    little history, when its jobs arrive faster than one per T (the same test for Poisson arrivals)."""
    t = break_even_idle_s(boot_s, shape.usd_per_gpu_hour, wait_value)
    if math.isinf(t):
        return t
    measured = keep_pays(shape.reuse_gaps, t) if shape.reuse_gaps is not None else None
    if measured is not None:
        return t if measured else 0.0
    return t if shape.arrivals_per_hour * t / 3600.0 > 1.0 else 0.0


def longest_idle_keep_s(facts: FleetFacts) -> float:
    """The longest idle keep the rule can set for these shapes, whatever the arrivals: the largest break-even T
    (`idle_keep_s` is T or 0).  What Slurm's SuspendTime must be no shorter than, so that Slurm does not power
    down a node the daemon keeps (inf when a shape is free)."""
    return max(
        (break_even_idle_s(facts.boot_s, s.usd_per_gpu_hour, facts.wait_value(s)) for s in facts.shapes), default=0.0
    )


def warm_nodes(shape: ShapeFacts, boot_s: float, wait_value: float, mean_run_s: float | None = None) -> int:
    """How many idle nodes of `shape` to keep at once.  Jobs end about as often as they arrive, so
    idle nodes are refilled as fast as they are taken: what a warm pool absorbs is the fluctuation
    of the busy count over the break-even window T, about sqrt(lambda * T) (Poisson arrivals), and an
    idle node beyond that is unlikely to be reused before T.  Over windows longer than a run the busy
    count does not drift further (it fluctuates about its mean lambda * run, by its square root), so
    the window is at most the mean run."""
    t = break_even_idle_s(boot_s, shape.usd_per_gpu_hour, wait_value)
    if mean_run_s:
        t = min(t, mean_run_s)
    return max(1, int(math.sqrt(shape.arrivals_per_hour * t / 3600.0)))


def erlang_use(load: float, servers: int) -> tuple[float, ...]:
    """u_j for j < `servers` under Poisson arrivals of `load` (arrival rate x boot): the carried-load gain of
    the j-th server, load * (E(j) - E(j+1)) with Erlang's loss formula E (E(0) = 1)."""
    out: list[float] = []
    e = 1.0
    for j in range(servers):
        nxt = load * e / (j + 1 + load * e)
        out.append(load * (e - nxt))
        e = nxt
    return tuple(out)


def standby_nodes(shape: ShapeFacts, boot_s: float, wait_value: float) -> int:
    """How many idle nodes of `shape` to keep up ahead of demand (module doc, "Standby nodes"): the leading
    standby nodes whose measured use u_j exceeds p / (p + w).  0 when waiting is not valued."""
    lam, p = shape.arrivals_per_hour, shape.usd_per_gpu_hour
    if wait_value <= 0 or lam <= 0 or boot_s <= 0 or p <= 0:
        return 0
    use = shape.standby_use
    if use is None:
        load = lam * boot_s / 3600.0
        use = erlang_use(load, int(load + 10.0 * math.sqrt(load) + 10))
    floor = p / (p + wait_value)
    k = 0
    while k < len(use) and use[k] > floor:
        k += 1
    return k


def reservation_hold_s(facts: FleetFacts) -> float:
    """H = ln(mu*S / w) / mu, at most one boot and at most the hold budget `facts.reservation_hold_max_s` (0 when
    waiting cannot pay, nothing is reserved, or the budget is 0, the default); see the module doc."""
    cap = min(facts.boot_s, facts.reservation_hold_max_s)
    if cap <= 0 or not facts.reserved_nodes or not facts.mean_run_s or facts.arrivals_per_hour <= 0:
        return 0.0
    if not facts.shapes:
        return 0.0
    big = max(facts.shapes, key=lambda s: (s.gpus, -s.usd_per_hour))  # the reserved shape
    p = big.usd_per_gpu_hour / 3600.0  # $ per GPU-second
    w = facts.wait_value(big) / 3600.0
    mu = facts.reserved_nodes / facts.mean_run_s  # reserved nodes freeing up, per second
    gain = p * 3600.0 / facts.arrivals_per_hour  # S: $ per GPU of reserved time not left idle
    if w <= 0:
        return cap  # waiting is free: up to the cap
    x = mu * gain / w
    return min(cap, math.log(x) / mu) if x > 1.0 else 0.0


def shared_arrivals(shapes: Sequence[ShapeFacts]) -> tuple[ShapeFacts, ...]:
    """`shapes` as `Policy.share_nodes` sees them: in each machine family, among the shapes at its largest shape's
    $/GPU-h (`fleet.catalog.price_ties`), that largest shape's arrivals are the GPU-weighted arrivals of them all, in
    nodes of it (a warm node of it takes any of their jobs), and its measured reuse gaps, which are of its own jobs
    only, are dropped (the Poisson test decides).  Standby nodes are not sized on these (`policy_for`): a standby
    node is a whole node a job takes, and a small job taking part of one would have the planner launch another.
    Other shapes are unchanged."""
    out = list(shapes)
    families: dict[str, list[int]] = {}
    for i, s in enumerate(out):
        families.setdefault(machine_family(s.machine_type), []).append(i)
    for members in families.values():
        big = max(members, key=lambda i: (out[i].gpus, -out[i].usd_per_hour))
        tiers = price_tiers(out[i].usd_per_gpu_hour for i in members)
        tier = tiers[out[big].usd_per_gpu_hour]
        pooled = [i for i in members if tiers[out[i].usd_per_gpu_hour] == tier]
        if len(pooled) < 2:
            continue
        gpus = sum(out[i].arrivals_per_hour * out[i].gpus for i in pooled)
        out[big] = replace(out[big], arrivals_per_hour=gpus / out[big].gpus, reuse_gaps=None)
    return tuple(out)


def policy_for(facts: FleetFacts, base: Policy | None = None) -> Policy:
    """The gpu-fleet settings for `facts`, on top of `base` (limits and other knobs kept)."""
    base = base or Policy()
    own = facts  # standby nodes are whole nodes a job takes: sized on each shape's own arrivals, shared or not
    if base.share_nodes:
        facts = replace(facts, shapes=shared_arrivals(facts.shapes))
    keep = {
        s.machine_type: round(idle_keep_s(s, facts.boot_s, facts.wait_value(s)), 1)
        for s in sorted(facts.shapes, key=lambda s: s.machine_type)
    }
    warm = {
        s.machine_type: warm_nodes(s, facts.boot_s, facts.wait_value(s), facts.mean_run_s)
        for s in facts.shapes
        if base.warm_cap and keep.get(s.machine_type, 0) > 0 and not math.isinf(keep[s.machine_type])
    }
    standby = {
        s.machine_type: k
        for s in sorted(own.shapes, key=lambda s: s.machine_type)
        if (k := min(base.standby_max_nodes, standby_nodes(s, own.boot_s, own.wait_value(s)))) > 0
    }
    hold = round(reservation_hold_s(facts), 1)
    return replace(
        base,
        idle_timeout_s=min(keep.values(), default=0.0),
        idle_timeout_by_machine=keep,
        idle_keep_max_by_machine=warm,
        standby_by_machine=standby,
        batch_window_s=hold,
        batch_idle_s=hold,
        wait_value_usd_per_gpu_hour=facts.wait_value_usd_per_gpu_hour,
        defragment=not base.share_nodes,
        expected_run_s=facts.mean_run_s,
        expected_boot_s=facts.boot_s,
    )


def right_sized(shapes: Sequence[ShapeFacts], gpus_per_node: int) -> ShapeFacts | None:
    """The shape a unit of `gpus_per_node` GPUs gets: the smallest that fits among those at the cheapest per-GPU
    price that fits (prices within `fleet.catalog.price_ties`' tolerance are the same price), then the cheaper."""
    fits = [s for s in shapes if s.gpus >= gpus_per_node]
    tiers = price_tiers(s.usd_per_gpu_hour for s in fits)
    cheapest = (s for s in fits if tiers[s.usd_per_gpu_hour] == 0)
    return min(cheapest, key=lambda s: (s.gpus, s.usd_per_gpu_hour), default=None)


def right_sizer(shapes: Sequence[ShapeFacts]) -> Callable[[int], ShapeFacts | None]:
    """`right_sized` over `shapes`, remembered per GPU count (callers ask it once per job seen)."""
    known: dict[int, ShapeFacts | None] = {}

    def get(gpus_per_node: int) -> ShapeFacts | None:
        if gpus_per_node not in known:
            known[gpus_per_node] = right_sized(shapes, gpus_per_node)
        return known[gpus_per_node]

    return get


def with_arrivals(
    shapes: Sequence[ShapeFacts], jobs: Iterable[tuple[int, int]], span_s: float
) -> tuple[ShapeFacts, ...]:
    """`shapes` with `arrivals_per_hour` counted from `jobs` ((nodes, gpus per node) per job seen
    over `span_s` seconds): each job counts `nodes` arrivals for its right-sized shape."""
    counts: dict[str, int] = {}
    shape_for = right_sizer(shapes)
    for nodes, gpus in jobs:
        s = shape_for(gpus)
        if s is not None:
            counts[s.machine_type] = counts.get(s.machine_type, 0) + nodes
    hours = max(span_s, 1.0) / 3600.0
    return tuple(replace(s, arrivals_per_hour=counts.get(s.machine_type, 0) / hours) for s in shapes)


def shapes_from_offerings(offerings: Iterable[Offering]) -> tuple[ShapeFacts, ...]:
    """One `ShapeFacts` per machine type with an on-demand offering: its GPUs and cheapest on-demand $/h."""
    best: dict[str, tuple[int, float]] = {}
    for o in offerings:
        if o.key.capacity_type is not CapacityType.ON_DEMAND or o.gpus_per_node < 1:
            continue
        m = o.key.machine_type
        if m not in best or o.hourly_usd < best[m][1]:
            best[m] = (o.gpus_per_node, o.hourly_usd)
    return tuple(ShapeFacts(m, g, usd) for m, (g, usd) in sorted(best.items()))


def observed_facts(
    offerings: Iterable[Offering],
    boot_s: float,
    jobs: Sequence[tuple[float, int, int, float | None]],
    now: float,
    window_s: float,
    reserved_nodes: int = 0,
    wait_value_usd_per_gpu_hour: float | None = DEFAULT_WAIT_VALUE_USD_PER_GPU_HOUR,
    reservation_hold_max_s: float = DEFAULT_RESERVATION_HOLD_MAX_S,
) -> FleetFacts:
    """Facts as a running daemon sees them: `jobs` are (submit time, nodes, GPUs per node, run seconds
    or None while running) of the jobs submitted in the last `window_s` seconds before `now`;
    `reservation_hold_max_s` is the operator's hold budget (module doc)."""
    recent = [j for j in jobs if now - window_s <= j[0] <= now]
    shapes = with_arrivals(shapes_from_offerings(offerings), [(n, g) for _, n, g, _ in recent], window_s)
    runs = [r for *_, r in recent if r is not None]
    return FleetFacts(
        boot_s=boot_s,
        shapes=shapes,
        reserved_nodes=reserved_nodes,
        arrivals_per_hour=len(recent) * 3600.0 / max(window_s, 1.0),
        mean_run_s=sum(runs) / len(runs) if runs else None,
        wait_value_usd_per_gpu_hour=wait_value_usd_per_gpu_hour,
        reservation_hold_max_s=reservation_hold_max_s,
    )
