#!/bin/sh
# slurm.conf: SuspendProgram=/usr/local/libexec/gpu-fleet/suspend.sh (written there by the controller's startup script)
exec "${GPU_FLEET_PYTHON:-/opt/gpu-fleet/.venv/bin/python}" -m autoscaler.slurm.hook suspend "$1" \
  --state "${GPU_FLEET_AUTOSCALER_STATE:-/var/lib/gpu-fleet/autoscaler.db}" \
  --log "${GPU_FLEET_HOOK_LOG:-/var/log/slurm/gpu-fleet-hooks.log}"
