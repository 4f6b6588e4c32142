"""The slurm.conf / gres.conf renderer, read as text (the real-slurmctld tests start the same output)."""

from __future__ import annotations

import copy
import math
import re
from pathlib import Path
from typing import Any

import pytest

from fleet.catalog import load_catalog
from fleet.slurm import render_slurm_conf
from fleet.slurm.conf import real_memory_mib
from fleet.spec import load_spec, load_stack_file, read_stack_config

ROOT = Path(__file__).resolve().parents[2]


def settings(text: str) -> dict[str, str]:
    """Global KEY=VALUE lines of a slurm.conf (not NodeName/NodeSet/PartitionName lines)."""
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#") and " " not in line and "=" in line:
            key, value = line.split("=", 1)
            out[key] = value
    return out


def lines_starting(text: str, head: str) -> list[str]:
    return [ln for ln in text.splitlines() if ln.startswith(head)]


def fields(line: str) -> dict[str, str]:
    return dict(item.split("=", 1) for item in line.split())


@pytest.fixture
def a3mega_data() -> dict[str, Any]:
    return read_stack_config(ROOT / "Pulumi.gcp-a3mega-slurm.yaml")


def render(data: dict[str, Any], **kwargs: Any):
    spec = load_spec(data)
    return render_slurm_conf(spec, spec.clusters[0], **kwargs)


def test_one_cloud_nodeset_per_pool(a3mega_data: dict[str, Any]) -> None:
    conf = render(a3mega_data)
    nodes = [fields(ln) for ln in lines_starting(conf.slurm_conf, "NodeName=")]
    assert [n["NodeName"] for n in nodes] == ["a3mega-resv-[0-15]", "a3mega-spot-[0-31]"]
    for n in nodes:
        assert n["State"] == "CLOUD" and n["Gres"] == "gpu:8" and n["CPUs"] == "208"
    assert nodes[0]["Features"] == "h100-mega,a3-megagpu-8g,reservation"
    assert nodes[1]["Features"] == "h100-mega,a3-megagpu-8g,spot"
    nodesets = [fields(ln) for ln in lines_starting(conf.slurm_conf, "NodeSet=")]
    assert nodesets == [
        {"NodeSet": "resv", "Nodes": "a3mega-resv-[0-15]"},
        {"NodeSet": "spot", "Nodes": "a3mega-spot-[0-31]"},
    ]
    assert [(s.name, s.node_names, s.gres, s.partitions) for s in conf.nodesets] == [
        ("resv", "a3mega-resv-[0-15]", "gpu:8", ["a3mega", "a3mega-spot"]),
        ("spot", "a3mega-spot-[0-31]", "gpu:8", ["a3mega-spot"]),
    ]


def test_reserved_capacity_is_allocated_first(a3mega_data: dict[str, Any]) -> None:
    conf = render(a3mega_data)
    weights = {fields(ln)["NodeName"]: int(fields(ln)["Weight"]) for ln in lines_starting(conf.slurm_conf, "NodeName")}
    assert weights["a3mega-resv-[0-15]"] < weights["a3mega-spot-[0-31]"]


def test_partitions_list_nodesets_and_one_default(a3mega_data: dict[str, Any]) -> None:
    conf = render(a3mega_data)
    parts = [fields(ln) for ln in lines_starting(conf.slurm_conf, "PartitionName=")]
    assert [(p["PartitionName"], p["Nodes"], p["Default"]) for p in parts] == [
        ("a3mega", "resv", "YES"),
        ("a3mega-spot", "spot,resv", "NO"),
    ]
    assert parts[1]["MaxTime"] == "2-00:00:00"
    # a job asking for 1 GPU gets 1/8 of the node's CPUs and memory by default
    assert parts[0]["DefCpuPerGPU"] == "26"
    assert int(parts[0]["DefMemPerGPU"]) * 8 <= real_memory_mib(load_catalog().machine("a3-megagpu-8g"))


def test_first_partition_is_default_when_none_is_marked(a3mega_data: dict[str, Any]) -> None:
    a3mega_data["clusters"][0]["slurm"]["partitions"][0]["default"] = False
    defaults = [fields(ln)["Default"] for ln in lines_starting(render(a3mega_data).slurm_conf, "PartitionName=")]
    assert defaults == ["YES", "NO"]


