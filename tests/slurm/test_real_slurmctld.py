"""Each example stack's generated slurm.conf, started by a real slurmctld: the release the stacks' images run
(23.11, the root conftest's `slurm_factory`), or this machine's 22.05 under FLEET_E2E_SLURM=22.05."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from autoscaler.slurm.client import CliSlurm
from autoscaler.slurm.gang_gate import GANG_GATE_MARK
from autoscaler.slurm.readers import SlurmJob
from fleet.catalog import load_catalog
from fleet.slurm import render_slurm_conf
from fleet.slurm.conf import release_settings
from fleet.spec import FleetSpec, load_spec, load_stack_file, read_stack_config
from fleet.spec.derive import default_partition, node_name_prefix
from tests.harness.slurm import SlurmHarness, SlurmStartError, for_this_slurm, poll_until, spec_release

pytestmark = pytest.mark.slurm

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ["gcp-a3mega-slurm", "gcp-a3ultra-slurm", "gcp-l4-dev"]
#: regions as `fleet bootstrap-region` writes them (GPU, GPUs, capacity, region): the flex-start time limit, a spot
#: partition, a single node of the smallest shape
BOOTSTRAPPED = [
    ("h200", 16, "flex-start", "europe-west4"), ("h100", 64, "spot", "us-east4"), ("l4", 1, "on-demand", "us-central1")
]  # fmt: skip


def _bootstrapped(gpu: str, gpus: int, capacity: str, region: str) -> FleetSpec:
    """The spec `fleet bootstrap-region --project my-gpu-project --region R --gpu G --gpus N --capacity C` writes."""
    from fleet.bootstrap.plan import plan_region
    from fleet.bootstrap.request import BootstrapRequest, parse_capacity

    request = BootstrapRequest("my-gpu-project", region, gpu, gpus, capacity=parse_capacity(capacity))
    return load_spec(plan_region(request, load_catalog(), []).spec)


@pytest.fixture(
    scope="module", params=[*EXAMPLES, *BOOTSTRAPPED], ids=[*EXAMPLES, *("-".join(map(str, b)) for b in BOOTSTRAPPED)]
)
def cluster(request: pytest.FixtureRequest, slurm_factory) -> Iterator[tuple[FleetSpec, SlurmHarness]]:
    """An example stack's cluster, or a bootstrapped region's, on a real slurmctld started with its rendered conf."""
    param = request.param
    spec = for_this_slurm(
        load_stack_file(ROOT / f"Pulumi.{param}.yaml") if isinstance(param, str) else _bootstrapped(*param)
    )
    harness = slurm_factory()
    # only host keys are replaced: the generated cgroup plugins, cloud and power-save settings stay as shipped
    conf = render_slurm_conf(spec, spec.clusters[0], overrides=harness.overrides(cgroup=True))
    assert "TopologyPlugin=topology/tree" in conf.slurm_conf
    harness.start_rendered(conf, cgroup=True)
    yield spec, harness
    harness.stop()


def test_every_pool_appears_as_powered_down_cloud_nodes(cluster: tuple[FleetSpec, SlurmHarness]) -> None:
    spec, harness = cluster
    c = spec.clusters[0]
    nodes = {n["name"]: n for n in harness.sinfo_json()["nodes"]}
    cat = load_catalog()
    for pool in c.pools:
        machine = cat.machine(pool.machine_type)
        want_parts = sorted(p.name for p in c.slurm.partitions if pool.name in p.pools)
        names = [f"{node_name_prefix(c.name, pool.name)}-{i}" for i in range(pool.max_nodes)]
        for name in names:
            node = nodes.get(name)
            assert node is not None, f"{name} missing from sinfo\n{harness.logs()}"
            assert {"CLOUD", "POWERED_DOWN"} <= set(node["state_flags"]), node["state_flags"]
            assert node["gres"] == f"gpu:{machine.gpu_count}"
            assert sorted(node["partitions"]) == want_parts
            assert node["features"].split(",") == [machine.gpu.short, pool.machine_type, str(pool.capacity)]
            assert node["cpus"] == machine.vcpus
            layout = (node["sockets"], node["cores"], node["threads"])
            assert layout == (machine.sockets, machine.cores_per_socket, machine.threads_per_core), layout
            assert 0 < node["real_memory"] < machine.memory_gib * 1024
    assert len(nodes) == sum(p.max_nodes for p in c.pools), "no node outside the pools"


def test_partitions_and_default(cluster: tuple[FleetSpec, SlurmHarness]) -> None:
    spec, harness = cluster
    slurm = spec.clusters[0].slurm
    out = harness.run("sinfo", "-h", "-o", "%P", check=True).stdout.split()
    default = default_partition(slurm).name
    assert sorted(out) == sorted(p.name + ("*" if p.name == default else "") for p in slurm.partitions)


def test_partition_time_limits_are_read_back_as_written(cluster: tuple[FleetSpec, SlurmHarness]) -> None:
    """A partition's `max_time` (bootstrap writes flex-start's 7 days: a flex-start VM lives at most that long) is
    slurmctld's MaxTime, as Slurm prints it (INFINITE as UNLIMITED, 8:00:00 as 08:00:00)."""
    from fleet.spec.rules import slurm_time_minutes

    spec, harness = cluster
    for part in spec.clusters[0].slurm.partitions:
        out = harness.run("scontrol", "show", "partition", part.name, check=True).stdout
        read = re.search(r"MaxTime=(\S+)", out).group(1)  # type: ignore[union-attr]
        assert slurm_time_minutes(read) == slurm_time_minutes(part.max_time), (part.max_time, read)


