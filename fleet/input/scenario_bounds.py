"""The bounds `fleet simulate` and `fleet advise` both put on a replay scenario before any replay starts.

Each returns the error text, which the command prefixes with its own option name (`--reserved-nodes` for
simulate, `--sizes` for advise's grid of reservation sizes), or None when the value is within bounds.
"""

from __future__ import annotations

from fleet.input.limits import MAX_RESERVED_NODES


def reserved_nodes_problem(option: str, nodes: int) -> str | None:
    """A reservation larger than one zonal managed instance group can hold."""
    if nodes <= MAX_RESERVED_NODES:
        return None
    return (
        f"{option}: at most {MAX_RESERVED_NODES:,} reserved nodes (the reservation sits in one zone, and a zonal "
        f"managed instance group holds at most {MAX_RESERVED_NODES:,} instances), got {nodes:,}"
    )


def stockout_rate_problem(rate: float) -> str | None:
    """A stockout rate under which no launch ever succeeds (NaN and negatives are the scenario model's to refuse)."""
    if rate >= 1:
        return f"--stockout-rate: must be below 1 (at {rate:g} no launch ever succeeds)"
    return None
