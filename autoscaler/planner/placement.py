"""Placement passes: put one unit on existing capacity, on paid-for reservations, or on the cheapest
feasible new capacity (gangs all or nothing in one zone and placement group).

Each pass is `pass(unit, cs, st) -> bool` (True when the unit is placed) over the mutable
`PlanState` of one plan and the `ClassState` of the unit's class.  Candidate lists are walked
with a cursor per class: limits only shrink during a plan and every unit of a class needs the
same thing, so a candidate that failed once fails for the rest of the class (this keeps a plan
linear in the number of units).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

from autoscaler.cloud import Offering
from autoscaler.model import Inventory, Placement, Policy, Pool, UnservedReason, WorkUnit
from autoscaler.planner.capacity import NEW, RANK_PLACEMENT, CapacityIndex, Slot
from autoscaler.planner.defrag import pack_pays, placement_caps, worth_reusing
from autoscaler.planner.limits import Headroom
from autoscaler.planner.offers import CandidateStream, NoCandidate, OfferBook, UnitClass


class NameAllocator:
    """Free names from each pool's `prefix-i` name space (i < max_nodes), lowest first."""

    def __init__(self, inventory: Inventory) -> None:
        self._inv = inventory
        self._used: dict[str, set[str]] = {}
        self._cursor: dict[str, int] = {}

    def take(self, pool: Pool, count: int, avoid: frozenset[str] = frozenset()) -> list[str] | None:
        """`count` free names, none of `avoid` (those stay free for other units)."""
        used = self._used.get(pool.name)
        if used is None:
            used = self._used[pool.name] = self._inv.used_names(pool.name)
        i = self._cursor.get(pool.name, 0)
        out: list[str] = []
        skipped = False
        while len(out) < count and i < pool.max_nodes:
            name = pool.node_name(i)
            i += 1
            if name not in used:
                if name in avoid:
                    skipped = True
                else:
                    out.append(name)
        if len(out) < count:
            return None  # leave the cursor: a smaller ask may still fit
        if not skipped:  # names skipped for this unit stay below the cursor for the next
            self._cursor[pool.name] = i
        used.update(out)
        return out


@dataclass(eq=False)
class Batch:
    """Nodes one ScaleUp will create: singles merge per (pool, offering); each gang is its own."""

    pool: Pool
    offering: Offering
    hourly_usd: float
    gang: bool = False
    minimum: bool = False  # launched to keep the pool at min_nodes
    names: list[str] = field(default_factory=list)
    units: list[str] = field(default_factory=list)


@dataclass
class ClassState:
    cls: UnitClass
    pools: list[str]
    reserved: CandidateStream
    market: CandidateStream
    none: NoCandidate | None = None
    failed: Counter = field(default_factory=Counter)
    pool_order: dict[str, tuple[int, int]] = field(default_factory=dict)  # pool -> (tier, position)
    caps: dict[str, int] = field(default_factory=dict)  # pool -> most free GPUs a node may have for this class
    hint_pools: frozenset[str] = frozenset()  # pools the class may run on at all (hinted nodes are its own)
    miss: bool = False  # nothing existing fits; cleared when capacity is added to one of `pools`


