"""Nodes and their explicit state machine.

`NodeState` is the autoscaler's view of one node; `TRANSITIONS` lists every legal edge with the
reason it exists; `transition()` is the only way to move a node and raises `IllegalTransition`
for anything else.  Each node keeps a timestamped history; `since` (time of entering the current
state) drives the idle and boot timeouts.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace

from autoscaler.cloud import OfferingKey


class NodeState(enum.StrEnum):
    REQUESTED = "requested"  # launch asked for; the cloud has not confirmed a VM yet
    BOOTING = "booting"  # VM exists but the node has not registered with the scheduler
    READY_IDLE = "ready-idle"  # registered, no work on it
    BUSY = "busy"  # registered, some or all GPUs in use
    DRAINING = "draining"  # takes no new work; deleted once empty
    DELETING = "deleting"  # delete issued by name, waiting for the cloud
    GONE = "gone"  # deleted, preempted or failed to create (terminal)


S = NodeState

#: Every legal move, with the reason the edge exists.  Anything else is an IllegalTransition.
TRANSITIONS: dict[tuple[NodeState, NodeState], str] = {
    (S.REQUESTED, S.BOOTING): "the cloud accepted the launch and the VM is provisioning",
    (S.REQUESTED, S.GONE): "the launch failed (stockout, quota) or was rejected",
    (S.REQUESTED, S.DELETING): "the request is cancelled before a VM exists",
    (S.BOOTING, S.READY_IDLE): "the node registered with the scheduler and has no work",
    (S.BOOTING, S.BUSY): "the node registered and the scheduler started work on it at once",
    (S.BOOTING, S.DELETING): "boot timeout or cancellation: the node never became ready",
    (S.BOOTING, S.GONE): "the VM died or was preempted while booting",
    (S.READY_IDLE, S.BUSY): "the scheduler started work on the node",
    (S.READY_IDLE, S.DRAINING): "scale-down step 1: idle past the idle timeout, stop new work",
    (S.READY_IDLE, S.GONE): "the node vanished (spot preemption, host failure)",
    (S.BUSY, S.READY_IDLE): "all work on the node finished",
    (S.BUSY, S.DRAINING): "an operator drained a busy node; running work finishes first",
    (S.BUSY, S.GONE): "the node was preempted or crashed with work on it",
    (S.DRAINING, S.READY_IDLE): "the drain was cancelled (resume) before deletion",
    (S.DRAINING, S.DELETING): "scale-down step 2: drained and empty, delete by name",
    (S.DRAINING, S.GONE): "the node vanished while draining",
    (S.DELETING, S.GONE): "the cloud confirmed the deletion",
}

#: States in which a node is billed and holds its name.
LIVE_STATES = frozenset({S.REQUESTED, S.BOOTING, S.READY_IDLE, S.BUSY, S.DRAINING, S.DELETING})
#: States whose node will be (or is) schedulable: capacity the planner may place demand on.
SCHEDULABLE_STATES = frozenset({S.REQUESTED, S.BOOTING, S.READY_IDLE, S.BUSY})
#: States of a node that is coming up.
COMING_STATES = frozenset({S.REQUESTED, S.BOOTING})


class IllegalTransition(ValueError):
    """A node move that the state machine does not allow."""

    def __init__(self, node: str, frm: NodeState, to: NodeState, why: str | None = None) -> None:
        legal = sorted(str(t) for (f, t) in TRANSITIONS if f is frm)
        why = why or f"legal from {frm}: {', '.join(legal) or 'none'}"
        super().__init__(f"node {node!r}: illegal transition {frm} -> {to} ({why})")
        self.node, self.frm, self.to = node, frm, to


@dataclass(frozen=True)
class Node:
    """One node of a pool as the autoscaler sees it.

    `gpus` is the node's GPU count, `gpus_used` how many are allocated to work, `units` the ids
    of the work units running on it (where known).  `hourly_usd` is what the node bills (None:
    the planner looks the price up in the offerings).  `history` is ((state, at), ...), oldest
    first, ending with the current state.  `work_pools`: the pools its running work could also run
    on, where some of that work may not run everywhere (a Slurm job's own constraint, CPUs or memory:
    `autoscaler.daemon.snapshot.job_pools`); None: none of it is restricted."""

    name: str
    pool: str
    offering: OfferingKey
    state: NodeState
    gpus: int
    gpus_used: int = 0
    since: float = 0.0
    units: tuple[str, ...] = ()
    hourly_usd: float | None = None
    history: tuple[tuple[NodeState, float], ...] = ()
    work_pools: frozenset[str] | None = None

    def __post_init__(self) -> None:
        if self.gpus < 0:
            raise ValueError(f"Node.gpus: must be >= 0, got {self.gpus} (node {self.name!r})")
        if not 0 <= self.gpus_used <= self.gpus:
            raise ValueError(f"Node.gpus_used: must be in 0..{self.gpus}, got {self.gpus_used} (node {self.name!r})")
        if self.state is NodeState.READY_IDLE and self.gpus_used:
            raise ValueError(f"Node.gpus_used: a ready-idle node uses no GPUs, got {self.gpus_used} ({self.name!r})")
        if not self.history:
            object.__setattr__(self, "history", ((self.state, self.since),))

    @property
    def gpus_free(self) -> int:
        return self.gpus - self.gpus_used

    @property
    def zone(self) -> str:
        return self.offering.zone

    @property
    def has_work(self) -> bool:
        return self.gpus_used > 0 or bool(self.units)

    def idle_for(self, now: float) -> float:
        """Seconds the node has been ready-idle (0 when it is in any other state)."""
        return max(0.0, now - self.since) if self.state is NodeState.READY_IDLE else 0.0


def transition(node: Node, to: NodeState, now: float, *, gpus_used: int | None = None) -> Node:
    """Move `node` to state `to` at time `now`; raises IllegalTransition for a move not in TRANSITIONS.

    Moving to READY_IDLE clears usage; moving to BUSY requires work (`gpus_used` > 0, given or already
    recorded); DRAINING -> DELETING requires an empty node (the planner never deletes a node with work)."""
    if (node.state, to) not in TRANSITIONS:
        raise IllegalTransition(node.name, node.state, to)
    used = node.gpus_used if gpus_used is None else gpus_used
    units = node.units
    work_pools = node.work_pools
    if to is NodeState.READY_IDLE:
        used, units, work_pools = 0, (), None
    elif to is NodeState.BUSY and used <= 0:
        raise ValueError(f"node {node.name!r}: moving to busy needs gpus_used > 0")
    elif to is NodeState.DELETING and node.has_work:
        why = f"it still has work: {node.gpus_used} GPUs used, units {list(node.units)}"
        raise IllegalTransition(node.name, node.state, to, why)
    history = (*node.history, (to, now))
    return replace(node, state=to, since=now, gpus_used=used, units=units, work_pools=work_pools, history=history)
