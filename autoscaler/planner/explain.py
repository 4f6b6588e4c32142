"""Explain pass: say why a unit was left unserved, naming the binding limit."""

from __future__ import annotations

from autoscaler.model import Unserved, UnservedReason, WorkUnit
from autoscaler.planner.placement import ClassState


def explain_unserved(unit: WorkUnit, cs: ClassState, held: bool = False) -> Unserved:
    """The reason code is the limit most candidates hit (ties: the order of UnservedReason);
    the detail lists every limit hit and how many candidate offerings it blocked."""
    shape = f"{unit.nodes} x {unit.gpus_per_node} GPUs" if unit.is_gang else f"{unit.gpus_per_node} GPUs"
    if held:
        return Unserved(unit.id, UnservedReason.BATCHING, f"{shape}: launches held while demand is still arriving")
    if cs.failed:
        order = list(UnservedReason)
        reason = max(cs.failed, key=lambda r: (cs.failed[r], -order.index(r)))
        parts = ", ".join(f"{r}: {cs.failed[r]}" for r in sorted(cs.failed, key=order.index))
        return Unserved(unit.id, UnservedReason(reason), f"{shape}: every candidate offering blocked ({parts})")
    if cs.none is not None:
        return Unserved(unit.id, cs.none.reason, f"{shape}: {cs.none.detail}")
    return Unserved(unit.id, UnservedReason.NO_OFFERING, f"{shape}: no candidate offering")
