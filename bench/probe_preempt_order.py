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

from slurm_probe import Nodeset, Probe, slurm_unavailable_reason, until

from fleet.slurm.preempt import YOUNGEST_FIRST

PARTITIONS = {"spotq PriorityTier=1 PreemptMode=REQUEUE": ["resv"], "odq PriorityTier=10": ["resv", "od"]}


def _round(swap: bool, first_up: str = "", params: str = "") -> str:
    extra = "PreemptType=preempt/partition_prio\nPreemptMode=REQUEUE\n"
    if params:  # 22.05 reads the victim order from SchedulerParameters (it refuses a PreemptParameters key)
        extra += f"SchedulerParameters={params}\n"
    with Probe.start([Nodeset("resv", 2, weight=1), Nodeset("od", 1, weight=30)], PARTITIONS, extra) as p:
        jobs = p.jobs
        p.h.run("scontrol", "update", "nodename=od-0", "state=drain", "reason=gpu-fleet:hold", check=True)
        first, second = ("resv-1", "resv-0") if swap else ("resv-0", "resv-1")
        ids = {}
        for tag, node in (("A", first), ("B", second)):
            sb = ("-p", "spotq", "-N1", "--gres=gpu:8", "-w", node, "-o", f"{p.out}/{tag}.out")
            ids[tag] = p.sbatch(*sb, "--wrap", "srun sleep 300")
            time.sleep(2)
        if first_up:  # that job's node boots first: it starts running well before the other
            p.cloud.boot(first if first_up == "A" else second)
            until(lambda: jobs().get(ids[first_up], {}).get("job_state") == "RUNNING", 90)
            time.sleep(10)
        p.cloud.boot("resv-0")
        p.cloud.boot("resv-1")
        until(lambda: all(jobs().get(ids[t], {}).get("job_state") == "RUNNING" for t in "AB"), 90)
        ids["C"] = p.sbatch("-p", "odq", "-N1", "--gres=gpu:8", "-o", f"{p.out}/C.out", "--wrap", "srun sleep 5")
        until(lambda: jobs().get(ids["C"], {}).get("job_state") in ("RUNNING", "COMPLETED"), 60)
        js = jobs()
        where = {t: (js.get(i, {}).get("job_state"), js.get(i, {}).get("nodes")) for t, i in ids.items()}
        pre = [x.split("] ", 1)[-1] for x in p.slurmctld_log() if "preempted" in x.lower()]
        return f"A on {first}, B on {second}: {where}; slurmctld: {pre}"


def main() -> int:
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
