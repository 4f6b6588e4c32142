"""The autoscaler's model: plain frozen dataclasses, no I/O (imports only stdlib, fleet.catalog
and autoscaler.cloud).  Names here are a contract for the planner, the simulator, the replay,
the daemon and the actuators: extend, never rename.

Demand (`demand.py`)
    `WorkUnit(id, submit_time, gpus_per_node, nodes=1, gpu_types=None, machine_types=None,
    spot_ok=False, priority=0, queue="default", time_limit_s=None)`; nodes > 1 is a gang.
    `WorkUnit.from_gpus(id, t, gpus, node_gpus=8)` splits big asks into 8-GPU gangs.
Nodes (`nodes.py`)
    `NodeState` (requested, booting, ready-idle, busy, draining, deleting, gone), the
    `TRANSITIONS` table {(from, to): why}, `transition(node, to, now)` raising
    `IllegalTransition`, and `Node(name, pool, offering, state, gpus, gpus_used, since, units,
    hourly_usd, history)`.
Inventory (`inventory.py`)
    `Pool(name, machine_type, gpu_type, gpus_per_node, zones, capacity_type, max_nodes, ...)`,
    `Inventory(pools, nodes)` with `free_names(pool, count)` over the `prefix-i` name space.
Offerings
    `autoscaler.cloud.Offering` / `OfferingKey` (provider x zone x machine type x capacity type,
    $/h, `available_nodes`, `reservation_size`).
Policy (`policy.py`)
    `Policy(...)` limits and knobs; `UnavailableOffering(key, until, reason, failures)` backoff
    memory, kept by the caller with `record_failure(memory, key, kind, now, policy)`.
Plan (`plan.py`)
    Commands `ScaleUp(pool, offering, names, request_id, units, reason, placement_group, gang,
    hourly_usd)`, `Drain(pool, nodes, reason)`, `DeleteNodes(pool, names, reason)`;
    `Assignment(unit, nodes, gpus_per_node, placement, request_id)`, `Unserved(unit, reason,
    detail)` with `UnservedReason`, and `Plan(commands, assignments, unserved, unavailable, stats)`.
"""

from autoscaler.cloud import Offering, OfferingKey
from autoscaler.model.demand import WorkUnit
from autoscaler.model.inventory import Inventory, Pool, free_names
from autoscaler.model.nodes import (
    COMING_STATES,
    LIVE_STATES,
    SCHEDULABLE_STATES,
    TRANSITIONS,
    IllegalTransition,
    Node,
    NodeState,
    transition,
)
from autoscaler.model.plan import (
    Assignment,
    Command,
    DeleteNodes,
    Drain,
    Placement,
    Plan,
    ScaleUp,
    Unserved,
    UnservedReason,
    request_id_for,
)
from autoscaler.model.policy import (
    Policy,
    PolicyError,
    UnavailableOffering,
    active_unavailable,
    policy_from_mapping,
    record_failure,
)

__all__ = [
    "COMING_STATES",
    "LIVE_STATES",
    "SCHEDULABLE_STATES",
    "TRANSITIONS",
    "Assignment",
    "Command",
    "DeleteNodes",
    "Drain",
    "IllegalTransition",
    "Inventory",
    "Node",
    "NodeState",
    "Offering",
    "OfferingKey",
    "Placement",
    "Plan",
    "Policy",
    "PolicyError",
    "Pool",
    "ScaleUp",
    "UnavailableOffering",
    "Unserved",
    "UnservedReason",
    "WorkUnit",
    "active_unavailable",
    "free_names",
    "policy_from_mapping",
    "record_failure",
    "request_id_for",
    "transition",
]
