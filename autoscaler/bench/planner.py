"""The planner benchmark: a seeded synthetic mix (demand x offerings x nodes) and a timing harness.

`synthetic_mix` draws offerings from the real machine catalog (its zones and list prices), one pool
per (machine type, region, capacity type) that can launch them, `nodes` existing nodes spread over
those pools in every state, and `jobs` pending units of 1 to 64 GPUs (mostly small, some gangs of
8-GPU nodes, a spot-tolerant share, three queues, a few GPU-type constraints).  A few offerings are
reservations with free slots, some have quota limits and some are backed off (recent stockouts).
`time_plan` runs `plan()` on it `runs` times and reports the median wall time.
"""

from __future__ import annotations

import gc
import random
import statistics
import time
from dataclasses import dataclass

from autoscaler.cloud import FailureKind, Offering, OfferingKey
from autoscaler.model import Inventory, Node, NodeState, Policy, Pool, UnavailableOffering, WorkUnit
from autoscaler.planner import plan
from fleet.catalog import CapacityType, load_catalog

QUEUES = ("batch", "interactive", "research")
_GPU_CHOICES = (1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 4, 4, 8, 8, 16, 24, 32, 64)


@dataclass(frozen=True)
class Mix:
    demand: tuple[WorkUnit, ...]
    inventory: Inventory
    offerings: tuple[Offering, ...]
    policy: Policy
    unavailable: tuple[UnavailableOffering, ...]
    now: float


def _catalog_offerings(rng: random.Random, count: int) -> list[Offering]:
    """`count` distinct offerings (machine type x zone x capacity type) with list prices."""
    cat = load_catalog()
    pool: list[Offering] = []
    for m in sorted(cat.machines(), key=lambda m: m.name):
        for region, zones in sorted(m.zones.items()):
            price = m.price(region)
            if price is None:
                continue
            for zone in zones:
                for cap in (CapacityType.ON_DEMAND, CapacityType.SPOT, CapacityType.FLEX_START):
                    hourly = price.hourly(cap)
                    if hourly is None or (cap is CapacityType.FLEX_START and m.gpu_count < 8):
                        continue
                    key = OfferingKey("gcp", zone, m.name, cap)
                    pool.append(Offering(key, hourly, m.gpu.accelerator_type, m.gpu_count))
    rng.shuffle(pool)
    chosen = pool[:count]
    # Turn a few on-demand 8-GPU offerings into reservations with free slots, some into quota-limited ones.
    out: list[Offering] = []
    for i, o in enumerate(chosen):
        if o.key.capacity_type is CapacityType.ON_DEMAND and o.gpus_per_node == 8 and i % 7 == 0:
            key = OfferingKey("gcp", o.key.zone, o.key.machine_type, CapacityType.RESERVATION, f"res-{i}")
            size = rng.randint(4, 32)
            out.append(Offering(key, o.hourly_usd, o.gpu_type, o.gpus_per_node, rng.randint(0, size), size))
        elif i % 5 == 0:
            out.append(Offering(o.key, o.hourly_usd, o.gpu_type, o.gpus_per_node, available_nodes=rng.randint(0, 40)))
        else:
            out.append(o)
    while len(out) < count:  # the catalog has fewer distinct offerings: repeat zones as extra reservations
        o = out[len(out) % max(1, len(chosen))]
        key = OfferingKey("gcp", o.key.zone, o.key.machine_type, CapacityType.RESERVATION, f"res-x{len(out)}")
        out.append(Offering(key, o.hourly_usd, o.gpu_type, o.gpus_per_node, 8, 16))
    return out


def _pools(offerings: list[Offering], rng: random.Random) -> list[Pool]:
    groups: dict[tuple[str, str, CapacityType, str | None], list[Offering]] = {}
    for o in offerings:
        region = o.key.zone.rsplit("-", 1)[0]
        groups.setdefault((o.key.machine_type, region, o.key.capacity_type, o.key.reservation), []).append(o)
    pools = []
    for (machine, region, cap, res), offs in sorted(groups.items(), key=lambda kv: str(kv[0])):
        o = offs[0]
        name = f"{machine}-{region}-{cap}" + (f"-{res}" if res else "")
        queues = None if rng.random() < 0.7 else frozenset(rng.sample(QUEUES, 2))
        pools.append(
            Pool(
                name=name,
                machine_type=machine,
                gpu_type=o.gpu_type,
                gpus_per_node=o.gpus_per_node,
                zones=tuple(sorted({x.key.zone for x in offs})),
                capacity_type=cap,
                max_nodes=2000,
                reservation=res,
                queues=queues,
                spot_tolerant=cap is CapacityType.SPOT,
                compact_placement=o.gpus_per_node == 8,
                placement_max_vms=150 if o.gpus_per_node == 8 else None,
            )
        )
    return pools


