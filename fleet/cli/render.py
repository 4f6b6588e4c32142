"""`fleet render`: files generated from a stack's fleet spec, without Pulumi.

`fleet render slurm-conf (--stack NAME | --config PATH) [--cluster NAME] --out DIR [--force]` writes
slurm.conf, gres.conf, cgroup.conf and topology.conf (the initial tree; the controller keeps it current), the
controller's slurmdbd.conf (0600: `slurm.accounting: slurmdbd`, the default) and job_submit.lua when there is one,
in DIR/<cluster>/ when the spec has several Slurm clusters (DIR's parent must exist; a file already there is
replaced only with --force; each file is written atomically, fleet.input.outputs);
`fleet render spec` prints the validated spec with every default filled in;
`fleet render gpudirect-pod (--stack NAME | --config PATH) --pool POOL --image IMAGE [--cluster NAME] [--gpus N]`
prints, as YAML, the pod template a workload on a GKE pool of A3 High, A3 Mega, A3 Ultra or A4 machines starts from
to use their GPU fabric (the networks, the NCCL plugin's mounts, the TCPX(O) RxDM sidecar:
`stacks.gke_fabric.workload_pod`).
An invalid spec exits 2 with one `path: reason` line per problem on stderr and writes nothing.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Annotated

import typer

render_app = typer.Typer(help="Render files from a stack's fleet spec (no cloud access).", no_args_is_help=True)

STACK_HELP = "stack name: reads Pulumi.NAME.yaml from the current directory or the repo root"
CONFIG_HELP = "path of a stack file (same format as Pulumi.<stack>.yaml)"
StackOpt = Annotated[str | None, typer.Option("--stack", help=STACK_HELP)]
ConfigOpt = Annotated[Path | None, typer.Option("--config", help=CONFIG_HELP)]


def _fail(lines: list[str]) -> typer.Exit:
    for line in lines:
        typer.echo(f"error: {line}", err=True)
    return typer.Exit(2)


def _load(stack: str | None, config: Path | None):  # -> FleetSpec
    from fleet.spec import SpecError, load_stack_file, stack_file

    if (stack is None) == (config is None):
        raise _fail(["give exactly one of --stack NAME or --config PATH"])
    try:
        path = stack_file(stack) if stack is not None else config
        return load_stack_file(path)
    except SpecError as exc:
        raise _fail(exc.lines()) from None


def _parse_sets(values: list[str]) -> dict[str, str]:
    """`--set KEY=VALUE` pairs; keys and values go into slurm.conf, so they obey the spec's extra_config rules."""
    from fleet.spec.rules import SLURM_KEY, SLURM_MANAGED_KEYS, SLURM_VALUE, SLURM_VALUE_CHARS

    out = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise _fail([f"--set {item!r}: expected KEY=VALUE (a slurm.conf key)"])
        if not SLURM_KEY.fullmatch(key):
            raise _fail([f"--set {item!r}: {key!r} is not a slurm.conf key (letters and digits only)"])
        if key.lower() in SLURM_MANAGED_KEYS:
            why = "--controller-host" if key.lower() == "slurmctldhost" else SLURM_MANAGED_KEYS[key.lower()]
            raise _fail([f"--set {item!r}: {key} cannot be set here: {why}"])
        if not SLURM_VALUE.fullmatch(value):
            raise _fail([f"--set {item!r}: the value must be one non-empty line of {SLURM_VALUE_CHARS}"])
        out[key] = value
    return out


def _conf_files(conf) -> dict[str, tuple[str, int]]:  # conf: fleet.slurm.SlurmConf
    """File name -> (text, mode before the umask) of one cluster's rendered configuration."""
    files = {
        "slurm.conf": (conf.slurm_conf, 0o666),
        "gres.conf": (conf.gres_conf, 0o666),
        "cgroup.conf": (conf.cgroup_conf, 0o666),
        "topology.conf": (conf.topology_conf, 0o666),
    }
    if conf.job_submit_lua:  # slurm.conf names JobSubmitPlugins=lua: slurmctld reads it next to slurm.conf
        files["job_submit.lua"] = (conf.job_submit_lua, 0o666)
    if conf.slurmdbd_conf:  # slurmdbd refuses a slurmdbd.conf others may read
        files["slurmdbd.conf"] = (conf.slurmdbd_conf, 0o600)
    return files