def test_real_memory_leaves_headroom() -> None:
    for name in ("a3-megagpu-8g", "g2-standard-4"):
        m = load_catalog().machine(name)
        assert 0.9 * m.memory_gib * 1024 - 1024 < real_memory_mib(m) < m.memory_gib * 1024


def test_cloud_and_power_save_settings(a3mega_data: dict[str, Any]) -> None:
    s = settings(render(a3mega_data).slurm_conf)
    # the controller's reserved address travels with its name: nodes never need DNS to find it
    assert s["SlurmctldHost"] == "a3mega-controller(10.0.15.253)" and s["ClusterName"] == "a3mega"
    assert s["SuspendTime"] == "600" and s["ResumeTimeout"] == "1800"
    # the autoscaler's hook wrappers (deploy/slurm/), where the controller's script writes them before slurmctld starts
    for key, name in (("ResumeProgram", "resume"), ("SuspendProgram", "suspend"), ("ResumeFailProgram", "resume_fail")):
        assert s[key] == f"/usr/local/libexec/gpu-fleet/{name}.sh"
        assert (ROOT / "deploy" / "slurm" / f"{name}.sh").is_file()
    assert s["SelectType"] == "select/cons_tres" and s["GresTypes"] == "gpu"
    params = s["SlurmctldParameters"].split(",")
    assert {"enable_configless", "idle_on_node_suspend"} <= set(params) and "cloud_dns" not in params  # zonal DNS
    assert s["TopologyPlugin"] == "topology/tree"
    assert (s["Prolog"], s["Epilog"]) == ("/etc/slurm/gpu-fleet-prolog.sh", "/etc/slurm/gpu-fleet-epilog.sh")
    assert s["PrologFlags"] == "Alloc" and s["BatchStartTimeout"] == "600"  # RxDM is up before the first step
    assert int(s["TreeWidth"]) >= 65533
    assert s["SuspendExcNodes"] == "a3mega-resv-[0-15]"  # reserved nodes are paid for: never power-saved


def test_accounting_is_slurmdbd_on_the_controller_by_default(a3mega_data: dict[str, Any]) -> None:
    """As slurm-gcp's controller runs it: slurmctld sends job records to the controller's slurmdbd (every VM resolves
    the name), GPUs are accounted; slurmdbd.conf keeps them in a local MariaDB through its socket, with no
    password anywhere (fleet/slurm/accounting.py)."""
    conf = render(a3mega_data)
    s = settings(conf.slurm_conf)
    assert s["AccountingStorageType"] == "accounting_storage/slurmdbd"
    assert (s["AccountingStorageHost"], s["AccountingStoragePort"]) == ("a3mega-controller", "6819")
    assert s["AccountingStorageTRES"] == "gres/gpu"
    assert "JobCompType" not in s  # sacct has the records
    dbd = settings(conf.slurmdbd_conf)
    assert (dbd["DbdHost"], dbd["DbdPort"], dbd["SlurmUser"]) == ("a3mega-controller", "6819", "slurm")
    assert (dbd["StorageType"], dbd["StorageHost"], dbd["StorageUser"]) == (
        "accounting_storage/mysql",
        "localhost",
        "slurm",
    )
    assert not {k for k in dbd if k.startswith("StoragePass")}
    assert render(a3mega_data, controller_host="ctl-0").slurmdbd_conf.count("DbdHost=ctl-0\n") == 1
    # slurmdbd takes the JWTs slurmctld takes: slurmrestd 23.11 connects to it with the client's token
    jwt = {"AuthAltTypes": "auth/jwt", "AuthAltParameters": "jwt_key=/k"}
    assert {k: settings(render(a3mega_data, overrides=jwt).slurmdbd_conf)[k] for k in jwt} == jwt


def test_accounting_none_keeps_a_completion_log_and_no_slurmdbd(a3mega_data: dict[str, Any]) -> None:
    a3mega_data["clusters"][0]["slurm"]["accounting"] = "none"
    conf = render(a3mega_data)
    s = settings(conf.slurm_conf)
    assert s["AccountingStorageType"] == "accounting_storage/none" and s["JobCompType"] == "jobcomp/filetxt"
    assert not {k for k in s if k in ("AccountingStorageHost", "AccountingStorageTRES")}  # the TRES: fatal without it
    assert conf.slurmdbd_conf == ""


