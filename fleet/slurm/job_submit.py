"""`job_submit.lua`: give each GPU job the right-sized machine type as a `--prefer`, so Slurm 22.05 right-sizes
allocations of powered-down CLOUD nodes too.

slurmctld 22.05 takes a node that needs no power-up before any powered-down node, whatever their Weights, so a
1-GPU job takes the free GPUs of an idle 8-GPU node before it powers up a 1-GPU one; among powered-down nodes it
ignores Weight too (the rendered topology.conf orders the pools' trees so that it follows them:
docs/autoscaler.md "Node weights").  `--prefer=<feature>` (22.05) is honoured in both cases: the job gets nodes
with the feature when it can, any node of its partition otherwise.
Every node carries its machine type as a feature (`fleet.slurm.conf`), so the generated `slurm_job_submit` sets
`prefer` to the right-sized machine type for the job's GPUs per node in its partition: the partition's shape that
fits and ranks first (`fleet.slurm.weights`: cheapest $/GPU-hour at on-demand list price, then fewer GPUs).  A job
that names features (`--constraint` / `--prefer`) or several partitions is left alone, and so is a GPU count for
which the partition has one machine type only (nothing to prefer).

A job's GPUs per node are read as the autoscaler reads them in squeue (`autoscaler.slurm.readers.parse_job`):
`--gres`/`--gpus-per-node`, else `--gpus` (or `--gpus-per-task` times the tasks) over the job's nodes, at least as
many nodes as the partition's largest node needs for them, as slurmctld counts them
(tests/slurm/test_job_submit_gpus.py checks each form on slurmctld).  An error in that reading leaves the job as
submitted (`pcall`): the lua never refuses a job.  In constrain mode the constraint is the first machine type,
best first (`constraint_shapes`), whose nodes also have the CPUs and memory the job asks per node (read as
`autoscaler.slurm.readers.job_size_per_node` reads squeue; CPUs and RealMemory as `fleet.slurm.conf` renders the
nodes): a constraint no node can meet makes slurmctld refuse the job at submission.

Reserved capacity is paid for whether used or not, so it must never lose to a right-sized on-demand node: in a
partition with reservation pools, a job whose GPUs fit a reserved node prefers `reservation|<machine type>` (every
reservation node carries the `reservation` feature), so an idle reserved node takes it first (powered-up nodes
come first, tests/e2e/test_weights.py) and the right-sized machine type is what it powers up once the reservation
is full.

Constrain mode (`render_job_submit(..., constrain=True)`) is for strict late binding (`Policy.late_bind` on a
cluster without reservation pools: `fleet.slurm.policy.late_binding_constrains`): the daemon holds every pool, so
Slurm must not pick the machine type at all.  The lua then sets the job's hard constraint (`--constraint`,
`job_desc.features`) to the right-sized machine type, for every GPU count of every partition (`constraints`), even
where the partition has one machine type only; when the planner falls back to another machine type the daemon
widens a pending job's constraint (`autoscaler.slurm.client`'s `update_job_features`).  In a spot-tolerant partition
(one with a spot pool) that also has another capacity type of the machine type, the constraint is pinned to spot
(`a3-highgpu-1g&spot`, `spot_pinned`): the daemon boots each job a node of the capacity type the plan chose, and an
unpinned spot-tolerant job would take the on-demand node booted for work that may not use spot.  The daemon widens
the pin too when the plan serves the job with another capacity type.  Jobs that name features or
several partitions are left alone here too, and so are jobs whose nodes are fixed (``-w``, ``--reservation``: a
constraint of another machine type than those nodes' would keep them pending for good); there are no `reservation|`
expressions.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from autoscaler.slurm.constraint import RIGHT_SIZED_MARK, constraint_expression
from autoscaler.slurm.gang_gate import GANG_GATE_MARK, GANG_GATE_S
from autoscaler.slurm.wake import submit_wake_path
from fleet.catalog import CapacityType, machine_family
from fleet.slurm.weights import PoolShape, ranked, shape_keys

__all__ = [
    "RESERVATION_FEATURE",
    "Prefer",
    "constraint_feature",
    "constraints",
    "preferences",
    "render_job_submit",
    "spot_pinned",
]

#: the feature every reservation node carries (fleet.slurm.conf: machine GPU, machine type, capacity type)
RESERVATION_FEATURE = str(CapacityType.RESERVATION)


@dataclass(frozen=True)
class Prefer:
    """A job's `--prefer`: its right-sized machine type, or reserved nodes too (`reservation|<machine type>`)."""

    machine_type: str
    reservation: bool = False

    @property
    def expression(self) -> str:
        return f"{RESERVATION_FEATURE}|{self.machine_type}" if self.reservation else self.machine_type

    def allows(self, machine_type: str, capacity: CapacityType) -> bool:
        """Whether a node of `machine_type` in `capacity` has the preferred features."""
        return machine_type == self.machine_type or (self.reservation and capacity is CapacityType.RESERVATION)


