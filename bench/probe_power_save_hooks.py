"""Probe: slurmctld started before its ResumeProgram / SuspendProgram exist runs no power saving until a reconfigure.

Until the thirty-fifth round the controller's startup script restarted slurmctld, then checked out gpu-fleet, whose
deploy/slurm/*.sh were the power-save hooks.  slurmctld validates the programs when it starts (absolute,
executable, not group/world writable) and on `scontrol reconfigure` only.  Measured on slurmctld 22.05.8
(thirty-fifth round):

- started with the hooks missing, it logs "power_save module disabled, invalid SuspendProgram ..." and a job on a
  CLOUD node calls no ResumeProgram, even once the programs exist;
- after `scontrol reconfigure` the next job's node is resumed through the program.

Slurm 23.11 goes further: it does not start at all over a missing EpilogSlurmctld ("fatal: failed to initialize
prep plugin", tests/slurm_compat).  So the controller's script writes the hooks (deploy/slurm's wrappers) to the
paths slurm.conf names before slurmctld first starts (components/gcp/startup.py `hook_lines`).
Run: `python bench/probe_power_save_hooks.py` (needs the harness's Slurm; prints what it saw)."""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from slurm_probe import Nodeset, Probe, slurm_unavailable_reason, until


def main() -> int:
    why = slurm_unavailable_reason()
    if why:
        print(f"skipped: {why}")
        return 0
    hooks = Path(tempfile.mkdtemp(prefix="gpu-fleet-hooks-"))
    extra = f"ResumeProgram={hooks}/resume.sh\nSuspendProgram={hooks}/suspend.sh\n"
    with Probe.start([Nodeset("c", 2)], {"gpu": ["c"]}, extra) as p:
        disabled = [line for line in p.slurmctld_log() if "power_save module disabled" in line]
        print("at start:", disabled[0] if disabled else "power saving on")
        for name in ("resume.sh", "suspend.sh"):
            path = hooks / name
            path.write_text(f'#!/bin/sh\necho "$@" >> {hooks}/{name}.called\n')
            os.chmod(path, 0o755)
        p.sbatch("-p", "gpu", "-N1", "--wrap", "sleep 5")
        time.sleep(8)
        print("hooks installed, job submitted: resume called:", (hooks / "resume.sh.called").exists())
        p.h.run("scontrol", "reconfigure", check=True)
        p.sbatch("-p", "gpu", "-N1", "--wrap", "sleep 5")
        called = until(lambda: (hooks / "resume.sh.called").exists(), 30)
        print("after scontrol reconfigure, next job: resume called:", called)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
