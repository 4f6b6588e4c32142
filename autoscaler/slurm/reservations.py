"""Slurm advanced reservations (``scontrol create reservation``): the nodes a job submitted with
``--reservation=<name>`` may run on.

Such a job runs on its reservation's nodes or not at all, so under a hold the daemon releases held names of the
reservation for it rather than booting any name of the pool (docs/autoscaler.md "Jobs whose nodes are fixed").
slurmctld 22.05's ``scontrol`` has no JSON output: `parse_scontrol_reservations` reads ``scontrol show reservation
-o`` (one line per reservation, ``Key=Value`` words); slurmrestd's ``GET reservations`` is JSON
(`parse_rest_reservations`).  Only ACTIVE reservations count: a job waiting for one that has not started is not
waiting for capacity.  Pure."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from autoscaler.slurm.hostlist import expand

#: what ``scontrol show reservation`` prints when there is none
NO_RESERVATIONS = "No reservations in the system"


def parse_scontrol_reservations(text: str) -> dict[str, tuple[str, ...]]:
    """Active reservation name -> its node names, from ``scontrol show reservation -o``."""
    out: dict[str, tuple[str, ...]] = {}
    for line in text.splitlines():
        fields = dict(word.partition("=")[::2] for word in line.split() if "=" in word)
        name = fields.get("ReservationName")
        if name and fields.get("State", "ACTIVE").upper() == "ACTIVE":
            nodes = fields.get("Nodes", "")
            out[name] = tuple(expand(nodes)) if nodes and nodes != "(null)" else ()
    return out


def parse_rest_reservations(body: Mapping[str, Any], now: float) -> dict[str, tuple[str, ...]]:
    """Active reservation name -> its node names, from slurmrestd's ``GET reservations`` (``node_list``; one whose
    ``start_time`` is still ahead of `now` is left out)."""
    out: dict[str, tuple[str, ...]] = {}
    for r in body.get("reservations") or ():
        name, nodes, start = r.get("name"), str(r.get("node_list") or ""), r.get("start_time")
        if isinstance(start, Mapping):  # >= 23.02: {"set", "infinite", "number"}
            start = start.get("number")
        if name and not (isinstance(start, int | float) and start > now):
            out[str(name)] = tuple(expand(nodes)) if nodes else ()
    return out