def test_an_unknown_accounting_kind_is_refused_by_name(a3mega_data: dict[str, Any]) -> None:
    a3mega_data["clusters"][0]["slurm"]["accounting"] = "cloudsql"
    with pytest.raises(ValueError, match=r"clusters\[0\]\.slurm\.accounting: Input should be 'slurmdbd' or 'none'"):
        load_spec(a3mega_data)


def test_hook_paths_and_controller_are_parameters(a3mega_data: dict[str, Any]) -> None:
    conf = render(a3mega_data, controller_host="ctl-0", controller_addr="10.9.9.9", resume_program="/opt/r",
                  suspend_program="/opt/s", resume_fail_program="/opt/f")  # fmt: skip
    s = settings(conf.slurm_conf)
    assert (s["SlurmctldHost"], s["ResumeProgram"], s["SuspendProgram"], s["ResumeFailProgram"]) == (
        "ctl-0(10.9.9.9)",
        "/opt/r",
        "/opt/s",
        "/opt/f",
    )


def test_overrides_replace_global_and_node_keys(a3mega_data: dict[str, Any]) -> None:
    conf = render(
        a3mega_data,
        overrides={"slurmctldport": "7001", "NodeAddr": "127.0.0.1", "TaskPlugin": "", "SlurmdParameters": "x"},
    )
    s = settings(conf.slurm_conf)
    assert s["SlurmctldPort"] == "7001"  # case-insensitive, the file keeps one spelling
    assert "slurmctldport" not in s and "TaskPlugin" not in s  # "" removes a key
    assert s["SlurmdParameters"] == "x"  # unknown keys are added
    assert all(fields(ln)["NodeAddr"] == "127.0.0.1" for ln in lines_starting(conf.slurm_conf, "NodeName="))
    plain = render(a3mega_data, overrides={"Port": ""})
    assert all("Port" not in fields(ln) for ln in lines_starting(plain.slurm_conf, "NodeName="))


def test_extra_config_adds_and_replaces_keys_and_overrides_win(a3mega_data: dict[str, Any]) -> None:
    extra = {"PriorityType": "priority/multifactor", "slurmctlddebug": "debug"}
    a3mega_data["clusters"][0]["slurm"]["extra_config"] = extra
    s = settings(render(a3mega_data, overrides={"PriorityType": "priority/basic"}).slurm_conf)
    assert s["SlurmctldDebug"] == "debug"
    assert s["PriorityType"] == "priority/basic"


def test_min_nodes_are_kept_out_of_power_save(a3mega_data: dict[str, Any]) -> None:
    a3mega_data["clusters"][0]["pools"][1]["min_nodes"] = 4
    assert settings(render(a3mega_data).slurm_conf)["SuspendExcNodes"] == "a3mega-resv-[0-15],a3mega-spot-[0-3]"


def test_gres_conf_lists_gpu_devices_per_nodeset() -> None:
    spec = load_stack_file(ROOT / "Pulumi.gcp-l4-dev.yaml")
    conf = render_slurm_conf(spec, spec.clusters[0])
    lines = [ln for ln in conf.gres_conf.splitlines() if not ln.startswith("#")]
    assert lines == [
        "NodeName=l4dev-l4x1-[0-7] Name=gpu File=/dev/nvidia0",
        "NodeName=l4dev-l4x4-[0-1] Name=gpu File=/dev/nvidia[0-3]",
    ]
    assert "ConstrainDevices=yes" in conf.cgroup_conf


def test_single_node_pool_has_a_plain_hostname(a3mega_data: dict[str, Any]) -> None:
    a3mega_data["clusters"][0]["pools"][1]["max_nodes"] = 1
    conf = render(a3mega_data)
    assert conf.nodesets[1].node_names == "a3mega-spot-0"
    assert re.search(r"^NodeName=a3mega-spot-0 ", conf.slurm_conf, re.M)


def test_only_slurm_clusters_render(a3mega_data: dict[str, Any]) -> None:
    spec = load_spec(a3mega_data)
    gke = spec.clusters[0].model_copy(update={"scheduler": "gke", "slurm": None})
    with pytest.raises(ValueError, match="not a Slurm cluster"):
        render_slurm_conf(spec, gke)


def test_rendering_is_deterministic(a3mega_data: dict[str, Any]) -> None:
    assert render(a3mega_data) == render(copy.deepcopy(a3mega_data))


