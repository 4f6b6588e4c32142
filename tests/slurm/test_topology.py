"""topology.conf from the nodes' physical_host comments: tree shape, every node in it, the CLI's rewrite rule."""

from __future__ import annotations

import json
import stat

import pytest

from fleet.slurm.topology import compress, expand, from_scontrol, main, parse_physical_host, render_topology


def test_hostlists_round_trip() -> None:
    names = ["a3-resv-0", "a3-resv-1", "a3-resv-2", "a3-resv-7", "a3-spot-10", "ctl"]
    assert compress(names) == "a3-resv-[0-2,7],a3-spot-10,ctl"
    assert sorted(expand(compress(names))) == sorted(names)


@pytest.mark.parametrize("value", ["", None, "/only/two", "garbage"])
def test_unusable_physical_hosts_are_ignored(value) -> None:
    assert parse_physical_host(value) is None


def test_placed_nodes_move_under_their_block_and_the_rest_stay_on_the_pool_leaf() -> None:
    pools = {"a3-resv": "a3-resv-[0-3]"}
    placed = {"a3-resv-0": "/c1/b1/h1", "a3-resv-1": "/c1/b1/h2", "a3-resv-2": "/c1/b2/h9"}
    text = render_topology(pools, placed)
    lines = text.splitlines()[1:]
    assert lines == [
        "SwitchName=b-c1-b1 Nodes=a3-resv-[0-1]",
        "SwitchName=b-c1-b2 Nodes=a3-resv-2",
        "SwitchName=c-c1 Switches=b-c1-b1,b-c1-b2",
        "SwitchName=pool-a3-resv Nodes=a3-resv-3",
        "SwitchName=root Switches=c-c1,pool-a3-resv",
    ]


def test_from_scontrol_reads_comments(tmp_path) -> None:
    shown = {"nodes": [{"name": "p-0", "comment": "physical_host=/c/b/h"}, {"name": "p-1", "comment": ""}]}
    pools, placed = from_scontrol(shown)
    assert pools == {"p": "p-[0-1]"} and placed == {"p-0": "/c/b/h"}


def test_cli_rewrites_only_on_change_and_reconfigures(tmp_path) -> None:
    calls = tmp_path / "calls"
    fake = tmp_path / "scontrol"
    nodes = {"nodes": [{"name": "p-0", "comment": "physical_host=/c/b/h"}, {"name": "p-1", "comment": ""}]}
    fake.write_text(f'#!/bin/sh\necho "$*" >> {calls}\n[ "$1" = show ] && echo \'{json.dumps(nodes)}\'\nexit 0\n')
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    out = tmp_path / "topology.conf"
    assert main(["--out", str(out), "--scontrol", str(fake)]) == 0
    assert "SwitchName=b-c-b Nodes=p-0" in out.read_text()
    assert main(["--out", str(out), "--scontrol", str(fake)]) == 0
    assert calls.read_text().splitlines() == ["show nodes --json", "reconfigure", "show nodes --json"]
