"""Fragmentation passes: small work must not pin large nodes when a smaller shape costs no more.

When shapes of one GPU type cost the same per GPU-hour (a3-highgpu 1g/2g/4g/8g), a 1-GPU job on
an 8-GPU node saves nothing and risks everything: the node is billed whole for as long as any job
runs on it, so one long small job keeps seven paid GPUs idle for hours.  The node's "step down"
is the largest smaller shape of its GPU type and capacity type, launchable by some pool, whose
$/GPU-h is no higher than the node's own (`step_down`; prices within `fleet.catalog.price_ties`' tolerance are
the same price).  A node whose used GPUs fit its step down is *oversized* for its work.  Two pure passes follow:

- `placement_caps`: the planner places a unit of `g` GPUs on a node only if the node is not left
  oversized (used + g > step down); otherwise the unit gets its own right-sized capacity.
- `cordon_oversized`: a partly used oversized node is cordoned (`Drain`): it takes no new work,
  its running jobs finish undisturbed, and the scale-down pass deletes it once it is empty.  A node
  whose running work could not run on the step-down shape (`Node.work_pools`: a job asking more
  CPUs or memory than the smaller machine has, or a constraint it does not meet) is the right size
  for that work and is left alone.  So is a node of a shape the policy keeps warm
  (`Policy.keeps_warm`: an idle keep or standby nodes): once its work ends it is a warm node the
  settings rule wants, and a drained one could serve nothing (Slurm's drain outlives the jobs) and
  would be deleted.  A shape with no idle keep is scaled down the moment it is empty anyway, so the
  cordon changes one thing only: no new small job keeps the big node up longer.  Nor is anything
  cordoned in a fleet with a reservation pool (`cordons_apply`): there Slurm binds a small job at
  submit with `--prefer` while the overflow is held for preemption, so a job kept off a cordoned
  node's free GPUs falls back to whatever node is free, often another big one (measured worse:
  docs/planner.md, "What an emptied cordoned node is").

Reservation capacity is paid for whether used or not (marginal $/GPU-h 0), so a reserved node is
never oversized; neither is a node with no smaller shape at its price (then packing is the saving).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from types import MappingProxyType

from autoscaler.cloud import Offering
from autoscaler.model import Drain, Inventory, NodeState, Policy, Pool
from autoscaler.planner.memo import recent_calls
from autoscaler.planner.offers import marginal_hourly
from fleet.catalog import CapacityType
from fleet.catalog.price_ties import SAME_PRICE_USD_PER_GPU_HOUR


@recent_calls(4)
def step_down(pools: Iterable[Pool], offerings: Iterable[Offering]) -> Mapping[str, int]:
    """Pool name -> GPUs of its step-down shape (0: none, the pool's nodes are never oversized).

    The step down of a pool of G GPUs is the largest s < G such that some pool of the same
    provider, GPU type and capacity type launches an s-GPU shape at a $/GPU-h no higher than the
    cheapest of the pool's own offerings."""
    pools = list(pools)
    rate: dict[tuple[str, str, str, int], float] = {}  # (provider, gpu type, capacity, gpus) -> min $/GPU-h
    by_machine: dict[tuple[str, str, str], float] = {}  # (provider, machine type, capacity) -> min $/GPU-h
    for o in offerings:
        k = o.key
        if o.gpus_per_node <= 0:
            continue
        per_gpu = marginal_hourly(o) / o.gpus_per_node
        mk = (k.provider, k.machine_type, str(k.capacity_type))
        by_machine[mk] = min(by_machine.get(mk, per_gpu), per_gpu)
    launchable = {(p.provider, p.machine_type, str(p.capacity_type)) for p in pools if p.max_nodes > 0}
    for p in pools:
        mk = (p.provider, p.machine_type, str(p.capacity_type))
        if mk in by_machine and mk in launchable:
            rk = (p.provider, p.gpu_type, str(p.capacity_type), p.gpus_per_node)
            rate[rk] = min(rate.get(rk, by_machine[mk]), by_machine[mk])
    out: dict[str, int] = {}
    for p in pools:
        own = by_machine.get((p.provider, p.machine_type, str(p.capacity_type)))
        best = 0
        if own is not None and own > 0:
            for (prov, gtype, cap, gpus), r in rate.items():
                if (
                    prov == p.provider
                    and gtype == p.gpu_type
                    and cap == str(p.capacity_type)
                    and best < gpus < p.gpus_per_node
                    and r <= own + SAME_PRICE_USD_PER_GPU_HOUR
                ):
                    best = gpus
        out[p.name] = best
    return MappingProxyType(out)  # remembered and shared (`recent_calls`): read-only


def placement_caps(steps: Mapping[str, int], pools: Mapping[str, Pool], gpus: int) -> dict[str, int]:
    """Pool name -> the most free GPUs a node of that pool may have for a unit of `gpus` GPUs to be
    placed on it without leaving it oversized: used + gpus > step down, i.e. free < G - step + gpus.
    Pools without a step down are absent (no cap)."""
    out: dict[str, int] = {}
    for name, s in steps.items():
        if s <= 0 or name not in pools:
            continue
        g_node = pools[name].gpus_per_node
        out[name] = g_node - s + gpus - 1
    return out


def cordons_apply(pools: Iterable[Pool], policy: Policy) -> bool:
    """Does `cordon_oversized` cordon anything in a fleet of `pools`: `Policy.defragment`, not `Policy.share_nodes`
    (the settings rule turns defragment off for it; this also answers for the operator's policy before the rule ran)
    and no reservation pool (module docstring)?"""
    return (
        policy.defragment
        and not policy.share_nodes
        and all(p.capacity_type is not CapacityType.RESERVATION for p in pools)
    )


def cordon_oversized(
    inventory: Inventory, steps: Mapping[str, int], policy: Policy, in_use: Collection[str] = ()
) -> list[Drain]:
    """Drain commands (one per pool, names sorted) for busy nodes whose used GPUs fit their pool's
    step-down shape, in pools whose shape the policy does not keep warm (module docstring).  Running
    work is never stopped: a drained node finishes its jobs and is deleted once empty.  Nodes `in_use`
    (this plan placed work on them) are left alone."""
    if not cordons_apply(inventory.pools, policy):
        return []
    out: list[Drain] = []
    for pool in inventory.pools:
        s = steps.get(pool.name, 0)
        if s <= 0 or policy.keeps_warm(pool.machine_type):
            continue
        smaller = step_down_pools(pool, s, inventory.pools)
        names = sorted(
            n.name
            for n in inventory.nodes_by_pool[pool.name]
            if n.state is NodeState.BUSY
            and 0 < n.gpus_used <= s
            and n.gpus_free > 0
            and n.name not in in_use
            and (n.work_pools is None or not smaller.isdisjoint(n.work_pools))
        )
        if names:
            out.append(
                Drain(
                    pool.name,
                    tuple(names),
                    f"oversized for its work: its used GPUs fit a {s}-GPU shape at no higher $/GPU-h; "
                    "cordoned so new work gets right-sized nodes, deleted once its running jobs end",
                    cordon=True,
                )
            )
    return out


def step_down_pools(pool: Pool, gpus: int, pools: Iterable[Pool]) -> frozenset[str]:
    """The pools of `pool`'s step-down shape: same provider, GPU type and capacity type, `gpus` GPUs a node."""
    return frozenset(
        q.name
        for q in pools
        if q.provider == pool.provider
        and q.gpu_type == pool.gpu_type
        and q.capacity_type is pool.capacity_type
        and q.gpus_per_node == gpus
    )


@recent_calls(4)
def pool_gpu_prices(pools: Iterable[Pool], offerings: Iterable[Offering]) -> Mapping[str, float]:
    """Pool name -> the marginal $/GPU-h of its cheapest offering (0 for reservation capacity)."""
    by_machine: dict[tuple[str, str, str], float] = {}
    for o in offerings:
        if o.gpus_per_node > 0:
            mk = (o.key.provider, o.key.machine_type, str(o.key.capacity_type))
            v = marginal_hourly(o) / o.gpus_per_node
            by_machine[mk] = min(by_machine.get(mk, v), v)
    out: dict[str, float] = {}
    for p in pools:
        v = by_machine.get((p.provider, p.machine_type, str(p.capacity_type)))
        if v is not None:
            out[p.name] = v
    return MappingProxyType(out)  # remembered and shared (`recent_calls`): read-only


def worth_reusing(pool_gpu_usd: float, new_gpu_usd: float, policy: Policy) -> bool:
    """Is running a unit for its expected run on a node billed `pool_gpu_usd` per GPU-h no dearer than
    new capacity at `new_gpu_usd` (billed from launch, so boot included) plus the boot's wait?"""
    d = policy.expected_run_s
    if d is None or pool_gpu_usd <= new_gpu_usd:
        return True
    boot = policy.expected_boot_s
    w = policy.wait_value_usd_per_gpu_hour
    w = pool_gpu_usd if w is None else w
    return pool_gpu_usd * d <= new_gpu_usd * (d + boot) + w * boot


def pack_pays(node_hourly: float, own_hourly: float, own_gpus: int, policy: Policy) -> bool:
    """Does a unit expecting `policy.expected_run_s` (m) cost less on the free GPUs of a busy node billed
    `node_hourly` than on a node of its own (`own_hourly`, `own_gpus`: the best new offering for it)?

    Sharing extends the busy node's life when the unit outlives the node's current work; with run
    times alike, by m/2 on average, billed for the whole node.  A node of its own bills the run plus
    a boot, and the unit waits that boot: own_hourly * (m + T), T = boot * (1 + w/p) as in the rule."""
    m = policy.expected_run_s
    if m is None or node_hourly <= 0:
        return True
    boot = policy.expected_boot_s
    p = own_hourly / max(1, own_gpus)
    w = p if policy.wait_value_usd_per_gpu_hour is None else policy.wait_value_usd_per_gpu_hour
    t = boot * (1 + w / p) if p > 0 else 0.0
    return node_hourly * m / 2 <= own_hourly * (m + t)


def cordoned_names(drains: Iterable[Drain]) -> set[str]:
    return {name for d in drains for name in d.nodes}
