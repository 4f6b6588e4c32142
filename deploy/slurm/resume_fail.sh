#!/bin/sh
# slurm.conf: ResumeFailProgram=/usr/local/libexec/gpu-fleet/resume_fail.sh (written there by the controller's startup script)
exec "${GPU_FLEET_PYTHON:-/opt/gpu-fleet/.venv/bin/python}" -m autoscaler.slurm.hook resume-fail "$1" \
  --state "${GPU_FLEET_AUTOSCALER_STATE:-/var/lib/gpu-fleet/autoscaler.db}" \
  --log "${GPU_FLEET_HOOK_LOG:-/var/log/slurm/gpu-fleet-hooks.log}"