def test_slurmctld_runs_the_rendered_preemption_of_spot_work_off_the_reservation(
    cluster: tuple[FleetSpec, SlurmHarness],
) -> None:
    """Where the render writes partition-priority preemption (fleet/slurm/preempt.py), slurmctld reads it back:
    the plugin, REQUEUE, youngest_first, and spot-tolerant partitions below the others; elsewhere Slurm's defaults
    stand."""
    from fleet.slurm.preempt import OTHER_TIER, SPOT_TIER, preempts_spot

    spec, harness = cluster
    c = spec.clusters[0]
    config = harness.run("scontrol", "show", "config", check=True).stdout
    conf = {k.strip(): v.strip() for k, _, v in (ln.partition(" = ") for ln in config.splitlines()) if v}
    tiers = {}
    for part in c.slurm.partitions:
        out = harness.run("scontrol", "show", "partition", part.name, check=True).stdout
        tiers[part.name] = int(re.search(r"PriorityTier=(\d+)", out).group(1))  # type: ignore[union-attr]
    if preempts_spot(c):
        assert conf["PreemptType"] == "preempt/partition_prio"
        assert conf["PreemptMode"] == "REQUEUE"
        assert "preempt_youngest_first" in conf["SchedulerParameters"].split(",")
        assert tiers == {p.name: SPOT_TIER if p.spot_tolerant else OTHER_TIER for p in c.slurm.partitions}
    else:  # Slurm's default: 22.05 names its preempt/none plugin, 23.11 (which has none) shows the key unset
        assert conf["PreemptType"] == ("preempt/none" if spec_release() == "22.05" else "(null)")
        assert "preempt_youngest_first" not in conf.get("SchedulerParameters", "")
        assert set(tiers.values()) == {1}


