"""Slurm `topology.conf` (topology/tree) from where GCE placed each node.

A GPU VM's metadata server answers `instance/attributes/physical_host` with `/CLUSTER/BLOCK/HOST`
(the same value slurm-gcp reads as `resourceStatus.physicalHost`).  Each compute node's startup
script (root) publishes it to slurmctld as its node comment (`physical_host=/c/b/h`); the controller's
`gpu-fleet-topology` timer runs `python -m fleet.slurm.topology` to rebuild the file from the nodes' JSON and
`scontrol reconfigure`s only when it changed.  It runs every 30 s as a new process, so it keeps no memory of which
command answers: it asks `scontrol show nodes --json` first (one call on 23.02+, the images' 23.11), and
`sinfo --json` when scontrol refuses `--json` (22.05, which refuses it before asking slurmctld anything).  Until the
forty-second round it asked sinfo first, so each run on 23.11 asked slurmctld twice, once for a grouped view it
then dropped.

**One tree per pool, no common root.**  Slurm documents that "jobs can only span nodes connected by the same
switch fabric" (topology.conf(5)), so a job never gets nodes of two pools: a gang stays in one placement policy,
one zone and one capacity type, which is how the daemon plans it (one pool, all or nothing) and the only way its
nodes share a compact placement.  slurm-gcp's file puts every nodeset under one root switch instead; with it
slurmctld 22.05.8 gave a 3-node job two names of one pool and one of another (`bench/probe_gang_topology.py`),
and a gang across a reservation and on-demand nodes waited, half booted, for its slower half.  slurmctld logs
"TOPOLOGY: warning -- no switch can reach all nodes through its descendants" at every start: that is this
design, not a fault.  A gang larger than every pool of its partition is refused at submission ("Requested node
configuration is not available"), as the daemon already reports it unservable.

**Trees from the highest Weight to the lowest.**  Among powered-down nodes 22.05 ignores Weight; with these
disconnected trees it takes the *last* tree in the file that can hold the job (measured, same probe; with one
root it took the pool leaf with the fewest nodes).  Writing the pools' trees from the highest Weight to the
lowest (node-table order reversed within one Weight) makes slurmctld power up the cheapest pool that fits, the
order the rendered Weights ask for and the simulated Slurm replays (`autoscaler.replay.simslurm`).  The timer
reads each pool's rendered Weight from the NodeName lines of slurm.conf (not the live one: the daemon raises
reserved nodes' Weights by their free GPUs, which must not reorder the file), else its lowest node Weight in sinfo.

Within a pool's tree: `pool-<prefix>` > one switch per GCE cluster (`c-<prefix>-<cluster>`) > one leaf per block
(`b-<prefix>-<cluster>-<block>`) holding the placed nodes, and the nodes not placed yet (powered down, or a
machine type without the attribute) on one leaf `u-<prefix>`; a pool with no placed node is the single leaf
`pool-<prefix>`.  Every node is in the file (topology/tree refuses to place jobs on nodes outside it).  Pure
functions plus a small CLI.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from fleet.slurm.nodes_json import SCONTROL, NodeSource, per_node

COMMENT_KEY = "physical_host="
_SAFE = re.compile(r"[^A-Za-z0-9_-]+")


def compress(names: Iterable[str]) -> str:
    """Slurm hostlist of node names `<prefix>-<i>`: `a-[0-3,7],b-1` (other names listed as they are)."""
    groups: dict[str, list[int]] = defaultdict(list)
    plain: list[str] = []
    for name in sorted(set(names)):
        m = re.match(r"^(?P<prefix>.+-)(?P<index>0|[1-9]\d*)$", name)
        if m:
            groups[m["prefix"]].append(int(m["index"]))
        else:
            plain.append(name)
    parts = []
    for prefix, idx in sorted(groups.items()):
        idx.sort()
        ranges, start, prev = [], idx[0], idx[0]
        for i in [*idx[1:], None]:
            if i is not None and i == prev + 1:
                prev = i
                continue
            ranges.append(str(start) if start == prev else f"{start}-{prev}")
            if i is not None:
                start = prev = i
        parts.append(f"{prefix}{ranges[0]}" if len(idx) == 1 else f"{prefix}[{','.join(ranges)}]")
    return ",".join(parts + plain)


def parse_physical_host(value: str | None) -> tuple[str, str] | None:
    """`/cluster/block/host` -> (cluster, block); None for anything else."""
    if not value:
        return None
    parts = [p for p in value.strip().split("/") if p]
    if len(parts) < 3:
        return None
    return _SAFE.sub("_", parts[0]), _SAFE.sub("_", parts[1])


def render_topology(
    pools: Mapping[str, str], placed: Mapping[str, str], weights: Mapping[str, int] | None = None
) -> str:
    """topology.conf text (module docstring).  `pools`: pool node-name prefix -> Slurm hostlist of all its nodes, in
    node-table order; `placed`: node name -> physical_host of the nodes that reported one; `weights`: pool prefix ->
    its Weight (None, or a pool missing: 0), which orders the trees."""
    pool_of = {name: prefix for prefix, hostlist in pools.items() for name in expand(hostlist)}
    blocks: dict[str, dict[tuple[str, str], list[str]]] = defaultdict(lambda: defaultdict(list))
    for node, host in placed.items():
        where = parse_physical_host(host)
        if where and node in pool_of:
            blocks[pool_of[node]][where].append(node)
    w = weights or {}
    position = {p: i for i, p in enumerate(pools)}
    preference = sorted(pools, key=lambda p: (w.get(p, 0), position[p]))
    lines = ["# topology.conf: generated by gpu-fleet (fleet/slurm/topology.py) from each VM's physical_host."]
    lines.append("# One tree per pool (a job never spans pools); slurmctld powers up the last tree that fits.")
    for prefix in reversed(preference):
        lines += _pool_tree(_SAFE.sub("_", prefix), pools[prefix], blocks.get(prefix, {}))
    return "\n".join(lines) + "\n"


def _pool_tree(pool: str, hostlist: str, blocks: Mapping[tuple[str, str], list[str]]) -> list[str]:
    """The switches of one pool's tree, children first; its top switch is `pool-<pool>`."""
    top = f"pool-{pool}"
    if not blocks:
        return [f"SwitchName={top} Nodes={hostlist}"]
    lines: list[str] = []
    clusters: dict[str, list[str]] = defaultdict(list)
    for (cluster, block), nodes in sorted(blocks.items()):
        leaf = f"b-{pool}-{cluster}-{block}"
        clusters[cluster].append(leaf)
        lines.append(f"SwitchName={leaf} Nodes={compress(nodes)}")
    children = []
    for cluster, leaves in sorted(clusters.items()):
        lines.append(f"SwitchName=c-{pool}-{cluster} Switches={','.join(leaves)}")
        children.append(f"c-{pool}-{cluster}")
    placed = {n for nodes in blocks.values() for n in nodes}
    rest = [n for n in expand(hostlist) if n not in placed]
    if rest:
        lines.append(f"SwitchName=u-{pool} Nodes={compress(rest)}")
        children.append(f"u-{pool}")
    lines.append(f"SwitchName={top} Switches={','.join(children)}")
    return lines


