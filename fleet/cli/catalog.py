"""`fleet catalog`: look up machine types, zones and list prices in the shipped catalog."""

from __future__ import annotations

import json

import typer
from rich.console import Console
from rich.table import Table

from fleet.catalog import UnknownMachineType, load_catalog

catalog_app = typer.Typer(help="Machine types, zones and list prices in the shipped GCP catalog.", no_args_is_help=True)


@catalog_app.command("list")
def list_machines(
    region: str | None = typer.Option(None, help="only types offered in this region, with its prices"),
    gpu: str | None = typer.Option(None, help="only this GPU (h100, h100-mega, h200, b200, a100, a100-80gb, l4)"),
    as_json: bool = typer.Option(False, "--json", help="print JSON instead of a table"),
) -> None:
    """List machine types (optionally those offered in REGION, with on-demand and spot $/h)."""
    cat = load_catalog()
    rows = []
    for m in sorted(cat.machines(), key=lambda m: m.name):
        if gpu and m.gpu.short != gpu:
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
    table = Table(
        "machine type", "GPU", "GPUs", "vCPU", "GiB", "NICs", "zones" if region else "regions", "$/h", "spot $/h"
    )
    for r in rows:
        table.add_row(
            r["machine_type"],
            r["gpu"],
            str(r["gpus"]),
            str(r["vcpus"]),
            str(r["memory_gib"]),
            str(r["nics"]),
            ", ".join(r["zones"]) if region else str(len(r["zones"])),
            f"{r['on_demand_usd_h']:.2f}" if r["on_demand_usd_h"] else "-",
            f"{r['spot_usd_h']:.2f}" if r["spot_usd_h"] else "-",
        )
    Console().print(table)


@catalog_app.command("show")
def show(machine_type: str) -> None:
    """Everything the catalog knows about one machine type, as JSON."""
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
    typer.echo(json.dumps(out, indent=2))


def register(app: typer.Typer) -> None:
    app.add_typer(catalog_app, name="catalog")
