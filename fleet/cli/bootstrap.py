"""`fleet bootstrap-region` and `fleet bootstrap-project`: write validated stack files for new capacity.

`bootstrap-region` exit codes: 0 written (or planned, with --dry-run); 1 Compute could not be read
for --check-quota, or an internal error; 2 bad arguments (including an existing stack file
without --force); 3 no zone of the region offers the machine type (the nearest regions that do
are named); 4 the region's quota, or the reservation, is too small (with --check-quota).
Nothing is written unless the exit code is 0.  See docs/bootstrap.md.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.console import Console
from rich.table import Table

from fleet.bootstrap.errors import BadArgument, BootstrapError, NoZoneOffers, QuotaTooSmall
from fleet.bootstrap.quotas import RegionQuota, reservation_shortfall, shortfalls
from fleet.catalog import load_catalog

if TYPE_CHECKING:
    from fleet.bootstrap.plan import RegionPlan
    from fleet.bootstrap.request import BootstrapRequest

ENDPOINT_ENV = "FLEET_COMPUTE_ENDPOINT"
#: the `bootstrap-project` flag behind each field of the project-bootstrap spec it writes
PROJECT_FLAGS = {"project": "--project", "region": "--region", "state_bucket": "--bucket-location"}


def _fail(exc: BootstrapError, as_json: bool) -> None:
    if as_json:
        typer.echo(json.dumps(exc.to_json(), indent=2))
    else:
        err = Console(stderr=True)
        err.print(f"[bold red]error[/]: {exc}", highlight=False, soft_wrap=True)
        if isinstance(exc, NoZoneOffers) and exc.alternatives:
            table = Table("region", "city", "km", "machine type", "zones", "on-demand $/h", "spot $/h")
            for m, alt in exc.alternatives:
                table.add_row(
                    alt.region,
                    alt.city,
                    f"{alt.distance_km:,.0f}",
                    m.name,
                    ", ".join(alt.zones),
                    f"{alt.price.on_demand:,.2f}" if alt.price else "-",
                    f"{alt.price.spot:,.2f}" if alt.price and alt.price.spot is not None else "-",
                )
            err.print(table)
    raise typer.Exit(exc.exit_code)


def _money(v: float | None) -> str:
    return "-" if v is None else f"${v:,.2f}"


def _print_human(out: dict, written: bool) -> None:
    con = Console()
    verb = "wrote" if written else "would write (--dry-run)"
    con.print(f"[bold]{verb}[/] {out['stack_file']}", highlight=False)
    con.print(
        f"{out['nodes']} x {out['machine_type']} ({out['gpus']} x {out['gpu_type']}), {out['capacity']}, "
        f"zones {', '.join(out['zones'])}; system {out['cidrs']['system']}, GPU {out['cidrs']['gpu']}",
        highlight=False,
    )
    con.print("\n[bold]Why[/]")
    for reason in out["reasons"]:
        con.print(f"  - {reason}", highlight=False)
    if out["warnings"]:
        con.print("\n[bold yellow]Warnings[/]")
        for warning in out["warnings"]:
            con.print(f"  - {warning}", highlight=False)

    quotas = Table("quota metric", "needed", "limit", "in use", "available", "status", title="Quotas at max size")
    for q in out["quotas"]:
        if "available" in q:
            status = "[green]ok[/]" if q["ok"] else "[red]too small[/]"
            row = [f"{q['limit']:g}", f"{q['usage']:g}", f"{q['available']:g}", status]
        else:
            row = ["", "", "", "not checked" if not q["checked"] else "run --check-quota"]
        quotas.add_row(q["metric"], f"{q['needed']:g}", *row)
    con.print(quotas)

    price = out["price_per_hour"]
    prices = Table("capacity", "$/h per node", "$/h at min", "$/h at max", title="Price per hour (list)")
    for name, p in price["by_capacity_type"].items():
        mark = " (chosen)" if name == price["capacity_type"] else ""
        prices.add_row(name + mark, _money(p["per_node"]), _money(p["at_min"]), _money(p["at_max"]))
    con.print(prices)
    con.print(f"  {price['covers']}", highlight=False)

    con.print("\n[bold]Next steps[/]")
    for step in out["next_steps"]:
        con.print(f"  {step}", highlight=False, soft_wrap=True)


def bootstrap_region(
    project: str = typer.Option(..., "--project", help="GCP project id the stack deploys into"),
    region: str = typer.Option(..., "--region", help="GCP region, e.g. europe-west4"),
    gpu: str = typer.Option(..., "--gpu", help="h100, h100-mega, h200, b200, a100, a100-80gb or l4"),
    gpus: int = typer.Option(..., "--gpus", help="GPUs the pool holds at its maximum size"),
    scheduler: str = typer.Option(
        "slurm", "--scheduler", help="slurm (Slurm on VMs) or kueue (a GKE cluster with Kueue and the autoscaler)"
    ),
    capacity: str = typer.Option("on-demand", "--capacity", help="reservation:NAME, spot, flex-start or on-demand"),
    name: str | None = typer.Option(None, "--name", help="stack name (default gcp-<region>-<gpu>; gke-... with kueue)"),
    stacks_dir: Path | None = typer.Option(  # noqa: B008
        None, "--stacks-dir", help="where the stack files live (default: the directory holding Pulumi.yaml)"
    ),
    check_quota: bool = typer.Option(
        False, "--check-quota", help="read the region's quota (google-cloud-compute) and fail if it is too small"
    ),
    as_json: bool = typer.Option(False, "--json", help="print one JSON object with every decision"),
    force: bool = typer.Option(False, "--force", help="overwrite an existing stack file"),
    dry_run: bool = typer.Option(False, "--dry-run", help="decide and print, write nothing"),
    machine_type: str | None = typer.Option(None, "--machine-type", help="use this machine type for the GPU"),
    zones: str | None = typer.Option(None, "--zones", help="comma-separated zones (default: all offering the type)"),
    cluster: str | None = typer.Option(None, "--cluster", help="cluster name (default <gpu>-<region abbrev>)"),
    reserve: list[str] = typer.Option(  # noqa: B008
        [], "--reserve", help="a CIDR used elsewhere (peered VPC, on-prem) to keep clear of; repeatable"
    ),
    label: list[str] = typer.Option(  # noqa: B008
        [], "--label", help="KEY=VALUE on every resource (team and cost-center: the policy pack requires them)"
    ),
    team: list[str] = typer.Option(  # noqa: B008
        [], "--team", help="kueue: a team (namespace and queues), equal shares of the pool; repeatable (default ml)"
    ),
    authorized_network: list[str] = typer.Option(  # noqa: B008
        [],
        "--authorized-network",
        help="kueue: a CIDR that may reach the API server besides the VPC (where `pulumi up` runs); repeatable",
    ),
    autoscaler_image: str | None = typer.Option(
        None, "--autoscaler-image", help="kueue: the autoscaler's image in your registry, <repository>@sha256:<digest>"
    ),
    upgrade_exclusion_start: str | None = typer.Option(
        None,
        "--upgrade-exclusion-start",
        help="kueue: RFC 3339 UTC start of GKE's upgrade exclusion (default: now)",
    ),
    compute_endpoint: str | None = typer.Option(
        None,
        "--compute-endpoint",
        envvar=ENDPOINT_ENV,
        help="Compute API endpoint for --check-quota (an http:// endpoint gets anonymous credentials)",
    ),
) -> None:
    """Write Pulumi.<STACK>.yaml for N GPUs in a region, and say what was decided and why."""
    from fleet.bootstrap.labels import parse_label
    from fleet.bootstrap.request import BootstrapRequest, parse_capacity
    from fleet.bootstrap.stackfiles import find_stacks_dir, render_stack_file, stack_path, write_stack_file

    try:
        request = BootstrapRequest(
            project=project,
            region=region,
            gpu=gpu,
            gpus=gpus,
            scheduler=scheduler,
            capacity=parse_capacity(capacity),
            stack=name,
            cluster=cluster,
            machine_type=machine_type,
            zones=tuple(dict.fromkeys(z.strip() for z in zones.split(",") if z.strip())) if zones else None,
            reserved_cidrs=tuple(reserve),
            labels=tuple(parse_label(text) for text in label),
            teams=tuple(team),
            authorized_networks=tuple(authorized_network),
            autoscaler_image=autoscaler_image,
            upgrade_exclusion_start=upgrade_exclusion_start or (_now_utc() if scheduler == "kueue" else None),
        )
        if stacks_dir is not None and not stacks_dir.is_dir():
            raise BadArgument("--stacks-dir", f"{stacks_dir} is not a directory")
        directory = stacks_dir if stacks_dir is not None else find_stacks_dir(Path.cwd())
        path = stack_path(directory, request.stack_name)
        plan, available, boot = _decide(request, directory, path, check_quota, compute_endpoint)
        if path.exists() and not force and not dry_run:
            raise BadArgument("--name", f"{path} exists; pass --force to overwrite it, or choose another --name")
    except BootstrapError as exc:
        _fail(exc, as_json)
        return

    in_project = (directory / "Pulumi.yaml").is_file()
    out = plan.to_json(path, available, boot, in_project)
    if not in_project:
        where = "" if stacks_dir is not None else " (nor does any directory above it)"
        out["warnings"].append(
            f"{directory} holds no Pulumi.yaml{where}: pulumi reads {path.name} beside the project's Pulumi.yaml, so"
            " move it into your gpu-fleet checkout, or pass --stacks-dir next time"
        )
    if not dry_run:
        argv = ["--project", project, "--region", region, "--gpu", gpu, "--gpus", str(gpus)]
        argv += [a for text in label for a in ("--label", text)]
        given = {"--machine-type": machine_type, "--zones": zones, "--cluster": cluster}
        argv += [a for flag, value in given.items() if value for a in (flag, value)]
        argv += [a for cidr in reserve for a in ("--reserve", cidr)]
        if request.scheduler != "slurm":
            argv += ["--scheduler", request.scheduler, *(a for t in team for a in ("--team", t))]
            argv += [a for c in authorized_network for a in ("--authorized-network", c)]
            argv += ["--autoscaler-image", str(autoscaler_image)]
            argv += ["--upgrade-exclusion-start", str(request.upgrade_exclusion_start)]
        command = shlex.join(["fleet", "bootstrap-region", *argv, "--capacity", capacity, "--name", request.stack_name])
        header = [
            f"Written by `{command}`: {out['nodes']} x {out['machine_type']} in {region}; see docs/bootstrap.md.",
            "`gcp:project` / `gcp:region` configure the Pulumi GCP provider and equal the spec's project / region.",
        ]
        write_stack_file(path, render_stack_file(project, region, plan.spec, header), force=True)
    if as_json:
        typer.echo(json.dumps(out | {"written": not dry_run}, indent=2))
    else:
        _print_human(out, written=not dry_run)


def _now_utc() -> str:
    """Now, RFC 3339 UTC to the second: a Kueue cluster's upgrade exclusion starts when its file is written."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _decide(
    request: BootstrapRequest, directory: Path, path: Path, check_quota: bool, endpoint: str | None
) -> tuple[RegionPlan, dict[str, RegionQuota] | None, str | None]:
    """Plan the stack; with check_quota, read the region (and the reservation) and fail when it does not fit."""
    from fleet.bootstrap.plan import fit_reservation, plan_region
    from fleet.bootstrap.stackfiles import read_stacks

    catalog = load_catalog()
    facts = read_stacks(directory, exclude=path)
    taken = facts.clusters.get(request.project, set())
    plan = plan_region(request, catalog, facts.ranges, taken)
    available = None
    if check_quota:
        from fleet.bootstrap.gce import find_reservation, read_region_quotas

        short = []
        if request.capacity.reservation:
            zones = request.zones or plan.zones
            info = find_reservation(request.project, zones, request.capacity.reservation, endpoint)
            plan = plan_region(fit_reservation(request, plan, info, catalog), catalog, facts.ranges, taken)
            plan = replace(plan, reservation=info)
            plan.reasons.append(f"reservation {info.name}: {info.free} of {info.count} slots free in {info.zone}")
            short += reservation_shortfall(info, plan.choice.nodes)
        available = read_region_quotas(request.project, request.region, endpoint)
        short += shortfalls(plan.quotas, available)
        if short:
            raise QuotaTooSmall(request.region, short)
    return plan, available, facts.project_bootstraps.get(request.project)


