"""Pure readers: `squeue --json` and `sinfo --json` (or slurmrestd's /jobs and /nodes) -> typed records.

Written against Slurm 22.05's JSON (openapi v0.0.38, samples in tests/data/slurm/) and tolerant of the later
shapes (state as a list, numbers as ``{"set", "infinite", "number"}``).  No I/O: the client runs the commands
and passes the parsed JSON in.  `squeue --json` ignores ``-p``/``-t`` in 22.05, so filtering happens here.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import KW_ONLY, dataclass, field
from typing import Any

from autoscaler.slurm.constraint import RIGHT_SIZED_MARK
from autoscaler.slurm.gang_gate import BLOCKED_REASONS, is_gated
from autoscaler.slurm.hostlist import expand
from autoscaler.slurm.job_array import NO_TASKS, ArrayTasks, parse_array_tasks

PENDING = "PENDING"
CONFIGURING = "CONFIGURING"
RUNNING = "RUNNING"
ACTIVE_JOB_STATES = frozenset({PENDING, CONFIGURING, RUNNING, "COMPLETING", "SUSPENDED", "REQUEUED"})
#: states in which an array's task counts against the array's throttle (``%N``): started and not ended
ARRAY_TASK_RUNNING_STATES = frozenset({CONFIGURING, RUNNING, "COMPLETING", "SUSPENDED"})

# Pending reasons that mean "more (or other) capacity would let it run" vs. reasons capacity cannot fix.
CAPACITY_REASONS = frozenset(
    {"Resources", "Priority", "PartitionNodeLimit", "PartitionConfig", "NodeDown", "ReqNodeNotAvail", "None"}
)
NON_CAPACITY_REASONS = frozenset(
    {"Dependency", "JobHeldUser", "JobHeldAdmin", "BeginTime", "AssocGrpJobsLimit", "QOSMaxJobsPerUserLimit"}
)


class SlurmFormatError(ValueError):
    """The JSON is not what squeue/sinfo print; the message names the field."""


def _number(value: Any) -> float | None:
    """22.05 prints plain numbers (None when unset/infinite); >= 23.02 prints {"set","infinite","number"}."""
    if value is None:
        return None
    if isinstance(value, Mapping):
        if value.get("infinite") or not value.get("set", True):
            return None
        value = value.get("number")
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, int | float):
        return float(value)
    return None


_GPU_RE = re.compile(r"(?:gres[:/])?gpu(?::([A-Za-z0-9_.-]+?))?(?::(\d+))?(?:\(.*\))?$")


def parse_gpu_tres(tres: str | None) -> tuple[int, str | None]:
    """GPU count and type from a tres/gres string: ``gres:gpu:8`` -> (8, None), ``gres:gpu:h100:8`` ->
    (8, "h100"), ``gres/gpu=4`` -> (4, None), ``gpu:h100:8(S:0-1)`` -> (8, "h100"); no GPUs -> (0, None)."""
    if not tres:
        return 0, None
    for item in re.split(r",(?![^(]*\))", tres):
        item = item.strip().replace("=", ":")
        m = _GPU_RE.match(item)
        if not m:
            continue
        gtype, count = m.group(1), m.group(2)
        if gtype is not None and gtype.isdigit() and count is None:
            gtype, count = None, gtype
        return (int(count) if count is not None else 1), gtype
    return 0, None


def _features(expr: str | list[str] | None) -> tuple[str, ...]:
    """A job's --constraint (``a3&h100``, ``a3|a4``, ``[a3*2]``) or a node's feature list, as plain names.  Slurm
    22.05 prints a node's features as one string (``h100,a3-megagpu-8g``), 23.02 and later as a list (the stacks'
    nodes on slurmctld 23.11.4, tests/slurm_compat: a list here broke every tick until the thirty-fifth round)."""
    if not expr:
        return ()
    if isinstance(expr, list):
        expr = ",".join(str(e) for e in expr)
    return tuple(f for f in re.split(r"[&|,\[\]*()\s]+", expr) if f and not f.isdigit())


@dataclass(frozen=True)
class SlurmJob:
    job_id: int
    name: str
    state: str  # PENDING, CONFIGURING, RUNNING, ...
    reason: str  # state_reason: Resources, Priority, PartitionNodeLimit, None, ...
    partition: str
    node_count: int
    gpus_per_node: int
    gpu_type: str | None  # from gres:gpu:<type>:N, when the job names one
    features: tuple[str, ...]
    priority: int
    time_limit_s: float | None  # None = no limit (INFINITE / partition default unknown)
    submit_time: float
    _: KW_ONLY  # the rest by name, as `SlurmNode`'s
    nodes: tuple[str, ...] = ()  # allocated nodes (CONFIGURING/RUNNING)
    flags: tuple[str, ...] = ()
    start_time: float | None = None  # when the current run started (RUNNING only: slurmctld resets it once
    # powered-up nodes are ready, so a CONFIGURING job's start_time is not its start)
    constraint: str = ""  # the --constraint expression as slurmctld holds it ("" for one built from `features`)
    admin_comment: str = ""
    excluded_nodes: tuple[str, ...] = ()  # its ExcNodeList (`--exclude`, or the daemon's: `core.gang_exclusion`)
    required_nodes: tuple[str, ...] = ()  # its ReqNodeList (`--nodelist`/`-w`): it runs on these names or not at all
    reservation: str = ""  # the advanced reservation it was submitted to (`--reservation`): it runs on its nodes
    reservation_nodes: tuple[str, ...] = ()  # ... which are these (the daemon's read, `autoscaler.slurm.reservations`)
    exclusive: bool = False  # it shares its nodes with no other job (`--exclusive`, or an OverSubscribe=EXCLUSIVE
    # partition: slurmctld shows both as squeue's ``shared`` "none")
    cpus_per_node: int = 0  # what a node must have for it: CPUs (`job_size_per_node`; 0: not asked)
    memory_per_node_mib: int = 0  # ... and memory (0: the partition's default, which every node has)
    eligible_time: float | None = None  # when a pending job may start (its BeginTime; None: not reported)
    dependency: str = ""  # as squeue shows it: "afterok:12(unfulfilled)" while it waits, "" once met or for none
    restarts: int = 0  # squeue's restart_cnt: how often slurmctld requeued it
    array_job_id: int = 0  # the job array it belongs to (0: none)
    array_task_id: int | None = None  # its task in that array; None for a record holding several pending tasks
    array_tasks: ArrayTasks = NO_TASKS  # the pending tasks this record holds (`autoscaler.slurm.job_array`)
    array_running: int = 0  # the array's tasks holding nodes (`parse_squeue`), against its throttle

    @property
    def pending(self) -> bool:
        return self.state == PENDING

    @property
    def tried(self) -> bool:
        """slurmctld has tried to place it at least once: a pending job has a reason other than "None" after its
        first scheduling pass (`WorkUnit.evaluated`), except a gang the job_submit.lua gated (`gated`): its
        BeginTime is the lua's, and slurmctld tries it only once the daemon released it."""
        return self.reason != "None" and not self.gated

    @property
    def blocked(self) -> bool:
        """Pending for a reason no capacity ends: a dependency not met yet (read from ``dependency``: the reason is
        None for a moment after any update of the job) or a hold (`gang_gate.BLOCKED_REASONS`)."""
        return self.pending and ("(unfulfilled)" in self.dependency or self.reason in BLOCKED_REASONS)

    @property
    def gated(self) -> bool:
        """A gang the stack's job_submit.lua held back for the daemon (or the daemon's lease kept back while it was
        blocked), not released yet (`autoscaler.slurm.gang_gate`): the daemon releases it, with an `ExcNodeList`
        where it must boot whole."""
        return (
            self.pending
            and not self.blocked
            and is_gated(self.reason, self.admin_comment, self.submit_time, self.eligible_time, self.restarts)
        )

    @property
    def tasks(self) -> int:
        """How many jobs of this shape the record is: 1, or for a pending array's record the tasks slurmctld may
        start now (its throttle less the array's running tasks), which may be 0."""
        return self.array_tasks.startable(self.array_running) if self.array_tasks.ranges else 1

    def unit_ids(self, limit: int | None = None) -> tuple[str, ...]:
        """The work unit ids it stands for (at most `limit`): ``job/<id>``, or one ``job/<array id>_<task>`` per task
        of a pending array's record slurmctld may start now, lowest task first (squeue -r's names: the first is the
        task slurmctld tries next)."""
        if not self.array_tasks.ranges:
            return (f"job/{self.job_id}",)
        n = self.tasks if limit is None else min(self.tasks, limit)
        return tuple(f"job/{self.array_job_id}_{t}" for t in self.array_tasks.ids(n))

    @property
    def nodes_fixed(self) -> bool:
        """It runs only on nodes it names (`required_nodes`) or on its reservation's: no node the plan picks in a
        pool serves it (`autoscaler.daemon.named_nodes`)."""
        return bool(self.required_nodes or self.reservation)

    @property
    def constraint_expression(self) -> str:
        """The job's constraint: as slurmctld holds it, or its features ANDed where only those are known."""
        return self.constraint or "&".join(self.features)

    @property
    def right_sized_by_lua(self) -> bool:
        """The stack's job_submit.lua set this job's constraint (right-sizing the daemon may widen), as opposed to
        a constraint the user gave (`autoscaler.slurm.constraint.RIGHT_SIZED_MARK`)."""
        return self.admin_comment == RIGHT_SIZED_MARK

    @property
    def gpus(self) -> int:
        return self.node_count * self.gpus_per_node


