"""`fleet catalog`: look up machine types, zones and list prices in the shipped catalog."""

from __future__ import annotations

import json

import typer

from fleet.catalog import Catalog, UnknownMachineType, load_catalog
from fleet.catalog.compare import (
    CAPACITIES,
    SOURCES,
    CompareError,
    compare,
    gpu_matches,
    known_gpus,
    parse_list,
    unpriced,
)
from fleet.cli.tables import print_table

catalog_app = typer.Typer(help="Machine types, zones and list prices in the shipped GCP catalog.", no_args_is_help=True)


def _list_filters(cat: Catalog, region: str | None, gpu: str | None) -> tuple[str | None, tuple[str, ...]]:
    """`catalog list`'s --region (one, offered by some machine type) and --gpu (as `compare` takes them: any case,
    a comma-separated list, `h100` for every H100); CompareError naming the option otherwise."""
    gpus = parse_list(gpu, "--gpu", known_gpus(cat))
    if region is None:
        return None, gpus
    regions = parse_list(region, "--region")
    if len(regions) > 1:
        raise CompareError(f"--region: one region (its zones and prices are shown), got {', '.join(regions)}")
    known_regions = {r for m in cat.machines() for r in m.zones}
    if regions[0] not in known_regions:
        raise CompareError(f"--region: no machine type of the catalog is offered in {regions[0]}")
    return regions[0], gpus


@catalog_app.command("list")
def list_machines(
    region: str | None = typer.Option(None, help="only types offered in this region, with its prices"),
    gpu: str | None = typer.Option(
        None, help="only these GPUs, comma-separated (h100 takes h100 and h100-mega; h200, b200, a100, l4, ...)"
    ),
    as_json: bool = typer.Option(False, "--json", help="print JSON instead of a table"),
) -> None:
    """List machine types (optionally those offered in REGION, with on-demand and spot $/h)."""
    cat = load_catalog()
    try:
        region, gpus = _list_filters(cat, region, gpu)
    except CompareError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    rows = []
    for m in sorted(cat.machines(), key=lambda m: m.name):
        if not gpu_matches(m.gpu, gpus):
            continue
        if region and not m.zones_in(region):
            continue
        price = m.price(region) if region else None
        rows.append(
            {
                "machine_type": m.name,
                "gpu": m.gpu.accelerator_type,
                "gpus": m.gpu_count,
                "vcpus": m.vcpus,
                "memory_gib": m.memory_gib,
                "nics": m.nics.total,
                "zones": list(m.zones_in(region)) if region else sorted(m.zones),
                "on_demand_usd_h": price.on_demand if price else None,
                "spot_usd_h": price.spot if price else None,
            }
        )
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    headers = [
        "machine type",
        "GPU",
        "GPUs",
        "vCPU",
        "GiB",
        "NICs",
        "zones" if region else "regions",
        "$/h",
        "spot $/h",
    ]
    cells = [
        [
            r["machine_type"],
            r["gpu"],
            str(r["gpus"]),
            str(r["vcpus"]),
            str(r["memory_gib"]),
            str(r["nics"]),
            ", ".join(r["zones"]) if region else str(len(r["zones"])),
            f"{r['on_demand_usd_h']:.2f}" if r["on_demand_usd_h"] else "-",
            f"{r['spot_usd_h']:.2f}" if r["spot_usd_h"] else "-",
        ]
        for r in rows
    ]
    print_table(headers, cells)