_PREFER_ABOUT = """\
-- Sets --prefer to the right-sized machine type for a GPU job's GPUs per node (22.05 ignores node Weight
-- among powered-down CLOUD nodes; it honours --prefer).  Jobs that name features are left alone."""
_CONSTRAIN_ABOUT = """\
-- Sets --constraint (job_desc.features) to the right-sized machine type for a GPU job's GPUs per node: strict
-- late binding (policy late_bind, no reservation pools).  The autoscaler widens a pending job's constraint
-- when it falls back to another machine type.  Jobs that name features are left alone."""

#: the lua's reading of a job's GPUs per node and nodes (also what the gang gate counts nodes by)
_GPUS_DEF = """
local function gpus_in(tres)
  if tres == nil then
    return nil
  end
  for item in string.gmatch(tres, "[^,]+") do
    local gpu = string.match(item, "^gres[:/]gpu(.*)$")
    if gpu ~= nil then
      local count = string.match(gpu, "^:(%d+)$") or string.match(gpu, "^:[^:]+:(%d+)$")
      if count ~= nil then
        return tonumber(count)
      end
      if gpu == "" or string.match(gpu, "^:[^:]+$") then -- gpu or gpu:<type>: one GPU
        return 1
      end
    end
  end
  return nil
end

-- a count the user gave (job_desc holds NO_VAL, NO_VAL16 or INFINITE16 for one not given)
local function given(n)
  if n == nil or n <= 0 or n == 65534 or n == 65535 or n >= 4294967294 then
    return nil
  end
  return n
end

-- GPUs per node and nodes as the autoscaler reads the job in squeue (autoscaler/slurm/readers.py, parse_job):
-- --gres/--gpus-per-node, else the job's GPUs (--gpus, or --gpus-per-task times the tasks) over its nodes, which
-- slurmctld raises to what the partition's largest node fits (--gpus=16 on 8-GPU nodes: 2 nodes of 8)
local function gpus_per_node(job_desc, most)
  local n = gpus_in(job_desc.tres_per_node)
  if n ~= nil then
    return n, given(job_desc.min_nodes) or 1
  end
  local total = gpus_in(job_desc.tres_per_job)
  if total == nil then
    local per_task = gpus_in(job_desc.tres_per_task)
    if per_task == nil then
      return nil, nil
    end
    local nodes = given(job_desc.min_nodes) or 1
    total = per_task * (given(job_desc.num_tasks) or (given(job_desc.ntasks_per_node) or 1) * nodes)
  end
  local nodes = math.max(given(job_desc.min_nodes) or 1, math.ceil(total / most))
  return math.ceil(total / nodes), nodes
end
"""

