"""Property-based tests (hypothesis): plan() invariants over random demand, nodes, offerings,
limits and backoff memory — gang atomicity, no oversubscription, every limit and quota, no busy
node drained or deleted, spot only for spot-tolerant work, existing capacity before new, backoff."""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, Phase, find, given, settings
from hypothesis import strategies as st

from autoscaler.cloud import FailureKind
from autoscaler.model import (
    LIVE_STATES,
    Inventory,
    Node,
    NodeState,
    Placement,
    Policy,
    UnavailableOffering,
    WorkUnit,
)
from autoscaler.planner import plan
from autoscaler.planner.defrag import step_down
from autoscaler.planner.limits import node_hourly
from fleet.catalog import CapacityType
from tests.planner.factory import SHAPES, machine, offering, pool

CAPS = (CapacityType.ON_DEMAND, CapacityType.SPOT, CapacityType.RESERVATION)
NOW = 10_000.0
STATES = [NodeState.REQUESTED, NodeState.BOOTING, NodeState.READY_IDLE, NodeState.BUSY, NodeState.DRAINING]
STATES += [NodeState.DELETING, NodeState.GONE]


@st.composite
def scenarios(draw):
    shapes = draw(st.lists(st.sampled_from(SHAPES), min_size=1, max_size=4, unique=True))
    pools = []
    for g in sorted(shapes):
        for cap in CAPS:
            if draw(st.booleans()):
                kw = {"reservation": f"r{g}", "name": f"res{g}"} if cap is CapacityType.RESERVATION else {}
                compact = g == 8 and draw(st.booleans())
                max_nodes = draw(st.integers(0, 12))
                pools.append(
                    pool(
                        g,
                        cap,
                        max_nodes=max_nodes,
                        min_nodes=min(max_nodes, draw(st.sampled_from([0, 0, 0, 1, 2]))),
                        queues=draw(st.sampled_from([None, frozenset({"a"}), frozenset({"a", "b"})])),
                        compact_placement=compact,
                        placement_max_vms=draw(st.sampled_from([None, 2, 4])) if compact else None,
                        **kw,
                    )
                )
    if not pools:
        pools.append(pool(sorted(shapes)[0]))
    offerings = []
    for p in pools:
        for z in p.zones:
            if draw(st.integers(0, 3)) == 0:
                continue
            avail = draw(st.sampled_from([None, 0, 1, 2, 5]))
            price = draw(st.floats(1.0, 100.0)) if draw(st.booleans()) else None
            offerings.append(
                offering(p.gpus_per_node, p.capacity_type, z, price=price, available=avail, res=p.reservation)
            )
    nodes = []
    for i in range(draw(st.integers(0, 14))):
        p = draw(st.sampled_from(pools))
        state = draw(st.sampled_from(STATES))
        used = draw(st.integers(1, p.gpus_per_node)) if state is NodeState.BUSY else 0
        if state is NodeState.DRAINING:
            used = draw(st.integers(0, p.gpus_per_node))
        zone = draw(st.sampled_from(p.zones))
        k = offering(p.gpus_per_node, p.capacity_type, zone, res=p.reservation).key
        since = NOW - draw(st.floats(0, 3000))
        nodes.append(Node(f"{p.node_name_prefix}-x{i}", p.name, k, state, p.gpus_per_node, used, since))
    demand = []
    for i in range(draw(st.integers(0, 25))):
        nodes_n = draw(st.sampled_from([1, 1, 1, 2, 3, 5]))
        g = draw(st.sampled_from([1, 2, 3, 4, 8])) if nodes_n == 1 else draw(st.sampled_from([4, 8]))
        types = draw(st.sampled_from([None, None, frozenset({machine(8)}), frozenset({machine(1), machine(2)})]))
        demand.append(
            WorkUnit(
                f"u{i}",
                NOW - draw(st.floats(0, 5000)),
                g,
                nodes_n,
                machine_types=types,
                spot_ok=draw(st.booleans()),
                priority=draw(st.integers(0, 2)),
                queue=draw(st.sampled_from(["a", "b"])),
                time_limit_s=draw(st.sampled_from([None, 3600.0, 36000.0])),
            )
        )
    memory = [
        UnavailableOffering(o.key, NOW + draw(st.floats(-100, 100)), FailureKind.STOCKOUT)
        for o in offerings
        if draw(st.integers(0, 4)) == 0
    ]
    policy = Policy(
        max_nodes=draw(st.sampled_from([None, 5, 20])),
        max_gpus=draw(st.sampled_from([None, 16, 64])),
        budget_usd_per_hour=draw(st.sampled_from([None, 50.0, 400.0])),
        idle_timeout_s=draw(st.sampled_from([0.0, 600.0])),
        spot_queues=draw(st.sampled_from([None, frozenset({"a"})])),
        spot_max_node_hours=draw(st.sampled_from([None, 20.0])),
        keep_reserved_nodes=draw(st.booleans()),
        boot_timeout_s=draw(st.sampled_from([None, 1200.0])),
        defragment=draw(st.booleans()),
        expected_run_s=draw(st.sampled_from([None, 600.0, 36000.0])),
        expected_boot_s=360.0,
        wait_value_usd_per_gpu_hour=draw(st.sampled_from([0.0, 11.0, 50.0])),
    )
    return demand, Inventory(tuple(pools), tuple(nodes)), offerings, policy, memory


SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(scenarios())
def test_plan_invariants(sc) -> None:
    demand, inv, offerings, policy, memory = sc
    out = plan(demand, inv, offerings, policy, NOW, memory)
    units = {u.id: u for u in demand}
    nodes = {n.name: n for n in inv.nodes}
    live = [n for n in inv.nodes if n.state in LIVE_STATES]
    ups = out.scale_ups
    new_node: dict[str, tuple[str, object]] = {}  # name -> (pool, scale-up)
    for s in ups:
        for name in s.names:
            assert name not in new_node and name not in {n.name for n in live}, "fresh unique names"
            new_node[name] = (s.pool, s)

    # every unit is placed or explained, exactly once
    served, unserved = set(out.assignments), [u.unit for u in out.unserved]
    assert len(unserved) == len(set(unserved)) and not served & set(unserved)
    assert served | set(unserved) == set(units)

    # capacity per node: assignments never oversubscribe existing free GPUs or new nodes
    load: Counter[str] = Counter()
    for uid, a in out.assignments.items():
        u = units[uid]
        assert len(a.nodes) == u.nodes and len(set(a.nodes)) == u.nodes, "a gang gets all its nodes"
        zones, pools_of = set(), set()
        for name in a.nodes:
            load[name] += u.gpus_per_node
            if name in new_node:
                pname, s = new_node[name]
                p, zone, cap = inv.pool(pname), s.zone, s.offering.capacity_type
                assert a.placement is Placement.NEW and a.request_id is not None
            else:
                n = nodes[name]
                p, zone, cap = inv.pool(n.pool), n.zone, n.offering.capacity_type
                assert n.state in (NodeState.REQUESTED, NodeState.BOOTING, NodeState.READY_IDLE, NodeState.BUSY)
            zones.add(zone)
            pools_of.add(p.name)
            assert p.gpus_per_node >= u.gpus_per_node and p.serves(u.queue)
            assert u.machine_types is None or p.machine_type in u.machine_types
            if cap is CapacityType.SPOT:
                assert policy.spot_ok(u), "spot only for spot-tolerant work"
        assert len(zones) == 1 and len(pools_of) == 1, "a gang sits in one zone and one pool"
        if u.is_gang and a.placement is Placement.NEW:
            (s,) = {id(new_node[n][1]): new_node[n][1] for n in a.nodes}.values()
            assert s.gang and set(s.names) == set(a.nodes), "a new gang is one all-or-nothing request"
    for name, gpus in load.items():
        cap = nodes[name].gpus_free if name in nodes else inv.pool(new_node[name][0]).gpus_per_node
        assert gpus <= cap, f"{name} oversubscribed"
    for s in ups:
        if s.gang:  # the gang first; single units may bin-pack onto its nodes' leftover GPUs
            assert units[s.units[0]].is_gang and out.assignments[s.units[0]].nodes == s.names
            assert not any(units[x].is_gang for x in s.units[1:])
        p = inv.pool(s.pool)
        if s.gang and p.compact_placement:
            assert s.placement_group and (p.placement_max_vms is None or s.count <= p.placement_max_vms)

    # limits, quotas and the budget
    per_pool = Counter(n.pool for n in live) + Counter({s.pool: 0 for s in ups})
    for s in ups:
        per_pool[s.pool] += s.count
    for s in ups:
        p = inv.pool(s.pool)
        before = sum(1 for n in live if n.pool == s.pool)
        assert per_pool[s.pool] <= max(p.max_nodes, before)
        assert p.can_launch(s.offering)
    launched_nodes = sum(s.count for s in ups)
    launched_gpus = sum(s.count * inv.pool(s.pool).gpus_per_node for s in ups)
    if policy.max_nodes is not None:
        assert launched_nodes == 0 or len(live) + launched_nodes <= policy.max_nodes
    if policy.max_gpus is not None:
        assert launched_gpus == 0 or sum(n.gpus for n in live) + launched_gpus <= policy.max_gpus
    prices = {o.key: o.hourly_usd for o in offerings}
    if policy.budget_usd_per_hour is not None:
        spend = sum(node_hourly(n.hourly_usd, n.offering, prices) for n in live)
        added = sum(s.hourly_usd for s in ups)
        assert added == 0 or spend + added <= policy.budget_usd_per_hour + 1e-6
    by_offer = Counter()
    for s in ups:
        by_offer[s.offering] += s.count
    avail = {o.key: o.available_nodes for o in offerings}
    for k, c in by_offer.items():
        assert avail[k] is None or c <= avail[k], "offering limit (quota / free reservation slots)"

    # backoff: offerings still in force are never used; expired ones are forgotten
    in_force = {m.key for m in memory if m.until > NOW}
    assert not {s.offering for s in ups} & in_force
    assert {m.key for m in out.unavailable} == in_force

    # scale-down: only idle nodes past the timeout are drained, or (defragment) busy nodes whose used
    # GPUs fit a smaller shape at no higher $/GPU-h (cordoned: they finish their work, take no more);
    # only drained empty (or stuck) nodes are deleted
    used_now = {n for a in out.assignments.values() for n in a.nodes}
    # a shape backed off everywhere is no step down (the planner's rule: small work may then use the larger node)
    launchable = [o for o in offerings if o.key not in in_force]
    steps = step_down(inv.pools, launchable) if policy.defragment else {}
    for d in out.drains:
        for name in d.nodes:
            n = nodes[name]
            assert name not in used_now
            if n.state is NodeState.BUSY:
                assert policy.defragment and 0 < n.gpus_used <= steps[n.pool] and n.gpus_free > 0
                continue
            assert n.state is NodeState.READY_IDLE and not n.has_work
            assert NOW - n.since >= policy.idle_timeout_for(n.offering.machine_type)
            assert not (policy.keep_reserved_nodes and n.offering.capacity_type is CapacityType.RESERVATION)
    cordoned = {name for d in out.drains for name in d.nodes if nodes[name].state is NodeState.BUSY}

    # small work never pins a large node: no single unit is put on an existing node it would leave
    # oversized (its used GPUs fitting a smaller shape of no higher $/GPU-h)
    if policy.defragment:
        for uid, a in out.assignments.items():
            u = units[uid]
            if u.is_gang or a.placement is Placement.NEW:
                continue
            n = nodes[a.nodes[0]]
            assert n.gpus_used + load[n.name] > steps.get(n.pool, 0), f"{uid} pins oversized {n.name}"
    for d in out.deletes:
        for name in d.names:
            n = nodes[name]
            assert not n.has_work and name not in used_now
            assert n.state is NodeState.DRAINING or n.state in (NodeState.REQUESTED, NodeState.BOOTING)

    # existing capacity first: a single unit only gets a new node when no compatible existing node
    # (ready or coming up) still has room for it after the plan
    for uid, a in out.assignments.items():
        u = units[uid]
        if a.placement is not Placement.NEW or u.is_gang:
            continue
        for n in inv.nodes:
            if n.state not in (NodeState.READY_IDLE, NodeState.BUSY, NodeState.REQUESTED, NodeState.BOOTING):
                continue
            if policy.boot_timeout_s is not None and n.state in (NodeState.REQUESTED, NodeState.BOOTING):
                continue  # may have timed out
            p = inv.pool(n.pool)
            compatible = (
                p.serves(u.queue)
                and (u.machine_types is None or p.machine_type in u.machine_types)
                and (p.capacity_type is not CapacityType.SPOT or policy.spot_ok(u))
                and n.name not in cordoned
                and (not policy.defragment or n.gpus_used + u.gpus_per_node > steps.get(n.pool, 0))
                and policy.expected_run_s is None  # reuse may be dearer over the run than new capacity
            )
            assert not compatible or n.gpus_free - load[n.name] < u.gpus_per_node


