"""The autoscaler daemon: config, durable state, the tick loop, reconcile, actuation, metrics.

- `config`: the validated YAML config (`fleet autoscaler run --config FILE`).
- `state`: the SQLite state store (WAL, versioned migrations): launch intents keyed by request id, node history,
  unavailable-offering memory, the Slurm power-save queue, the leader lock record.
- `lock`: single-actuator guarantee (an fcntl lock next to the state file).
- `snapshot`: one tick's reads (Slurm, cloud, store) -> the planner's demand / inventory.
- `actuate`: the plan's commands and the power-save requests -> provider / scontrol calls.
- `reconcile`: adoption of instances requested before a crash, orphan deletion after a grace period.
- `loop`: the apscheduler loop, signals, `--once` / `--dry-run`.
- `metrics`: Prometheus metrics and `/healthz`.
"""
