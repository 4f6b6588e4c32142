"""The autoscaler and the stacks' Slurm set-up against Slurm 23.11, as Ubuntu 24.04 (the stacks' image) ships it.

Each test here passed on Debian 12's Slurm 22.05, where the rest of the suite runs, and failed on 23.11 before the
thirty-fifth round: the daemon read no node (`sinfo --json` groups them from 23.02 on), and slurmctld, without
PMIx on the root, held every job PENDING with Reason=InvalidAccount (the errno of the failed libpmix load taken for
a down accounting database)."""

from __future__ import annotations

import subprocess
import time

import pytest

from autoscaler.slurm.client import CliSlurm
from components.gcp.startup import NVIDIA_CONTAINER_TOOLKIT_PACKAGES
from tests.harness.cloud_nodes import CloudNodes, Nodeset, cloud_slurm_conf
from tests.harness.slurm import poll_until

pytestmark = [pytest.mark.slurm, pytest.mark.slow]


@pytest.fixture
def cluster(noble_slurm):
    h = noble_slurm()
    cloud = CloudNodes(h, [Nodeset("gpu-a3", 4, gpus=8)])
    cloud.prepare()
    conf = cloud_slurm_conf(h, cloud, {"gpu": ["gpu-a3"]}, suspend_time=600, resume_timeout=300)
    h.start(conf, cloud.gres_conf())
    return h, cloud


def _sbatch(h, *args: str) -> int:
    return int(h.run("sbatch", "-p", "gpu", *args, "--wrap", "sleep 300", check=True).stdout.split()[-1])


def _jobs(h) -> dict[int, tuple[str, str]]:
    out = h.run("squeue", "-h", "-o", "%i %T %r", check=True).stdout
    return {int(i): (state, reason) for i, state, reason in (line.split() for line in out.splitlines())}


def test_the_controllers_slurm_23_11_allocates_cloud_nodes_and_calls_the_resume_program(cluster) -> None:
    """A job on CLOUD nodes is allocated at once and its nodes resumed through ResumeProgram, as on 22.05; without
    the PMIx library the scripts now install, it stayed PENDING (InvalidAccount) and nothing was resumed."""
    h, _ = cluster
    assert "23.11" in h.run("sinfo", "--version", check=True).stdout
    job = _sbatch(h, "-N2")
    assert poll_until(lambda: _jobs(h)[job][0] == "CONFIGURING", 30), _jobs(h)
    assert poll_until(lambda: h.power_calls(), 30)
    assert h.power_calls()[0].split()[1:] in (["resume", "gpu-a3-[0-1]"], ["resume", "gpu-a3-[2-3]"])


def test_the_daemons_readers_see_slurm_23_11_nodes_and_jobs(cluster) -> None:
    """The daemon's CLI client on 23.11: every node one by one (from `scontrol show nodes --json`, the grouped
    `sinfo --json` left), a powering-up job as CONFIGURING, a booted node's GPUs in use."""
    h, cloud = cluster
    cli = CliSlurm(env=h.env)
    first = int(
        h.run("sbatch", "-p", "gpu", "-N1", "--gres=gpu:2", "--wrap", "sleep 300", check=True).stdout.split()[-1]
    )
    assert poll_until(lambda: _jobs(h)[first][0] == "CONFIGURING", 30)
    (node,) = next(j.nodes for j in cli.jobs() if j.job_id == first)
    cloud.boot(node)
    assert poll_until(lambda: _jobs(h)[first][0] == "RUNNING", 60), _jobs(h)
    gang = int(
        h.run("sbatch", "-p", "gpu", "-N2", "--gres=gpu:8", "--wrap", "sleep 300", check=True).stdout.split()[-1]
    )
    assert poll_until(lambda: _jobs(h)[gang][0] == "CONFIGURING", 30)
    time.sleep(1)
    nodes = {n.name: n for n in cli.nodes()}
    assert sorted(nodes) == [f"gpu-a3-{i}" for i in range(4)]
    assert nodes[node].gpus == 8 and nodes[node].gpus_used == 2 and not nodes[node].powering_up
    jobs = {j.job_id: j for j in cli.jobs()}
    assert jobs[first].state == "RUNNING" and jobs[gang].state == "CONFIGURING"
    assert all(nodes[n].powering_up for n in jobs[gang].nodes)


