"""The autoscaler daemon: config, durable state, the tick, reconcile, actuation, the loop, metrics.

- `config`: the validated YAML config (`fleet autoscaler run --config FILE`); `build` wires a `Daemon` from it.
- `state`: the SQLite state store (WAL, versioned migrations): launch intents keyed by request id, node history,
  unavailable-offering memory, the Slurm power-save queue, orphans, the leader record.
- `lock`: single-actuator guarantee (an fcntl lock next to the state file).
- `snapshot`: one tick's reads (Slurm, cloud, store) -> the planner's demand / inventory (pure).
- `reconcile`: adoption of instances requested before a crash, orphans after a grace period (pure decisions).
- `actuate`: every cloud and scontrol call, logged, counted, dry-run aware, with the one delete guard.
- `tick`: one tick (`Daemon.tick`): reads, reconcile, power-save requests, per-pool plans, queue depth.
- `loop`: the apscheduler loop, the hook watcher, SIGTERM handling.
- `metrics`: Prometheus metrics and `/healthz`; `logs`: human or JSON-lines loguru output.
"""
