"""Capacity index: every node with free GPUs the planner may place demand on.

Slots are bucketed by (pool, rank, free GPUs) with a per-(pool, rank) bitmask of non-empty free
levels, so best-fit ("the fullest node that still fits") is a few integer operations per pool.
Rank orders preference: 0 = ready (idle or partly used), 1 = requested/booting, 2 = nodes a
ScaleUp of this plan creates (their leftover GPUs bin-pack further small units).  `version`
increases whenever capacity is added, so a caller may cache "nothing fits" until it changes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from autoscaler.model import COMING_STATES, SCHEDULABLE_STATES, Inventory, Node, Placement

READY, BOOTING, NEW = 0, 1, 2
RANK_PLACEMENT = {READY: Placement.READY, BOOTING: Placement.BOOTING, NEW: Placement.NEW}


@dataclass(eq=False)
class Slot:
    """A node (existing or planned) with `free` GPUs.  `batch` ties a planned node to its ScaleUp."""

    name: str
    pool: str
    zone: str
    free: int
    rank: int
    batch: object = None


class CapacityIndex:
    def __init__(self) -> None:
        self._buckets: dict[tuple[str, int, int], dict[str, Slot]] = {}
        self._mask: dict[tuple[str, int], int] = {}
        self._any: dict[str, int] = {}  # pool -> OR of its rank masks
        self._by_name: dict[str, Slot] = {}
        self.version = 0

    @classmethod
    def from_inventory(cls, inventory: Inventory, exclude: Iterable[str] = ()) -> CapacityIndex:
        """Slots for nodes that are (or will be) schedulable and have free GPUs."""
        skip = set(exclude)
        idx = cls()
        for n in inventory.nodes:
            if n.state in SCHEDULABLE_STATES and n.gpus_free > 0 and n.name not in skip:
                idx.add(slot_of(n))
        return idx

    def add(self, slot: Slot) -> None:
        self._put(slot)
        self.version += 1

    def get(self, name: str) -> Slot | None:
        """The slot of node `name` while it has free GPUs."""
        return self._by_name.get(name)

    def _put(self, slot: Slot) -> None:
        self._by_name[slot.name] = slot
        self._buckets.setdefault((slot.pool, slot.rank, slot.free), {})[slot.name] = slot
        mk = (slot.pool, slot.rank)
        bit = 1 << slot.free
        self._mask[mk] = self._mask.get(mk, 0) | bit
        self._any[slot.pool] = self._any.get(slot.pool, 0) | bit

    def _remove(self, slot: Slot) -> None:
        key = (slot.pool, slot.rank, slot.free)
        bucket = self._buckets[key]
        del bucket[slot.name]
        del self._by_name[slot.name]
        if not bucket:
            del self._buckets[key]
            self._mask[(slot.pool, slot.rank)] &= ~(1 << slot.free)
            m = self._mask
            p = slot.pool
            left = m.get((p, READY), 0) | m.get((p, BOOTING), 0) | m.get((p, NEW), 0)
            if left:
                self._any[p] = left
            else:
                del self._any[p]  # only pools with free capacity stay, so scans stay short

    def hide(self, names: Iterable[str]) -> list[Slot]:
        """Take the slots of `names` out of the index (a unit that may not run on them is placed meanwhile); give
        them back with `restore`, unchanged."""
        hidden = [s for n in names if (s := self._by_name.get(n)) is not None]
        for s in hidden:
            self._remove(s)
        return hidden

    def restore(self, slots: Iterable[Slot]) -> None:
        for s in slots:
            self._put(s)

    def take(self, slot: Slot, gpus: int) -> None:
        """Use `gpus` of the slot's free GPUs."""
        if not 0 < gpus <= slot.free:
            raise ValueError(f"slot {slot.name!r}: cannot take {gpus} of {slot.free} free GPUs")
        self._remove(slot)
        slot.free -= gpus
        if slot.free:
            self._put(slot)

    def best_fit(
        self, pools: Mapping[str, tuple[int, int]], gpus: int, caps: Mapping[str, int] | None = None
    ) -> Slot | None:
        """The best slot with >= `gpus` free among `pools` (pool name -> (tier, position)): lowest rank,
        then lowest tier, then fewest free GPUs (best fit), then position.  `caps` (pool -> most free
        GPUs a slot of that pool may have) leaves out slots too empty for the unit (defrag.py).
        Scans whichever is shorter: `pools` or the pools that still have capacity."""
        mask, any_mask = self._mask, self._any
        if len(any_mask) < len(pools):
            scan = [(p, am) for p, am in any_mask.items() if p in pools]
        else:
            scan = [(p, any_mask[p]) for p in pools if p in any_mask]
        best: tuple[int, int, int, int] = (3, 0, 0, 0)
        best_pool = ""
        for p, am in scan:
            if not am >> gpus:
                continue
            cap = caps.get(p) if caps else None
            keep = -1 if cap is None else (1 << max(0, cap - gpus + 1)) - 1
            for rank in (READY, BOOTING, NEW):
                m = (mask.get((p, rank), 0) >> gpus) & keep
                if m:
                    tier, pos = pools[p]
                    cand = (rank, tier, gpus + (m & -m).bit_length() - 1, pos)
                    if cand < best:
                        best = cand
                        best_pool = p
                    break
        if best[0] == 3:
            return None
        return next(iter(self._buckets[(best_pool, best[0], best[2])].values()))

    def slots(self, pool: str, min_free: int, ranks: Sequence[int] = (READY, BOOTING, NEW)) -> list[Slot]:
        """Every slot of `pool` with at least `min_free` free GPUs and a rank in `ranks`, by (rank, free)."""
        out: list[Slot] = []
        for rank in ranks:
            m = self._mask.get((pool, rank), 0) >> min_free
            f = min_free
            while m:
                if m & 1:
                    out.extend(self._buckets[(pool, rank, f)].values())
                m >>= 1
                f += 1
        return out

    def gang_fit(self, pools: Mapping[str, tuple[int, int]], gpus_per_node: int, nodes: int) -> list[Slot] | None:
        """`nodes` distinct existing slots (ready or coming up) with >= `gpus_per_node` free, all in one
        pool and one zone (so one placement group), preferring the lowest worst rank, then the lowest
        tier, then the tightest fit.  Leftovers of nodes this plan launches are not used: a new gang
        is its own request."""
        best: tuple[tuple[int, int, int], list[Slot]] | None = None
        for p, (tier, _pos) in pools.items():
            if not self._any.get(p, 0) >> gpus_per_node:
                continue
            by_zone: dict[str, list[Slot]] = {}
            for s in self.slots(p, gpus_per_node, (READY, BOOTING)):
                by_zone.setdefault(s.zone, []).append(s)
            for zone in sorted(by_zone):
                group = by_zone[zone]
                if len(group) >= nodes:
                    chosen = group[:nodes]  # slots() already orders by (rank, free)
                    score = (max(s.rank for s in chosen), tier, sum(s.free for s in chosen))
                    if best is None or score < best[0]:
                        best = (score, chosen)
        return best[1] if best else None


def slot_of(node: Node) -> Slot:
    rank = BOOTING if node.state in COMING_STATES else READY
    return Slot(node.name, node.pool, node.offering.zone, node.gpus_free, rank)
