#!/bin/sh
# slurm.conf: ResumeFailProgram=/opt/gpu-fleet/deploy/slurm/resume_fail.sh
exec "${GPU_FLEET_PYTHON:-/opt/gpu-fleet/.venv/bin/python}" -m autoscaler.slurm.hook resume-fail "$1" \
  --state "${GPU_FLEET_AUTOSCALER_STATE:-/var/lib/gpu-fleet/autoscaler.db}"