def test_jobs_power_up_the_right_nodes(slurm_factory) -> None:
    """Reservations fill first; Features select a capacity type; max_nodes bounds a partition.
    slurmctld hands the chosen nodes to the ResumeProgram hook.  (With every node powered down 22.05 ignores
    Weight: the reservation's 16-node pool leaf is topology/tree's best fit over the 32-node spot leaf;
    docs/autoscaler.md "Node weights".)"""
    spec = for_this_slurm(load_stack_file(ROOT / "Pulumi.gcp-a3mega-slurm.yaml"))
    harness = slurm_factory()
    conf = render_slurm_conf(spec, spec.clusters[0], overrides=harness.overrides())
    harness.start_rendered(conf)
    try:
        sbatch = ("sbatch", "--parsable", "--gres=gpu:8", "--wrap", "true")
        any_capacity = harness.run(*sbatch, "-p", "a3mega-spot", "-N", "2", "-J", "any")
        spot_only = harness.run(*sbatch, "-p", "a3mega-spot", "-N", "3", "-C", "spot", "-J", "spot")
        too_big = harness.run(*sbatch, "-p", "a3mega", "-N", "17", "-J", "big")
        for job in (any_capacity, spot_only, too_big):
            assert job.returncode == 0, job.stderr
        # the rendered job_submit.lua gates every gang (autoscaler/slurm/gang_gate.py); released as the daemon does
        client = CliSlurm(env={"SLURM_CONF": str(harness.conf_path)})
        gated = [j for j in client.jobs() if j.gated]
        # (not the 17-node job: a partition of 16 nodes can never hold it, and slurmctld shows that reason instead)
        assert sorted(j.name for j in gated) == ["any", "spot"]
        assert all(j.eligible_time and 29 <= j.eligible_time - j.submit_time <= 31 for j in gated)
        for j in gated:
            client.start_job_now(j.job_id)

        def resumed() -> str:
            return " ".join(line.split(" ", 2)[2] for line in harness.power_calls() if " resume " in line)

        assert poll_until(lambda: "a3mega-resv" in resumed() and "a3mega-spot" in resumed(), 15.0), (
            f"hook calls: {harness.power_calls()}\n{harness.logs()}"
        )
        jobs = {j["name"]: j for j in harness.squeue_json()["jobs"]}
        nodes = {name: harness.run("scontrol", "show", "hostnames", j["nodes"]).stdout.split() for name, j in
                 jobs.items() if j["nodes"]}  # fmt: skip
        assert len(nodes["any"]) == 2 and all(n.startswith("a3mega-resv-") for n in nodes["any"])
        assert len(nodes["spot"]) == 3 and all(n.startswith("a3mega-spot-") for n in nodes["spot"])
        assert jobs["big"]["job_state"] == "PENDING" and not jobs["big"]["nodes"]
        # requeued (as ResumeTimeout or a preemption does), a gang keeps the mark and slurmctld counts the restart:
        # the lua ran once, so whatever BeginTime the requeue sets (cred_expire after a new submission stamp, 30 s
        # in this harness, the gate's own: bench/probe_gang_lease.py) is no gate (`gang_gate.gate_time`)
        harness.run("scontrol", "requeue", str(jobs["any"]["job_id"]), check=True)

        def requeued() -> SlurmJob | None:
            j = next(j for j in client.jobs() if j.name == "any")
            return j if j.pending and j.restarts else None

        assert poll_until(requeued, 15.0), harness.logs()
        again = requeued()
        assert again is not None and again.admin_comment == GANG_GATE_MARK and not again.gated
    finally:
        harness.stop()


def _suspend_exc_nodes(slurm_factory, data: dict) -> str:  # type: ignore[no-untyped-def]
    """SuspendExcNodes as a real slurmctld reads back the slurm.conf rendered from the stack config `data`."""
    spec = for_this_slurm(load_spec(data))
    harness = slurm_factory()
    conf = render_slurm_conf(spec, spec.clusters[0], overrides=harness.overrides())
    harness.start_rendered(conf)
    try:
        config = harness.run("scontrol", "show", "config", check=True).stdout
        line = next(ln for ln in config.splitlines() if ln.startswith("SuspendExcNodes"))
        return line.split("=", 1)[1].strip()
    finally:
        harness.stop()


