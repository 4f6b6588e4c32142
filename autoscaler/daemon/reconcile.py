"""Reconcile the store's launch intents and the cloud's instances with what Slurm wants (pure decisions).

Runs every tick (so also right after a restart):
- an *intent* whose instances all exist is adopted (the daemon died between the launch and the bookkeeping);
  one with instances missing is launched again with the same request id (idempotent) until
  `launch_timeout_s`, then given up;
- a *launched* request whose instances are gone releases those names;
- an instance no open request holds is adopted when Slurm considers the node up (it holds jobs or is not
  powered down), otherwise it is an orphan: deleted once it has been unwanted for `orphan_grace_s`.
Decisions come back as data; `tick` executes them through the actuator.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from autoscaler.cloud import CloudNode, CloudNodeStatus
from autoscaler.daemon.state import RequestRow
from autoscaler.slurm.readers import SlurmNode


@dataclass
class Reconciliation:
    adopt_requests: list[str] = field(default_factory=list)  # intents whose instances all exist
    relaunch: list[tuple[RequestRow, tuple[str, ...]]] = field(default_factory=list)  # (intent, missing names)
    give_up: list[str] = field(default_factory=list)  # intents past the launch timeout
    released: list[str] = field(default_factory=list)  # names of launched requests whose instance is gone
    adopt_instances: list[CloudNode] = field(default_factory=list)  # unknown instances Slurm uses
    orphans_seen: list[CloudNode] = field(default_factory=list)  # unknown instances nobody wants
    not_orphans: list[str] = field(default_factory=list)  # previously seen orphans that are wanted again


def reconcile(
    open_requests: Sequence[RequestRow],
    cloud_nodes: Sequence[CloudNode],
    slurm_nodes: Mapping[str, SlurmNode] | None,
    resume_names: set[str],
    known_orphans: Mapping[str, float],
    now: float,
    *,
    launch_timeout_s: float,
    managed: set[str] | None = None,
) -> Reconciliation:
    """`resume_names`: names with an open resume request; `managed`: names of managed pools (None = all)."""
    out = Reconciliation()
    live = {c.name: c for c in cloud_nodes if c.status is not CloudNodeStatus.GONE}
    held: set[str] = set()
    for r in open_requests:
        held.update(r.names)
        missing = tuple(n for n in r.names if n not in live)
        if r.state == "intent":
            if not missing:
                out.adopt_requests.append(r.request_id)
            elif now - r.created_at >= launch_timeout_s:
                out.give_up.append(r.request_id)
            else:
                out.relaunch.append((r, missing))
        elif r.state == "launched" and missing:
            out.released.extend(missing)
    for name, c in sorted(live.items()):
        if name in held or (managed is not None and name not in managed):
            continue
        if c.status is CloudNodeStatus.STOPPING:
            continue  # on its way out: neither adopted nor counted as an orphan
        if name in resume_names:
            # Slurm asked for it and it exists already (e.g. a crash lost the record): use it
            out.adopt_instances.append(c)
            continue
        if slurm_nodes is None:
            continue  # no fresh Slurm view: decide nothing about unknown instances
        s = slurm_nodes.get(name)
        if s is not None and (s.has_work or not (s.powered_down or s.powering_down)):
            out.adopt_instances.append(c)
        else:
            out.orphans_seen.append(c)
    seen_now = {c.name for c in out.orphans_seen}
    out.not_orphans = [n for n in known_orphans if n not in seen_now]
    return out
