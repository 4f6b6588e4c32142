#!/bin/sh
# slurm.conf: ResumeProgram=/usr/local/libexec/gpu-fleet/resume.sh (written there by the controller's startup script)
# Hands the hostlist (and SLURM_RESUME_FILE) to the autoscaler daemon through its state store, then exits.
# What it says goes to the hook log too: slurmctld keeps none of a power program's output.
exec "${GPU_FLEET_PYTHON:-/opt/gpu-fleet/.venv/bin/python}" -m autoscaler.slurm.hook resume "$1" \
  --state "${GPU_FLEET_AUTOSCALER_STATE:-/var/lib/gpu-fleet/autoscaler.db}" \
  --log "${GPU_FLEET_HOOK_LOG:-/var/log/slurm/gpu-fleet-hooks.log}"
