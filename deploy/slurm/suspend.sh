#!/bin/sh
# slurm.conf: SuspendProgram=/opt/gpu-fleet/deploy/slurm/suspend.sh
exec "${GPU_FLEET_PYTHON:-/opt/gpu-fleet/.venv/bin/python}" -m autoscaler.slurm.hook suspend "$1" \
  --state "${GPU_FLEET_AUTOSCALER_STATE:-/var/lib/gpu-fleet/autoscaler.db}"
