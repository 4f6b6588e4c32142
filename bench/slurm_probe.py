"""What the real-slurmctld probes in bench/ share: a harness slurmctld with CLOUD nodesets, squeue by job id, and
a polling wait.  The probes measure one Slurm behaviour each (probe_requeue_configuring.py, probe_late_bind.py,
probe_preempt_order.py); their findings are in their docstrings and docs/simulate.md."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.harness.cloud_nodes import CloudNodes, Nodeset, cloud_slurm_conf  # noqa: E402
from tests.harness.slurm import SlurmHarness, poll_until, slurm_unavailable_reason  # noqa: E402

__all__ = ["Nodeset", "Probe", "slurm_unavailable_reason", "until"]


class Probe:
    """A running harness slurmctld (`h`) and its CLOUD nodes (`cloud`: `boot(name)` starts a node's slurmd)."""

    def __init__(self, h: SlurmHarness, cloud: CloudNodes) -> None:
        self.h, self.cloud = h, cloud
        self.out = h.root / "log"

    def jobs(self) -> dict[int, dict[str, Any]]:
        """squeue's jobs by id."""
        return {j["job_id"]: j for j in self.h.squeue_json()["jobs"]}

    def sbatch(self, *args: str) -> int:
        """`sbatch args...`; the job id."""
        return int(self.h.run("sbatch", *args, check=True).stdout.split()[-1])

    def slurmctld_log(self) -> list[str]:
        return (self.out / "slurmctld.log").read_text().splitlines()

    @classmethod
    @contextmanager
    def start(
        cls,
        nodesets: Sequence[Nodeset],
        partitions: Mapping[str, Sequence[str]],
        extra_conf: str = "",
        job_submit_lua: Callable[[SlurmHarness], str] | None = None,
    ) -> Iterator[Probe]:
        """slurmctld with `nodesets` and `partitions` (name, with any extra PartitionName attributes -> node
        prefixes), SuspendTime 600 s and ResumeTimeout 300 s, `extra_conf` lines appended, and the job_submit.lua
        `job_submit_lua(harness)` gives (JobSubmitPlugins=lua); stopped on exit."""
        h = SlurmHarness()
        cloud = CloudNodes(h, list(nodesets))
        cloud.prepare()
        conf = cloud_slurm_conf(h, cloud, dict(partitions), suspend_time=600, resume_timeout=300) + extra_conf
        lua = job_submit_lua(h) if job_submit_lua is not None else None
        if lua:
            conf += "JobSubmitPlugins=lua\n"
        h.start(conf, cloud.gres_conf(), job_submit_lua=lua)
        try:
            yield cls(h, cloud)
        finally:
            cloud.stop_all()
            h.stop()


def until(pred: Callable[[], object], timeout: float) -> bool:
    """Poll `pred` every second until it is true (True) or `timeout` seconds pass (False)."""
    return poll_until(pred, timeout, interval=1.0)