def _check_out_dir(out: Path, targets: dict[Path, list[str]], force: bool) -> None:
    """Refuse, before writing anything: an --out (or per-cluster directory) that is not a directory, an --out whose
    parent directory does not exist (only --out itself and its per-cluster directories are created), and a file
    to write that exists (replaced only with --force) or is not a regular file (fleet.input.outputs)."""
    from fleet.input import InputError
    from fleet.input.outputs import check_parent, check_target

    for target in [out, *targets]:
        if target.exists() and not target.is_dir():
            raise _fail([f"--out: {target} exists and is not a directory (give a directory to write into)"])
    try:
        if not out.exists():
            check_parent(out, option="--out")
        for target, names in targets.items():
            for name in names:
                check_target(target / name, option="--out", force=force)
    except InputError as exc:
        raise _fail(exc.lines()) from None


def _write_confs(target: Path, files: dict[str, tuple[str, int]], force: bool) -> None:
    """Create `target` (one level: its parent was checked) and write every file into it atomically."""
    from fleet.input import InputError, write_atomic
    from fleet.input.outputs import make_dir

    try:
        make_dir(target, option="--out")
        for name, (text, mode) in files.items():
            write_atomic(target / name, text, option="--out", force=force, mode=mode)
    except InputError as exc:
        raise _fail(exc.lines()) from None


@render_app.command("slurm-conf")
def slurm_conf(
    out: Annotated[
        Path, typer.Option("--out", help="directory to write slurm.conf, gres.conf, cgroup.conf, topology.conf into")
    ],
    stack: StackOpt = None,
    config: ConfigOpt = None,
    cluster: Annotated[str | None, typer.Option(help="only this cluster (default: every Slurm cluster)")] = None,
    controller_host: Annotated[str | None, typer.Option(help="SlurmctldHost (default: <cluster>-controller)")] = None,
    set_: Annotated[list[str] | None, typer.Option("--set", help="override a slurm.conf key, KEY=VALUE")] = None,
    force: Annotated[bool, typer.Option("--force", help="replace files already in the --out directory")] = False,
) -> None:
    """Write the generated Slurm configuration of a stack's Slurm cluster(s)."""
    from components.gcp.startup import JWT_KEY_PATH
    from fleet.slurm import render_slurm_conf
    from fleet.slurm.conf import slurmrestd_auth

    spec = _load(stack, config)
    # the same files the stack delivers (slurmrestd's JWT auth included); --set wins
    overrides = {**slurmrestd_auth(JWT_KEY_PATH), **_parse_sets(set_ or [])}
    clusters = [c for c in spec.clusters if c.scheduler == "slurm"]
    if cluster is not None:
        names = [c.name for c in clusters]
        clusters = [c for c in clusters if c.name == cluster]
        if not clusters:
            raise _fail([f"--cluster: no Slurm cluster {cluster!r} in the spec (clusters: {', '.join(names)})"])
    if not clusters:
        raise _fail(["the spec has no Slurm cluster"])
    if controller_host is not None and not re.fullmatch(
        r"[A-Za-z0-9]([-A-Za-z0-9.]{0,251}[A-Za-z0-9])?", controller_host
    ):
        raise _fail([f"--controller-host: {controller_host!r} is not a host name"])
    rendered = [(c, render_slurm_conf(spec, c, controller_host=controller_host, overrides=overrides)) for c in clusters]
    targets = {(out / c.name if len(rendered) > 1 else out): _conf_files(conf) for c, conf in rendered}
    _check_out_dir(out, {target: list(files) for target, files in targets.items()}, force)
    if len(rendered) > 1:
        _write_confs(out, {}, force)
    for (c, conf), (target, files) in zip(rendered, targets.items(), strict=True):
        _write_confs(target, files, force)
        also = "".join(f", {name}" for name in list(files)[4:])  # the files a cluster has only sometimes
        nodes = ", ".join(f"{n.name}={n.node_names}" for n in conf.nodesets)
        typer.echo(
            f"{c.name}: wrote {target}/slurm.conf, gres.conf, cgroup.conf, topology.conf{also} (nodesets: {nodes})"
        )


