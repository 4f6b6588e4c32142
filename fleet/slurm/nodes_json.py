"""One JSON document per node from the Slurm command line, whatever the Slurm release.

Slurm 22.05's `sinfo --json` lists every node (`{"nodes": [...]}`).  From 23.02 on it prints sinfo's own grouped
view instead (`{"sinfo": [...]}`: nodes of one state and partition together, names in a hostlist; NEWS 23.02.0rc1
"sinfo ... use openapi/v0.0.39 for --json"), and the per-node document comes from `scontrol show nodes --json`,
which 22.05 does not have (it refuses `--json`).  Ubuntu 24.04, the image the stacks boot, ships 23.11: until
the thirty-fifth round the autoscaler and the topology timer read `sinfo --json` alone, every tick failed there
("no 'nodes' list") and the timer wrote a topology.conf with no switch (found by an audit; captured from
slurmctld 23.11.4 in tests/data/slurm-23.11).

`NodeSource.read(run)` asks `sinfo --json` first and, when it answers grouped, `scontrol show nodes --json`; a
caller that keeps the `NodeSource` asks the right one directly from then on."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

SINFO = ("sinfo", "--json")
SCONTROL = ("scontrol", "show", "nodes", "--json")


def per_node(document: Any) -> bool:
    """Whether a node JSON document lists nodes one by one (`{"nodes": [...]}`)."""
    return isinstance(document, dict) and isinstance(document.get("nodes"), list)


@dataclass
class NodeSource:
    """Which command gives this Slurm's per-node JSON: `sinfo --json` until it answers grouped."""

    command: tuple[str, ...] = SINFO

    def read(self, run: Callable[[Sequence[str]], str]) -> dict[str, Any]:
        """The per-node document; `run(argv)` returns a command's stdout (raising on failure).  A grouped
        `sinfo --json` switches this source to `scontrol show nodes --json`."""
        document = json.loads(run(self.command))
        if not per_node(document) and self.command == SINFO and isinstance(document, dict) and "sinfo" in document:
            self.command = SCONTROL
            document = json.loads(run(self.command))
        return document