def test_node_lines_carry_the_host_layout(a3mega_data: dict[str, Any]) -> None:
    (resv, spot) = [fields(ln) for ln in lines_starting(render(a3mega_data).slurm_conf, "NodeName=")]
    for node in (resv, spot):  # A3 Mega: 2 sockets x 52 cores x 2 threads (Cluster Toolkit node_conf)
        assert (node["CPUs"], node["Sockets"], node["CoresPerSocket"], node["ThreadsPerCore"]) == (
            "208",
            "2",
            "52",
            "2",
        )
        assert int(node["RealMemory"]) < 1872 * 1024


def test_whole_node_partitions_are_exclusive(a3mega_data: dict[str, Any]) -> None:
    parts = [fields(ln) for ln in lines_starting(render(a3mega_data).slurm_conf, "PartitionName=")]
    assert parts and all(p["OverSubscribe"] == "EXCLUSIVE" for p in parts)
    l4 = load_stack_file(ROOT / "Pulumi.gcp-l4-dev.yaml")
    conf = render_slurm_conf(l4, l4.clusters[0])
    assert "OverSubscribe" not in conf.slurm_conf  # L4 nodes are shared by small jobs
    assert "Prolog=" not in conf.slurm_conf  # no TCPXO pool: no RxDM prolog


def test_initial_topology_holds_every_node(a3mega_data: dict[str, Any]) -> None:
    from fleet.slurm.topology import expand

    conf = render(a3mega_data)
    leaves = {f["SwitchName"]: f["Nodes"] for f in map(fields, lines_starting(conf.topology_conf, "SwitchName="))
              if "Nodes" in f}  # fmt: skip
    assert sorted(n for hl in leaves.values() for n in expand(hl)) == sorted(
        [f"a3mega-resv-{i}" for i in range(16)] + [f"a3mega-spot-{i}" for i in range(32)]
    )
    # one tree per pool, no root over them (a job never spans pools); the lowest Weight last (the reservation)
    assert "SwitchName=root" not in conf.topology_conf
    assert list(leaves) == ["pool-a3mega-spot", "pool-a3mega-resv"]


def _pools_8g_first(data: dict[str, Any]) -> dict[str, Any]:
    """The l4-dev cluster as a3-highgpu on-demand pools, the 8-GPU pool listed before the 1-GPU one."""
    c = data["clusters"][0]
    c["pools"] = [
        {"name": "h8", "machine_type": "a3-highgpu-8g", "capacity": "on-demand", "max_nodes": 2},
        {"name": "h1", "machine_type": "a3-highgpu-1g", "capacity": "on-demand", "max_nodes": 8},
    ]
    c["slurm"]["partitions"][0].update(pools=["h8", "h1"], spot_tolerant=False)
    return data


def test_node_weights_right_size_within_a_tier_whatever_the_pool_order() -> None:
    data = _pools_8g_first(read_stack_config(ROOT / "Pulumi.gcp-l4-dev.yaml"))
    conf = render(data)
    lines = lines_starting(conf.slurm_conf, "NodeName=")
    weights = {fields(ln)["NodeName"]: int(fields(ln)["Weight"]) for ln in lines}
    assert list(weights) == ["l4dev-h8-[0-1]", "l4dev-h1-[0-7]"]  # node-table order is the spec's
    assert weights["l4dev-h1-[0-7]"] < weights["l4dev-h8-[0-1]"]  # equal $/GPU-h: the 1-GPU shape first


def test_suspend_time_defaults_to_the_longest_idle_keep_plus_a_tick() -> None:
    data = read_stack_config(ROOT / "Pulumi.gcp-l4-dev.yaml")
    assert "suspend_time" not in data["clusters"][0]["slurm"]
    boot = load_catalog().machine("g2-standard-48").ready_s
    # wait value 0 (the default): T = boot
    assert settings(render(data).slurm_conf)["SuspendTime"] == str(int(boot + 10))
    # a wait value w lengthens the keep: T = boot * (1 + w / p), the longest over the pools (the cheapest per GPU)
    data["clusters"][0]["slurm"]["autoscaler"] = {"policy": {"wait_value_usd_per_gpu_hour": 1.0}}
    p = min(
        load_catalog().machine(m).price("us-central1").on_demand / g
        for m, g in (("g2-standard-8", 1), ("g2-standard-48", 4))
    )
    assert settings(render(data).slurm_conf)["SuspendTime"] == str(math.ceil(boot * (1 + 1.0 / p) + 10))
    data["clusters"][0]["slurm"]["suspend_time"] = 7200  # an explicit, longer value is kept
    assert settings(render(data).slurm_conf)["SuspendTime"] == "7200"


