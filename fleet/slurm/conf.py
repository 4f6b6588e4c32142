"""Render `slurm.conf`, `gres.conf`, `cgroup.conf` and `topology.conf` for one cluster of a validated spec.

Every pool becomes `NodeSet=<pool>` over `State=CLOUD` nodes `<cluster>-<pool>-[0-<max-1>]`
(power-saved: slurmctld calls the autoscaler's Resume/SuspendProgram hooks), with `Gres=gpu:N`,
the host layout from the machine catalog (`CPUs= Sockets= CoresPerSocket= ThreadsPerCore=
RealMemory=`, A3 Mega is 2 x 52 x 2) and `Features=<gpu>,<machine type>,<capacity type>`.
Partitions list nodesets; a partition of whole-node fabric machines (A3/A4 8-GPU) is
`OverSubscribe=EXCLUSIVE`.  `SlurmctldHost=<name>(<ip>)` carries the controller's reserved address
(nodes never depend on DNS to find it), `TopologyPlugin=topology/tree` reads the `topology.conf`
that the controller keeps current (`fleet.slurm.topology`).  The result is a config Slurm 22.05
accepts; `overrides` replaces host-specific keys so a test harness can start the very same file.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from fleet.catalog import CapacityType, Catalog, MachineType, load_catalog
from fleet.slurm.accounting import accounting_settings, render_slurmdbd_conf
from fleet.slurm.job_submit import render_job_submit
from fleet.slurm.node_size import real_memory_mib
from fleet.slurm.options import merge_options, replace_keys, with_site_config
from fleet.slurm.policy import (
    gates_gangs,
    hold_settings,
    late_binding_constrains,
    late_binding_shares_nodes,
    submit_wakes_daemon,
)
from fleet.slurm.preempt import partition_tiers, preemption_settings
from fleet.slurm.suspend import standby_exclusion, suspend_time
from fleet.slurm.topology import render_topology
from fleet.slurm.weights import pool_weights, ranking_shapes
from fleet.spec.derive import controller_address, default_partition, node_hostlist, node_name_prefix
from fleet.spec.model import ClusterSpec, FleetSpec

__all__ = ["Nodeset", "SlurmConf", "node_name_prefix", "real_memory_mib", "render_slurm_conf"]

# Prolog / Epilog every compute node carries (components/gcp/startup.py writes them); slurm.conf names
# them only when a pool of the cluster needs one (the TCPXO RxDM container of A3 Mega multi-node jobs).
PROLOG = "/etc/slurm/gpu-fleet-prolog.sh"
EPILOG = "/etc/slurm/gpu-fleet-epilog.sh"

# Keys of NodeName= lines that `overrides` may set (everything else is a global key).
NODE_KEYS = ("NodeAddr", "NodeHostname", "Port")
# The autoscaler's power-saving hooks (and its job-end wake-up, EpilogSlurmctld): deploy/slurm/'s wrappers, which the
# controller's startup script writes here before slurmctld first starts (components/gcp/startup.py `hook_lines`).
# slurmctld validates them when it starts: 23.11 refuses to start at all over a missing EpilogSlurmctld ("fatal:
# failed to initialize prep plugin"), and any release runs no power saving over a missing ResumeProgram.  Until the
# thirty-fifth round they were the gpu-fleet checkout's own files, installed after slurmctld had started.
HOOK_DIR = "/usr/local/libexec/gpu-fleet"
HOOK_NAMES = ("resume", "suspend", "resume_fail", "epilog_slurmctld")
HOOKS = {name: f"{HOOK_DIR}/{name}.sh" for name in HOOK_NAMES}


@dataclass(frozen=True)
class Nodeset:
    name: str  # NodeSet name == pool name
    pool: str
    node_names: str  # Slurm hostlist, e.g. a3mega-resv-[0-63]
    gres: str  # gpu:8
    features: str  # h100-mega,a3-megagpu-8g,reservation
    partitions: list[str]


@dataclass(frozen=True)
class SlurmConf:
    slurm_conf: str
    gres_conf: str
    nodesets: list[Nodeset]
    cgroup_conf: str = ""
    topology_conf: str = ""
    # "" when no partition has a shape to prefer and late binding does not constrain (then no JobSubmitPlugins=lua)
    job_submit_lua: str = ""
    # the controller's slurmdbd.conf; "" with `slurm.accounting: none` (fleet/slurm/accounting.py)
    slurmdbd_conf: str = ""


def _gpu_files(count: int) -> str:
    return "/dev/nvidia0" if count == 1 else f"/dev/nvidia[0-{count - 1}]"


def runs_rxdm_prolog(cluster: ClusterSpec, cat: Catalog) -> bool:
    """Whether the render sets Prolog/Epilog for the GPUDirect-TCPXO receive-datapath manager (a pool of A3 Mega)."""
    for pool in cluster.pools:
        if pool.machine_type in cat:
            software = cat.machine(pool.machine_type).software
            if software is not None and software.fabric == "tcpxo":
                return True
    return False


def _line(head: tuple[str, str], items: Mapping[str, str | int]) -> str:
    return " ".join([f"{head[0]}={head[1]}", *(f"{k}={v}" for k, v in items.items())])


def release_settings(release: str) -> dict[str, str]:
    """What 22.05 needs set that 23.11, the images' Slurm, does by default: a CLOUD node's address is the one it
    registers from (`cloud_reg_addrs`: no DNS for nodes), powered-down nodes show in sinfo (`PrivateData=cloud`),
    no address cache (`NoAddrCache`).  23.11 has no address cache and logs "is defunct, please remove it" for the
    other two at every start of every daemon and client (src/common/read_config.c; NEWS 23.02.0rc1 and 23.11.0rc1),
    so they are rendered for 22.05 only."""
    if release == "22.05":
        return {
            "SlurmctldParameters": "cloud_reg_addrs,enable_configless,idle_on_node_suspend",
            "PrivateData": "cloud",
            "CommunicationParameters": "NoAddrCache",
        }
    return {}


def _global_settings(
    spec: FleetSpec,
    cluster: ClusterSpec,
    controller_host: str,
    resume_program: str,
    suspend_program: str,
    resume_fail_program: str,
    suspend_exc: list[str],
    catalog: Catalog,
) -> dict[str, str]:
    slurm = cluster.slurm
    assert slurm is not None  # validated: scheduler slurm has slurm settings
    settings = {
        "ClusterName": cluster.name,
        "SlurmctldHost": controller_host,
        "SlurmUser": "slurm",
        "SlurmdUser": "root",
        "SlurmctldPort": "6817",
        "SlurmdPort": "6818",
        "AuthType": "auth/munge",
        "StateSaveLocation": "/var/spool/slurmctld",
        "SlurmdSpoolDir": "/var/spool/slurmd",
        "SlurmctldPidFile": "/run/slurmctld.pid",
        "SlurmdPidFile": "/run/slurmd.pid",
        "SlurmctldLogFile": "/var/log/slurm/slurmctld.log",
        "SlurmdLogFile": "/var/log/slurm/slurmd.log",
        "SlurmctldDebug": "info",
        "SlurmdDebug": "info",
        "TopologyPlugin": "topology/tree",
        "TopologyParam": "SwitchAsNodeRank",  # node ranks follow the tree (slurm-gcp's default)
        "ProctrackType": "proctrack/cgroup",
        "TaskPlugin": "task/cgroup,task/affinity",
        "JobAcctGatherType": "jobacct_gather/cgroup",
        # slurmdbd on the controller, or a job completion log (fleet/slurm/accounting.py)
        **accounting_settings(cluster, controller_host.split("(", 1)[0]),
        "JobAcctGatherFrequency": "30",
        "MpiDefault": "none",
        # a job keeps the node's locked-memory limit, not the submitting shell's (8 MiB on a stock login VM): NCCL
        # over RDMA registers its buffers against it (Slurm FAQ "memlock"; the Toolkit's images set it unlimited)
        "PropagateResourceLimitsExcept": "MEMLOCK",
        "SwitchType": "switch/none",
        "SchedulerType": "sched/backfill",
        "SelectType": "select/cons_tres",
        "SelectTypeParameters": "CR_Core_Memory",
        "GresTypes": "gpu",
        "ReturnToService": "2",
        "MailProg": "/bin/true",
        # --- cloud nodes, power saving (the autoscaler daemon's hooks) ---
        "SlurmctldParameters": "enable_configless,idle_on_node_suspend",
        **release_settings(slurm.release),
        "TreeWidth": "65533",
        "ResumeProgram": resume_program,
        "SuspendProgram": suspend_program,
        "ResumeFailProgram": resume_fail_program,
        # a job's end wakes the daemon at once (its freed nodes are scaled down within ~1-2 s, not at the next
        # poll); slurmctld only logs a failing EpilogSlurmctld, the job is never affected
        "EpilogSlurmctld": HOOKS["epilog_slurmctld"],
        "SuspendTime": str(suspend_time(spec, cluster, catalog)),
        "ResumeTimeout": str(slurm.resume_timeout),
        "SuspendTimeout": "300",
        "ResumeRate": "0",
        "SuspendRate": "0",
    }
    if suspend_exc:
        settings["SuspendExcNodes"] = ",".join(suspend_exc)
    # spot-tolerant work yields reserved nodes to jobs that may not use spot (fleet/slurm/preempt.py)
    settings |= preemption_settings(cluster)
    # a held node (booted, or released powered down) starts its job at the scheduler's next pass after its undrain
    # (fleet/slurm/policy.py)
    for key, options in hold_settings(cluster).items():
        settings[key] = merge_options(settings[key], options) if key in settings else options
    return settings


def slurmrestd_auth(jwt_key_path: str) -> dict[str, str]:
    """slurm.conf keys that let slurmrestd (and `scontrol token`) use JWTs signed by the HS256 key
    at `jwt_key_path` (the provider's startup script puts it there); pass as `overrides`."""
    return {"AuthAltTypes": "auth/jwt", "AuthAltParameters": f"jwt_key={jwt_key_path}"}


def render_slurm_conf(
    spec: FleetSpec,
    cluster: ClusterSpec,
    *,
    controller_host: str | None = None,
    controller_addr: str | None = None,
    resume_program: str = HOOKS["resume"],
    suspend_program: str = HOOKS["suspend"],
    resume_fail_program: str = HOOKS["resume_fail"],
    overrides: dict[str, str] | None = None,
    catalog: Catalog | None = None,
) -> SlurmConf:
    """slurm.conf / gres.conf / cgroup.conf of one Slurm cluster of a spec that passed `load_spec`.

    `controller_host` defaults to `<cluster>-controller`, `controller_addr` to the address the stack
    reserves for it (`fleet.spec.derive.controller_address`).  `overrides` sets global keys or the
    node-line keys NodeAddr / NodeHostname / Port (case-insensitive; "" removes a key, a value replaces the key
    whole); it is applied after the spec's `slurm.extra_config`, whose option lists (SlurmctldParameters, ...) are
    merged with the rendered ones rather than replacing them (`fleet.slurm.options`).
    """
    if cluster.scheduler != "slurm" or cluster.slurm is None:
        raise ValueError(f"cluster {cluster.name!r}: not a Slurm cluster (scheduler={cluster.scheduler})")
    cat = catalog or load_catalog(spec.provider)
    slurm = cluster.slurm
    overrides = dict(overrides or {})
    node_overrides = {k: overrides.pop(k) for k in list(overrides) if k.lower() in {n.lower() for n in NODE_KEYS}}

    member_of = {
        pool.name: [part.name for part in slurm.partitions if pool.name in part.pools] for pool in cluster.pools
    }
    nodesets: list[Nodeset] = []
    node_lines: list[str] = []
    gres_lines: list[str] = []
    suspend_exc: list[str] = []
    machines: dict[str, MachineType] = {}
    weights = pool_weights(((p.name, p.capacity, p.machine_type) for p in cluster.pools), cat, spec.region)
    written: dict[str, int] = {}  # the Weight each pool's NodeName line carries (a site override included)
    standby = standby_exclusion(cluster)
    for pool in cluster.pools:
        machine = machines[pool.name] = cat.machine(pool.machine_type)
        hostlist = node_hostlist(cluster.name, pool.name, pool.max_nodes)
        features = ",".join([machine.gpu.short, machine.name, str(pool.capacity)])
        gres = f"gpu:{machine.gpu_count}"
        nodesets.append(Nodeset(pool.name, pool.name, hostlist, gres, features, member_of[pool.name]))
        node = {
            "State": "CLOUD",
            "CPUs": str(machine.vcpus),
            "Sockets": str(machine.sockets),
            "CoresPerSocket": str(machine.cores_per_socket),
            "ThreadsPerCore": str(machine.threads_per_core),
            "RealMemory": str(real_memory_mib(machine)),
            "Gres": gres,
            "Features": features,
            "Weight": str(weights[pool.name]),
        }
        node = replace_keys(node, node_overrides)
        written[pool.name] = int(node["Weight"]) if str(node.get("Weight", "")).isdigit() else weights[pool.name]
        node_lines.append(
            f"# pool {pool.name}: {pool.machine_type}, {pool.capacity}, {pool.min_nodes}..{pool.max_nodes}"
        )
        node_lines.append(_line(("NodeName", hostlist), node))
        node_lines.append(f"NodeSet={pool.name} Nodes={hostlist}")
        gres_lines.append(f"NodeName={hostlist} Name=gpu File={_gpu_files(machine.gpu_count)}")
        # never power-saved: a pool's minimum, and reservation nodes (paid for whether up or not; the autoscaler
        # launches them up front and keeps them, Policy.launch_reserved_nodes / keep_reserved_nodes): once up they
        # stay up and serve jobs without a boot
        keep = pool.max_nodes if pool.capacity is CapacityType.RESERVATION else pool.min_nodes
        if pool.capacity is CapacityType.ON_DEMAND and standby:
            # the daemon's standby nodes idle past SuspendTime by design: Slurm keeps that many usable idle nodes
            # of the pool up (`name[range]:count`, any of them; the count covers the pool minimum too)
            suspend_exc.append(f"{hostlist}:{min(pool.max_nodes, max(standby, pool.min_nodes))}")
        elif keep:
            suspend_exc.append(node_hostlist(cluster.name, pool.name, keep))

    default = default_partition(slurm).name
    part_lines = []
    tiers = partition_tiers(cluster)  # spot-tolerant work yields reserved nodes to the rest (fleet/slurm/preempt.py)
    for part in slurm.partitions:
        pms = [machines[p] for p in part.pools]
        items: dict[str, str | int] = {
            "Nodes": ",".join(part.pools),
            "Default": "YES" if part.name == default else "NO",
            "MaxTime": part.max_time,
            "State": "UP",
            "DefCpuPerGPU": min(m.vcpus // m.gpu_count for m in pms),
            "DefMemPerGPU": min(real_memory_mib(m) // m.gpu_count for m in pms),
        }
        if all(whole_node(m) for m in pms):
            items["OverSubscribe"] = "EXCLUSIVE"  # one job per A3/A4 node: its 8 GPUs and 8 NICs go together
        if part.name in tiers:
            items["PriorityTier"] = tiers[part.name]
        part_lines.append(_line(("PartitionName", part.name), items))

    host = controller_host or f"{cluster.name}-controller"
    addr = controller_addr or controller_address(spec, cluster.name)
    settings = _global_settings(
        spec,
        cluster,
        f"{host}({addr})",
        resume_program,
        suspend_program,
        resume_fail_program,
        suspend_exc,
        cat,
    )
    if runs_rxdm_prolog(cluster, cat):
        # the RxDM prolog pulls and starts a container: run it at allocation, give it the Toolkit's long-prolog
        # timeouts (schedmd-slurm-gcp-v6-controller/etc/long-prolog-slurm.conf.tpl); not its MessageTimeout=600,
        # which slurmctld reports as "too high for effective fault-tolerance" (100 is the most it takes quietly)
        settings |= {
            "Prolog": PROLOG,
            "Epilog": EPILOG,
            "PrologFlags": "Alloc",
            "PrologEpilogTimeout": "600",
            "BatchStartTimeout": "600",
            "MessageTimeout": "100",
        }
    # right-sized --prefer for powered-down allocations (22.05 ignores Weight there; fleet/slurm/job_submit.py), or
    # under strict late binding a hard --constraint: the daemon holds every pool and picks the machine type itself
    pools_by_name = {p.name: p for p in cluster.pools}
    shapes = ranking_shapes(((p.name, p.capacity, p.machine_type) for p in cluster.pools), cat, spec.region)
    by_pool = {s.pool: s for s in shapes}
    reserved = {  # partition -> GPUs per node of its largest reservation pool: reserved nodes are preferred too
        part.name: max(
            (machines[p].gpu_count for p in part.pools if pools_by_name[p].capacity is CapacityType.RESERVATION),
            default=0,
        )
        for part in slurm.partitions
    }
    job_submit = render_job_submit(
        {part.name: [by_pool[p] for p in part.pools] for part in slurm.partitions},
        default,
        reserved,
        constrain=late_binding_constrains(cluster),
        shared=late_binding_shares_nodes(cluster),
        wake=submit_wakes_daemon(cluster),
        gate_gangs=gates_gangs(cluster),
    )
    if job_submit:
        settings["JobSubmitPlugins"] = "lua"  # reads job_submit.lua next to slurm.conf
    settings = replace_keys(with_site_config(settings, slurm.extra_config), overrides)
    header = [
        f"# slurm.conf of cluster {cluster.name!r} (project {spec.project}, {spec.region}).",
        "# Generated by gpu-fleet from the fleet spec: edit the spec, not this file.",
    ]
    body = [f"{k}={v}" for k, v in settings.items()]
    slurm_conf = "\n".join([*header, *body, "", "# --- nodes (one CLOUD nodeset per pool) ---", *node_lines,
                            "", "# --- partitions ---", *part_lines, ""])  # fmt: skip
    gres_conf = "\n".join(["# gres.conf: generated by gpu-fleet.", *gres_lines, ""])
    cgroup_conf = "\n".join(
        [
            "# cgroup.conf: generated by gpu-fleet.",
            "CgroupPlugin=autodetect",
            "ConstrainCores=yes",
            "ConstrainDevices=yes",
            "ConstrainRAMSpace=yes",
            "",
        ]
    )
    prefixes = {n.pool: node_name_prefix(cluster.name, n.pool) for n in nodesets}
    topology_conf = render_topology(
        {prefixes[n.pool]: n.node_names for n in nodesets}, {}, {prefixes[p]: w for p, w in written.items()}
    )
    # slurmdbd takes the tokens slurmctld does: slurmrestd (JWT) opens a slurmdbd connection on 23.11
    auth_alt = {k: settings[k] for k in ("AuthAltTypes", "AuthAltParameters") if settings.get(k)}
    slurmdbd_conf = render_slurmdbd_conf(cluster, host, auth_alt)
    return SlurmConf(slurm_conf, gres_conf, nodesets, cgroup_conf, topology_conf, job_submit, slurmdbd_conf)


def whole_node(machine: MachineType) -> bool:
    """A machine type whose GPUs and GPU NICs only make sense for one job at a time (A3/A4 8-GPU)."""
    return machine.nics.fabric != "none" and machine.gpu_count == 8
