"""`plan()`: the pure planner, a chain of named passes over one snapshot.

expire_backoff -> step_down / cordon_oversized -> compute_headroom -> keep_min_nodes -> (per unit, by
priority, standby units last: standby.py) place_on_existing -> fill_reservations -> place_gang | place_cheapest
(budget and limits checked by the headroom) -> scale_down_idle -> explain_unserved.  No I/O, no clock, no
randomness: same inputs, same plan.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

from autoscaler.cloud import Offering
from autoscaler.model import (
    Assignment,
    Command,
    Inventory,
    Placement,
    Plan,
    Policy,
    ScaleUp,
    UnavailableOffering,
    Unserved,
    WorkUnit,
    request_id_for,
)
from autoscaler.planner.backoff import expire_backoff
from autoscaler.planner.capacity import CapacityIndex
from autoscaler.planner.defrag import cordon_oversized, cordoned_names, pool_gpu_prices, step_down
from autoscaler.planner.explain import explain_unserved
from autoscaler.planner.limits import compute_headroom
from autoscaler.planner.minimum import keep_min_nodes
from autoscaler.planner.offers import UnitClass, offer_book
from autoscaler.planner.placement import (
    Batch,
    ClassState,
    NameAllocator,
    PlanState,
    class_state,
    fill_reservations,
    place_cheapest,
    place_gang,
    place_on_existing,
)
from autoscaler.planner.scale_down import boot_timeouts, scale_down_idle
from autoscaler.planner.standby import is_standby_unit, real_demand, standby_units
from autoscaler.planner.whole_node import take_whole


def batch_hold(demand: Sequence[WorkUnit], policy: Policy, now: float) -> bool:
    """True while launches wait for more demand: the newest unit is younger than `batch_idle_s`
    and the oldest younger than `batch_window_s` (Karpenter's batch idle / max durations)."""
    if not demand or policy.batch_window_s <= 0:
        return False
    newest = max(u.submit_time for u in demand)
    oldest = min(u.submit_time for u in demand)
    return now - newest < policy.batch_idle_s and now - oldest < policy.batch_window_s


def class_key(u: WorkUnit, policy: Policy, now: float) -> tuple:
    """The fields of `UnitClass.of(u, policy, now)` as a plain tuple (cheap to hash)."""
    spot = policy.spot_ok(u)
    flex = bool(policy.flex_start_queues) and policy.flex_start_allowed(u.queue, now - u.submit_time)
    return (u.gpus_per_node, u.nodes, u.gpu_types, u.machine_types, spot, flex, u.queue, u.pools, u.avoid)


def priority_order(demand: Iterable[WorkUnit]) -> list[WorkUnit]:
    """Highest priority first, then oldest, then by id (deterministic)."""
    return sorted(demand, key=lambda u: (-u.priority, u.submit_time, u.id))


def plan(
    demand: Sequence[WorkUnit],
    inventory: Inventory,
    offerings: Sequence[Offering],
    policy: Policy,
    now: float,
    unavailable: Iterable[UnavailableOffering] = (),
    hints: Mapping[str, Assignment | Sequence[str]] | None = None,
    standby_in_flight: Mapping[str, int] | None = None,
    unusable: Iterable[str] = (),
) -> Plan:
    """Decide what to launch, where each pending unit runs, what to drain and delete, and why
    anything is left unserved.  `unavailable` is the caller's backoff memory; the plan returns the
    entries still in force in `Plan.unavailable`.  `hints` (optional) is the previous plan's
    `assignments`: a still-pending unit stays on the nodes it was given while they have room, so
    re-planning while nodes boot does not reshuffle them and launch again.  `standby_in_flight`: standby
    nodes of each machine type on their way that `inventory` does not list yet (`standby.standby_units`); None
    (the default): the caller does not bring standby nodes up (the Kubernetes paths, for now), so none are
    planned whatever `policy.standby_by_machine` says.  `unusable`: existing nodes none of `demand` may run on (a
    Slurm advanced reservation none of it is in): no capacity for it, left to the idle scale-down like any node
    without work."""
    demand = real_demand(demand)
    standby = standby_units(policy, inventory, now, standby_in_flight) if standby_in_flight is not None else []
    units = priority_order(demand) + standby
    seen: set[str] = set()
    for u in units:
        if u.id in seen:
            raise ValueError(f"demand: duplicate unit id {u.id!r}")
        seen.add(u.id)

    active = expire_backoff(unavailable, now)
    timed_out = boot_timeouts(inventory, policy, now)
    # a smaller shape that is backed off everywhere (stocked out) is no step down: small work may then use the
    # larger node (a job constrained to the smaller shape is widened to it, late binding) instead of the plan
    # launching a larger node per tick that the defragmentation rule then keeps from taking the work
    backed_off = {u.key for u in active}
    launchable = [o for o in offerings if o.key not in backed_off]
    steps = step_down(inventory.pools, launchable) if policy.defragment else {}
    cordons = cordon_oversized(inventory, steps, policy)
    st = PlanState(
        now=now,
        policy=policy,
        inventory=inventory,
        headroom=compute_headroom(inventory, offerings, policy),
        index=CapacityIndex.from_inventory(inventory, exclude=[*timed_out, *cordoned_names(cordons), *unusable]),
        book=offer_book(offerings, active, inventory.pools),
        names=NameAllocator(inventory),
        hints={uid: _hint_nodes(a) for uid, a in (hints or {}).items()},
        steps=steps,
        gpu_prices=pool_gpu_prices(inventory.pools, offerings) if policy.expected_run_s is not None else {},
    )
    held = batch_hold(demand, policy, now)
    keep_min_nodes(st)
    if any(u.whole_node for u in units):  # the shape each takes whole, now that reservations and backoffs are known
        units = take_whole(units, st)

    keys = [class_key(u, policy, now) for u in units]
    sizes = Counter(keys)
    classes: dict[tuple, ClassState] = {}
    unserved: list[Unserved] = []
    for unit, key in zip(units, keys, strict=True):
        cs = classes.get(key)
        if cs is None:
            cs = classes[key] = class_state(UnitClass(*key), sizes[key], st)
        if place_on_existing(unit, cs, st) or fill_reservations(unit, cs, st):
            continue  # paid-for reservation slots cost nothing at the margin: never held
        if held:
            if not is_standby_unit(unit.id):
                unserved.append(explain_unserved(unit, cs, held=True))
            continue
        if place_gang(unit, cs, st) or place_cheapest(unit, cs, st):
            continue
        unserved.append(explain_unserved(unit, cs))

    drains, deletes = scale_down_idle(inventory, policy, now, st.in_use, timed_out)
    drains = [*cordons, *drains]
    scale_ups, request_ids = build_scale_ups(st.batches.values(), now)
    assignments = {
        uid: Assignment(uid, names, g, placement, request_ids.get(id(batch)) if batch else None)
        for uid, (names, g, placement, batch) in st.placed.items()
    }
    by_place = Counter(a.placement for a in assignments.values())
    commands: list[Command] = [*scale_ups, *drains, *deletes]
    stats = {
        "units": len(units),
        "classes": len(classes),
        "placed_ready": by_place[Placement.READY],
        "placed_booting": by_place[Placement.BOOTING],
        "placed_new": by_place[Placement.NEW],
        "unserved": len(unserved),
        "nodes_launched": sum(s.count for s in scale_ups),
        "gpus_launched": sum(s.count * inventory.pool(s.pool).gpus_per_node for s in scale_ups),
        "hourly_usd_added": round(sum(s.hourly_usd for s in scale_ups), 6),
        "nodes_drained": sum(len(d.nodes) for d in drains),
        "nodes_deleted": sum(len(d.names) for d in deletes),
        "offerings_backed_off": len(active),
    }
    return Plan(tuple(commands), assignments, tuple(unserved), active, stats)


def _nodes(n: int) -> str:
    return f"{n} new node{'s' if n != 1 else ''}"


def _hint_nodes(h: object) -> tuple[str, ...]:
    return tuple(h.nodes) if isinstance(h, Assignment) else tuple(h)  # type: ignore[arg-type]


def build_scale_ups(batches: Iterable[Batch], now: float) -> tuple[list[ScaleUp], dict[int, str]]:
    """One ScaleUp per batch with a deterministic request id (and placement group for gangs)."""
    out: list[ScaleUp] = []
    ids: dict[int, str] = {}
    for b in batches:
        names = tuple(b.names)
        key = b.offering.key
        rid = request_id_for(b.pool.name, key, names, now)
        ids[id(b)] = rid
        pg = None
        if b.gang and b.pool.compact_placement:
            pg = b.pool.placement_policy or f"{b.pool.node_name_prefix}-{rid[3:11]}"
        where = f"{key.capacity_type} {key.machine_type} in {key.zone}"
        price = "paid-for reservation" if b.hourly_usd == 0 and key.reservation else f"${b.hourly_usd:.2f}/h each"
        if b.gang:
            reason = f"gang {b.units[0]}: {len(names)} nodes all or nothing, {where} ({price})"
        elif b.minimum and b.pool.reservation is not None and b.pool.min_nodes < b.pool.max_nodes:
            reason = f"reserved capacity launched up front: {_nodes(len(names))}, {where} ({price})"
        elif b.minimum:
            reason = f"pool minimum ({b.pool.min_nodes} nodes): {_nodes(len(names))}, {where} ({price})"
        else:
            units = f"{len(b.units)} pending unit{'s' if len(b.units) != 1 else ''}"
            reason = f"{units} need{'s' if len(b.units) == 1 else ''} {_nodes(len(names))}: {where} ({price})"
        out.append(
            ScaleUp(
                pool=b.pool.name,
                offering=key,
                names=names,
                request_id=rid,
                units=tuple(b.units),
                reason=reason,
                placement_group=pg,
                gang=b.gang,
                hourly_usd=round(b.hourly_usd * len(names), 6),
                minimum=b.minimum,
            )
        )
    return out, ids
