"""Probe, on a real slurmctld 22.05 (tests/harness): which spot-tolerant job does partition-priority preemption
requeue when several could make room?  The simulated Slurm assumed the latest submitted (priority/basic gives
older jobs the higher priority; `SimSlurm._preempt_for`), and the fifth round's e2e test had one candidate only.

Two reserved 8-GPU CLOUD nodes (`resv-0`, `resv-1`, Weight 1) and one on-demand node (`od-0`, Weight 30) drained
while powered down (the hold).  `PreemptType=preempt/partition_prio`, `PreemptMode=REQUEUE`; `spotq` (PriorityTier
1, the reserved nodes) and `odq` (PriorityTier 10, all three).  Job A (8 GPUs, `spotq`) is submitted first, job B
(8 GPUs, `spotq`) second, each pinned to one reserved node with `-w` and booted by hand; then job C (8 GPUs,
`odq`) comes.  Rounds 1 and 2 swap A and B's nodes, so that "latest submitted" is told apart from "lowest /
highest node index":
- round 1: A on resv-0, B on resv-1;
- round 2: A on resv-1, B on resv-0;
- round 3: as round 1, but B's node boots first, so B starts 10 s before A (submission order against start order);
- rounds 4 and 5: with `SchedulerParameters=preempt_youngest_first` (what the stack renders, fleet/slurm/preempt.py;
  22.05 refuses a `PreemptParameters` key), A's node booted first, then B's.

    timeout 900 nice -n 10 .venv/bin/python bench/probe_preempt_order.py [ROUND ...]

Measured on this machine (Slurm 22.05.8, 2026-12-02), about 70 s a round:
- rounds 1-3 (Slurm's default order): A, the first submitted, was requeued every time ("preempted JobId=1 has been
  requeued to reclaim resources for JobId=3") and C ran on A's node, whatever the nodes' order or the start order.
  The simulated Slurm assumed the latest submitted: it was wrong.
- rounds 4-5 (`preempt_youngest_first`): the job that started last was requeued, B in round 4 and A in round 5.
  The stack renders it and the simulated Slurm models it (the latest started first)."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _round(swap: bool, first_up: str = "", params: str = "") -> str:
    from tests.harness.cloud_nodes import CloudNodes, Nodeset, cloud_slurm_conf
    from tests.harness.slurm import SlurmHarness

    h = SlurmHarness()
    cloud = CloudNodes(h, [Nodeset("resv", 2, weight=1), Nodeset("od", 1, weight=30)])
    cloud.prepare()
    conf = cloud_slurm_conf(
        h,
        cloud,
        {"spotq PriorityTier=1 PreemptMode=REQUEUE": ["resv"], "odq PriorityTier=10": ["resv", "od"]},
        suspend_time=600,
        resume_timeout=300,
    )
    conf += "PreemptType=preempt/partition_prio\nPreemptMode=REQUEUE\n"
    if params:  # 22.05 reads the victim order from SchedulerParameters (it refuses a PreemptParameters key)
        conf += f"SchedulerParameters={params}\n"
    h.start(conf, cloud.gres_conf())

    def jobs() -> dict[int, dict[str, Any]]:
        return {j["job_id"]: j for j in h.squeue_json()["jobs"]}

    def until(pred: Any, timeout: float) -> bool:
        end = time.time() + timeout
        while time.time() < end:
            if pred():
                return True
            time.sleep(1)
        return False

    out = h.root / "log"
    try:
        h.run("scontrol", "update", "nodename=od-0", "state=drain", "reason=gpu-fleet:hold", check=True)
        first, second = ("resv-1", "resv-0") if swap else ("resv-0", "resv-1")
        ids = {}
        for tag, node in (("A", first), ("B", second)):
            sb = ("sbatch", "-p", "spotq", "-N1", "--gres=gpu:8", "-w", node, "-o", f"{out}/{tag}.out")
            ids[tag] = int(h.run(*sb, "--wrap", "srun sleep 300", check=True).stdout.split()[-1])
            time.sleep(2)
        if first_up:  # that job's node boots first: it starts running well before the other
            cloud.boot(first if first_up == "A" else second)
            until(lambda: jobs().get(ids[first_up], {}).get("job_state") == "RUNNING", 90)
            time.sleep(10)
        cloud.boot("resv-0")
        cloud.boot("resv-1")
        until(lambda: all(jobs().get(ids[t], {}).get("job_state") == "RUNNING" for t in "AB"), 90)
        sb = ("sbatch", "-p", "odq", "-N1", "--gres=gpu:8", "-o", f"{out}/C.out")
        ids["C"] = int(h.run(*sb, "--wrap", "srun sleep 5", check=True).stdout.split()[-1])
        until(lambda: jobs().get(ids["C"], {}).get("job_state") in ("RUNNING", "COMPLETED"), 60)
        js = jobs()
        where = {t: (js.get(i, {}).get("job_state"), js.get(i, {}).get("nodes")) for t, i in ids.items()}
        log = (out / "slurmctld.log").read_text().splitlines()
        pre = [x.split("] ", 1)[-1] for x in log if "preempted" in x.lower()]
        return f"A on {first}, B on {second}: {where}; slurmctld: {pre}"
    finally:
        cloud.stop_all()
        h.stop()


def main() -> int:
    from fleet.slurm.preempt import YOUNGEST_FIRST
    from tests.harness.slurm import slurm_unavailable_reason

    if why := slurm_unavailable_reason():
        print(f"skipped: {why}", file=sys.stderr)
        return 2
    rounds = [
        (False, "", ""),
        (True, "", ""),
        (False, "B", ""),
        (False, "A", YOUNGEST_FIRST),
        (False, "B", YOUNGEST_FIRST),
    ]
    only = {int(a) for a in sys.argv[1:]}  # round numbers to run (default: all)
    for n, (swap, first_up, params) in enumerate(rounds, 1):
        if only and n not in only:
            continue
        tag = (f" ({first_up} started first)" if first_up else "") + (
            f" SchedulerParameters={params}" if params else ""
        )
        print(f"round {n}{tag}: {_round(swap, first_up, params)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