@dataclass(frozen=True)
class SlurmNode:
    name: str
    state: str  # base state, lower case: idle, allocated, mixed, down, completing, future, unknown
    flags: frozenset[str]  # upper case: CLOUD, POWERED_DOWN, POWERING_UP, DRAIN, NOT_RESPONDING, ...
    gpus: int
    gpus_used: int
    partitions: tuple[str, ...]
    features: tuple[str, ...]
    reason: str = ""
    _: KW_ONLY  # the rest by name: a positional argument once landed in a field added later (`weight`)
    alloc_cpus: int = 0
    weight: int | None = None  # scheduling Weight (slurm.conf, or `scontrol update weight=`); None: not reported
    cpus: int = 0  # CPUs and RealMemory (MiB) as configured (0: not reported)
    real_memory_mib: int = 0
    alloc_memory_mib: int = 0  # memory the jobs on it hold (SelectTypeParameters CR_*_Memory, as the stack renders)
    extra: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False)

    @property
    def cloud(self) -> bool:
        return "CLOUD" in self.flags

    def lacks_room_for(self, job: SlurmJob) -> bool:
        """Jobs on it hold so many of its CPUs or so much of its memory that `job` cannot start here, whatever GPUs
        are free (a job with ``--mem=0`` holds all the memory of a node it takes one GPU of)."""
        if not (self.alloc_cpus or self.alloc_memory_mib):
            return False
        cpus = bool(self.cpus) and self.cpus - self.alloc_cpus < max(1, job.cpus_per_node)
        memory = bool(self.real_memory_mib) and self.real_memory_mib - self.alloc_memory_mib < job.memory_per_node_mib
        return cpus or memory

    @property
    def powered_down(self) -> bool:
        return "POWERED_DOWN" in self.flags

    @property
    def powering_up(self) -> bool:
        """Booting, or asked to: `scontrol update state=power_up` (the daemon's own, or an admin's) marks the node
        POWER_UP while it still reads POWERED_DOWN, until slurmctld's power thread calls ResumeProgram (seen for up
        to a second on 22.05 and 23.11: bench/probe_power_up_flag.py); as POWER_DOWN counts as powering down."""
        return "POWERING_UP" in self.flags or "POWER_UP" in self.flags

    @property
    def powering_down(self) -> bool:
        return "POWERING_DOWN" in self.flags or "POWER_DOWN" in self.flags

    @property
    def not_responding(self) -> bool:
        return "NOT_RESPONDING" in self.flags

    @property
    def drain(self) -> bool:
        return "DRAIN" in self.flags

    @property
    def completing(self) -> bool:
        """A job that ended (or was preempted) is still winding down on it (Epilog, KillWait)."""
        return self.state == "completing" or "COMPLETING" in self.flags

    @property
    def has_work(self) -> bool:
        """Jobs allocated or still completing on it: never power it down or delete it."""
        return self.state in ("allocated", "mixed") or self.completing or self.alloc_cpus > 0

    @property
    def idle(self) -> bool:
        """Up, registered, no jobs, not draining: ready capacity."""
        return (
            self.state == "idle"
            and not self.has_work
            and not (self.flags & {"POWERED_DOWN", "POWERING_UP", "POWERING_DOWN", "DRAIN", "NOT_RESPONDING"})
        )

    @property
    def drained(self) -> bool:
        """DRAIN set and nothing left running: safe to power down."""
        return self.drain and not self.has_work

    @property
    def down(self) -> bool:
        return self.state == "down" or "FAIL" in self.flags


