"""Demand: the pending work units the planner must find capacity for.

A `WorkUnit` is one pending job (a Slurm job, a Kueue workload).  `nodes > 1` makes it a *gang*:
it needs `nodes` distinct nodes with `gpus_per_node` free GPUs each, all at once, in one zone.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class WorkUnit:
    """One pending unit of work.

    - `gpu_types`: acceptable accelerator types (e.g. ``{"nvidia-h100-80gb"}``); None = any.
    - `machine_types`: acceptable machine types (e.g. ``{"a3-highgpu-8g"}``); None = any that fits.
    - `pools`: the pools whose nodes it may run on (a Slurm job's own `--constraint` over the nodes' features,
      `autoscaler.slurm.constraint`); None = any pool serving its queue.
    - `spot_ok`: the unit tolerates preemption (it may run on spot capacity, if the policy allows
      spot for its queue).
    - `priority`: higher is served first; ties go to the older `submit_time`, then `id`.
    - `queue`: the Slurm partition / Kueue queue it was submitted to.
    - `time_limit_s`: requested run time where known (informative; not used for placement yet).
    - `avoid`: node names it may not run on (a Slurm job's own ``--exclude``): the planner neither counts on them
      nor gives a launch for it one of those names.
    - `whole_node`: it shares no node with other work (a Slurm job with ``--exclusive`` or in an
      OverSubscribe=EXCLUSIVE partition), so it takes every GPU of the node it gets.  `gpus_per_node` is what it asks
      and `pools` every pool it may run on, of any shape that holds it: the planner picks the shape
      (`autoscaler.planner.whole_node`: reservation capacity first, then the smallest shape it can have now, a larger
      one when the smaller is stocked out) and plans it as a unit of that shape's GPUs.
    - `evaluated`: the scheduler has tried to place it at least once.  False for a Slurm job whose pending reason
      is still `None` (slurmctld's first scheduling pass for it has not run): it may yet start on nodes Slurm
      finds by itself, preemption included, so a hold releases nothing for it (`autoscaler.core.hold`).
    """

    id: str
    submit_time: float
    gpus_per_node: int
    nodes: int = 1
    gpu_types: frozenset[str] | None = None
    machine_types: frozenset[str] | None = None
    pools: frozenset[str] | None = None
    spot_ok: bool = False
    priority: int = 0
    queue: str = "default"
    time_limit_s: float | None = None
    evaluated: bool = True
    avoid: frozenset[str] = frozenset()
    whole_node: bool = False

    def __post_init__(self) -> None:
        if not self.id:
            raise ValueError("WorkUnit.id: must be a non-empty string")
        if self.nodes < 1:
            raise ValueError(f"WorkUnit.nodes: must be >= 1, got {self.nodes} (unit {self.id!r})")
        if self.gpus_per_node < 1:
            raise ValueError(f"WorkUnit.gpus_per_node: must be >= 1, got {self.gpus_per_node} (unit {self.id!r})")
        if self.time_limit_s is not None and self.time_limit_s <= 0:
            raise ValueError(f"WorkUnit.time_limit_s: must be > 0 when set, got {self.time_limit_s} (unit {self.id!r})")
        if self.gpu_types is not None and not isinstance(self.gpu_types, frozenset):
            object.__setattr__(self, "gpu_types", frozenset(self.gpu_types))
        if self.machine_types is not None and not isinstance(self.machine_types, frozenset):
            object.__setattr__(self, "machine_types", frozenset(self.machine_types))
        if self.pools is not None and not isinstance(self.pools, frozenset):
            object.__setattr__(self, "pools", frozenset(self.pools))
        if not isinstance(self.avoid, frozenset):
            object.__setattr__(self, "avoid", frozenset(self.avoid))

    @property
    def is_gang(self) -> bool:
        return self.nodes > 1

    @property
    def gpus(self) -> int:
        """Total GPUs the unit needs."""
        return self.nodes * self.gpus_per_node

    @classmethod
    def from_gpus(cls, id: str, submit_time: float, gpus: int, *, node_gpus: int = 8, **kw: object) -> WorkUnit:
        """A unit asking for `gpus` GPUs: up to `node_gpus` on one node, else a gang of
        ceil(gpus / node_gpus) nodes of `node_gpus` each (the ITP trace convention)."""
        if gpus < 1:
            raise ValueError(f"gpus: must be >= 1, got {gpus} (unit {id!r})")
        if gpus <= node_gpus:
            return cls(id=id, submit_time=submit_time, gpus_per_node=gpus, nodes=1, **kw)  # type: ignore[arg-type]
        nodes = -(-gpus // node_gpus)
        return cls(id=id, submit_time=submit_time, gpus_per_node=node_gpus, nodes=nodes, **kw)  # type: ignore[arg-type]