@pytest.mark.parametrize("stack", ["gcp-a3mega-slurm", "gcp-a3ultra-slurm", "gcp-l4-dev"])
def test_each_stacks_slurm_conf_runs_on_slurm_23_11(noble, noble_slurm, stack: str) -> None:
    """The slurm.conf, gres.conf, topology.conf and job_submit.lua a stack renders, only the host keys replaced
    (cgroup plugins, lua, cloud and power-save settings as shipped), started by 23.11's slurmctld, with the hook
    the controller's script writes (its own lines, run in the root): every pool's nodes read back powered-down
    CLOUD with their GPUs, and a job to the default partition is allocated, not held.  23.11 does not start over
    a missing EpilogSlurmctld, which the gpu-fleet checkout carried, installed after slurmctld started."""
    import subprocess

    from components.gcp.startup import hook_lines
    from fleet.catalog import load_catalog
    from fleet.slurm import render_slurm_conf
    from fleet.slurm.conf import HOOKS
    from fleet.spec import load_stack_file
    from fleet.spec.derive import default_partition, node_name_prefix
    from tests.stacks.conftest import REPO

    spec = load_stack_file(REPO / f"Pulumi.{stack}.yaml")
    cluster = spec.clusters[0]
    written = subprocess.run(
        ["chroot", str(noble), "sh", "-ec", "\n".join(hook_lines(HOOKS))], capture_output=True, text=True
    )
    assert written.returncode == 0, written.stderr
    h = noble_slurm()
    h.start_rendered(render_slurm_conf(spec, cluster, overrides=h.overrides(cgroup=True)), cgroup=True)
    nodes = {n.name: n for n in CliSlurm(env=h.env).nodes()}
    cat = load_catalog()
    for pool in cluster.pools:
        gpus = cat.machine(pool.machine_type).gpu_count
        names = [f"{node_name_prefix(cluster.name, pool.name)}-{i}" for i in range(pool.max_nodes)]
        assert all(nodes[n].cloud and nodes[n].powered_down and nodes[n].gpus == gpus for n in names), pool.name
    partition = default_partition(cluster.slurm)
    job = int(h.run("sbatch", "-p", partition.name, "-N1", "--wrap", "true", check=True).stdout.split()[-1])
    assert poll_until(lambda: _jobs(h)[job][0] == "CONFIGURING", 30), (_jobs(h), h.logs())
    logs = h.logs(200).lower()
    assert "fatal" not in logs
    assert "defunct" not in logs, logs  # 23.11 logs a key it dropped at every start of every daemon and client


def test_23_11_exclusive_jobs_arrays_and_memory_read_as_on_22_05(cluster) -> None:
    """What the daemon reads of a pending job beyond GPUs (docs/autoscaler.md "Jobs that take their nodes whole",
    "Job arrays"): 23.02+ prints numbers as {set, infinite, number} and flags as lists; each reads as on 22.05."""
    h, _ = cluster
    whole = _sbatch(h, "-N1", "--exclusive", "--gres=gpu:1", "--mem=500")
    array = _sbatch(h, "-N1", "--array=0-5%2", "--gres=gpu:1")
    jobs = {j.job_id: j for j in CliSlurm(env=h.env).jobs()}
    assert jobs[whole].exclusive and jobs[whole].memory_per_node_mib == 500 and jobs[whole].gpus_per_node == 1
    pending = [j for j in jobs.values() if j.array_job_id == array]
    assert pending and all(j.gpus_per_node == 1 for j in pending)
    record = next(j for j in pending if j.pending and j.array_task_id is None)  # the record holding the rest
    assert record.array_tasks.throttle == 2, record.array_tasks


#: what the scripts install from the repositories they add themselves (Google's Artifact Registry, gIB, Lustre and
#: Cloud Storage FUSE repositories, NVIDIA's), not from Ubuntu's archive (apt-transport-artifact-registry is in both)
THIRD_PARTY = {"dmabuf-import-helper", "lustre-client-utils", "gcsfuse", "nccl-gib", *NVIDIA_CONTAINER_TOOLKIT_PACKAGES}


def test_every_ubuntu_package_the_scripts_install_is_in_noble(noble) -> None:
    """Every package an `apt_install` of the generated scripts names (each role, each fabric) resolves in Ubuntu
    24.04's archive (main and universe, as the images have them): a Debian-only or mistyped name would stop a first
    boot at `apt-get install`.  A virtual package (libpmix2, provided by libpmix2t64) resolves as apt resolves it."""
    from tests.components.test_startup import ALL
    from tests.firstboot.image import script_packages

    wanted = script_packages(ALL.values())
    assert {"slurmctld", "slurmd", "libpmix2", "python3-venv"} <= wanted  # the extraction sees the scripts' lists
    simulate = ["chroot", str(noble), "apt-get", "install", "-s", "-q", "--no-install-recommends"]
    missing = {p for p in sorted(wanted) if subprocess.run([*simulate, p], capture_output=True).returncode != 0}
    assert missing == THIRD_PARTY & wanted, f"not in Ubuntu noble: {sorted(missing - THIRD_PARTY)}"