@SETTINGS
@given(scenarios(), st.randoms(use_true_random=False))
def test_plan_is_deterministic_whatever_the_input_order(sc, rnd: random.Random) -> None:
    demand, inv, offerings, policy, memory = sc
    a = plan(demand, inv, offerings, policy, NOW, memory)
    shuffled = list(demand)
    rnd.shuffle(shuffled)
    b = plan(shuffled, inv, offerings, policy, NOW, memory)
    assert a == b


@SETTINGS
@given(scenarios())
def test_replanning_after_the_launches_adds_nothing_for_the_same_demand(sc) -> None:
    """With the previous assignments as hints, every unit stays on the nodes it was given (now
    requested): re-planning while nodes boot launches nothing twice."""
    demand, inv, offerings, policy, memory = sc
    policy = Policy(**{**policy.__dict__, "boot_timeout_s": None})
    memory = [m for m in memory if not NOW < m.until <= NOW + 1]  # a backoff ending in between may launch
    first = plan(demand, inv, offerings, policy, NOW, memory)
    extra = []
    for s in first.scale_ups:
        g = inv.pool(s.pool).gpus_per_node
        extra += [Node(n, s.pool, s.offering, NodeState.REQUESTED, g, since=NOW) for n in s.names]
    inv2 = Inventory(inv.pools, (*inv.nodes, *extra))
    served = [u for u in demand if u.id in first.assignments]
    # the cloud's headroom shrinks by what was just requested (a refreshed offerings() would say so)
    launched = Counter()
    for s in first.scale_ups:
        launched[s.offering] += len(s.names)
    offerings2 = [
        replace(o, available_nodes=max(0, o.available_nodes - launched[o.key])) if o.available_nodes is not None else o
        for o in offerings
    ]
    second = plan(served, inv2, offerings2, policy, NOW + 1, first.unavailable, hints=first.assignments)
    assert second.scale_ups == ()
    assert set(second.assignments) == {u.id for u in served}