# {about}: what the lua does; {table}: the Lua name of the partition -> GPUs -> features table; {field}: the
# job_desc field set (the prefer output must stay byte-identical to what clusters already run)
_TEMPLATE = """\
-- job_submit.lua: generated by gpu-fleet (fleet/slurm/job_submit.py) from the fleet spec: edit the spec.
{about}
local default_partition = {default}
local {table} = {{
{rows}
}}
{most_def}{wake_def}{gpus_def}{gate_def}{choose_def}
function slurm_job_submit(job_desc, part_list, submit_uid)
{wake_call}{gate_call}  if job_desc.prefer ~= nil or job_desc.features ~= nil{named} then
    return slurm.SUCCESS
  end
  local part = job_desc.partition or default_partition
  if part == nil or string.find(part, ",") then
    return slurm.SUCCESS
  end
  local by_gpus = {table}[part]
  if by_gpus == nil then
    return slurm.SUCCESS
  end
  local ok, chosen = pcall(choose, job_desc, by_gpus, most_gpus[part])
  if not ok then -- never refuse a job for the lua's own fault: leave it as submitted
    slurm.log_error("job_submit.lua (gpu-fleet): %s", tostring(chosen))
    return slurm.SUCCESS
  end
  if chosen ~= nil then
    job_desc.{field} = chosen
{mark}  end
  return slurm.SUCCESS
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
  return slurm.SUCCESS
end

return slurm.SUCCESS
"""


def _right_sized(shapes: Sequence[PoolShape], gpus: int) -> str:
    """The machine type a job of `gpus` GPUs per node should get among `shapes` (some of which fit it): the one that
    ranks first (`weights.ranked`: cheapest $/GPU-hour, then fewer GPUs; the name breaks ties, so renders are
    stable)."""
    return ranked([s for s in shapes if s.gpus >= gpus])[0].machine_type


def preferences(
    partitions: Mapping[str, Sequence[PoolShape]], reserved_gpus: Mapping[str, int] | None = None
) -> dict[str, dict[int, Prefer]]:
    """Partition -> GPUs per node -> the `Prefer`, only where the partition has a choice (more than one machine type
    fits).  `PoolShape.usd_per_gpu_hour` is the on-demand list price per GPU; `reserved_gpus`: partition -> GPUs
    per node of its largest reservation pool (reserved nodes are preferred too for jobs that fit them)."""
    out: dict[str, dict[int, Prefer]] = {}
    for part, shapes in partitions.items():
        most = max((s.gpus for s in shapes), default=0)
        reserved = (reserved_gpus or {}).get(part, 0)
        table: dict[int, Prefer] = {}
        for g in range(1, most + 1):
            if len({s.machine_type for s in shapes if s.gpus >= g}) < 2:
                continue
            table[g] = Prefer(_right_sized(shapes, g), reservation=g <= reserved)
        if table:
            out[part] = table
    return out


def constraints(partitions: Mapping[str, Sequence[PoolShape]], *, shared: bool = False) -> dict[str, dict[int, str]]:
    """Partition -> GPUs per node (1 up to its largest shape's) -> the job's hard constraint under strict late
    binding: the right-sized machine type (the same ranking as `preferences`), pinned to spot where the partition
    is spot-tolerant (`spot_pinned`); `shared` (`Policy.share_nodes`): every shape that fits in the right-sized
    one's share group (`share_groups`), ORed (`constraint_expression`).  For GPUs alone, the alternatives the
    constrain-mode lua sets (it writes them best first, this sorted).  Partitions without GPU shapes are left out."""
    out: dict[str, dict[int, str]] = {}
    for part, shapes in partitions.items():
        most = max((s.gpus for s in shapes), default=0)
        if most > 0:
            pinned = spot_pinned(shapes)
            groups = share_groups(shapes) if shared else {}
            table: dict[int, str] = {}
            for g in range(1, most + 1):
                best = _right_sized(shapes, g)
                group = groups.get(best, "")
                fitting = dict.fromkeys(s.machine_type for s in ranked(shapes) if s.gpus >= g)
                types = [t for t in fitting if groups[t] == group] if group else [best]
                table[g] = constraint_expression(constraint_feature(t, pinned) for t in types)
            out[part] = table
    return out