@dataclass
class PlanState:
    now: float
    policy: Policy
    inventory: Inventory
    headroom: Headroom
    index: CapacityIndex
    book: OfferBook
    names: NameAllocator
    batches: dict[object, Batch] = field(default_factory=dict)
    placed: dict[str, tuple[tuple[str, ...], int, Placement, Batch | None]] = field(default_factory=dict)
    in_use: set[str] = field(default_factory=set)
    watchers: dict[str, list[ClassState]] = field(default_factory=dict)  # pool -> classes that may use it
    hints: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # unit -> nodes of the previous plan
    steps: Mapping[str, int] = field(default_factory=dict)  # pool -> step-down shape GPUs (defrag.py)
    gpu_prices: Mapping[str, float] = field(default_factory=dict)  # pool -> marginal $/GPU-h

    def watch(self, cs: ClassState) -> None:
        for p in cs.pools:
            self.watchers.setdefault(p, []).append(cs)

    def add_capacity(self, slot: Slot) -> None:
        """Add a planned node's leftover GPUs and let the classes that may use it look again."""
        self.index.add(slot)
        for cs in self.watchers.get(slot.pool, ()):
            if slot.free >= cs.cls.gpus_per_node:
                cs.miss = False

    def record(self, unit: WorkUnit, slots: list[Slot]) -> None:
        """Place `unit` on indexed slots (existing nodes or leftovers of planned ones)."""
        rank = max(s.rank for s in slots)
        batch = slots[0].batch if rank == NEW else None
        if rank == NEW and (len(slots) > 1 or not isinstance(batch, Batch)):
            raise AssertionError("only single units bin-pack onto nodes this plan launches")
        names = tuple(s.name for s in slots)
        for s in slots:
            self.index.take(s, unit.gpus_per_node)
        self.in_use.update(names)
        if isinstance(batch, Batch):
            batch.units.append(unit.id)
        self.placed[unit.id] = (names, unit.gpus_per_node, RANK_PLACEMENT[rank], batch)


def place_on_hint(unit: WorkUnit, cs: ClassState, st: PlanState) -> bool:
    """Keep a unit on the nodes the previous plan gave it (`hints`), when they still have room and
    suit it: re-planning then never reshuffles booting capacity and launches twice.  The reuse filters
    (caps, reuse and packing tests) do not apply: the previous plan chose these nodes under them."""
    names = st.hints.get(unit.id)
    if not names or len(names) != unit.nodes:
        return False
    slots = [st.index.get(n) for n in names]
    # a hinted name may have been reused by a node this plan launches (the old launch never happened)
    pools = cs.hint_pools or cs.pool_order
    if any(
        s is None or s.rank == NEW or s.free < unit.gpus_per_node or s.pool not in pools or s.name in unit.avoid
        for s in slots
    ):
        return False
    ok = [s for s in slots if s is not None]
    if len({(s.pool, s.zone) for s in ok}) != 1 or len(set(names)) != len(names):
        return False
    st.record(unit, ok)
    return True


def place_on_existing(unit: WorkUnit, cs: ClassState, st: PlanState) -> bool:
    """Ready nodes first, then requested/booting ones, then nodes this plan already launches;
    best fit (the fullest node that still fits), so small units bin-pack onto partly used nodes.
    Among equal fits, capacity fewer units may use (spot, queue-restricted pools) goes first."""
    if st.hints and place_on_hint(unit, cs, st):
        return True
    if cs.miss or not cs.pools:
        return False
    hidden = st.index.hide(unit.avoid) if unit.avoid else []  # nodes it may not run on: out of the search
    try:
        if unit.nodes == 1:
            slot = st.index.best_fit(cs.pool_order, unit.gpus_per_node, cs.caps)
            slots = [slot] if slot else None
        else:
            slots = st.index.gang_fit(cs.pool_order, unit.gpus_per_node, unit.nodes)
    finally:
        st.index.restore(hidden)
    if not slots:
        cs.miss = True
        return False
    st.record(unit, slots)
    return True


def _launch(unit: WorkUnit, cs: ClassState, st: PlanState, cands: CandidateStream) -> bool:
    n = unit.nodes
    while (c := cands.peek()) is not None:
        o, pool = c.offering, c.pool
        why = st.headroom.blocker(pool.name, o.key, n, o.gpus_per_node, c.hourly_usd * n)
        names = None if why else st.names.take(pool, n, unit.avoid)
        if why is None and names is None:
            why = UnservedReason.NAMES_EXHAUSTED
        if why is not None:
            cs.failed[why] += 1
            cands.advance()
            continue
        st.headroom.take(pool.name, o.key, n, o.gpus_per_node, c.hourly_usd * n)
        if n > 1:
            batch = st.batches[("gang", unit.id)] = Batch(pool, o, c.hourly_usd, gang=True)
        else:
            batch = st.batches.get((pool.name, o.key))
            if batch is None:
                batch = st.batches[(pool.name, o.key)] = Batch(pool, o, c.hourly_usd)
        assert names is not None
        batch.names.extend(names)
        batch.units.append(unit.id)
        st.placed[unit.id] = (tuple(names), unit.gpus_per_node, Placement.NEW, batch)
        st.in_use.update(names)
        left = o.gpus_per_node - unit.gpus_per_node
        if left > 0:
            for name in names:
                st.add_capacity(Slot(name, pool.name, o.key.zone, left, NEW, batch))
        return True
    return False


