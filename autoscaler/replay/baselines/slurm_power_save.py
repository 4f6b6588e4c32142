"""`slurm-power-save`: Slurm's power saving as slurm-gcp configures it, on the simulated Slurm (`simslurm`).

slurm-gcp's documented defaults (its Terraform `cloud_parameters` variable of the controller / slurm_files
modules: `resume_rate = 0, resume_timeout = 300, suspend_rate = 0, suspend_timeout = 300`; SuspendTime 300 s in
its partition defaults; ResumeRate/SuspendRate 0 = no rate limit, which is what the simulation does):

- every node is a `State=CLOUD` 8-GPU on-demand node (stock nodesets do not use spot for a subset of jobs); a
  reservation nodeset, when the scenario has one, gets the lowest Weight so Slurm allocates it first;
- slurmctld allocates jobs to powered-down nodes at submit and calls ResumeProgram (slurm-gcp's resume.py)
  with the batch: it creates those instances in the nodeset's zone order; a refused bulk insert (stockout)
  marks the nodes DOWN at once and Slurm requeues the job; slurmsync returns DOWN nodes to service after
  about a minute (`down_s`), the offering is skipped meanwhile;
- **ResumeTimeout** 300 s: a node not registered by then goes DOWN, the job is requeued and ResumeFailProgram
  (slurm-gcp: suspend.py) deletes the instance.  A boot longer than 300 s would never start a job on a stock
  slurm-gcp cluster; the replay then uses the next multiple of 300 s above the scenario's boot (what an operator
  has to set) and says so in `settings`;
- SuspendTime 300 s idle -> SuspendProgram deletes the VM; SuspendTimeout 300 s before the name is reusable;
- the partition is `OverSubscribe=EXCLUSIVE` where `fleet render slurm-conf` renders it so, by the same rule
  (`fleet.slurm.conf.whole_node`, which the simulated Slurm applies to the driver's pools: `SimSlurm.exclusive`):
  on an 8-GPU type with GPU NICs (a3-highgpu-8g, a3-megagpu-8g, a4-highgpu-8g) every job gets whole nodes, as
  Cluster Toolkit's A3 blueprints set `partition_conf: {OverSubscribe: EXCLUSIVE}` on their partitions
  (examples/machine-learning/a3-megagpu-8g/a3mega-slurm-blueprint.yaml, `a3mega_partition`;
  examples/machine-learning/a3-highgpu-8g/a3high-slurm-blueprint.yaml, the same for A3 High) and as the Toolkit
  partition module's default `exclusive = true` renders (slurm-gcp's `partitionlines`: `Oversubscribe=Exclusive`,
  with `PowerDownOnIdle=YES`, which the blueprint avoids with `exclusive: false` and which is not modelled).  On an
  8-GPU type without them (a2-highgpu-8g) small jobs share a node, as with `exclusive: false`.  That blueprint's
  partition also sets `ResumeTimeout: 900` and `SuspendTimeout: 600`; they are not taken: its nodeset is static
  (`node_count_dynamic_max: 0`), so they do not govern power saving there, and the stock slurm-gcp
  `cloud_parameters` above stand.  Since this baseline runs 8-GPU nodes only, one job each makes it several times
  the bound on traces of small jobs (the forty-eighth round); an operator with such work would add smaller
  nodesets, which this baseline does not model, so a lead over it on small jobs says little;
- a reservation's nodeset is **static**, as Cluster Toolkit's reservation blueprints configure it
  (examples/machine-learning/a3-megagpu-8g/a3mega-slurm-blueprint.yaml: `node_count_static:
  $(vars.a3mega_cluster_size)`, `node_count_dynamic_max: 0`): every reserved node is created when the cluster
  starts and never power-saved (`static_reserved`; False gives stock slurm-gcp's all-dynamic nodesets)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from autoscaler.cloud import OfferingKey
from autoscaler.model import Pool, ScaleUp, request_id_for
from autoscaler.replay.scenario import Scenario
from autoscaler.replay.simslurm import SimSlurm, SlurmSettings
from autoscaler.replay.state import Job
from fleet.catalog import CapacityType

#: slurm-gcp cloud_parameters defaults (see the module docstring)
SLURM_GCP_RESUME_TIMEOUT_S = 300.0
SLURM_GCP_SUSPEND_TIMEOUT_S = 300.0
SLURM_GCP_SUSPEND_TIME_S = 300.0


@dataclass
class SlurmPowerSavePolicy:
    suspend_time_s: float = SLURM_GCP_SUSPEND_TIME_S
    resume_timeout_s: float | None = None  # None: slurm-gcp's 300 s, raised past the boot when needed
    down_s: float = 60.0
    static_reserved: bool = True
    name: str = "slurm-power-save"
    description: str = (
        "Slurm power saving (slurm-gcp defaults) on the simulated Slurm: 8-GPU CLOUD nodes allocated at submit "
        "(whole, one job each, where GPU NICs make the partition OverSubscribe=EXCLUSIVE), ResumeTimeout 300 s, "
        "SuspendTime 300 s, on-demand; a reservation's nodeset static (Cluster Toolkit)"
    )
    _pools: list[Pool] = field(default_factory=list)
    _down: dict[OfferingKey, float] = field(default_factory=dict)
    _timeout: float = SLURM_GCP_RESUME_TIMEOUT_S
    _returns: list[tuple[float, list[str]]] = field(default_factory=list)
    _started: bool = False

    def pools(self, scenario: Scenario) -> list[Pool]:
        m = scenario.reservation_machine
        if m is None:
            raise ValueError(f"slurm-power-save needs an 8-GPU machine type in {scenario.machine_family}")
        self._pools = scenario.pools([m.name], spot=False)
        return self._pools

    def slurm_settings(self, scenario: Scenario) -> SlurmSettings:
        t = self.resume_timeout_s
        if t is None:
            t = SLURM_GCP_RESUME_TIMEOUT_S
            if scenario.ready_s >= t:
                t = math.floor(scenario.ready_s / SLURM_GCP_RESUME_TIMEOUT_S + 1) * SLURM_GCP_RESUME_TIMEOUT_S
        self._timeout = t
        return SlurmSettings(
            resume_timeout_s=t,
            suspend_time_s=self.suspend_time_s,
            suspend_timeout_s=SLURM_GCP_SUSPEND_TIMEOUT_S,
            weights={CapacityType.RESERVATION: 1, CapacityType.ON_DEMAND: 10},
            prefer=False,  # stock slurm-gcp has no job_submit plugin (and one machine type here)
            # static nodes are never power-saved; stock slurm-gcp power-saves every dynamic node
            suspend_exc=frozenset({CapacityType.RESERVATION}) if self.static_reserved else frozenset(),
        )

    def settings(self) -> dict[str, float | bool]:
        return {
            "resume_timeout_s": self._timeout,
            "suspend_time_s": self.suspend_time_s,
            "down_s": self.down_s,
            "static_reserved": self.static_reserved,
        }

    # ---- slurm-gcp's hooks ------------------------------------------------------------------------------

    def resume(self, sim: SimSlurm, names: Sequence[str], jobs: Mapping[str, Job | None]) -> None:
        """resume.py: one bulk insert per (nodeset, job); the zone is the nodeset's (first not DOWN here)."""
        groups: dict[tuple[str, int], list[str]] = {}
        for n in names:
            job = jobs.get(n)
            groups.setdefault((sim.names[n].pool.name, job.idx if job else -1), []).append(n)
        for (pool_name, _), ns in groups.items():
            pool = sim.pools[pool_name]
            offer = self._offering(sim, pool)
            if offer is None:
                self._fail(sim, ns)
                continue
            key, hourly = offer
            cmd = ScaleUp(
                pool=pool_name,
                offering=key,
                names=tuple(ns),
                request_id=request_id_for(pool_name, key, tuple(ns), sim.now),
                units=(),
                reason="ResumeProgram",
                gang=len(ns) > 1,
                hourly_usd=0.0 if key.reservation else hourly * len(ns),
            )
            if sim.launch(cmd) is not None:
                self._down[key] = sim.now + self.down_s
                self._fail(sim, ns)

    def _offering(self, sim: SimSlurm, pool: Pool) -> tuple[OfferingKey, float] | None:
        for o in sorted(sim.offerings(), key=lambda o: o.key.zone):
            if pool.can_launch(o.key) and self._down.get(o.key, -math.inf) <= sim.now:
                if o.available_nodes is not None and o.available_nodes < 1:
                    continue
                return o.key, o.hourly_usd
        return None

    def _fail(self, sim: SimSlurm, names: list[str]) -> None:
        sim.fail_resume(names)
        self._returns.append((sim.now + self.down_s, names))
        sim.wake(sim.now + self.down_s)

    def suspend(self, sim: SimSlurm, names: Sequence[str]) -> None:
        by_pool: dict[str, list[str]] = {}
        for n in names:
            by_pool.setdefault(sim.names[n].pool.name, []).append(n)
        for pool, ns in by_pool.items():
            sim.delete(pool, ns)

    def resume_fail(self, sim: SimSlurm, names: Sequence[str]) -> None:
        """ResumeFailProgram = suspend.py: delete the instance; slurmsync returns the node after `down_s`."""
        for n in names:
            nm = sim.names.get(n)
            if nm is not None and nm.launched:
                sim.delete(nm.pool.name, [n])
            elif nm is not None:
                self._returns.append((sim.now + self.down_s, [n]))
                sim.wake(sim.now + self.down_s)

    def tick(self, sim: SimSlurm) -> float | None:
        """slurmsync: the static reserved nodes created when the cluster starts; DOWN nodes back in service once
        their time is up."""
        if not self._started:
            self._started = True
            for pool in self._pools if self.static_reserved else ():
                if pool.capacity_type is CapacityType.RESERVATION:
                    sim.power_up(pool.name, pool.max_nodes)
        due = [ns for t, ns in self._returns if t <= sim.now]
        self._returns = [(t, ns) for t, ns in self._returns if t > sim.now]
        for ns in due:
            sim.return_to_service(ns)
        return min((t for t, _ in self._returns), default=None)