def spot_pinned(shapes: Sequence[PoolShape]) -> frozenset[str]:
    """The machine types whose right-sized constraint a partition of `shapes` pins to spot (`<machine type>&spot`):
    those it has a spot pool of and a pool of another capacity type of.  A partition with a spot pool is
    spot-tolerant (`autoscaler.model.Pool.spot_tolerant`), so its jobs may use both; under late binding the daemon
    boots each pending job a node of the capacity type the plan chose, and a job pinned to nothing would take an
    on-demand node booted for work that may not use spot, leaving that work to wait for the next boot and the spot
    node booted for this job idle.  The daemon widens the pin when the plan serves the job with another capacity
    type (a spot stockout: `autoscaler.core.hold.widened`)."""
    spot = {s.machine_type for s in shapes if s.capacity is CapacityType.SPOT}
    other = {s.machine_type for s in shapes if s.capacity is not CapacityType.SPOT}
    return frozenset(spot & other)


def constraint_feature(machine_type: str, pinned: frozenset[str]) -> str:
    """The constraint the lua sets for `machine_type`: pinned to spot (`spot_pinned`) or the machine type alone."""
    return f"{machine_type}&{CapacityType.SPOT}" if machine_type in pinned else machine_type


def constraint_shapes(partitions: Mapping[str, Sequence[PoolShape]]) -> dict[str, list[PoolShape]]:
    """Partition -> its machine types (one `PoolShape` each), best first (`weights.ranked`): the constrain
    mode lua gives a job the first whose nodes have its GPUs, CPUs and memory per node; for GPUs alone that is
    `constraints`' choice.  Partitions without GPU shapes are left out."""
    out: dict[str, list[PoolShape]] = {}
    for part, shapes in partitions.items():
        by_type: dict[str, PoolShape] = {}
        for s in ranked(shapes):
            by_type.setdefault(s.machine_type, s)
        if by_type and max(s.gpus for s in by_type.values()) > 0:
            out[part] = list(by_type.values())
    return out


def share_groups(shapes: Sequence[PoolShape]) -> dict[str, str]:
    """Machine type -> its share group under `Policy.share_nodes`: its machine family and price tier
    (`weights.shape_keys`; `family/tier`), so that a job may take any shape of its family at the $/GPU-h of its
    right-sized one; "" for an unpriced shape (it shares with none)."""
    keys = shape_keys(shapes)
    return {
        s.machine_type: "" if math.isinf(keys[s][0]) else f"{machine_family(s.machine_type)}/{keys[s][0]}"
        for s in shapes
    }


def _lua_shape_rows(
    tables: Mapping[str, Sequence[PoolShape]], pinned: Mapping[str, frozenset[str]], shared: bool
) -> str:
    """The Lua table body: one line per partition, ``{ "<constraint>", <GPUs>, <CPUs>, <MiB>, "<group>" }`` per
    shape, the constraint its machine type, pinned to spot where `pinned[partition]` says (`constraint_feature`; an
    unknown CPU or memory figure is written as the largest Lua integer: it rules nothing out), the group its share
    group when `shared` (`share_groups`), else "" (the job gets the first shape that fits)."""
    unknown = 2**53
    rows = []
    for part, shapes in sorted(tables.items()):
        groups = share_groups(shapes) if shared else {}
        entries = ", ".join(
            f"{{ {_lua_string(constraint_feature(s.machine_type, pinned[part]), expression=True)}, {s.gpus}, "
            f"{s.cpus or unknown}, {s.memory_mib or unknown}, {_lua_group(groups.get(s.machine_type, ''))} }}"
            for s in shapes
        )
        rows.append(f"  [{_lua_string(part)}] = {{ {entries} }},")
    return "\n".join(rows)


def _lua_group(group: str) -> str:
    if not all(c.isalnum() or c in "-_./" for c in group):
        raise ValueError(f"not a share group: {group!r}")
    return f'"{group}"'


def _lua_string(s: str, *, expression: bool = False) -> str:
    ok = "-_.|&" if expression else "-_."
    if not s or not all(c.isalnum() or c in ok for c in s):
        raise ValueError(f"not a Slurm partition or feature name: {s!r}")
    return f'"{s}"'


