"""`exact-fit`: one node of the smallest shape that fits, per job, for that job only — the sanity floor.

Not a real system: the trivial policy any autoscaler must beat.  At a job's submission it launches
the job's own nodes (a gang: all of them in one all-or-nothing request in one zone) of the smallest
machine type of the family with enough GPUs per node; the job waits for exactly those nodes
(`binds_nominations`), no other job ever runs on them (`exclusive_nodes`: the spare GPUs of a 4g node
under a 3-GPU job stay idle), and they are deleted the moment the job ends.  Its only waste is each
node's boot (billed from the launch request) and the spare GPUs of a shape larger than the job.

Capacity: a free reservation slot first, whatever the job's size (it is paid for anyway; the slot
is handed back when the job ends), else the smallest shape: spot for spot-tolerant jobs when the
family has a spot price, else on-demand; then the cheapest offering, then the zone.  A refused
launch marks the offering unavailable for `retry_s` and the job tries the next offering at once; a
job whose every offering is out waits for the first to come back.  A preempted job gets a fresh
set of nodes (its surviving nodes are deleted: no reuse).

`launch_delay_s` / `delete_delay_s` (0, the floor, by default) are for what-ifs only: the launch a job's
submission is seen after, and the delete a job's end is seen after, by a daemon that learns of both through
Slurm's hooks (`bench/exact_fit_latency.py` sets them to the simulated Slurm's ResumeProgram delay and the
daemon's measured EpilogSlurmctld wake-up)."""

from __future__ import annotations

from dataclasses import dataclass, field

from autoscaler.cloud import Offering, OfferingKey, ProviderError
from autoscaler.model import Command, Pool, ScaleUp
from autoscaler.replay.baselines.common import delete_per_pool
from autoscaler.replay.policy import Decision, ReplayView
from autoscaler.replay.scenario import Scenario
from autoscaler.replay.state import Job
from fleet.catalog import CapacityType

PRIORITY = {CapacityType.RESERVATION: 0, CapacityType.SPOT: 1, CapacityType.ON_DEMAND: 2, CapacityType.FLEX_START: 3}


@dataclass
class ExactFitPolicy:
    retry_s: float = 60.0
    launch_delay_s: float = 0.0
    delete_delay_s: float = 0.0
    name: str = "exact-fit"
    description: str = (
        "sanity floor: one node of the smallest fitting shape per job (a gang's nodes in one request), launched "
        "at submit, used by that job only, deleted when it ends"
    )
    binds_nominations: bool = True
    exclusive_nodes: bool = True
    placement_weights: None = None
    _pools: list[Pool] = field(default_factory=list)
    _shapes: list[int] = field(default_factory=list)  # GPUs per node of the family's shapes, ascending
    _down: dict[OfferingKey, float] = field(default_factory=dict)
    _planned: dict[OfferingKey, int] = field(default_factory=dict)

    def pools(self, scenario: Scenario) -> list[Pool]:
        self._pools = scenario.pools()
        self._shapes = sorted({m.gpu_count for m in scenario.machines})
        return self._pools

    def shape_for(self, gpus_per_node: int) -> int:
        """GPUs per node of the smallest shape that fits a job's per-node GPUs."""
        for g in self._shapes:
            if g >= gpus_per_node:
                return g
        raise ValueError(f"exact-fit: no machine type has {gpus_per_node} GPUs per node")

    def decide(self, view: ReplayView, now: float, reasons: frozenset[str]) -> Decision:
        st = view.state
        ended = [n for n in st.idle.values() if not n.jobs and n.nominated_for is None]
        # due times compared as computed (t + delay <= now), so a wake-up at exactly t + delay finds them due
        done = [n for n in ended if n.since + self.delete_delay_s <= now]
        cmds: list[Command] = list(delete_per_pool(done, "its job ended (exact-fit: no reuse)"))
        later = [n.since + self.delete_delay_s for n in ended if n.since + self.delete_delay_s > now]
        nominations: dict[str, tuple[str, ...]] = {}
        self._planned = {}
        waiting = False
        offers = view.offerings()
        for job in st.pending():
            if job.nominated:
                continue  # its nodes are on the way
            if job.submit + self.launch_delay_s > now:
                later.append(job.submit + self.launch_delay_s)
                continue
            cmd = self._launch(view, offers, now, job)
            if cmd is None:
                waiting = True
                continue
            cmds.append(cmd)
            nominations[job.id] = cmd.names
        if waiting:
            back = [t for t in self._down.values() if t > now]
            later.append(min(back) if back else now + self.retry_s)
        return Decision(tuple(cmds), nominations, wake_at=min(later, default=None))

    def _launch(
        self, view: ReplayView, offers: list[Offering] | tuple[Offering, ...], now: float, job: Job
    ) -> ScaleUp | None:
        shape = self.shape_for(job.gpus_per_node)
        best: tuple[tuple[int, float, str], Offering, Pool] | None = None
        for o in offers:
            k = o.key
            reserved = k.capacity_type is CapacityType.RESERVATION
            if (o.gpus_per_node < job.gpus_per_node if reserved else o.gpus_per_node != shape) or self._down.get(
                k, 0.0
            ) > now:
                continue
            if k.capacity_type is CapacityType.SPOT and not job.spot_ok:
                continue
            if o.available_nodes is not None and o.available_nodes - self._planned.get(k, 0) < job.nodes:
                continue
            pool = next((p for p in self._pools if p.can_launch(k)), None)
            if pool is None:
                continue
            rank = (PRIORITY[k.capacity_type], o.hourly_usd, k.zone)
            if best is None or rank < best[0]:
                best = (rank, o, pool)
        if best is None:
            return None
        _, o, pool = best
        self._planned[o.key] = self._planned.get(o.key, 0) + job.nodes
        return view.scale_up(pool, o, job.nodes, (job.id,), f"job {job.id}: its own node(s)", gang=job.nodes > 1)

    def on_launch_failure(self, command: ScaleUp, error: ProviderError, now: float) -> None:
        self._down[command.offering] = now + self.retry_s
