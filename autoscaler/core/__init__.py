"""The decision core: the one code path that turns a scheduler's view into commands, in the daemon and in the replay.

```
 queue source (peer)                    decision core (pure)                    actuator (peer)
 Slurm: squeue/sinfo + power-save   ─▶  serve_resumes()  ─▶ launches by name ─▶  GCE MIGs (autoscaler/gce)
        hooks (autoscaler/daemon)       queue_depth()    ─▶ drains, deletes  ─▶  sim cloud (autoscaler/sim)
 simulated Slurm (replay/simslurm)      scale_down_steps() / resume_failed()
 Kueue (later, autoscaler/kube)
```

Inputs, all plain data (`autoscaler.model` plus the dataclasses here):

- `resume`: pool name -> `ResumeUnit`s.  A resume unit is capacity the scheduler has *already bound to names*
  (Slurm allocated powered-down CLOUD nodes to a job and called ResumeProgram with them; one unit per job and
  pool, a gang's nodes together).  The core must create exactly those names; it decides only *how*
  (offering and zone, through `plan()`, gangs all or nothing, backoff, limits).
- `pending`: `WorkUnit`s the scheduler could not place at all (Slurm PENDING with Resources, Priority, ...).
  The queue-depth plan explains them, may pre-warm for them, and yields the idle scale-down.
- `inventory`: every managed pool and live node with its `NodeState` (the source maps its scheduler's node
  states: Slurm POWERING_UP -> BOOTING, idle -> READY_IDLE, ...).
- `facts`: name -> `SchedulerNode` (idle / drain / has_work as the scheduler reports them, fresh this tick):
  scale-down acts only on what the scheduler itself reports idle or drained with no work.
- offerings, the backoff memory (`UnavailableOffering`s), the `Policy`, `now`.

Outputs: `ResumeLaunch`es (a `ScaleUp` carrying the scheduler's names and a deterministic request id),
`Unserved` reasons, the queue-depth `Plan`, and `ScaleDownStep`s (drain names; power down + delete names;
`deletable_after_drain` lets a source delete what it just drained once a re-read confirms it is empty).
Actuation is a callback (`launch`) so the core can react to a refused launch within the same pass (backoff
memory for the next pool) without doing any I/O itself.

The reservation hold (`hold.py`): with a reservation and a hold, overflow pools are kept unavailable to the
scheduler (Slurm: powered-down names drained) and released by the queue-depth plan once waiting is no longer
cheaper (`held_pools`, `held_launches`, `take_names`); under late binding every pool is held and launches boot
held names drained instead (`late_binding`), and a held boot no pending job needs any more is
aborted when its shape has no idle keep (`surplus_held_boots`).

`stable.py`: until when the core's answer stands if only the clock moves (`stable_until`: the clock thresholds it
reads).  The replay uses it to answer the daemon's repeated polls without planning again.

Adding a queue source (e.g. Kubernetes/Kueue, `autoscaler/kube`): produce `ResumeUnit`s for capacity the
scheduler bound to node names (a ProvisioningRequest's nodes, one unit per workload so it is all or nothing),
`WorkUnit`s for work nothing could place, an `Inventory` from its nodes, and `SchedulerNode` facts (a node is
idle when no non-daemon pod runs on it, drained when cordoned).  Then call `serve_resumes` and `queue_depth`
exactly as `autoscaler/daemon/tick.py` does, and execute the steps with your actuator.  Nothing here may
import a cloud SDK, a scheduler client, the daemon or the replay (tests/replay/test_layering.py).
"""

from autoscaler.core.decide import (
    LaunchOutcome,
    ResumeLaunch,
    ResumeUnit,
    ScaleDownStep,
    SchedulerNode,
    deletable_after_drain,
    plan_pool_resumes,
    pool_policy,
    queue_depth,
    resume_failed,
    resume_unit,
    scale_down_steps,
    serve_resumes,
)
from autoscaler.core.gang_exclusion import UpNode, configured_names, gang_exclusions, gate_exclusion
from autoscaler.core.hold import (
    RELEASE_GRACE_S,
    HeldLaunches,
    ReservedRoom,
    constraint_allows,
    held_launches,
    held_pools,
    kept_idle,
    late_binding,
    surplus_held_boots,
    take_names,
    widened,
)
from autoscaler.planner.scale_down import name_index, name_order

__all__ = [
    "RELEASE_GRACE_S",
    "HeldLaunches",
    "LaunchOutcome",
    "ReservedRoom",
    "ResumeLaunch",
    "ResumeUnit",
    "ScaleDownStep",
    "SchedulerNode",
    "UpNode",
    "configured_names",
    "constraint_allows",
    "deletable_after_drain",
    "gang_exclusions",
    "gate_exclusion",
    "held_launches",
    "held_pools",
    "kept_idle",
    "late_binding",
    "name_index",
    "name_order",
    "plan_pool_resumes",
    "pool_policy",
    "queue_depth",
    "resume_failed",
    "resume_unit",
    "scale_down_steps",
    "serve_resumes",
    "surplus_held_boots",
    "take_names",
    "widened",
]
