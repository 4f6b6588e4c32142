"""The fake cloud nodes behave as VMs where the tests rely on it: deleting one takes its running jobs with it.

On GCE a deleted VM's processes are gone with it.  A fake VM is a slurmd on this host; slurmd leaves its job steps
(slurmstepd and the job's processes) running when it stops, by design, so before this the "deleted" node's jobs
ran on, finished and reported to slurmctld, and every e2e run left orphaned job scripts behind on the machine."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest

from tests.e2e.env import wait_for
from tests.harness.cloud_nodes import CloudNodes, Nodeset, cloud_nodes_unavailable_reason, cloud_slurm_conf
from tests.harness.slurm import SlurmHarness, processes

pytestmark = [pytest.mark.slurm, pytest.mark.slow]


def running_marker(marker: str) -> list[int]:
    return [pid for pid, cmdline, _ in processes() if marker in cmdline]


def test_a_deleted_fake_vm_takes_its_running_jobs_processes_with_it(
    slurm_factory: Callable[..., SlurmHarness],
) -> None:
    if why := cloud_nodes_unavailable_reason():
        pytest.skip(why)
    h = slurm_factory()
    cloud = CloudNodes(h, [Nodeset("vm", 1)])
    cloud.prepare()
    h.start(cloud_slurm_conf(h, cloud, {"gpu": ["vm"]}, suspend_time=600, resume_timeout=300), cloud.gres_conf())
    marker = f"fake-vm-{uuid.uuid4().hex[:12]}"
    try:
        out = f"--output={h.root / 'log'}/job-%j.out"
        wrap = f"srun sh -c 'sleep 600; : {marker}'"
        job = h.run("sbatch", "--parsable", "-p", "gpu", "-N1", "--gres=gpu:8", out, "--wrap", wrap, check=True)
        job_id = job.stdout.strip()
        cloud.boot("vm-0")

        def running() -> bool:
            states = {str(j["job_id"]): j["job_state"] for j in h.squeue_json()["jobs"]}
            return states.get(job_id) == "RUNNING" and bool(running_marker(marker))

        wait_for(running, 90, "the job's step running on vm-0")
        cloud.stop("vm-0")  # the VM is deleted
        wait_for(lambda: not running_marker(marker), 10, "the deleted VM's job processes gone")
        conf = str(h.conf_path)
        assert not [p for p, _, e in processes() if e.get("SLURMD_NODENAME") == "vm-0" and e.get("SLURM_CONF") == conf]
    finally:
        cloud.stop_all()
        h.stop()
    assert not [p for p, _, env in processes() if env.get("SLURM_CONF") == str(h.conf_path)]