def test_a_site_option_list_is_merged_and_slurmctld_reads_both(slurm_factory) -> None:
    """A site's SlurmctldParameters, GresTypes, PrivateData, SchedulerParameters and SuspendExcNodes
    (`slurm.extra_config`) join the rendered options (fleet/slurm/options.py) instead of dropping the ones the
    cluster needs, and slurmctld reads back every option of both (on 22.05 also `cloud_reg_addrs`, which 23.11
    does by default and which the render leaves out there: `fleet.slurm.conf.release_settings`)."""
    data = read_stack_config(ROOT / "Pulumi.gcp-a3mega-slurm.yaml")
    data["clusters"][0]["slurm"]["extra_config"] = {
        "SlurmctldParameters": "reboot_from_controller",
        "GresTypes": "shard",
        "PrivateData": "jobs",
        "SchedulerParameters": "bf_window=2880",
        "SuspendExcNodes": "a3mega-spot-[0,2]",
    }
    spec = for_this_slurm(load_spec(data))
    harness = slurm_factory()
    harness.start_rendered(render_slurm_conf(spec, spec.clusters[0], overrides=harness.overrides()))
    try:
        config = harness.run("scontrol", "show", "config", check=True).stdout
        conf = {k.strip(): v.strip() for k, _, v in (ln.partition(" = ") for ln in config.splitlines()) if v}
        excluded = harness.run("scontrol", "show", "hostnames", conf["SuspendExcNodes"], check=True).stdout.split()
    finally:
        harness.stop()
    # what the render adds for this release only (22.05: cloud_reg_addrs, PrivateData=cloud; 23.11: nothing)
    release = release_settings(spec_release())
    rendered_for = {key: set(release.get(key, "").split(",")) - {""} for key in ("SlurmctldParameters", "PrivateData")}
    assert set(conf["SlurmctldParameters"].split(",")) == rendered_for["SlurmctldParameters"] | {
        "enable_configless",
        "idle_on_node_suspend",
        "reboot_from_controller",
    }, conf["SlurmctldParameters"]
    assert set(conf["GresTypes"].split(",")) == {"gpu", "shard"}
    assert set(conf["PrivateData"].split(",")) == {"jobs", *rendered_for["PrivateData"]}, conf["PrivateData"]
    assert set(conf["SchedulerParameters"].split(",")) == {
        "preempt_youngest_first",
        "batch_sched_delay=0",
        "bf_window=2880",
    }
    assert set(excluded) == {f"a3mega-resv-{i}" for i in range(16)} | {"a3mega-spot-0", "a3mega-spot-2"}


def test_min_nodes_are_excluded_from_suspend(slurm_factory) -> None:
    data = read_stack_config(ROOT / "Pulumi.gcp-l4-dev.yaml")
    data["clusters"][0]["pools"][0]["min_nodes"] = 2
    assert _suspend_exc_nodes(slurm_factory, data) == "l4dev-l4x1-[0-1]"


def test_standby_pools_render_a_counted_suspend_exclusion_slurmctld_accepts(slurm_factory) -> None:
    """A cluster that values waiting keeps standby nodes up (autoscaler/planner/standby.py): its on-demand pools
    are rendered `<nodes>:<standby_max_nodes>` in SuspendExcNodes, which slurmctld 22.05 reads back as written."""
    data = read_stack_config(ROOT / "Pulumi.gcp-a3mega-slurm.yaml")
    data["clusters"][0]["pools"][1]["capacity"] = "on-demand"  # the 32-node pool
    data["clusters"][0]["slurm"]["autoscaler"]["policy"]["wait_value_usd_per_gpu_hour"] = 5
    # reserved nodes whole, as before; the on-demand pool with a count, min(32 nodes, standby_max_nodes 16)
    assert _suspend_exc_nodes(slurm_factory, data) == "a3mega-resv-[0-15],a3mega-spot-[0-31]:16"


def test_harness_reports_a_config_slurm_rejects(slurm_factory) -> None:
    harness = slurm_factory()
    spec = for_this_slurm(load_stack_file(ROOT / "Pulumi.gcp-l4-dev.yaml"))
    conf = render_slurm_conf(spec, spec.clusters[0], overrides={**harness.overrides(), "SelectType": "select/bogus"})
    with pytest.raises(SlurmStartError, match="slurmctld"):
        harness.start_rendered(conf, timeout=10)
    assert not harness.running


def test_harness_local_slurmd_runs_a_job(slurm_factory) -> None:
    spec = for_this_slurm(load_stack_file(ROOT / "Pulumi.gcp-l4-dev.yaml"))
    harness = slurm_factory()
    conf = render_slurm_conf(spec, spec.clusters[0], overrides=harness.overrides())
    # topology/tree schedules only nodes in the tree: the harness's own node gets a leaf of its own
    topology = conf.topology_conf + f"SwitchName=local Nodes={harness.hostname}\n"
    harness.start_rendered(conf, topology_conf=topology, slurmd=True)
    try:
        out = harness.run("srun", "-p", "local", "-N1", "hostname", "-s", check=True, timeout=30)
        assert out.stdout.strip() == harness.hostname
    finally:
        harness.stop()
