"""Which spot-tolerant job the shipped preemption requeues, on a real slurmctld: the one that started last, as the
simulated Slurm models it (`SimSlurm.victim_order`).

The preemption keys and PriorityTiers come from rendering the shipped `gcp-a3mega-slurm` stack
(`fleet.slurm.preempt`), on a small CLOUD cluster whose nodes really run jobs (tests/harness/cloud_nodes.py): two
reserved 8-GPU nodes in both partitions, one on-demand node (held: drained while powered down) in the other one.
Job A (spot-tolerant) is submitted first and starts first; job B (spot-tolerant) is submitted and starts later; job
C may not use spot.  Slurm's default order would requeue A, the earliest submitted
(bench/probe_preempt_order.py measured it); the rendered `preempt_youngest_first` requeues B, and C runs on B's node.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from fleet.slurm.preempt import partition_tiers, preemption_settings
from fleet.spec import load_stack_file
from tests.e2e.env import wait_for
from tests.harness.cloud_nodes import CloudNodes, Nodeset, cloud_nodes_unavailable_reason, cloud_slurm_conf
from tests.harness.slurm import SlurmHarness

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]


def test_the_rendered_preemption_requeues_the_spot_job_that_started_last(
    slurm_factory: Callable[..., SlurmHarness],
) -> None:
    if why := cloud_nodes_unavailable_reason():
        pytest.skip(why)
    spec = load_stack_file(ROOT / "Pulumi.gcp-a3mega-slurm.yaml")
    cluster = spec.clusters[0]
    tiers = partition_tiers(cluster)
    spot_part = next(p.name for p in cluster.slurm.partitions if p.spot_tolerant)  # type: ignore[union-attr]
    other_part = next(p.name for p in cluster.slurm.partitions if not p.spot_tolerant)  # type: ignore[union-attr]
    assert tiers[spot_part] < tiers[other_part]
    h = slurm_factory()
    cloud = CloudNodes(h, [Nodeset("resv", 2, weight=1), Nodeset("od", 1, weight=30)])
    cloud.prepare()
    partitions = {
        f"spotq PriorityTier={tiers[spot_part]} PreemptMode=REQUEUE": ["resv"],
        f"odq PriorityTier={tiers[other_part]}": ["resv", "od"],
    }
    conf = cloud_slurm_conf(h, cloud, partitions, suspend_time=600, resume_timeout=300)
    conf += "".join(f"{k}={v}\n" for k, v in preemption_settings(cluster).items())
    h.start(conf, cloud.gres_conf())

    def jobs() -> dict[int, dict[str, Any]]:
        return {j["job_id"]: j for j in h.squeue_json()["jobs"]}

    def sbatch(*args: str) -> int:
        out = f"--output={h.root / 'log'}/job-%j.out"  # job output stays in the harness's directory
        return int(h.run("sbatch", "--parsable", "-N1", "--gres=gpu:8", out, *args, check=True).stdout.strip())

    try:
        h.run("scontrol", "update", "nodename=od-0", "state=drain", "reason=gpu-fleet: held", check=True)
        a = sbatch("-p", "spotq", "-w", "resv-0", "--wrap", "srun sleep 600")
        b = sbatch("-p", "spotq", "-w", "resv-1", "--wrap", "srun sleep 600")
        cloud.boot("resv-0")
        wait_for(lambda: jobs()[a]["job_state"] == "RUNNING", 90, "job A running")
        time.sleep(3)  # B starts strictly later than A
        cloud.boot("resv-1")
        wait_for(lambda: jobs()[b]["job_state"] == "RUNNING", 90, "job B running")
        c = sbatch("-p", "odq", "--wrap", "srun sleep 5")
        wait_for(lambda: jobs().get(c, {}).get("job_state") in ("RUNNING", "COMPLETED"), 60, "job C started")
        js = jobs()
        assert js[b]["job_state"] == "PENDING" and js[b]["restart_cnt"] >= 1  # requeued: it started last
        assert js[a]["job_state"] == "RUNNING" and js[a]["nodes"] == "resv-0"  # the older one keeps its node
        assert js[c]["nodes"] == "resv-1"  # no on-demand node was powered up
    finally:
        cloud.stop_all()
        h.stop()
