"""Small builders for planner tests: an a3-highgpu-like family (1/2/4/8 GPUs, equal per-GPU price)
in two zones, on-demand and spot, plus helpers for nodes, reservations and units."""

from __future__ import annotations

from autoscaler.cloud import Offering, OfferingKey
from autoscaler.model import Inventory, Node, NodeState, Pool, WorkUnit
from fleet.catalog import CapacityType

ZONES = ("us-central1-a", "us-central1-b")
H100 = "nvidia-h100-80gb"
OD_PER_GPU = 11.0
SPOT_PER_GPU = 4.0
SHAPES = (1, 2, 4, 8)


def machine(g: int) -> str:
    return f"a3-highgpu-{g}g"


def pool_name(g: int, cap: CapacityType | str) -> str:
    return f"h{g}-{CapacityType(cap)}"


def key(g: int, cap: CapacityType | str = CapacityType.ON_DEMAND, zone: str = ZONES[0], res: str | None = None):
    return OfferingKey("gcp", zone, machine(g), CapacityType(cap), res)


def offering(
    g: int,
    cap: CapacityType | str = CapacityType.ON_DEMAND,
    zone: str = ZONES[0],
    *,
    price: float | None = None,
    available: int | None = None,
    res: str | None = None,
) -> Offering:
    cap = CapacityType(cap)
    per_gpu = SPOT_PER_GPU if cap is CapacityType.SPOT else OD_PER_GPU
    return Offering(key(g, cap, zone, res), price if price is not None else per_gpu * g, H100, g, available)


def family_offerings(caps=(CapacityType.ON_DEMAND, CapacityType.SPOT), zones=ZONES, shapes=SHAPES) -> list[Offering]:
    return [offering(g, c, z) for g in shapes for c in caps for z in zones]


def pool(g: int, cap: CapacityType | str = CapacityType.ON_DEMAND, **kw) -> Pool:
    cap = CapacityType(cap)
    args = dict(
        name=pool_name(g, cap),
        machine_type=machine(g),
        gpu_type=H100,
        gpus_per_node=g,
        zones=ZONES,
        capacity_type=cap,
        max_nodes=64,
        spot_tolerant=cap is CapacityType.SPOT,
    )
    args.update(kw)
    return Pool(**args)


def family_pools(caps=(CapacityType.ON_DEMAND, CapacityType.SPOT), shapes=SHAPES, **kw) -> list[Pool]:
    return [pool(g, c, **kw) for g in shapes for c in caps]


def node(
    p: Pool,
    i: int,
    state: NodeState = NodeState.READY_IDLE,
    *,
    used: int = 0,
    since: float = 0.0,
    zone: str | None = None,
    units: tuple[str, ...] = (),
) -> Node:
    k = OfferingKey(p.provider, zone or p.zones[0], p.machine_type, p.capacity_type, p.reservation)
    return Node(p.node_name(i), p.name, k, state, p.gpus_per_node, used, since, units)


def inv(pools, nodes=()) -> Inventory:
    return Inventory(tuple(pools), tuple(nodes))


def unit(uid: str, gpus: int = 1, nodes: int = 1, t: float = 0.0, **kw) -> WorkUnit:
    return WorkUnit(uid, t, gpus, nodes, **kw)