def expand(hostlist: str) -> list[str]:
    """Expand the simple hostlists this module and fleet.spec.derive write (`p-[0-3,7]`, `p-0`, a,b)."""
    out: list[str] = []
    for part in re.findall(r"[^,\[]+(?:\[[^\]]*\])?", hostlist):
        m = re.match(r"^(?P<prefix>[^\[]*)\[(?P<ranges>[^\]]*)\]$", part)
        if not m:
            out.append(part)
            continue
        for rng in m["ranges"].split(","):
            lo, _, hi = rng.partition("-")
            out += [f"{m['prefix']}{i}" for i in range(int(lo), int(hi or lo) + 1)]
    return out


def pool_prefix(name: str) -> str | None:
    """The pool's node-name prefix of `<prefix>-<index>` (None for a name without an index)."""
    m = re.match(r"^(?P<prefix>.+)-\d+$", name)
    return m["prefix"] if m else None


def from_scontrol(nodes_json: Mapping[str, object]) -> tuple[dict[str, str], dict[str, str], dict[str, int]]:
    """(pools, placed, weights) from the per-node JSON (`fleet.slurm.nodes_json`): pools by node-name prefix (in the
    order Slurm lists them),
    placed from the node comments, each pool's Weight as its lowest node Weight."""
    names: dict[str, list[str]] = defaultdict(list)
    placed: dict[str, str] = {}
    weights: dict[str, int] = {}
    for node in nodes_json.get("nodes", []):  # type: ignore[union-attr]
        name = str(node.get("name", ""))
        prefix = pool_prefix(name) or name
        names[prefix].append(name)
        comment = str(node.get("comment") or "")
        if comment.startswith(COMMENT_KEY):
            placed[name] = comment[len(COMMENT_KEY) :]
        weight = node.get("weight")
        if isinstance(weight, int):
            weights[prefix] = min(weight, weights.get(prefix, weight))
    return {prefix: compress(ns) for prefix, ns in names.items()}, placed, weights


