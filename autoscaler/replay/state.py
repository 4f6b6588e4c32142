"""The scheduler side of a replay: jobs, registered nodes, and Slurm-like FIFO + backfill placement.

Nodes here are the scheduler's view (a node counts as capacity only once registered).  A job
starts when free GPUs are found for all its nodes at once (a gang never starts partially): on the
nodes launched for it (its *nominations*) or, best fit, on any registered node with room.  The
queue is FIFO with backfill: a job that does not fit does not block smaller ones behind it.

State is incremental so a 60-day replay stays fast: registered nodes with free GPUs are indexed
by (capacity type, free GPUs); counters for provisioned / demanded GPUs are kept as things change."""

from __future__ import annotations

import bisect
import enum
import heapq
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from autoscaler.cloud import OfferingKey
from autoscaler.model import NodeState
from autoscaler.node_names import split_node_name
from autoscaler.replay.trace import TraceJob
from fleet.catalog import CapacityType


class ReplayError(RuntimeError):
    """The replay cannot go on (a policy asked for something impossible, or left work stranded)."""


class JobState(enum.StrEnum):
    PENDING = "pending"
    CONFIGURING = "configuring"  # simulated Slurm: allocated, waiting for its nodes to power up
    RUNNING = "running"
    DONE = "done"


@dataclass(eq=False, slots=True)
class Job:
    idx: int
    trace: TraceJob
    nodes: int
    gpus_per_node: int
    state: JobState = JobState.PENDING
    first_start: float | None = None
    start: float | None = None
    end: float | None = None
    attempt: int = 0
    preemptions: int = 0
    placed_on: list[SimNode] = field(default_factory=list)
    nominated: list[SimNode] = field(default_factory=list)
    gpu_seconds: float = 0.0  # GPU-seconds run, lost attempts included
    progress_s: float = 0.0  # work saved by checkpoints: a requeued job resumes from here
    #: the one pool its pods may run in (None: any): on Kubernetes, the node selector its Kueue flavor gives them
    pool: str | None = None
    #: when it was last requeued (None: never): slurmctld stamps a requeued job's submit time anew (job_mgr.c
    #: `batch_requeue_fini`: `details->submit_time = now`), and Kubernetes' Job controller creates new pods
    requeued_at: float | None = None

    @property
    def remaining_s(self) -> float:
        return self.trace.duration - self.progress_s

    @property
    def id(self) -> str:
        return self.trace.id

    @property
    def submit(self) -> float:
        return self.trace.submit

    @property
    def pending_since(self) -> float:
        """The submit time the scheduler shows for it now: its requeue's, once requeued (`requeued_at`)."""
        return self.submit if self.requeued_at is None else self.requeued_at

    @property
    def spot_ok(self) -> bool:
        return self.trace.spot_ok

    @property
    def gpus(self) -> int:
        return self.nodes * self.gpus_per_node

    @property
    def is_gang(self) -> bool:
        return self.nodes > 1

    @property
    def key(self) -> tuple[float, int]:
        return (self.trace.submit, self.idx)


READY = (NodeState.READY_IDLE, NodeState.BUSY)


@dataclass(eq=False, slots=True)
class SimNode:
    name: str
    pool: str
    offering: OfferingKey
    gpus: int
    hourly_usd: float
    launched_at: float
    state: NodeState = NodeState.BOOTING
    since: float = 0.0
    free: int = 0
    jobs: dict[int, int] = field(default_factory=dict)  # job idx -> GPUs used here
    nominated_for: Job | None = None
    held_since: float | None = None  # registered and held for a gang that cannot start yet
    ready_at: float | None = None
    version: int = 0  # bumped on every change (lets drivers cache their own view of the node)
    jobs_run: int = 0

    @property
    def capacity_type(self) -> CapacityType:
        return self.offering.capacity_type

    @property
    def spot(self) -> bool:
        return self.offering.capacity_type is CapacityType.SPOT

    @property
    def zone(self) -> str:
        return self.offering.zone

    @property
    def used(self) -> int:
        return self.gpus - self.free

    @property
    def registered(self) -> bool:
        return self.ready_at is not None