#: the state flags Slurm's `job_state_string()` names instead of the base state, first first (22.05's
#: src/common/slurm_protocol_defs.c): what 22.05's squeue prints as `job_state`
JOB_STATE_FLAGS_SHOWN = (
    "COMPLETING", "STAGE_OUT", "CONFIGURING", "RESIZING", "REQUEUED", "REQUEUE_FED", "REQUEUE_HOLD", "SPECIAL_EXIT",
    "STOPPED", "REVOKED", "RESV_DEL_HOLD", "SIGNALING",
)  # fmt: skip


def job_state(value: Any) -> str:
    """A job's state as 22.05 names it.  22.05 prints one string, a flag such as CONFIGURING before the base state;
    23.02 and later print the base state and its flags, ``["RUNNING", "CONFIGURING", "POWER_UP_NODE"]`` for a job
    whose nodes are powering up (captured from slurmctld 23.11.4, tests/data/slurm-23.11), which reads as
    CONFIGURING here, as on 22.05, not RUNNING."""
    if not isinstance(value, list):
        return str(value or "")
    names = [str(v).upper() for v in value]
    return next((f for f in JOB_STATE_FLAGS_SHOWN if f in names[1:]), names[0] if names else "")


def parse_job(raw: Mapping[str, Any]) -> SlurmJob:
    try:
        job_id = int(raw["job_id"])
    except (KeyError, TypeError, ValueError) as exc:
        raise SlurmFormatError(f"squeue job without a valid 'job_id': {raw!r:.200}") from exc
    state = job_state(raw.get("job_state", ""))
    node_count = int(_number(raw.get("node_count")) or 1)
    gpus, gtype = parse_gpu_tres(raw.get("tres_per_node"))
    if not gpus:
        per_job, gtype_j = parse_gpu_tres(raw.get("tres_per_job"))
        if per_job:
            gpus, gtype = math.ceil(per_job / node_count), gtype_j
    if not gpus:
        per_task, gtype_t = parse_gpu_tres(raw.get("tres_per_task"))
        tasks = int(_number(raw.get("tasks")) or 1)
        if per_task:
            gpus, gtype = math.ceil(per_task * tasks / node_count), gtype_t
    limit_min = _number(raw.get("time_limit"))
    nodes_expr = raw.get("nodes") or ""
    cpus_per_node, memory_per_node = job_size_per_node(raw, node_count, gpus)
    return SlurmJob(
        job_id=job_id,
        name=str(raw.get("name", "")),
        state=str(state),
        reason=str(raw.get("state_reason") or "None"),
        partition=str(raw.get("partition", "")),
        node_count=node_count,
        gpus_per_node=gpus,
        gpu_type=gtype,
        features=_features(raw.get("features")),
        priority=int(_number(raw.get("priority")) or 0),
        time_limit_s=None if limit_min is None else limit_min * 60.0,
        submit_time=float(_number(raw.get("submit_time")) or 0.0),
        nodes=tuple(expand(nodes_expr)) if nodes_expr else (),
        flags=tuple(raw.get("flags") or ()),
        start_time=_start_time(raw) if str(state) == RUNNING else None,
        constraint=str(raw.get("features") or ""),
        admin_comment=str(raw.get("admin_comment") or ""),
        excluded_nodes=tuple(expand(str(raw.get("excluded_nodes") or ""))),
        required_nodes=tuple(expand(str(required))) if (required := raw.get("required_nodes")) else (),
        exclusive=_shares_with_none(raw.get("shared")),
        reservation=str(raw.get("resv_name") or ""),
        cpus_per_node=cpus_per_node,
        memory_per_node_mib=memory_per_node,
        eligible_time=_number(raw.get("eligible_time")),
        dependency=str(raw.get("dependency") or ""),
        restarts=int(_number(raw.get("restart_cnt")) or 0),
        array_job_id=int(_number(raw.get("array_job_id")) or 0),
        array_task_id=None if (task := _number(raw.get("array_task_id"))) is None else int(task),
        array_tasks=_array_tasks(raw) if str(state) == PENDING else NO_TASKS,
    )