def rendered_weights(slurm_conf: str) -> dict[str, int]:
    """Pool node-name prefix -> the Weight its `NodeName=<hostlist> ... Weight=N` line in slurm.conf carries."""
    out: dict[str, int] = {}
    for line in slurm_conf.splitlines():
        fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
        names, weight = fields.get("NodeName"), fields.get("Weight")
        if not names or not weight or not weight.isdigit():
            continue
        for name in expand(names):
            prefix = pool_prefix(name)
            if prefix:
                out[prefix] = min(int(weight), out.get(prefix, int(weight)))
    return out


def main(argv: list[str] | None = None) -> int:
    """`python -m fleet.slurm.topology --out /etc/slurm/topology.conf`: rebuild, reconfigure if changed."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("/etc/slurm/topology.conf"))
    ap.add_argument("--sinfo", default="sinfo")
    ap.add_argument("--scontrol", default="scontrol")
    ap.add_argument("--no-reconfigure", action="store_true")
    ap.add_argument("--slurm-conf", type=Path, default=Path("/etc/slurm/slurm.conf"), help="read pools' Weights here")
    args = ap.parse_args(argv)
    commands = {"sinfo": args.sinfo, "scontrol": args.scontrol}

    def run(argv: Sequence[str]) -> str:
        shown = subprocess.run([commands[argv[0]], *argv[1:]], capture_output=True, text=True, check=False)
        if shown.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} failed: {shown.stderr.strip()}")
        return shown.stdout

    try:  # one object per node whatever the release (sinfo --json groups them from 23.02 on)
        try:
            nodes = NodeSource(SCONTROL).read(run)
        except RuntimeError:  # 22.05's scontrol has no --json (or slurmctld is down: sinfo then fails too)
            nodes = NodeSource().read(run)
    except (RuntimeError, ValueError) as exc:
        print(f"gpu-fleet-topology: {exc}", file=sys.stderr)
        return 1
    if not per_node(nodes):  # never write a topology of no switch from a document this reader does not know
        print("gpu-fleet-topology: the node JSON lists no nodes one by one; topology.conf left as is", file=sys.stderr)
        return 1
    pools, placed, weights = from_scontrol(nodes)
    if args.slurm_conf.exists():
        weights.update(rendered_weights(args.slurm_conf.read_text()))
    text = render_topology(pools, placed, weights)
    if args.out.exists() and args.out.read_text() == text:
        return 0
    tmp = args.out.with_suffix(".tmp")
    tmp.write_text(text)
    tmp.chmod(0o644)
    tmp.replace(args.out)
    if not args.no_reconfigure:
        return subprocess.run([args.scontrol, "reconfigure"], check=False).returncode
    return 0


if __name__ == "__main__":
    sys.exit(main())
