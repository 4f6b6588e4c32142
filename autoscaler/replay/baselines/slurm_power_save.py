"""`slurm-power-save`: Slurm's power saving as slurm-gcp configures it, on 8-GPU nodes only.

Every node is a `State=CLOUD` 8-GPU node (one nodeset per zone; a reservation nodeset, when the
scenario has one, gets the lowest Weight so Slurm allocates it first).  Slurm allocates a job
that fits nowhere to powered-down nodes at once, packing small jobs onto nodes already powering
up (select/cons_tres), and calls ResumeProgram for the batch 1-3 s later; `resume_delay_s` models that
delay but is 0 by default, because gpu-fleet is driven by the same ResumeProgram calls in production
and the replay does not charge it to either.  The job then waits for exactly those nodes.  A node
idle for `SuspendTime` (300 s, slurm-gcp's default) is suspended: SuspendProgram deletes the VM.
When ResumeProgram fails (stockout), slurm-gcp marks the nodes DOWN and the job is requeued;
slurmsync returns them to service after about a minute (`down_s`), so Slurm tries the other
nodesets meanwhile.  On-demand only: stock slurm-gcp nodesets do not use spot for a subset of
jobs."""

from __future__ import annotations

from dataclasses import dataclass, field

from autoscaler.cloud import Offering, OfferingKey, ProviderError
from autoscaler.model import Command, DeleteNodes, Pool, ScaleUp
from autoscaler.replay.baselines.common import first_fit, uncovered
from autoscaler.replay.policy import Decision, ReplayView
from autoscaler.replay.scenario import Scenario
from fleet.catalog import CapacityType


@dataclass
class SlurmPowerSavePolicy:
    suspend_time_s: float = 300.0
    resume_delay_s: float = 0.0
    down_s: float = 60.0
    name: str = "slurm-power-save"
    description: str = (
        "Slurm power saving (slurm-gcp): 8-GPU CLOUD nodes resumed per unplaced job, suspended after "
        "SuspendTime=300 s idle, on-demand"
    )
    binds_nominations: bool = True
    #: the reservation's nodeset has the lowest Weight; every other node the same
    placement_weights: dict[CapacityType, int] | None = field(
        default_factory=lambda: {CapacityType.RESERVATION: 1, CapacityType.ON_DEMAND: 10}
    )
    _pools: list[Pool] = field(default_factory=list)
    _down: dict[OfferingKey, float] = field(default_factory=dict)
    _since: float | None = None  # oldest unlaunched allocation
    _planned: dict[OfferingKey, int] = field(default_factory=dict)  # nodes asked of each offering this decision

    def pools(self, scenario: Scenario) -> list[Pool]:
        m = scenario.reservation_machine
        if m is None:
            raise ValueError(f"slurm-power-save needs an 8-GPU machine type in {scenario.machine_family}")
        self._pools = scenario.pools([m.name], spot=False)
        return self._pools

    def _offers(self, view: ReplayView, now: float) -> list[tuple[Offering, Pool]]:
        out = []
        for o in view.offerings():
            if self._down.get(o.key, 0.0) > now:
                continue
            pool = next((p for p in self._pools if p.can_launch(o.key)), None)
            if pool is not None:
                out.append((o, pool))
        out.sort(key=lambda op: (op[0].key.capacity_type is not CapacityType.RESERVATION, op[0].key.zone))
        return out

    def decide(self, view: ReplayView, now: float, reasons: frozenset[str]) -> Decision:
        cmds: list[Command] = []
        wake: list[float] = []
        self._planned = {}
        # SuspendProgram: idle nodes past SuspendTime
        victims: dict[str, list[str]] = {}
        for n in view.state.idle.values():
            if n.nominated_for is None and not n.jobs:
                if now - n.since >= self.suspend_time_s:
                    victims.setdefault(n.pool, []).append(n.name)
                else:
                    wake.append(n.since + self.suspend_time_s)
        for pool, names in victims.items():
            cmds.append(DeleteNodes(pool, tuple(sorted(names)), f"idle for SuspendTime={self.suspend_time_s:g}s"))
        # ResumeProgram: power up nodes for jobs that fit nowhere
        singles, gangs = uncovered(view.state)
        failed_any = False
        if singles or gangs:
            if self._since is None:
                self._since = now
            if now - self._since < self.resume_delay_s:
                wake.append(self._since + self.resume_delay_s)
            else:
                self._since = None
                nominations: dict[str, tuple[str, ...]] = {}
                for members in first_fit(singles, 8):
                    cmd = self._resume(view, now, 1, tuple(j.id for j in members))
                    if cmd is None:
                        failed_any = True
                        break
                    cmds.append(cmd)
                for job in gangs:
                    cmd = self._resume(view, now, job.nodes - len(job.nominated), (job.id,))
                    if cmd is None:
                        failed_any = True
                        break
                    cmds.append(cmd)
                    nominations[job.id] = cmd.names
                downs = [t for t in self._down.values() if t > now]
                if failed_any and downs:
                    wake.append(min(downs))
                return Decision(tuple(cmds), nominations, wake_at=min(wake) if wake else None)
        return Decision(tuple(cmds), wake_at=min(wake) if wake else None)

    def _resume(self, view: ReplayView, now: float, count: int, units: tuple[str, ...]) -> ScaleUp | None:
        for o, pool in self._offers(view, now):
            if o.available_nodes is not None and o.available_nodes - self._planned.get(o.key, 0) < count:
                continue
            self._planned[o.key] = self._planned.get(o.key, 0) + count
            return view.scale_up(pool, o, count, units, "ResumeProgram", gang=count > 1)
        return None

    def on_launch_failure(self, command: ScaleUp, error: ProviderError, now: float) -> None:
        self._down[command.offering] = now + self.down_s