def _shares_with_none(shared: Any) -> bool:
    """squeue's ``shared`` of a job: "none" (22.05; a list of it later) when it takes its nodes whole, measured on
    22.05.8 for ``--exclusive`` and for any job of an OverSubscribe=EXCLUSIVE partition; None by default, "user" for
    ``--exclusive=user`` (other jobs of the same user may share)."""
    values = shared if isinstance(shared, list) else [shared]
    return any(str(v).lower() == "none" for v in values if v is not None)


def _array_tasks(raw: Mapping[str, Any]) -> ArrayTasks:
    """The pending tasks a record holds, its throttle read from ``array_max_tasks`` (also there when squeue cut the
    task list, and with it the ``%N``)."""
    tasks = parse_array_tasks(raw.get("array_task_string"))
    throttle = int(_number(raw.get("array_max_tasks")) or 0)
    if tasks.ranges and throttle and throttle != tasks.throttle:
        tasks = dataclasses.replace(tasks, throttle=throttle)
    return tasks


def job_size_per_node(raw: Mapping[str, Any], node_count: int, gpus_per_node: int) -> tuple[int, int]:
    """(CPUs, memory MiB) one node must have for a job, from squeue: the most of ``--mincpus``
    (`minimum_cpus_per_node`), its CPUs over its nodes (`cpus`: ``-c`` x tasks) and ``--cpus-per-gpu`` x its GPUs
    per node; memory ``--mem`` (`memory_per_node`), else ``--mem-per-cpu`` x those CPUs, else the job's memory over
    its nodes (`tres_req_str`: ``--mem-per-gpu`` x its GPUs, or the partition's default, which the stack's
    DefMemPerGPU keeps within every node that has the GPUs).  The stack's job_submit.lua reads the submission the
    same way (`fleet.slurm.job_submit`), so the machine type it constrains a job to is one the daemon sees fit."""
    nodes = max(1, node_count)
    cpus = max(
        int(_number(raw.get("minimum_cpus_per_node")) or 0),
        math.ceil((_number(raw.get("cpus")) or 0) / nodes),
        parse_gpu_tres(raw.get("cpus_per_tres"))[0] * gpus_per_node,
    )
    memory = int(_number(raw.get("memory_per_node")) or 0)
    if not memory:
        memory = int(_number(raw.get("memory_per_cpu")) or 0) * cpus
    if not memory:  # --mem-per-gpu (22.05's squeue and slurmrestd print no mem_per_tres) or the partition's default
        memory = math.ceil(_tres_mib(raw.get("tres_req_str"), "mem") / nodes)
    return cpus, memory


