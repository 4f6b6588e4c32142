"""topology.conf from the nodes' physical_host comments: tree shape, every node in it, the CLI's rewrite rule."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from fleet.slurm.topology import (
    compress,
    expand,
    from_scontrol,
    main,
    parse_physical_host,
    render_topology,
    rendered_weights,
)
from tests.harness.slurm import binary, for_this_slurm


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
    lines = [line for line in text.splitlines() if not line.startswith("#")]
    assert lines == [
        "SwitchName=b-a3-resv-c1-b1 Nodes=a3-resv-[0-1]",
        "SwitchName=b-a3-resv-c1-b2 Nodes=a3-resv-2",
        "SwitchName=c-a3-resv-c1 Switches=b-a3-resv-c1-b1,b-a3-resv-c1-b2",
        "SwitchName=u-a3-resv Nodes=a3-resv-3",
        "SwitchName=pool-a3-resv Switches=c-a3-resv-c1,u-a3-resv",
    ]


def test_every_pool_is_its_own_tree_the_lowest_weight_last() -> None:
    """No switch joins two pools (slurmctld then never gives one job nodes of both), and the trees run from the
    highest Weight to the lowest, node-table order reversed within one Weight (slurmctld 22.05 powers up the last
    tree that fits).  Two pools placed in the same GCE block still get a leaf each."""
    pools = {"od": "od-[0-1]", "spot": "spot-[0-1]", "resv": "resv-[0-1]", "resv2": "resv2-0"}
    placed = {"od-0": "/c1/b1/h1", "spot-0": "/c1/b1/h2"}
    text = render_topology(pools, placed, {"od": 30000, "spot": 10000, "resv": 1000, "resv2": 1000})
    tops = [line.split()[0].split("=")[1] for line in text.splitlines() if line.startswith("SwitchName=pool-")]
    assert tops == ["pool-od", "pool-spot", "pool-resv2", "pool-resv"]
    assert "SwitchName=b-od-c1-b1 Nodes=od-0" in text and "SwitchName=b-spot-c1-b1 Nodes=spot-0" in text
    children: dict[str, set[str]] = {}
    for line in text.splitlines():
        if line.startswith("SwitchName="):
            name, what = line.split()
            children[name.split("=")[1]] = set(what.split("=")[1].split(","))

    def nodes(switch: str) -> set[str]:
        kids = children[switch]
        return set().union(*(nodes(k) if k in children else set(expand(k)) for k in kids))

    for top in tops:
        assert {n.rsplit("-", 1)[0] for n in nodes(top)} == {top.removeprefix("pool-")}
    assert sorted(n for top in tops for n in nodes(top)) == sorted(n for hl in pools.values() for n in expand(hl))


def test_from_scontrol_reads_comments(tmp_path) -> None:
    shown = {"nodes": [{"name": "p-0", "comment": "physical_host=/c/b/h"}, {"name": "p-1", "comment": ""}]}
    pools, placed, weights = from_scontrol(shown)
    assert pools == {"p": "p-[0-1]"} and placed == {"p-0": "/c/b/h"} and weights == {}
    shown = {"nodes": [{"name": "p-0", "weight": 1008}, {"name": "p-1", "weight": 1000}, {"name": "q-0", "weight": 9}]}
    assert from_scontrol(shown)[2] == {"p": 1000, "q": 9}  # a pool's lowest node Weight


def test_the_rebuild_orders_pools_by_the_weights_slurm_conf_renders_not_the_live_ones() -> None:
    conf = "NodeName=p-[0-1] CPUs=4 Weight=1000 State=CLOUD\nNodeName=q-[0-3] Weight=30000\nPartitionName=x Nodes=p\n"
    assert rendered_weights(conf) == {"p": 1000, "q": 30000}
    # the daemon raised p's live Weights by their free GPUs: the file keeps p (the lower rendered Weight) last
    live = {
        "nodes": [{"name": "p-0", "weight": 31000}, {"name": "p-1", "weight": 31000}, {"name": "q-0", "weight": 30000}]
    }
    pools, placed, weights = from_scontrol(live)
    weights.update(rendered_weights(conf))
    text = render_topology(pools, placed, weights)
    assert text.index("SwitchName=pool-q") < text.index("SwitchName=pool-p")


def test_cli_rewrites_only_on_change_and_reconfigures(tmp_path) -> None:
    """Slurm 22.05: scontrol refuses `--json` (exit 1), so the timer reads `sinfo --json`, which lists every node."""
    calls = tmp_path / "calls"
    nodes = {"nodes": [{"name": "p-0", "comment": "physical_host=/c/b/h"}, {"name": "p-1", "comment": ""}]}
    tools = []
    refuses = 'if [ "$1" = show ]; then echo "scontrol: unrecognized option \'--json\'" >&2; exit 1; fi'
    for name, body in (("sinfo", f"echo '{json.dumps(nodes)}'"), ("scontrol", refuses)):
        fake = tmp_path / name
        fake.write_text(f'#!/bin/sh\necho "{name} $*" >> {calls}\n{body}\n')
        fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
        tools += [f"--{name}", str(fake)]
    out = tmp_path / "topology.conf"
    tools += ["--slurm-conf", str(tmp_path / "absent.conf")]
    assert main(["--out", str(out), *tools]) == 0
    assert "SwitchName=b-p-c-b Nodes=p-0" in out.read_text()
    assert main(["--out", str(out), *tools]) == 0
    read = ["scontrol show nodes --json", "sinfo --json"]
    assert calls.read_text().splitlines() == [*read, "scontrol reconfigure", *read]


@pytest.mark.slurm
def test_a_node_that_reports_its_host_moves_in_real_slurmctlds_tree(slurm_factory, tmp_path) -> None:
    """What a compute node's startup script does (scontrol update Comment=physical_host=...) and what the
    controller's timer does (this module's CLI), against a real slurmctld with the a3mega config."""
    from pathlib import Path

    from fleet.slurm.conf import render_slurm_conf
    from fleet.spec import load_stack_file

    spec = for_this_slurm(load_stack_file(Path(__file__).resolve().parents[2] / "Pulumi.gcp-a3mega-slurm.yaml"))
    harness = slurm_factory()
    conf = render_slurm_conf(spec, spec.clusters[0], overrides=harness.overrides())
    harness.start_rendered(conf)
    try:
        harness.run("scontrol", "update", "NodeName=a3mega-resv-3", "Comment=physical_host=/c1/b7/h2", check=True)
        tools = tmp_path / "bin"
        tools.mkdir()
        for name in ("sinfo", "scontrol"):  # the real clients, pointed at this harness's slurm.conf
            (tools / name).write_text(f'#!/bin/sh\nSLURM_CONF={harness.conf_path} exec {binary(name)} "$@"\n')
            (tools / name).chmod(0o755)
        out = harness.root / "etc" / "topology.conf"
        cli = [
            "--sinfo",
            str(tools / "sinfo"),
            "--scontrol",
            str(tools / "scontrol"),
            "--slurm-conf",
            str(harness.conf_path),
        ]
        assert main(["--out", str(out), *cli]) == 0
        shown = harness.run("scontrol", "show", "topology", check=True).stdout
        assert "SwitchName=b-a3mega-resv-c1-b7 Level=0 LinkSpeed=1 Nodes=a3mega-resv-3" in shown, shown
        assert "SwitchName=u-a3mega-resv Level=0 LinkSpeed=1 Nodes=a3mega-resv-[0-2,4-15]" in shown
        # the rebuilt file keeps the rendered order: the reservation (Weight 1000) after the spot pool
        text = out.read_text()
        assert text.index("SwitchName=pool-a3mega-spot") < text.index("SwitchName=pool-a3mega-resv")
    finally:
        harness.stop()


def test_cli_reads_slurm_23_nodes_one_by_one_and_never_writes_an_empty_tree(tmp_path) -> None:
    """Slurm >= 23.02: `sinfo --json` groups nodes (`{"sinfo": [...]}`); the timer reads `scontrol show nodes --json`
    (tests/data/slurm-23.11), and that alone: slurmctld is asked once per run (until the forty-second round sinfo
    first, then scontrol).  Before the thirty-fifth round it read no node there and wrote a topology.conf with no
    switch."""
    data = Path(__file__).parent.parent / "data" / "slurm-23.11"
    calls = tmp_path / "calls"
    tools = []
    scontrol = f'if [ "$1" = show ]; then cat {data / "scontrol-nodes.json"}; fi'
    for name, body in (("sinfo", f"cat {data / 'sinfo.json'}"), ("scontrol", scontrol)):
        fake = tmp_path / name
        fake.write_text(f'#!/bin/sh\necho "{name} $*" >> {calls}\n{body}\n')
        fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
        tools += [f"--{name}", str(fake)]
    out = tmp_path / "topology.conf"
    assert main(["--out", str(out), *tools, "--slurm-conf", str(tmp_path / "absent.conf")]) == 0
    assert "Nodes=gpu-a3-[0-3]" in out.read_text()
    assert calls.read_text().splitlines() == ["scontrol show nodes --json", "scontrol reconfigure"]