def bootstrap_project(
    project: str = typer.Option(..., "--project", help="GCP project id"),
    region: str = typer.Option(..., "--region", help="default location of the state bucket"),
    name: str | None = typer.Option(None, "--name", help="stack name (default gcp-<project>-bootstrap)"),
    stacks_dir: Path | None = typer.Option(  # noqa: B008
        None, "--stacks-dir", help="where the stack files live (default: the directory holding Pulumi.yaml)"
    ),
    bucket_location: str | None = typer.Option(
        None, "--bucket-location", help="state bucket location: a region or multi-region (US, EU, ASIA)"
    ),
    label: list[str] = typer.Option(  # noqa: B008
        [], "--label", help="KEY=VALUE on every resource (team and cost-center: the policy pack requires them)"
    ),
    force: bool = typer.Option(False, "--force", help="overwrite an existing stack file"),
    as_json: bool = typer.Option(False, "--json", help="print one JSON object"),
) -> None:
    """Write a project-bootstrap stack file: APIs, Pulumi state bucket, the autoscaler's custom role."""
    from fleet.bootstrap.labels import check_labels, label_warnings, parse_label
    from fleet.bootstrap.request import check_stack_name
    from fleet.bootstrap.stackfiles import find_stacks_dir, render_stack_file, stack_path, write_stack_file
    from fleet.spec.project import ProjectSpecError, load_project_spec

    stack = name or f"gcp-{project}-bootstrap"
    raw: dict = {"kind": "project-bootstrap", "project": project, "region": region}
    if bucket_location:
        raw["state_bucket"] = {"location": bucket_location}
    try:
        if name is not None:  # the default derives from --project, which the spec checks
            check_stack_name(name)
        labels = tuple(parse_label(text) for text in label)
        check_labels(labels)
        if labels:
            raw["labels"] = dict(labels)
        try:
            spec = load_project_spec(raw)
        except ProjectSpecError as exc:
            path_, reason = exc.errors[0]
            flag = PROJECT_FLAGS.get(path_.partition(".")[0], "--label")
            raise BadArgument(flag, reason) from None
        if stacks_dir is not None and not stacks_dir.is_dir():
            raise BadArgument("--stacks-dir", f"{stacks_dir} is not a directory")
        path = stack_path(stacks_dir if stacks_dir is not None else find_stacks_dir(Path.cwd()), stack)
        header = [
            "Once per project, before any fleet stack (see docs/bootstrap.md): deploy with a local backend,",
            f"then point the fleet stacks at the bucket: pulumi login gs://{spec.bucket_name()}",
        ]
        write_stack_file(path, render_stack_file(project, region, raw, header), force=force)
    except BootstrapError as exc:
        _fail(exc, as_json)
        return
    steps = [
        "pulumi login --local   # the state bucket does not exist yet",
        f"pulumi stack init {stack}",
        f"fleet synth --config {path} --json",
        f"fleet policy check --config {path}   # the guardrails pulumi up enforces with policies/",
        f"pulumi up --stack {stack}",
        f"pulumi login gs://{spec.bucket_name()}   # then bootstrap regions: fleet bootstrap-region ...",
    ]
    warnings = label_warnings(dict(labels))
    out = {"stack": stack, "stack_file": str(path), "state_bucket": spec.bucket_name(), "warnings": warnings,
           "next_steps": steps}  # fmt: skip
    if as_json:
        typer.echo(json.dumps(out, indent=2))
        return
    con = Console()
    con.print(f"[bold]wrote[/] {path}", highlight=False)
    if warnings:
        con.print("\n[bold yellow]Warnings[/]")
        for warning in warnings:
            con.print(f"  - {warning}", highlight=False, soft_wrap=True)
    con.print("\n[bold]Next steps[/]")
    for step in steps:
        con.print(f"  {step}", highlight=False, soft_wrap=True)


def register(app: typer.Typer) -> None:
    app.command("bootstrap-region")(bootstrap_region)
    app.command("bootstrap-project")(bootstrap_project)