def _nodes(pools: list[Pool], offerings: list[Offering], count: int, rng: random.Random, now: float) -> list[Node]:
    by_pool: dict[str, list[Offering]] = {}
    for p in pools:
        by_pool[p.name] = [o for o in offerings if p.can_launch(o.key)]
    states = [NodeState.BUSY] * 5 + [NodeState.READY_IDLE] * 3 + [NodeState.BOOTING, NodeState.DRAINING]
    nodes: list[Node] = []
    counters: dict[str, int] = {}
    for _ in range(count):
        p = rng.choice(pools)
        o = rng.choice(by_pool[p.name])
        i = counters.get(p.name, 0)
        counters[p.name] = i + 1
        state = rng.choice(states)
        used = rng.randint(1, p.gpus_per_node) if state is NodeState.BUSY else 0
        since = now - rng.uniform(0, 3600)
        nodes.append(Node(p.node_name(i), p.name, o.key, state, p.gpus_per_node, used, since))
    return nodes


def _demand(count: int, rng: random.Random, now: float, spot_share: float) -> list[WorkUnit]:
    units = []
    gpu_type_choices = (None,) * 6 + (frozenset({"nvidia-h100-80gb"}), frozenset({"nvidia-tesla-a100"}))
    for i in range(count):
        gpus = rng.choice(_GPU_CHOICES)
        units.append(
            WorkUnit.from_gpus(
                f"job-{i}",
                now - rng.uniform(0, 7200),
                gpus,
                gpu_types=rng.choice(gpu_type_choices),
                spot_ok=rng.random() < spot_share,
                priority=rng.choice((0, 0, 0, 1)),
                queue=rng.choice(QUEUES),
            )
        )
    return units


def synthetic_mix(jobs: int, offerings: int, nodes: int, seed: int = 0, spot_share: float = 0.3) -> Mix:
    """A reproducible planner input of the given size."""
    rng = random.Random(seed)
    now = 1_000_000.0
    offs = _catalog_offerings(rng, offerings)
    pools = _pools(offs, rng)
    inv = Inventory(tuple(pools), tuple(_nodes(pools, offs, nodes, rng, now)))
    backed = tuple(
        UnavailableOffering(o.key, now + rng.uniform(-600, 600), FailureKind.STOCKOUT)
        for o in offs
        if rng.random() < 0.05
    )
    policy = Policy(
        max_gpus=200_000,
        budget_usd_per_hour=2_000_000.0,
        idle_timeout_s=600,
        spot_queues=frozenset({"batch", "research"}),
        flex_start_queues=frozenset({"research"}),
        flex_start_max_wait_s=3600,
    )
    return Mix(tuple(_demand(jobs, rng, now, spot_share)), inv, tuple(offs), policy, backed, now)


def time_plan(mix: Mix, runs: int = 5) -> dict[str, float | int]:
    """Median and min wall time of `runs` plans of `mix` (plus one untimed warm-up).

    The mix's own objects are moved out of the collector's sight (`gc.freeze`) while timing, as a
    long-running caller's long-lived data would be: collections triggered by the planner's own
    allocations are timed, re-scans of the benchmark's inputs are not."""
    if runs < 1:
        raise ValueError(f"runs: must be >= 1, got {runs}")
    plan(mix.demand, mix.inventory, mix.offerings, mix.policy, mix.now, mix.unavailable)
    times = []
    gc.collect()
    gc.freeze()
    try:
        for _ in range(runs):
            t0 = time.perf_counter()
            p = plan(mix.demand, mix.inventory, mix.offerings, mix.policy, mix.now, mix.unavailable)
            times.append(time.perf_counter() - t0)
    finally:
        gc.unfreeze()
    return {
        "seconds_median": round(statistics.median(times), 4),
        "seconds_min": round(min(times), 4),
        "units_placed": len(p.assignments),
        "units_unserved": len(p.unserved),
        "nodes_launched": int(p.stats["nodes_launched"]),
    }