def test_daemon_tick_matches_the_daemon_default() -> None:
    from autoscaler.daemon.config import LoopConfig
    from fleet.slurm.suspend import DAEMON_TICK_S

    assert LoopConfig().interval_s == DAEMON_TICK_S


def test_spot_tolerant_partitions_yield_the_shared_reservation_by_partition_priority(
    a3mega_data: dict[str, Any],
) -> None:
    """The reservation serves work that may not use spot first: partition-priority preemption requeues
    spot-tolerant jobs (lower PriorityTier) off reserved nodes that a partition of other work shares."""
    conf = render(a3mega_data).slurm_conf
    s = settings(conf)
    assert (s["PreemptType"], s["PreemptMode"]) == ("preempt/partition_prio", "REQUEUE")
    # the job that started last has the least to lose; the held on-demand overflow's names are allocated at once
    assert s["SchedulerParameters"] == "preempt_youngest_first,batch_sched_delay=0"
    tiers = {p["PartitionName"]: int(p["PriorityTier"]) for p in map(fields, lines_starting(conf, "PartitionName="))}
    assert tiers["a3mega-spot"] < tiers["a3mega"]  # a3mega-spot is spot_tolerant, both list the resv pool


def test_no_preemption_without_a_reservation_shared_with_spot_work_or_when_the_policy_turns_it_off(
    a3mega_data: dict[str, Any],
) -> None:
    off = copy.deepcopy(a3mega_data)
    off["clusters"][0]["slurm"].setdefault("autoscaler", {}).setdefault("policy", {})["preempt_spot"] = False
    not_shared = copy.deepcopy(a3mega_data)
    not_shared["clusters"][0]["slurm"]["partitions"][1]["pools"] = ["spot"]  # spot work no longer on the reservation
    for data in (off, not_shared):
        conf = render(data).slurm_conf
        assert "Preempt" not in conf and "PriorityTier" not in conf
    l4 = load_stack_file(ROOT / "Pulumi.gcp-l4-dev.yaml")  # no reservation at all
    assert "Preempt" not in render_slurm_conf(l4, l4.clusters[0]).slurm_conf


def test_a_site_scheduler_parameters_keep_their_options_and_the_preemption_order(a3mega_data: dict[str, Any]) -> None:
    """The victim order is part of the stack's preemption: a site's SchedulerParameters are merged with it (once)."""
    site = copy.deepcopy(a3mega_data)
    site["clusters"][0]["slurm"]["extra_config"] = {"SchedulerParameters": "bf_continue,bf_window=2880"}
    assert (
        settings(render(site).slurm_conf)["SchedulerParameters"]
        == "preempt_youngest_first,batch_sched_delay=0,bf_continue,bf_window=2880"
    )
    site["clusters"][0]["slurm"]["extra_config"] = {"SchedulerParameters": "bf_continue,PREEMPT_youngest_first"}
    assert (
        settings(render(site).slurm_conf)["SchedulerParameters"]
        == "PREEMPT_youngest_first,batch_sched_delay=0,bf_continue"
    )
    site["clusters"][0]["slurm"]["autoscaler"]["policy"]["preempt_spot"] = False
    site["clusters"][0]["slurm"]["extra_config"] = {"SchedulerParameters": "bf_continue"}
    # no preemption: the site's own, and the reservation hold's (the settings rule may hold the spot pool)
    assert settings(render(site).slurm_conf)["SchedulerParameters"] == "batch_sched_delay=0,bf_continue"


@pytest.mark.parametrize(
    ("release", "defunct_or_needed"),
    [
        ("23.11", {}),  # 23.11 does all three by default and logs the first two as defunct at every start
        ("22.05", {"cloud_reg_addrs": True, "PrivateData": "cloud", "CommunicationParameters": "NoAddrCache"}),
    ],
)
def test_the_keys_follow_the_images_slurm_release(
    a3mega_data: dict[str, Any], release: str, defunct_or_needed: dict[str, Any]
) -> None:
    """`slurm.release` (default 23.11, Ubuntu 24.04's): what 22.05 needs for CLOUD nodes (a node's address is the
    one it registers from, powered-down nodes in sinfo, no address cache) is rendered for 22.05 only."""
    data = copy.deepcopy(a3mega_data)
    data["clusters"][0]["slurm"]["release"] = release
    s = settings(render(data).slurm_conf)
    assert ("cloud_reg_addrs" in s["SlurmctldParameters"].split(",")) == bool(defunct_or_needed)
    assert {k: s[k] for k in ("PrivateData", "CommunicationParameters") if k in s} == {
        k: v for k, v in defunct_or_needed.items() if k != "cloud_reg_addrs"
    }