@catalog_app.command("show")
def show(
    machine_type: str,
    as_json: bool = typer.Option(False, "--json", help="print JSON instead of the human view"),
) -> None:
    """Everything the catalog knows about one machine type: hardware, fabric, zones and prices per region."""
    try:
        m = load_catalog().machine(machine_type)
    except UnknownMachineType as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    out = {
        "machine_type": m.name,
        "gpu": vars(m.gpu),
        "gpu_count": m.gpu_count,
        "vcpus": m.vcpus,
        "memory_gib": m.memory_gib,
        "local_ssd_gib": m.local_ssd_gib,
        "nics": {**vars(m.nics), "total": m.nics.total},
        "compact_placement_max_vms": m.compact_placement_max_vms,
        "flex_start_compact": m.flex_start_compact,
        "zones": m.zones,
        "prices": {r: vars(p) for r, p in m.prices.items()},
    }
    if as_json:
        typer.echo(json.dumps(out, indent=2))
        return
    g = m.gpu
    nics = m.nics
    fabric = "" if nics.fabric == "none" else f", fabric {nics.fabric}"
    typer.echo(
        f"{m.name}: {m.gpu_count} x {g.accelerator_type} ({g.memory_gib} GiB, {g.bf16_dense_tflops:g} dense BF16 "
        f"TFLOPS each), {m.vcpus} vCPU, {m.memory_gib} GiB, local SSD {m.local_ssd_gib} GiB"
    )
    typer.echo(
        f"NICs: {nics.total} ({nics.gvnic} gVNIC, {nics.gpu_nics} GPUDirect, {nics.rdma_nics} RDMA{fabric}); "
        f"compact placement up to {m.compact_placement_max_vms or 'not supported'}"
        f"{' VMs' if m.compact_placement_max_vms else ''}; flex-start + compact: "
        f"{'yes' if m.flex_start_compact else 'no'}"
    )
    cells = []
    for region in sorted(set(m.zones) | set(m.prices)):
        p = m.prices.get(region)
        cells.append(
            [
                region,
                ", ".join(m.zones.get(region, ())) or "(not offered)",
                _usd(p.on_demand if p else None),
                _usd(p.spot if p else None),
                _usd(p.commit_1y if p else None),
                _usd(p.commit_3y if p else None),
                p.source if p else "-",
            ]
        )
    print_table(["region", "zones", "on-demand $/h", "spot $/h", "1y $/h", "3y $/h", "price source"], cells)


def _usd(v: float | None) -> str:
    return f"{v:.2f}" if v is not None else "-"


@catalog_app.command("compare")
def compare_cmd(
    gpu: str | None = typer.Option(None, help="comma-separated GPUs (h100 takes h100 and h100-mega), default all"),
    region: str | None = typer.Option(None, help="comma-separated regions, default every offered region"),
    capacity: str = typer.Option(",".join(CAPACITIES), help="comma-separated: on-demand, spot, 1y, 3y"),
    as_json: bool = typer.Option(False, "--json", help="print JSON instead of a table"),
) -> None:
    """$/GPU-hour and $/PFLOP-hour (dense BF16) for every machine type and offered region, cheapest first."""
    cat = load_catalog()
    try:
        gpus = parse_list(gpu, "--gpu", known_gpus(cat))
        regions = parse_list(region, "--region")
        caps = parse_list(capacity, "--capacity", CAPACITIES)
        known_regions = {r for m in cat.machines() for r in m.zones}
        unknown = [r for r in regions if r not in known_regions]
        if unknown:
            raise CompareError(f"--region: no machine type of the catalog is offered in {', '.join(unknown)}")
    except CompareError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    rows = compare(cat, gpus=gpus, regions=regions, capacities=caps)
    missing = unpriced(cat, gpus=gpus, regions=regions)
    if as_json:
        doc = {
            "sources": SOURCES,
            "rows": [r.to_json() for r in rows],
            "offered_unpriced": [{"machine_type": m, "region": r} for m, r in missing],
        }
        typer.echo(json.dumps(doc, indent=2))
        return
    if not rows:
        typer.echo("no priced offering matches", err=True)
        return
    cells = [
        [
            r.machine_type,
            r.gpu,
            str(r.gpus),
            r.region,
            r.capacity,
            f"{r.usd_per_hour:.2f}",
            f"{r.usd_per_gpu_hour:.3f}",
            f"{r.usd_per_pflop_hour:.3f}",
            r.price_source,
        ]
        for r in rows
    ]
    headers = ["machine type", "GPU", "GPUs", "region", "capacity", "$/h", "$/GPU-h", "$/PFLOP-h", "price source"]
    print_table(headers, cells, title="cheapest dense-BF16 PFLOP-hour first")
    if missing:
        typer.echo("offered but not priced in the catalog: " + ", ".join(f"{m} in {r}" for m, r in missing))
    typer.echo("sources: " + "; ".join(f"{k}: {v}" for k, v in SOURCES.items()))


def register(app: typer.Typer) -> None:
    app.add_typer(catalog_app, name="catalog")
