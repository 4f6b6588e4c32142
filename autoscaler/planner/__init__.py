"""The pure planner: `plan(demand, inventory, offerings, policy, now, unavailable=(), hints=None) -> Plan`.

`unavailable` is the caller's backoff memory (see `autoscaler.model.record_failure`); `hints` is
the previous plan's `assignments`, so still-pending units stay on the nodes they were given.
A chain of named passes, each a function testable alone:

1. `expire_backoff` (backoff.py): forget expired unavailable-offering entries; `OfferBook` skips
   the rest, so the planner falls back to the next offering or zone.
2. `compute_headroom` (limits.py): room under pool / fleet node and GPU limits, offering limits
   (free reservation slots, quota) and the $/h budget; `Headroom.blocker` is the budget/limit check.
   `keep_min_nodes` (minimum.py) then launches pools up to their `min_nodes`.
   `step_down` / `cordon_oversized` (defrag.py): busy nodes whose used GPUs fit a smaller shape at no
   higher $/GPU-h, of a shape the policy does not keep warm, are cordoned (drained, never stopped) and take no
   new work.
3. Per unit, highest priority first: `place_on_existing` (hinted nodes; else ready, then booting,
   then nodes this plan launches; reservation, spot, then other capacity; best fit = bin-packing)
   -> `fill_reservations` -> `place_gang` (all or nothing, one zone, one placement group) or
   `place_cheapest` (right-sized, cheapest per unit served).  A single unit never lands where it
   would leave a node oversized (`placement_caps`), nor on running capacity dearer over its
   expected run than new capacity (`worth_reusing`).
4. `scale_down_idle` (scale_down.py): drain idle nodes past their shape's timeout or beyond its
   warm-node cap, delete drained ones by name.

The settings (idle keep, warm cap, reservation hold) come from `rule.policy_for(facts)`.
5. `explain_unserved` (explain.py): a reason code and detail for every unit left pending.

The passes over the catalog alone (`step_down`, `pool_gpu_prices`, `OfferBook`) remember their last few calls
(memo.py): equal offerings, backoff memory and pools give the earlier result, so a plan stays a pure function.
"""

from autoscaler.planner.backoff import expire_backoff, split_backed_off
from autoscaler.planner.capacity import CapacityIndex, Slot
from autoscaler.planner.core import batch_hold, plan, priority_order
from autoscaler.planner.defrag import cordon_oversized, placement_caps, step_down, worth_reusing
from autoscaler.planner.explain import explain_unserved
from autoscaler.planner.limits import Headroom, compute_headroom
from autoscaler.planner.minimum import keep_min_nodes
from autoscaler.planner.offers import Candidate, OfferBook, UnitClass
from autoscaler.planner.placement import (
    ClassState,
    NameAllocator,
    PlanState,
    class_state,
    fill_reservations,
    place_cheapest,
    place_gang,
    place_on_existing,
)
from autoscaler.planner.rule import FleetFacts, ShapeFacts, policy_for
from autoscaler.planner.scale_down import boot_timeouts, idle_over_cap, scale_down_idle

__all__ = [
    "Candidate",
    "CapacityIndex",
    "ClassState",
    "FleetFacts",
    "Headroom",
    "NameAllocator",
    "OfferBook",
    "PlanState",
    "ShapeFacts",
    "Slot",
    "UnitClass",
    "batch_hold",
    "boot_timeouts",
    "class_state",
    "compute_headroom",
    "cordon_oversized",
    "expire_backoff",
    "explain_unserved",
    "fill_reservations",
    "idle_over_cap",
    "keep_min_nodes",
    "place_cheapest",
    "place_gang",
    "place_on_existing",
    "placement_caps",
    "plan",
    "policy_for",
    "priority_order",
    "scale_down_idle",
    "split_backed_off",
    "step_down",
    "worth_reusing",
]
