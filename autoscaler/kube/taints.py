"""Does every Node of a managed pool carry the pool's taints?  A check the daemon makes each tick, and says once.

The pools' taints are what keeps work where it belongs: `nvidia.com/gpu` keeps CPU pods off GPU nodes, the spot
taint keeps work that does not tolerate preemption off spot nodes (Kueue's spot flavors rely on it).  GKE applies
a node pool's taints itself.  On Cluster API something else must: the MachineDeployment's
`spec.template.spec.taints` (propagated by Cluster API only with its alpha `MachineTaintPropagation` feature gate
on) or the pool's bootstrap template (`kubernetes.taint_propagation`, docs/kubernetes.md).  If neither does, the
nodes come up without them and nothing fails: the daemon names such a node, and the taints it lacks, in one
warning (a node Ready for less than `SETTLE_S` is not judged yet: Cluster API patches taints just after the Node
registers).  It does not taint nodes itself: a taint added to a node already running pods would change where
the scheduler has put work."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from loguru import logger

#: how long a Node may be Ready before its taints are judged
SETTLE_S = 60.0


def taint_text(t: Mapping[str, Any]) -> str:
    value = t.get("value")
    return f"{t.get('key')}{'=' + str(value) if value else ''}:{t.get('effect')}"


def missing_taints(node: Mapping[str, Any], wanted: Iterable[Mapping[str, Any]]) -> list[str]:
    """The taints of `wanted` (key, value, effect) that `node` does not carry, as `key=value:Effect`."""
    have = {(t.get("key"), t.get("value") or "", t.get("effect")) for t in (node.get("spec") or {}).get("taints") or []}
    return [taint_text(t) for t in wanted if (t.get("key"), t.get("value") or "", t.get("effect")) not in have]


class TaintCheck:
    """Warns once per Node and missing taint (a Node that gets it later and loses it again is named again)."""

    def __init__(self, pool_taints: Mapping[str, list[dict[str, str]]]) -> None:
        self.pool_taints = pool_taints
        self.warned: set[tuple[str, str]] = set()

    def check(self, nodes: Iterable[Mapping[str, Any]], facts: Mapping[str, Any], now: float) -> dict[str, list[str]]:
        """`facts`: the managed Nodes' `NodeFacts` (pool, ready, since).  Returns node -> taints it lacks."""
        out: dict[str, list[str]] = {}
        seen: set[tuple[str, str]] = set()
        for node in nodes:
            name = node["metadata"]["name"]
            f = facts.get(name)
            if f is None or not f.ready or now - f.since < SETTLE_S:
                continue
            lacking = missing_taints(node, self.pool_taints.get(f.pool, []))
            if not lacking:
                continue
            out[name] = lacking
            fresh = [t for t in lacking if (name, t) not in self.warned]
            seen.update((name, t) for t in lacking)
            if fresh:
                logger.warning(
                    "node {} of pool {} lacks the pool's taints {}: work the taints keep off it may be scheduled "
                    "there (docs/kubernetes.md, how a pool's nodes get their taints)",
                    name,
                    f.pool,
                    ", ".join(fresh),
                )
        self.warned = seen
        return out