#: what the properties above need the strategy to produce, each a predicate on (scenario, its plan)
INTERESTING = {
    "gang_new": lambda sc, out: any(s.gang for s in out.scale_ups),
    "unserved": lambda sc, out: bool(out.unserved),
    "drain": lambda sc, out: bool(out.drains),
    "delete": lambda sc, out: bool(out.deletes),
    "ready": lambda sc, out: any(a.placement is Placement.READY for a in out.assignments.values()),
}


@pytest.mark.parametrize("case", sorted(INTERESTING))
def test_scenarios_exercise_the_interesting_cases(case: str) -> None:
    """Guard against a strategy that never produces gangs, unserved units or scale-downs: `find` searches the
    strategy for a scenario whose plan shows the case.  Until the forty-seventh round this counted the cases over
    200 derandomized draws, which depend on the literals Hypothesis collects from the modules loaded: run alone the
    draws held no gang scale-up and the test failed, run with the rest of tests/planner it passed."""
    holds = INTERESTING[case]

    def shows(sc) -> bool:
        demand, inv, offerings, policy, memory = sc
        return holds(sc, plan(demand, inv, offerings, policy, NOW, memory))

    once = settings(max_examples=2000, deadline=None, database=None, derandomize=True, phases=[Phase.generate])
    find(scenarios(), shows, settings=once)  # the first hit will do: no shrinking
