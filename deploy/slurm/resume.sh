#!/bin/sh
# slurm.conf: ResumeProgram=/usr/local/libexec/gpu-fleet/resume.sh (written there by the controller's startup script)
# Hands the hostlist (and SLURM_RESUME_FILE) to the autoscaler daemon through its state store, then exits.
exec "${GPU_FLEET_PYTHON:-/opt/gpu-fleet/.venv/bin/python}" -m autoscaler.slurm.hook resume "$1" \
  --state "${GPU_FLEET_AUTOSCALER_STATE:-/var/lib/gpu-fleet/autoscaler.db}"
