"""Probe, on a real slurmctld (the Slurm on PATH: this machine's 22.05, or 23.11 with the noble wrappers first): what
does a CLOUD node read between `scontrol update state=power_up` and the ResumeProgram call?

    .venv/bin/python bench/probe_power_up_flag.py                                   # 22.05
    PATH=/tmp/noble-bin:$PATH .venv/bin/python bench/probe_power_up_flag.py        # 23.11

Two powered-down CLOUD nodes, no daemon; power both up at once, then print the first node's state and flags and the
ResumeProgram calls so far, every 0.1 s for 2 s.

Measured on this machine (2026-12-07, one run each, idle): both releases show POWERED_DOWN with POWER_UP (the
request) first; 23.11 shows POWERING_UP + NOT_RESPONDING from about 0.2 s, when its power thread has called the
ResumeProgram; 22.05 from about 0.9 s (POWER_UP + POWERED_DOWN until then).  A daemon tick in that window read the names
as powered down and sent the power-up again (the reserved-up-front e2e test on 23.11, in CI): `SlurmNode.powering_up`
counts POWER_UP since.  Not part of the suite (CI does not collect bench/)."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.harness.cloud_nodes import CloudNodes, Nodeset, cloud_slurm_conf
from tests.harness.slurm import SlurmHarness, slurm_release


def node_flags(h: SlurmHarness, name: str) -> list[str]:
    """The node's state and flags as the release prints them (22.05: `sinfo --json`; 23.02+: a list of both)."""
    new = slurm_release() >= (23, 2)
    doc = json.loads(h.run("scontrol", "show", "nodes", "--json").stdout if new else h.run("sinfo", "--json").stdout)
    node = next(n for n in doc["nodes"] if n["name"] == name)
    return list(node["state"]) if new else [node["state"], *node.get("state_flags", [])]


def main() -> None:
    h = SlurmHarness()
    cloud = CloudNodes(h, [Nodeset("gpu-a3", 2, gpus=8)])
    cloud.prepare()
    h.start(cloud_slurm_conf(h, cloud, {"gpu": ["gpu-a3"]}, suspend_time=600, resume_timeout=300), cloud.gres_conf())
    try:
        print(h.run("sinfo", "--version").stdout.strip())
        t0 = time.monotonic()
        h.run("scontrol", "update", "nodename=gpu-a3-[0-1]", "state=power_up", check=True)
        while (elapsed := time.monotonic() - t0) < 2:
            print(f"{elapsed:5.2f} s  {node_flags(h, 'gpu-a3-0')}  ResumeProgram calls: {len(h.power_calls())}")
            time.sleep(0.1)
    finally:
        h.stop()


if __name__ == "__main__":
    main()