def _tres_mib(tres: Any, name: str) -> float:
    """A memory figure of a TRES string (``cpu=1,mem=800000M,node=1``) in MiB; 0 when absent."""
    for item in str(tres or "").split(","):
        key, _, value = item.partition("=")
        if key == name and value:
            unit = value[-1].upper()
            scale = {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024}.get(unit)
            number = value[:-1] if scale is not None else value
            try:
                return float(number) * (scale if scale is not None else 1)
            except ValueError:
                return 0.0
    return 0.0


def _start_time(raw: Mapping[str, Any]) -> float | None:
    t = _number(raw.get("start_time"))
    return float(t) if t else None


def parse_squeue(
    data: Mapping[str, Any], *, partitions: Iterable[str] | None = None, states: Iterable[str] | None = None
) -> list[SlurmJob]:
    """Jobs of `squeue --json` (filtered by partition and state in code: 22.05 ignores -p/-t with --json).
    A job submitted to several partitions (``-p a,b``) matches when any of them is wanted."""
    if "jobs" not in data:
        raise SlurmFormatError("squeue JSON has no 'jobs' list")
    want_p = set(partitions) if partitions is not None else None
    want_s = {s.upper() for s in states} if states is not None else None
    jobs = [parse_job(j) for j in data["jobs"]]
    running = Counter(j.array_job_id for j in jobs if j.array_job_id and j.state in ARRAY_TASK_RUNNING_STATES)
    jobs = [
        dataclasses.replace(j, array_running=running[j.array_job_id]) if j.array_tasks.throttle else j for j in jobs
    ]
    return [
        j
        for j in jobs
        if (want_s is None or j.state in want_s) and (want_p is None or want_p & set(j.partition.split(",")))
    ]