def test_a_site_option_list_adds_to_the_options_the_cluster_needs(a3mega_data: dict[str, Any]) -> None:
    """A site's SlurmctldParameters, GresTypes, PrivateData, JobSubmitPlugins... are added to the rendered options
    (a CLOUD node that lost cloud_reg_addrs / enable_configless cannot register or fetch its slurm.conf; without
    GresTypes=gpu no GPU is schedulable); an option named again takes the site's value; keys whose options exclude
    each other (SelectTypeParameters) and plain keys are replaced, and `overrides` replace whole."""
    rendered = settings(render(a3mega_data).slurm_conf)
    site = copy.deepcopy(a3mega_data)
    site["clusters"][0]["slurm"]["extra_config"] = {
        "slurmctldparameters": "reboot_from_controller,idle_on_node_suspend",
        "GresTypes": "shard",
        "PrivateData": "jobs,usage",
        "SchedulerParameters": "bf_window=2880",
        "SelectTypeParameters": "CR_CPU_Memory",
        "SlurmdParameters": "config_overrides",
        "SuspendExcNodes": "a3mega-spot-[0,2]",
    }
    s = settings(render(site).slurm_conf)
    assert rendered["SlurmctldParameters"] == "enable_configless,idle_on_node_suspend"
    assert s["SlurmctldParameters"] == "enable_configless,idle_on_node_suspend,reboot_from_controller"
    assert "slurmctldparameters" not in s  # one spelling of the key in the file
    assert s["GresTypes"] == "gpu,shard"
    assert s["PrivateData"] == "jobs,usage"
    assert s["SchedulerParameters"] == "preempt_youngest_first,batch_sched_delay=0,bf_window=2880"
    assert s["SelectTypeParameters"] == "CR_CPU_Memory"
    assert s["SlurmdParameters"] == "config_overrides"  # not rendered: added as given
    # the reservation pool stays out of power saving (slurmctld would suspend it and the daemon delete it)
    assert rendered["SuspendExcNodes"] == "a3mega-resv-[0-15]"
    assert s["SuspendExcNodes"] == "a3mega-resv-[0-15],a3mega-spot-[0,2]"
    forced = settings(render(site, overrides={"SlurmctldParameters": "enable_configless"}).slurm_conf)
    assert forced["SlurmctldParameters"] == "enable_configless"
    # the right-sizing job_submit.lua stays named when a site adds its own plugin (l4-dev renders one)
    data = read_stack_config(ROOT / "Pulumi.gcp-l4-dev.yaml")
    data["clusters"][0]["slurm"]["extra_config"] = {"JobSubmitPlugins": "require_timelimit"}
    two_types = load_spec(data)
    assert settings(render_slurm_conf(two_types, two_types.clusters[0]).slurm_conf)["JobSubmitPlugins"] == (
        "lua,require_timelimit"
    )


@pytest.mark.parametrize(
    ("rendered", "site", "merged"),
    [
        ("a,b=1", "c", "a,b=1,c"),
        ("a,b=1", "B=2,a", "a,B=2"),  # the site's value and spelling, where the rendered option stood
        ("a", " c , ,d ", "a,c,d"),
        ("", "c", "c"),
        ("a-[0-15],b-[0-3]", "c-[1,3],a-[0-15]", "a-[0-15],b-[0-3],c-[1,3]"),  # hostlists keep their commas
    ],
)
def test_merge_options(rendered: str, site: str, merged: str) -> None:
    from fleet.slurm.options import merge_options

    assert merge_options(rendered, site) == merged


def test_jobs_keep_the_nodes_locked_memory_limit_not_the_submitting_shells(a3mega_data: dict[str, Any]) -> None:
    """NCCL over RDMA registers its buffers against the locked-memory limit; Slurm's default propagates the
    submitting shell's (8 MiB on a stock login VM) into every job (Slurm FAQ "memlock"), so the rendered conf keeps
    MEMLOCK out of it, and slurmd runs with it unlimited (tests/components/test_startup.py)."""
    assert settings(render(a3mega_data).slurm_conf)["PropagateResourceLimitsExcept"] == "MEMLOCK"
