#!/bin/sh
# slurm.conf: EpilogSlurmctld=/usr/local/libexec/gpu-fleet/epilog_slurmctld.sh (written there by the controller's startup script)
# slurmctld runs this as SlurmUser on the controller when a job ends (SLURM_JOB_ID, SLURM_JOB_NODELIST set, no
# search path). It records a wake-up in the autoscaler's state store so the daemon scales the freed nodes down
# within a second or two instead of at its next poll, then exits. A failure is only logged by slurmctld (the job
# and its nodes are unaffected); the daemon's poll then frees the nodes. A job that never got nodes: nothing to do.
[ -n "${SLURM_JOB_NODELIST:-}" ] || exit 0
set -- "${GPU_FLEET_PYTHON:-/opt/gpu-fleet/.venv/bin/python}" -m autoscaler.slurm.hook job-end "$SLURM_JOB_NODELIST" \
  --state "${GPU_FLEET_AUTOSCALER_STATE:-/var/lib/gpu-fleet/autoscaler.db}" \
  --log "${GPU_FLEET_HOOK_LOG:-/var/log/slurm/gpu-fleet-hooks.log}"
[ -z "${SLURM_JOB_ID:-}" ] || set -- "$@" --job-id "$SLURM_JOB_ID"
# bounded: slurmctld waits for EpilogSlurmctld indefinitely by default (PrologEpilogTimeout) and keeps the job
# COMPLETING until it returns
[ -x /usr/bin/timeout ] && exec /usr/bin/timeout -k 2 10 "$@"
exec "$@"