class ClusterState:
    """Jobs and nodes of one replay, with the placement index and running counters."""

    def __init__(self, jobs: list[Job], checkpoint_interval_s: float = 0.0) -> None:
        """`checkpoint_interval_s`: a preempted job keeps the work up to its last checkpoint (taken every
        that many seconds of run time); 0 = it restarts from scratch."""
        self.jobs = jobs
        self.checkpoint_interval_s = checkpoint_interval_s
        self.by_id = {j.id: j for j in jobs}
        self.nodes: dict[str, SimNode] = {}
        self._pending: list[tuple[float, int]] = []  # sorted job keys
        self._free: dict[tuple[CapacityType, int], dict[str, SimNode]] = {}
        self.max_node_gpus = 8
        self.idle: dict[str, SimNode] = {}  # READY_IDLE nodes (any nomination)
        self.draining: dict[str, SimNode] = {}
        self.booting: dict[str, SimNode] = {}  # launched, not registered yet
        self._names: dict[str, tuple[int, list[int]]] = {}  # pool -> (next index, heap of freed)
        self.provisioned_gpus = 0
        self.provisioned_by_capacity: dict[CapacityType, int] = {}
        self.demand_gpus = 0  # pending + running
        self.running_gpus = 0
        self.partial_gang_gpu_s = 0.0
        self.unused_node_gpu_s = 0.0  # billed GPU-seconds of nodes removed without ever running a job
        self.unused_nodes = 0
        self.done = 0
        self.pending_changed = False
        #: nodes serve only the jobs they were launched for (exact-fit): never offered to other jobs
        self.exclusive_nodes = False

    # ---- queue ------------------------------------------------------------------------------------

    def pending(self) -> Iterator[Job]:
        for _, idx in list(self._pending):
            yield self.jobs[idx]

    @property
    def pending_count(self) -> int:
        return len(self._pending)

    def submit(self, job: Job) -> None:
        bisect.insort(self._pending, job.key)
        self.demand_gpus += job.gpus
        self.pending_changed = True

    def _unqueue(self, job: Job) -> None:
        i = bisect.bisect_left(self._pending, job.key)
        if i < len(self._pending) and self._pending[i] == job.key:
            del self._pending[i]

    # ---- names ------------------------------------------------------------------------------------

    def free_names(self, prefix: str, count: int) -> list[str]:
        """The lowest free `prefix-i` names (reused after deletion), without reserving them."""
        nxt, freed = self._names.get(prefix, (0, []))
        idxs = heapq.nsmallest(count, freed)
        idxs += range(nxt, nxt + count - len(idxs))
        return [f"{prefix}-{i}" for i in idxs]

    def _take_name(self, name: str) -> None:
        parsed = split_node_name(name)
        if parsed is None:
            return
        prefix, i = parsed
        nxt, freed = self._names.setdefault(prefix, (0, []))
        if i in freed:
            freed.remove(i)
            heapq.heapify(freed)
        elif i >= nxt:
            freed.extend(k for k in range(nxt, i))
            heapq.heapify(freed)
            self._names[prefix] = (i + 1, freed)

    def _release_name(self, name: str) -> None:
        parsed = split_node_name(name)
        if parsed is not None and parsed[0] in self._names:
            heapq.heappush(self._names[parsed[0]][1], parsed[1])

    # ---- nodes ------------------------------------------------------------------------------------

    def add_node(self, node: SimNode) -> None:
        if node.name in self.nodes:
            raise ReplayError(f"node {node.name} launched twice")
        node.free = node.gpus
        self.max_node_gpus = max(self.max_node_gpus, node.gpus)
        self.nodes[node.name] = node
        if not node.registered:
            self.booting[node.name] = node
        self._take_name(node.name)
        self.provisioned_gpus += node.gpus
        ct = node.capacity_type
        self.provisioned_by_capacity[ct] = self.provisioned_by_capacity.get(ct, 0) + node.gpus

    def nominate(self, node: SimNode, job: Job, now: float) -> None:
        """Hold `node` for `job` (the capacity was launched for it)."""
        self._unnominate(node, now)
        self._index_remove(node)
        node.nominated_for = job
        job.nominated.append(node)
        node.version += 1
        if node.registered and job.is_gang and node.held_since is None:
            self._hold(node, job, now)

    def _hold(self, node: SimNode, job: Job, now: float) -> None:
        """`node` is up and held for `job`'s gang until its peers are (partial-gang time from now)."""
        node.held_since = now
        self._settle_if_complete(job, now)

    def _settle_if_complete(self, job: Job, now: float) -> None:
        """Every node of `job`'s gang is up: none is held for a peer any more.  What follows until the gang starts
        is its start latency (on Kubernetes, the poll or woken tick that answers its request Provisioned), billed
        like a boot but not a partial gang; before the nineteenth round it was counted as one (never on Slurm,
        whose gangs start the instant their last node registers)."""
        if len(job.nominated) >= job.nodes and all(n.registered for n in job.nominated):
            for n in job.nominated:
                self._settle_hold(n, now)

    def _unnominate(self, node: SimNode, now: float) -> None:
        job = node.nominated_for
        if job is None:
            return
        node.nominated_for = None
        if node in job.nominated:
            job.nominated.remove(node)
        self._settle_hold(node, now)
        node.version += 1
        self._index_add(node)
        if job.is_gang and job.state is JobState.PENDING:  # the gang is short of a node again: its peers wait
            for n in job.nominated:
                if n.nominated_for is job and n.registered and n.held_since is None:
                    n.held_since = now

    def _settle_hold(self, node: SimNode, now: float) -> None:
        if node.held_since is not None:
            self.partial_gang_gpu_s += node.gpus * (now - node.held_since)
            node.held_since = None

    def register(self, node: SimNode, now: float) -> None:
        """The node joined the scheduler: it is capacity from now on."""
        node.ready_at = now
        self.booting.pop(node.name, None)
        node.state = NodeState.READY_IDLE
        node.since = now
        node.version += 1
        self.idle[node.name] = node
        job = node.nominated_for
        if job is not None and job.state is not JobState.PENDING:
            self._unnominate(node, now)
        elif job is not None and job.is_gang:
            self._hold(node, job, now)
        else:
            self._index_add(node)

    def drain(self, node: SimNode, now: float) -> None:
        if node.state not in READY:
            return
        self._unnominate(node, now)
        self._index_remove(node)
        node.state = NodeState.DRAINING
        node.since = now
        node.version += 1
        self.idle.pop(node.name, None)
        self.draining[node.name] = node

    def remove_node(self, node: SimNode, now: float) -> list[Job]:
        """Forget a deleted or preempted node; jobs running on it are requeued (returned)."""
        requeued = [self.jobs[i] for i in list(node.jobs)]
        for job in requeued:
            self.requeue(job, now)
        self._unnominate(node, now)
        self._index_remove(node)
        self.idle.pop(node.name, None)
        self.draining.pop(node.name, None)
        self.booting.pop(node.name, None)
        del self.nodes[node.name]
        self._release_name(node.name)
        node.state = NodeState.GONE
        node.version += 1
        if node.jobs_run == 0:
            self.unused_nodes += 1
            self.unused_node_gpu_s += node.gpus * (now - node.launched_at)
        self.provisioned_gpus -= node.gpus
        self.provisioned_by_capacity[node.capacity_type] -= node.gpus
        return requeued

    # ---- placement index --------------------------------------------------------------------------

    def _index_add(self, node: SimNode) -> None:
        if self.exclusive_nodes:
            return
        if node.state in READY and node.nominated_for is None and node.free > 0:
            self._free.setdefault((node.capacity_type, node.free), {})[node.name] = node

    def _index_remove(self, node: SimNode) -> None:
        bucket = self._free.get((node.capacity_type, node.free))
        if bucket is not None:
            bucket.pop(node.name, None)

    def free_nodes(self, capacity: CapacityType, free: int) -> dict[str, SimNode]:
        return self._free.get((capacity, free), {})

    # ---- scheduling -------------------------------------------------------------------------------

    def schedule(
        self, now: float, *, binding: bool = False, weights: Mapping[CapacityType, int] | None = None
    ) -> list[Job]:
        """Start every pending job that fits now, FIFO with backfill; returns the started jobs.

        `binding`: a job with nominations waits for exactly those nodes (Slurm allocates powered-down
        nodes to a job, which then waits for them); otherwise it takes whatever fits first.
        `weights`: Slurm node Weight per capacity type (lower is allocated first, best fit within a
        weight); None: best fit over every node alike."""
        started: list[Job] = []
        failed: set[tuple[int, int, bool, str | None]] = set()
        order = self._orders(weights)
        for _, idx in list(self._pending):
            job = self.jobs[idx]
            nodes = self._find(job, failed, binding, order[job.spot_ok])
            if nodes is not None:
                self.start(job, nodes, now)
                started.append(job)
        self.pending_changed = False
        return started

    @staticmethod
    def _orders(weights: Mapping[CapacityType, int] | None) -> dict[bool, list[tuple[CapacityType, ...]]]:
        """Per spot tolerance: groups of capacity types searched in turn (one group: plain best fit)."""
        out: dict[bool, list[tuple[CapacityType, ...]]] = {}
        for spot_ok in (False, True):
            types = [c for c in CapacityType if spot_ok or c is not CapacityType.SPOT]
            if weights is None:
                out[spot_ok] = [tuple(types)]
            else:
                levels = sorted({weights.get(c, 1 << 20) for c in types})
                out[spot_ok] = [tuple(c for c in types if weights.get(c, 1 << 20) == w) for w in levels]
        return out

    def _find(
        self, job: Job, failed: set[tuple[int, int, bool, str | None]], binding: bool,
        order: list[tuple[CapacityType, ...]],
    ) -> list[SimNode] | None:  # fmt: skip
        own = [n for n in job.nominated if n.state in READY and n.free >= job.gpus_per_node]
        if len(own) >= job.nodes:
            return own[: job.nodes]
        if binding and job.nominated:
            return None
        shape = (job.nodes, job.gpus_per_node, job.spot_ok, job.pool)
        if shape in failed:
            return None
        g = job.gpus_per_node
        frees = range(g, self.max_node_gpus + 1)
        pool = job.pool
        if job.nodes == 1:
            if own:
                return own
            for group in order:
                for f in frees:  # best fit: the fullest node that still fits
                    for ct in group:
                        bucket = self._free.get((ct, f))
                        if bucket:
                            if pool is None:
                                return [next(iter(bucket.values()))]
                            hit = next((n for n in bucket.values() if n.pool == pool), None)
                            if hit is not None:
                                return [hit]
            failed.add(shape)
            return None
        picked = list(own)
        for group in order:
            for f in frees:
                for ct in group:
                    for n in self._free.get((ct, f), {}).values():
                        if pool is not None and n.pool != pool:
                            continue
                        picked.append(n)
                        if len(picked) >= job.nodes:
                            return picked
        failed.add(shape)
        return None

    def start(self, job: Job, nodes: list[SimNode], now: float) -> None:
        self._unqueue(job)
        g = job.gpus_per_node
        for n in nodes:
            self._index_remove(n)
            if n.nominated_for is job:
                n.nominated_for = None
                self._settle_hold(n, now)
            n.free -= g
            n.jobs[job.idx] = g
            n.jobs_run += 1
            if n.state is NodeState.READY_IDLE:
                n.state = NodeState.BUSY
                n.since = now
                self.idle.pop(n.name, None)
            n.version += 1
            self._index_add(n)
        for n in list(job.nominated):
            if n not in nodes:
                self._unnominate(n, now)
        job.nominated.clear()
        job.placed_on = list(nodes)
        job.state = JobState.RUNNING
        job.start = now
        if job.first_start is None:
            job.first_start = now
        self.running_gpus += job.gpus

    def _release(self, job: Job, now: float) -> None:
        for n in job.placed_on:
            self._index_remove(n)
            n.free += n.jobs.pop(job.idx)
            if n.free == n.gpus and n.state is NodeState.BUSY:
                n.state = NodeState.READY_IDLE
                n.since = now
                self.idle[n.name] = n
            n.version += 1
            self._index_add(n)
        job.gpu_seconds += job.gpus * (now - job.start if job.start is not None else 0.0)
        job.placed_on = []
        self.running_gpus -= job.gpus

    def finish(self, job: Job, now: float) -> None:
        self._release(job, now)
        job.state = JobState.DONE
        job.end = now
        self.demand_gpus -= job.gpus
        self.done += 1

    def requeue(self, job: Job, now: float) -> None:
        """A running job lost a node (spot preemption): it resumes from its last checkpoint (or from
        scratch without checkpoints) once it is placed again."""
        if job.state is not JobState.RUNNING:
            return
        ran = now - (job.start if job.start is not None else now)
        every = self.checkpoint_interval_s
        if every > 0:
            job.progress_s = min(job.trace.duration, job.progress_s + (ran // every) * every)
        self._release(job, now)
        job.state = JobState.PENDING
        job.attempt += 1
        job.preemptions += 1
        job.start = None
        job.requeued_at = now
        bisect.insort(self._pending, job.key)
        self.pending_changed = True

    def settle_holds(self, now: float) -> None:
        """Fold held-node time into the partial-gang counter (at the end of a replay)."""
        for n in self.nodes.values():
            if n.held_since is not None:
                self._settle_hold(n, now)
                n.held_since = now