def parse_node(raw: Mapping[str, Any]) -> SlurmNode:
    name = raw.get("name") or raw.get("hostname")
    if not name:
        raise SlurmFormatError(f"sinfo node without a 'name': {raw!r:.200}")
    state = raw.get("state", "unknown")
    flags = {str(f).upper() for f in raw.get("state_flags") or ()}
    if isinstance(state, list):  # >= 23.02: ["IDLE", "CLOUD", "POWERED_DOWN"]
        base, *rest = [str(s) for s in state] or ["unknown"]
        flags |= {s.upper() for s in rest}
        state = base
    gpus, _ = parse_gpu_tres(raw.get("gres"))
    used, _ = parse_gpu_tres(raw.get("gres_used"))
    return SlurmNode(
        name=str(name),
        state=str(state).lower(),
        flags=frozenset(flags),
        gpus=gpus,
        gpus_used=used,
        partitions=tuple(raw.get("partitions") or ()),
        features=_features(raw.get("active_features") or raw.get("features")),
        reason=str(raw.get("reason") or ""),
        alloc_cpus=int(_number(raw.get("alloc_cpus")) or 0),
        weight=_weight(raw.get("weight")),
        cpus=int(_number(raw.get("cpus")) or 0),
        real_memory_mib=int(_number(raw.get("real_memory")) or 0),
        alloc_memory_mib=int(_number(raw.get("alloc_memory")) or 0),
        # epoch seconds; >= 23.02 wraps them like every number (read raw, the idle clock of a 23.11 node fell back
        # to its VM's creation and a node up longer than the idle timeout was scaled down the moment it went idle)
        extra={k: t for k in ("boot_time", "last_busy", "slurmd_start_time") if (t := _number(raw.get(k))) is not None},
    )


def _weight(value: Any) -> int | None:
    """A node's ``weight``: a plain number in 22.05, ``{"set", "infinite", "number"}`` later; None when absent."""
    w = _number(value)
    return None if w is None or isinstance(value, bool) else int(w)


def parse_sinfo(data: Mapping[str, Any], *, cloud_only: bool = False) -> list[SlurmNode]:
    """Nodes of a per-node document: `sinfo --json` on 22.05, `scontrol show nodes --json` on 23.02 and later (whose
    `sinfo --json` lists groups of nodes, `{"sinfo": [...]}`: `fleet.slurm.nodes_json`), slurmrestd /nodes."""
    if "nodes" not in data:
        grouped = " (Slurm >= 23.02's sinfo --json groups nodes: read scontrol show nodes --json)"
        grouped = grouped if "sinfo" in data else ""
        raise SlurmFormatError(f"node JSON has no 'nodes' list{grouped}")
    nodes = [parse_node(n) for n in data["nodes"]]
    return [n for n in nodes if n.cloud] if cloud_only else nodes


def parse_resume_file(data: Mapping[str, Any]) -> dict[str, tuple[int, ...]]:
    """``SLURM_RESUME_FILE`` -> node name -> the job ids it is resumed for (keeps a gang's nodes together).
    22.05 writes ``{"jobs": [{"job_id": 1, "nodes": "a-[0-1]"}], "all_nodes": "a-[0-1]"}``; later releases
    ``{"all_nodes_resume": ..., "jobs": [{"job_id", "nodes_resume", "nodes_alloc", ...}]}``."""
    out: dict[str, list[int]] = {}
    for job in data.get("jobs") or ():
        expr = job.get("nodes_resume") or job.get("nodes") or job.get("nodes_alloc") or ""
        for n in expand(expr) if expr else ():
            out.setdefault(n, []).append(int(job.get("job_id", 0)))
    return {k: tuple(v) for k, v in out.items()}


def waiting_on_power_up(jobs: Iterable[SlurmJob], nodes: Mapping[str, SlurmNode]) -> list[SlurmJob]:
    """Jobs Slurm already placed on CLOUD nodes that are still powering up (CONFIGURING, or allocated to a
    node that is POWERED_DOWN / POWERING_UP): their capacity is on its way, through the resume hook."""
    out = []
    for j in jobs:
        if j.pending or not j.nodes:
            continue
        ns = [nodes[n] for n in j.nodes if n in nodes]
        if j.state == CONFIGURING or any(n.powering_up or n.powered_down for n in ns):
            out.append(j)
    return out
