"""The `gpu-fleet` policy in a replay: the real planner (`autoscaler.planner.plan`) in the loop.

Each decision converts the sim's view into the planner's model — pending jobs that hold no
capacity become `WorkUnit`s, scheduler nodes become `Node`s (booting, ready-idle, busy,
draining; nodes allocated to a gang that is still waiting for its other nodes count as in use) —
calls `plan(demand, inventory, offerings, policy, now, unavailable, hints)` and hands its commands
to the engine.  Launch refusals go into the planner's backoff memory (`record_failure`); the last
plan's assignments are the next plan's hints.

The planner is pure and not free, so it is called only when its answer can change: new demand it
has not placed yet (submission, requeue after preemption), a launch failure, capacity that
vanished, an idle node reaching the idle timeout, or drained nodes waiting for their delete."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from autoscaler.cloud import ProviderError
from autoscaler.model import (
    Assignment,
    Drain,
    Inventory,
    Node,
    NodeState,
    Placement,
    Plan,
    Policy,
    Pool,
    ScaleUp,
    UnavailableOffering,
    UnservedReason,
    WorkUnit,
    record_failure,
)
from autoscaler.planner import plan, scale_down_idle
from autoscaler.planner.rule import policy_for
from autoscaler.replay.facts import scenario_facts
from autoscaler.replay.policy import Decision, ReplayView
from autoscaler.replay.scenario import Scenario
from autoscaler.replay.state import Job, SimNode
from autoscaler.replay.trace import TraceJob
from fleet.catalog import CapacityType
from fleet.slurm.conf import CAPACITY_WEIGHT

#: knobs of the gpu-fleet policy in replays that the settings rule does not derive (the rule sets
#: idle keep, batch window / reservation hold and defragmentation: autoscaler/planner/rule.py)
DEFAULT_POLICY = Policy(
    backoff_s=600.0,
    keep_reserved_nodes=True,  # reservation capacity is paid for either way
)


@dataclass
class GpuFleetPolicy:
    """Drives the real planner; see the module docstring."""

    policy: Policy = DEFAULT_POLICY
    name: str = "gpu-fleet"
    description: str = (
        "the gpu-fleet planner: right-sized cheapest offering per unit (reservation first, spot for "
        "spot-tolerant work), gangs all or nothing in one zone, backoff on stockouts, idle scale-down"
    )
    #: Slurm allocates the powered-down nodes a job is given at submit: the job waits for exactly those
    binds_nominations: bool = True
    #: the node Weights gpu-fleet renders into slurm.conf: reservation, then spot, then on-demand
    placement_weights: Mapping[CapacityType, int] | None = field(default_factory=lambda: dict(CAPACITY_WEIGHT))
    unavailable: tuple[UnavailableOffering, ...] = ()
    planner_calls: int = 0
    scale_down_calls: int = 0
    _nodes: dict[str, tuple[SimNode, int, Node]] = field(default_factory=dict)
    _placed: set[str] = field(default_factory=set)  # units the last plan found capacity for
    _pools: list[Pool] = field(default_factory=list)
    _hints: Mapping[str, Assignment] = field(default_factory=dict)  # the last plan's assignments
    _kept: dict[str, tuple[SimNode, int]] = field(default_factory=dict)  # idle past the timeout, kept by the planner

    @classmethod
    def for_scenario(
        cls,
        scenario: Scenario,
        wait_value_usd_per_gpu_hour: float | None = None,
        jobs: Sequence[TraceJob] = (),
    ) -> GpuFleetPolicy:
        """The replay's gpu-fleet configuration: the settings rule (`autoscaler.planner.rule.policy_for`,
        the same the daemon uses) over the scenario's facts (boot time, shapes and prices, reserved
        nodes) and the trace's arrival rates, on top of `DEFAULT_POLICY`.  No setting is swept."""
        facts = scenario_facts(scenario, jobs, wait_value_usd_per_gpu_hour)
        return cls(policy=policy_for(facts, base=DEFAULT_POLICY))

    def settings(self) -> dict[str, float | bool]:
        p = self.policy
        return {
            "wait_value_usd_per_gpu_hour": p.wait_value_usd_per_gpu_hour,  # type: ignore[dict-item]
            "idle_timeout_by_machine": dict(p.idle_timeout_by_machine),  # type: ignore[dict-item]
            "defragment": p.defragment,
            "idle_timeout_s": p.idle_timeout_s,
            "batch_window_s": p.batch_window_s,
            "batch_idle_s": p.batch_idle_s,
            "backoff_s": p.backoff_s,
            "keep_reserved_nodes": p.keep_reserved_nodes,
        }

    def pools(self, scenario: Scenario) -> list[Pool]:
        self._pools = scenario.pools()
        return self._pools

    # ---- the sim's view as the planner's model ---------------------------------------------------

    def _node(self, n: SimNode, now: float) -> Node:
        cached = self._nodes.get(n.name)
        if cached is not None and cached[0] is n and cached[1] == n.version:  # names are reused: check identity
            return cached[2]
        units: tuple[str, ...] = ()
        used = n.used
        state = n.state
        holder: Job | None = n.nominated_for
        if holder is not None:  # allocated to a gang that waits for the rest of its nodes
            used, units = n.gpus, (holder.id,)
            if state is NodeState.READY_IDLE:
                state = NodeState.BUSY
        elif n.jobs:
            units = tuple(str(i) for i in n.jobs)
        node = Node(
            name=n.name,
            pool=n.pool,
            offering=n.offering,
            state=state,
            gpus=n.gpus,
            gpus_used=used,
            since=n.since,
            units=units,
            hourly_usd=n.hourly_usd,
        )
        self._nodes[n.name] = (n, n.version, node)
        return node

    def _demand(self, view: ReplayView) -> list[WorkUnit]:
        out = []
        for job in view.state.pending():
            if job.nominated and len(job.nominated) >= job.nodes:
                continue  # its capacity is allocated and on the way
            out.append(
                WorkUnit(
                    id=job.id,
                    submit_time=job.submit,
                    gpus_per_node=job.gpus_per_node,
                    nodes=job.nodes,
                    spot_ok=job.spot_ok,
                )
            )
        return out

    # ---- ReplayPolicy -------------------------------------------------------------------------------

    def decide(self, view: ReplayView, now: float, reasons: frozenset[str]) -> Decision:
        demand = self._demand(view)
        new_demand = any(u.id not in self._placed for u in demand)
        idle_due, wake = self._idle_due(view, now)
        full = (
            new_demand
            or bool(reasons & {"failure", "gone", "start"})
            # capacity the last plan counted on may have gone to other work: look again
            or (bool(demand) and "ready" in reasons)
        )
        if not full and not idle_due and not view.state.draining:
            return Decision(wake_at=wake)
        if not full and self._shortcut:
            return self._scale_down_only(view, now, wake)
        nodes = view.state.nodes
        if len(self._nodes) > 2 * len(nodes) + 64:
            self._nodes = {k: v for k, v in self._nodes.items() if k in nodes}
        inventory = Inventory(tuple(self._pools), tuple(self._node(n, now) for n in nodes.values()))
        p = plan(demand, inventory, view.offerings(), self.policy, now, self.unavailable, hints=self._hints)
        self.planner_calls += 1
        self.unavailable = p.unavailable
        self._hints = p.assignments
        self._placed = {uid for uid, a in p.assignments.items() if a.placement is not Placement.READY}
        nominations = {}
        for cmd in p.scale_ups:
            if cmd.gang:
                nominations[cmd.units[0]] = cmd.names
            elif self.binds_nominations:  # Slurm allocates the powered-down node to the job at submit
                for uid in cmd.units:
                    a = p.assignments.get(uid)
                    if a is not None and a.placement is Placement.NEW and uid not in nominations:
                        nominations[uid] = a.nodes
        self._remember_kept(view, now, p.drains)
        # deleting frees quota / reservation slots that unserved work may be waiting for
        again = bool(p.drains) or (bool(p.deletes) and bool(p.unserved))
        release = self._batch_release(demand, p)
        if release is not None and release > now:
            wake = release if wake is None else min(wake, release)
        return Decision(p.commands, nominations, wake_at=wake, again=again)

    def _batch_release(self, demand: Sequence[WorkUnit], p: Plan) -> float | None:
        """When the planner's batch hold (units unserved as `batching`) ends: the newest pending unit
        `batch_idle_s` old, or the oldest `batch_window_s` old, whichever comes first."""
        if not any(u.reason is UnservedReason.BATCHING for u in p.unserved):
            return None
        pol = self.policy
        newest = max(u.submit_time for u in demand)
        oldest = min(u.submit_time for u in demand)
        return min(newest + pol.batch_idle_s, oldest + pol.batch_window_s)

    @property
    def _shortcut(self) -> bool:
        """With no fleet-wide limits and no pool minimum, the planner's scale-down pass decides the
        same over the idle and draining nodes alone as over the whole inventory."""
        pol = self.policy
        return pol.max_nodes is None and pol.max_gpus is None and all(p.min_nodes == 0 for p in self._pools)

    def _scale_down_only(self, view: ReplayView, now: float, wake: float | None) -> Decision:
        """Nothing but idleness changed: run only the planner's scale-down pass (`scale_down_idle`)."""
        st = view.state
        sub = Inventory(
            tuple(self._pools), tuple(self._node(n, now) for n in (*st.idle.values(), *st.draining.values()))
        )
        drains, deletes = scale_down_idle(sub, self.policy, now)
        self.scale_down_calls += 1
        self._remember_kept(view, now, drains)
        waiting = any(u.id not in self._placed for u in self._demand(view))
        return Decision((*drains, *deletes), wake_at=wake, again=bool(drains) or (bool(deletes) and waiting))

    def _remember_kept(self, view: ReplayView, now: float, drains: Sequence[Drain]) -> None:
        drained = {name for d in drains for name in d.nodes}
        for n in view.state.idle.values():  # idle past the timeout but kept (pool minimum ...): do not ask again
            if n.name not in drained and n.since + self.policy.idle_timeout_for(n.offering.machine_type) <= now:
                self._kept[n.name] = (n, n.version)

    def _idle_due(self, view: ReplayView, now: float) -> tuple[bool, float | None]:
        earliest = None
        caps = self.policy.idle_keep_max_by_machine
        if caps:  # more idle nodes of a shape than the rule keeps warm: scale down now
            count: dict[str, int] = {}
            for n in view.state.idle.values():
                if n.nominated_for is None and self._kept.get(n.name) != (n, n.version):
                    m = n.offering.machine_type
                    count[m] = count.get(m, 0) + 1
            if any(c > caps[m] for m, c in count.items() if m in caps):
                return True, None
        for n in view.state.idle.values():
            if n.nominated_for is not None:
                continue
            if self.policy.keep_reserved_nodes and n.offering.reservation is not None:
                continue
            if self._kept.get(n.name) == (n, n.version):
                continue
            t = n.since + self.policy.idle_timeout_for(n.offering.machine_type)
            if earliest is None or t < earliest:
                earliest = t
        if earliest is None:
            return False, None
        if earliest <= now:
            return True, None
        return False, earliest

    def on_launch_failure(self, command: ScaleUp, error: ProviderError, now: float) -> None:
        self.unavailable = record_failure(self.unavailable, command.offering, error.kind, now, self.policy, str(error))
        self._placed.difference_update(command.units)
