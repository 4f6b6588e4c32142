"""`static-peak`: a fixed fleet sized to the trace's peak, up for the whole replay.

What a team without an autoscaler buys: ceil(peak concurrent GPUs / 8) nodes of the family's
8-GPU machine, filling the reservation first (when the scenario has one) and on-demand for the
rest, launched before the first job so nothing waits for a boot, never scaled down.  Jobs can
still queue when fragmentation leaves no node with room.  Nodes lost (stockout at launch,
preemption) are relaunched in the next zone that has capacity."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from autoscaler.cloud import ProviderError
from autoscaler.model import Command, Pool, ScaleUp
from autoscaler.replay.policy import Decision, ReplayView
from autoscaler.replay.scenario import Scenario
from fleet.catalog import CapacityType

RETRY_S = 60.0


@dataclass
class StaticPeakPolicy:
    peak_gpus: int
    name: str = "static-peak"
    description: str = "fixed fleet of 8-GPU nodes sized to the trace's peak demand, reservation first, always on"
    binds_nominations: bool = False
    placement_weights: None = None  # plain best fit: a static fleet costs the same wherever jobs land
    _pools: list[Pool] = field(default_factory=list)
    _failed_until: dict[object, float] = field(default_factory=dict)

    def pools(self, scenario: Scenario) -> list[Pool]:
        m = scenario.reservation_machine
        if m is None:
            raise ValueError(f"static-peak needs an 8-GPU machine type in {scenario.machine_family}")
        self._pools = [p for p in scenario.pools([m.name], spot=False)]
        return self._pools

    def decide(self, view: ReplayView, now: float, reasons: frozenset[str]) -> Decision:
        target = math.ceil(self.peak_gpus / 8)
        have = {p.name: 0 for p in self._pools}
        for n in view.state.nodes.values():
            have[n.pool] = have.get(n.pool, 0) + 1
        missing = target - sum(have.values())
        if missing <= 0:
            return Decision()
        offers = sorted(
            (o for o in view.offerings() if any(p.can_launch(o.key) for p in self._pools)),
            key=lambda o: (o.key.capacity_type is not CapacityType.RESERVATION, o.key.zone),
        )
        cmds: list[Command] = []
        retry = None
        for o in offers:
            if missing <= 0:
                break
            until = self._failed_until.get(o.key, 0.0)
            if until > now:
                retry = until if retry is None else min(retry, until)
                continue
            pool = next(p for p in self._pools if p.can_launch(o.key))
            count = missing if o.available_nodes is None else min(missing, o.available_nodes)
            if count <= 0:
                continue
            cmds.append(view.scale_up(pool, o, count, (), f"static fleet of {target} nodes"))
            missing -= count
            break  # one request per decision: a refusal is handled before the next
        return Decision(tuple(cmds), wake_at=retry, again=bool(cmds))

    def on_launch_failure(self, command: ScaleUp, error: ProviderError, now: float) -> None:
        self._failed_until[command.offering] = now + RETRY_S