# prefer mode: the table's entry for the job's GPUs per node
_PREFER_CHOOSE = """
local function choose(job_desc, by_gpus, most)
  local gpus = gpus_per_node(job_desc, most)
  return gpus ~= nil and by_gpus[gpus] or nil
end
"""

# constrain mode: the first machine type, best first, whose nodes have the GPUs, CPUs and memory the job asks per
# node (a constraint nodes cannot meet makes slurmctld refuse the job at submission)
_CONSTRAIN_CHOOSE = """
-- CPUs and memory (MiB) a node must have for the job, as the autoscaler reads them in squeue
-- (autoscaler/slurm/readers.py, job_size_per_node): the most of --mincpus, its CPUs over its nodes and
-- --cpus-per-gpu times its GPUs per node; --mem, else --mem-per-cpu times those CPUs, else --mem-per-gpu
local function size_per_node(job_desc, gpus, nodes)
  local cpus = math.max(given(job_desc.pn_min_cpus) or 0, math.ceil((given(job_desc.min_cpus) or 1) / nodes),
    (gpus_in(job_desc.cpus_per_tres) or 0) * gpus)
  local mem = given(job_desc.min_mem_per_node)
  if mem == nil then
    local per_cpu = given(job_desc.min_mem_per_cpu)
    mem = per_cpu ~= nil and per_cpu * cpus or (gpus_in(job_desc.mem_per_tres) or 0) * gpus
  end
  return cpus, mem
end

-- shapes: { constraint, GPUs, CPUs, RealMemory MiB, share group } of the partition, best first (the constraint:
-- the machine type, "&spot" where the partition is spot-tolerant and also has another capacity type of it); with
-- shared nodes (policy share_nodes) the job may take every shape that fits in the first fit's share group
local function choose(job_desc, shapes, most)
  local gpus, nodes = gpus_per_node(job_desc, most)
  if gpus == nil then
    return nil
  end
  local cpus, mem = size_per_node(job_desc, gpus, nodes)
  local group = nil
  local chosen = {}
  for _, shape in ipairs(shapes) do
    if shape[2] >= gpus and shape[3] >= cpus and shape[4] >= mem and (group == nil or shape[5] == group) then
      group = group or shape[5]
      table.insert(chosen, shape[1])
      if group == "" then
        break
      end
    end
  end
  if #chosen < 2 then
    return chosen[1]
  end
  for i, term in ipairs(chosen) do
    if string.find(term, "&", 1, true) then
      chosen[i] = "(" .. term .. ")"
    end
  end
  return table.concat(chosen, "|")
end
"""

# constrain mode: the daemon widens only the constraints the lua set (autoscaler/slurm/constraint.py)
_MARK = """\
    if job_desc.admin_comment == nil or job_desc.admin_comment == "" then
      job_desc.admin_comment = {mark}
    end
"""

#: the lua of a cluster with nothing to prefer whose daemon may hold pools or gates gangs: the submit wake-up (and
#: the gang gate) alone
_WAKE_ONLY = """\
-- job_submit.lua: generated by gpu-fleet (fleet/slurm/job_submit.py) from the fleet spec: edit the spec.
-- No partition has a machine type to prefer; every submission wakes the autoscaler, which may hold pools.
{wake_def}{gate_prelude}{gate_def}
function slurm_job_submit(job_desc, part_list, submit_uid)
{wake_call}{gate_call}  return slurm.SUCCESS
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
  return slurm.SUCCESS
end
"""

#: the partitions' largest nodes, which the lua reads a job's nodes by (`_GPUS_DEF`)
_MOST_DEF = """-- GPUs of each partition's largest node
local most_gpus = {{
{most_rows}
}}
"""

_WAKE_DEF = """
-- held pools (late binding, the reservation or preemption hold): their powered-down nodes are not allocatable,
-- so no ResumeProgram tells the autoscaler of a new job; this file does (its 1 s watcher ticks when it changes:
-- autoscaler/slurm/wake.py)
local wake_path = {path}
local function wake_daemon()
  local f = io.open(wake_path, "w")
  if f ~= nil then
    f:write(tostring(os.time()), "\\n")
    f:close()
  end
end
"""