@render_app.command("spec")
def spec_json(stack: StackOpt = None, config: ConfigOpt = None) -> None:
    """Validate a stack's fleet spec and print it as JSON with every default filled in."""
    spec = _load(stack, config)
    typer.echo(json.dumps(spec.model_dump(mode="json"), indent=2))


@render_app.command("gpudirect-pod")
def gpudirect_pod(
    pool: Annotated[str, typer.Option("--pool", help="the GKE node pool the workload runs on")],
    image: Annotated[str, typer.Option("--image", help="the trainer container's image")],
    stack: StackOpt = None,
    config: ConfigOpt = None,
    cluster: Annotated[str | None, typer.Option(help="the GKE cluster (default: the one holding --pool)")] = None,
    gpus: Annotated[int | None, typer.Option(help="GPUs the trainer asks (default: all of the node's)")] = None,
) -> None:
    """Print the pod template a workload uses the pool's GPUDirect fabric with (GKE: A3 High, A3 Mega, A3 Ultra, A4)."""
    import yaml

    from fleet.catalog import load_catalog
    from stacks import plan
    from stacks.gke_fabric import NCCL_ENV_SCRIPT, PodTemplateError, workload_pod
    from stacks.kube_plan import gke_networks

    spec = _load(stack, config)
    gke = [c for c in spec.clusters if c.platform == "gke" and (cluster is None or c.name == cluster)]
    if not gke:
        names = ", ".join(c.name for c in spec.clusters if c.platform == "gke") or "none"
        if cluster is not None:
            raise _fail([f"--cluster: no GKE cluster {cluster!r} in the spec (GKE clusters: {names})"])
        raise _fail(["the spec has no GKE cluster (the Slurm path sets the fabric up on the nodes themselves)"])
    found = [(c, p) for c in gke for p in c.pools if p.name == pool]
    if len(found) != 1:
        pools = ", ".join(sorted(f"{c.name}/{p.name}" for c in gke for p in c.pools))
        reason = "is in several GKE clusters: give --cluster" if found else "is not a pool of"
        raise _fail([f"--pool: {pool!r} {reason} {'' if found else 'the GKE clusters '}({pools})"])
    ((owner, chosen),) = found
    cat = load_catalog(spec.provider)
    nets = gke_networks(owner, plan.fabric_plans(spec, cat)).get(chosen.machine_type, [])
    try:
        template = workload_pod(chosen, cat, [n.name for n in nets], image, gpus)
    except PodTemplateError as exc:
        raise _fail([f"--{exc.argument}: {exc.reason}"]) from None
    fabric = cat.machine(chosen.machine_type).gke_fabric
    typer.echo(f"# gpu-fleet: the pod template for {owner.name}/{chosen.name} ({chosen.machine_type}); merge it into")
    typer.echo("# your Job / JobSet / PyTorchJob pod template.  Kueue adds the pool's node selector and tolerations.")
    if fabric in ("tcpx", "tcpxo"):
        typer.echo("# Leave hostNetwork off: the GPU NICs move into this pod, and the node's firewall stays closed.")
    if fabric in NCCL_ENV_SCRIPT:
        typer.echo(f"# Before NCCL starts, the trainer sources {NCCL_ENV_SCRIPT[fabric]} (docs/kubernetes.md).")
    typer.echo(yaml.dump(template, Dumper=_block_dumper(), sort_keys=False), nl=False)


def _block_dumper():  # -> type[yaml.SafeDumper]
    """A YAML dumper writing multi-line strings (the injector's device list) as `|` blocks, as one writes them."""
    import yaml

    class BlockDumper(yaml.SafeDumper):
        def ignore_aliases(self, data: object) -> bool:  # a manifest spells every value out, no &anchors
            return True

    def text(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|" if "\n" in value else None)

    BlockDumper.add_representer(str, text)
    return BlockDumper


def register(app: typer.Typer) -> None:
    app.add_typer(render_app, name="render")
