"""Conformance of generated stacks with the reference facts of Google's blueprints (`reference.yaml`)."""

from fleet.conformance.check import Reference, check_stack, load_reference

__all__ = ["Reference", "check_stack", "load_reference"]