_GATE_DEF = """
-- the gang gate (autoscaler/slurm/gang_gate.py): slurmctld would give a multi-node job the nodes that are up and
-- powered-down names for the rest, and the up ones would wait for the others' boot; so a gang that names no
-- BeginTime and has no AdminComment gets a BeginTime {gate_s} s ahead and the mark, and the autoscaler, woken by
-- this submission, releases it at once with the nodes it may not get.  A daemon that is down leaves it to Slurm
-- {gate_s} s later.  A gang is a job of more than one node as the autoscaler reads it: -N, or GPUs that need more
-- than one of the largest node of each partition it names (--gpus=16 on 8-GPU nodes)
local gang_gate_s = {gate_s}
local gang_gate_mark = {mark}
local function gang_nodes(job_desc)
  local nodes = given(job_desc.min_nodes) or 1
  local fewest = nil
  for part in string.gmatch(job_desc.partition or default_partition or "", "[^,]+") do
    local most = most_gpus[part]
    if most == nil then
      return nodes
    end
    local _, by_gpus = gpus_per_node(job_desc, most)
    fewest = math.min(fewest or math.huge, by_gpus or 1)
  end
  return math.max(nodes, fewest or 1)
end
local function gate_gang(job_desc)
  if gang_nodes(job_desc) <= 1 then
    return
  end
  if (job_desc.begin_time ~= nil and job_desc.begin_time ~= 0)
    or (job_desc.admin_comment ~= nil and job_desc.admin_comment ~= "")
    or (job_desc.req_nodes ~= nil and job_desc.req_nodes ~= "")
    or (job_desc.reservation ~= nil and job_desc.reservation ~= "") then -- its nodes are fixed: it gets those
    return
  end
  job_desc.begin_time = os.time() + gang_gate_s
  job_desc.admin_comment = gang_gate_mark
end
"""


def _lua_path(path: str) -> str:
    if not path.startswith("/") or not all(c.isalnum() or c in "/-_." for c in path):
        raise ValueError(f"wake_path: {path!r} is not an absolute path of letters, digits and /-_.")
    return f'"{path}"'


def _lua_rows(tables: Mapping[str, Mapping[int, str]]) -> str:
    """The Lua table body: one line per partition, ``[<gpus>] = "<features>"`` per GPU count."""
    rows = []
    for part, table in sorted(tables.items()):
        entries = ", ".join(f"[{g}] = {_lua_string(expr, expression=True)}" for g, expr in sorted(table.items()))
        rows.append(f"  [{_lua_string(part)}] = {{ {entries} }},")
    return "\n".join(rows)


def _lua_most_rows(partitions: Mapping[str, Sequence[PoolShape]], parts: Iterable[str]) -> str:
    """The Lua table body: one line per partition of `parts` with GPU nodes, ``["<partition>"] = <GPUs of its
    largest node>``."""
    most = {part: max((s.gpus for s in partitions[part]), default=0) for part in parts}
    return "\n".join(f"  [{_lua_string(part)}] = {gpus}," for part, gpus in sorted(most.items()) if gpus > 0)


