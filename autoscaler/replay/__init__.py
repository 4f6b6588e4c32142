"""Trace replay: run a GPU job trace through a scaling policy and the simulated cloud.

`trace` loads the CSV, `state` is the Slurm-like scheduler side (nodes, jobs, FIFO + backfill
placement), `engine` the discrete-event loop, `gpu_fleet` drives the real planner, `baselines/`
the systems we compare against, `metrics` / `lower_bound` the numbers, `report` the page, and
`run` ties one scenario to every policy (`fleet simulate`)."""
