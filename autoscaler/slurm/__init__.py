"""Slurm, both ways: readers that turn `squeue --json` / `sinfo --json` into the planner's model, the
commands the daemon sends back (`scontrol update ...`), and the hand-off of Slurm's power-saving hooks
(ResumeProgram / SuspendProgram / ResumeFailProgram) to the daemon.

Modules: `hostlist` (pure hostlist expand/compress), `readers` (pure JSON -> `SlurmJob`/`SlurmNode`),
`client` (runs the Slurm CLI or slurmrestd), `handoff` (fast hook side: rows into the state store).
Only stdlib here at import time, so the hooks start fast.
"""