def render_job_submit(
    partitions: Mapping[str, Sequence[PoolShape]],
    default: str | None,
    reserved_gpus: Mapping[str, int] | None = None,
    *,
    constrain: bool = False,
    shared: bool = False,
    wake: bool | None = None,
    wake_path: str = str(submit_wake_path()),
    gate_gangs: bool = False,
) -> str:
    """The job_submit.lua text ("" when there is nothing to set and no wake-up: then no JobSubmitPlugins either).

    Default: `--prefer` where a partition has a choice (`preferences`).  `constrain`: a hard `--constraint` for
    every GPU count of every partition (`constraints`), for strict late binding, which is for clusters without
    reservation pools: a reserved GPU count in `reserved_gpus` is a ValueError.  With `wake` (default: in constrain
    mode; `fleet.slurm.policy.submit_wakes_daemon` says when the stack wants it) every submission also rewrites
    `wake_path` (`autoscaler.slurm.wake`: the daemon's watcher ticks on it while it holds pools); a failing write is
    ignored (`pcall`), so the job is never refused for it.  `shared` (`Policy.share_nodes`, constrain mode): the
    constraint allows every shape that fits in the first fit's share group (`share_groups`).  `gate_gangs`
    (`fleet.slurm.policy.gates_gangs`; needs the wake-up): every multi-node job that names no BeginTime and has no
    AdminComment gets a BeginTime `GANG_GATE_S` ahead and the AdminComment `GANG_GATE_MARK`, which the daemon
    releases (`autoscaler.slurm.gang_gate`); a failing gate leaves the job as submitted (`pcall`)."""
    if constrain:
        reserved = {part: g for part, g in (reserved_gpus or {}).items() if g}
        if reserved:
            raise ValueError(f"reserved_gpus: {reserved!r}: constrain mode is for clusters without reservation pools")
        shapes = constraint_shapes(partitions)
        tables: Mapping[str, object] = shapes
        rows, choose, about, table, field = (
            _lua_shape_rows(shapes, {part: spot_pinned(partitions[part]) for part in shapes}, shared),
            _CONSTRAIN_CHOOSE,
            _CONSTRAIN_ABOUT,
            "constraint",
            "features",
        )
    else:
        prefs = preferences(partitions, reserved_gpus)
        exprs = {part: {g: p.expression for g, p in t.items()} for part, t in prefs.items()}
        tables = exprs
        rows, choose, about, table, field = _lua_rows(exprs), _PREFER_CHOOSE, _PREFER_ABOUT, "prefer", "prefer"
    wakes = constrain if wake is None else wake
    if gate_gangs and not wakes:
        raise ValueError("gate_gangs: the gang gate needs the submit wake-up (wake), or gangs wait for the next poll")
    wake_def = wake_call = gate_def = gate_call = mark = ""
    if wakes:
        wake_def, wake_call = _WAKE_DEF.format(path=_lua_path(wake_path)), "  pcall(wake_daemon)\n"
    if gate_gangs:  # constants of digits, and of letters, "-" and ":"
        gate_def = _GATE_DEF.format(gate_s=GANG_GATE_S, mark=f'"{GANG_GATE_MARK}"')
        gate_call = "  pcall(gate_gang, job_desc)\n"
    default_lua = _lua_string(default) if default else "nil"
    # the gate counts a gang's nodes in every partition with GPUs; the prefer output stays as clusters run it
    most_def = _MOST_DEF.format(most_rows=_lua_most_rows(partitions, partitions if gate_gangs else tables))
    if not tables:
        if not wakes:
            return ""
        gate_prelude = f"local default_partition = {default_lua}\n{most_def}{_GPUS_DEF}" if gate_gangs else ""
        return _WAKE_ONLY.format(
            wake_def=wake_def, gate_prelude=gate_prelude, wake_call=wake_call, gate_def=gate_def, gate_call=gate_call
        )
    if constrain:
        mark = _MARK.format(mark=f'"{RIGHT_SIZED_MARK}"')  # a constant of letters, "-" and ":"
    return _TEMPLATE.format(
        about=about,
        default=default_lua,
        table=table,
        rows=rows,
        most_def=most_def,
        gpus_def=_GPUS_DEF,
        choose_def=choose,
        field=field,
        wake_def=wake_def,
        wake_call=wake_call,
        gate_def=gate_def,
        gate_call=gate_call,
        mark=mark,
        # a job whose nodes are fixed (-w, --reservation) runs on them or not at all: a constraint of another machine
        # type would keep it pending for good; the prefer output stays as clusters run it (a --prefer never blocks)
        named=" or job_desc.req_nodes ~= nil or job_desc.reservation ~= nil" if constrain else "",
    )