def fill_reservations(unit: WorkUnit, cs: ClassState, st: PlanState) -> bool:
    """Launch into paid-for reservation slots before buying anything (cost 0 at the margin)."""
    return _launch(unit, cs, st, cs.reserved)


def place_gang(unit: WorkUnit, cs: ClassState, st: PlanState) -> bool:
    """A multi-node unit: all `nodes` from one offering (one zone) in one ScaleUp, with one
    placement group where the pool wants compact placement; never part of a gang."""
    if unit.nodes == 1:
        return False
    return _launch(unit, cs, st, cs.market)


def place_cheapest(unit: WorkUnit, cs: ClassState, st: PlanState) -> bool:
    """A single-node unit: the cheapest feasible offering per unit served, right-sized; the new
    node's leftover GPUs become capacity for the next small units (bin-packing)."""
    if unit.nodes > 1:
        return False
    return _launch(unit, cs, st, cs.market)


def class_steps(cls: UnitClass, steps: Mapping[str, int], pools: Mapping[str, Pool]) -> Mapping[str, int]:
    """The step-down shapes (`defrag.step_down`) as the class sees them: a class limited to some pools (a job's own
    constraint, its CPUs or memory: `WorkUnit.pools`) can only step down to a shape one of those pools has, so a
    node of a pool with none is not oversized for it (a 1-GPU job that needs a 2-GPU node's CPUs takes a booting
    2-GPU node instead of launching another)."""
    if cls.pools is None:
        return steps
    allowed = {pools[p].gpus_per_node for p in cls.pools if p in pools}
    return {p: max((g for g in allowed if cls.gpus_per_node <= g <= s), default=0) for p, s in steps.items()}


def class_state(cls: UnitClass, class_size: int, st: PlanState) -> ClassState:
    reserved, market, none = st.book.streams(cls, class_size, shared=st.policy.share_nodes)
    order = st.book.existing_pools(cls)
    every = frozenset(order)
    if st.policy.expected_run_s is not None and st.gpu_prices:
        head = market.peek()
        if head is not None:  # leave out running capacity dearer over the run than the best new offering
            g_new = max(1, head.offering.gpus_per_node)
            pools = st.inventory.pool_by_name
            # a gang takes whole nodes: only the price over the run counts (sharing a busy node is a 1-node unit's)
            order = {
                p: v
                for p, v in order.items()
                if worth_reusing(st.gpu_prices.get(p, 0.0), head.hourly_usd / g_new, st.policy)
                and (
                    cls.nodes > 1
                    or st.policy.share_nodes  # the operator's choice: small work shares nodes (rule.py)
                    or pack_pays(st.gpu_prices.get(p, 0.0) * pools[p].gpus_per_node, head.hourly_usd, g_new, st.policy)
                )
            }
    caps = {}
    if cls.nodes == 1 and st.steps:
        caps = placement_caps(class_steps(cls, st.steps, st.inventory.pool_by_name), st.inventory.pool_by_name,
                              cls.gpus_per_node)  # fmt: skip
        caps = {p: c for p, c in caps.items() if p in order}
    cs = ClassState(cls, list(order), reserved, market, none, pool_order=order, caps=caps, hint_pools=every)
    st.watch(cs)
    return cs
