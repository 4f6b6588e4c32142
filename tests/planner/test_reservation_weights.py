"""Best fit on the reservation (`autoscaler.core.weights`): the Weights the decision core gives reserved nodes."""

from __future__ import annotations

from autoscaler.core.weights import ReservedNode, rendered_weights, reservation_weights, weight_changes
from fleet.catalog import CapacityType
from fleet.slurm.weights import TIER_BASE
from tests.planner.factory import pool


def test_the_fullest_reserved_node_that_fits_gets_the_lowest_weight_and_other_pools_are_left_alone() -> None:
    resv = pool(8, CapacityType.RESERVATION)
    od = pool(1)
    base = rendered_weights([resv, od])
    assert TIER_BASE[CapacityType.RESERVATION] <= base[resv.name] < TIER_BASE[CapacityType.SPOT]
    nodes = [
        ReservedNode(f"{resv.name}-0", resv.name, 8, 0),  # empty: last
        ReservedNode(f"{resv.name}-1", resv.name, 8, 4),
        ReservedNode(f"{resv.name}-2", resv.name, 8, 7),  # fullest with room: first
        ReservedNode(f"{resv.name}-3", resv.name, 8, 8),  # full
        ReservedNode(f"{od.name}-0", od.name, 1, 0),  # not reserved: Slurm keeps its rendered Weight
    ]
    w = reservation_weights([resv, od], base, nodes)
    b = base[resv.name]
    assert w == {f"{resv.name}-0": b + 8, f"{resv.name}-1": b + 4, f"{resv.name}-2": b + 1, f"{resv.name}-3": b}
    # the whole range stays inside the reservation tier, below every other capacity type
    assert max(w.values()) < min(base[od.name], TIER_BASE[CapacityType.SPOT])


def test_only_nodes_whose_weight_differs_are_updated_one_command_per_weight() -> None:
    desired = {"r-0": 1008, "r-1": 1004, "r-2": 1004, "r-3": 1000}
    current = {"r-0": 1008, "r-1": 1000, "r-2": None}  # r-2 not known, r-3 not listed
    assert weight_changes(desired, current) == {1000: ("r-3",), 1004: ("r-1", "r-2")}
    assert weight_changes(desired, desired) == {}
