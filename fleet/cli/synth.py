"""`fleet synth`: run the stack program under Pulumi's mocks and print the resource tree and the fleet's price.

No Pulumi CLI, no plugins, no credentials.  `--json` prints one object
`{"stack", "resources": [{"urn", "type", "name", "parent", "inputs", ...}], "outputs", "cost"}`;
secrets print as "[secret]".  Exit 2 on an invalid spec, with `field.path: reason` lines on stderr.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer


def _tree(resources: list[dict[str, Any]], stack: str) -> Any:
    from rich.tree import Tree

    root = Tree(f"[bold]stack[/] {stack}")
    nodes: dict[str | None, Any] = {}
    by_parent: dict[str | None, list[dict[str, Any]]] = {}
    urns = {r["urn"] for r in resources}
    for r in resources:
        by_parent.setdefault(r["parent"] if r["parent"] in urns else None, []).append(r)

    def add(parent_node: Any, parent_urn: str | None) -> None:
        for r in sorted(by_parent.get(parent_urn, []), key=lambda r: (r["custom"], r["name"])):
            style = "bold cyan" if not r["custom"] else ""
            label = f"[{style}]{r['name']}[/] [dim]{r['type']}[/]" if style else f"{r['name']} [dim]{r['type']}[/]"
            nodes[r["urn"]] = node = parent_node.add(label)
            add(node, r["urn"])

    add(root, None)
    return root


def _price_table(cost: dict[str, Any]) -> Any:
    from rich.table import Table

    table = Table(title=f"list price, {cost.get('region', '')} ($/h)")
    for col in (
        "cluster/pool",
        "machine type",
        "capacity",
        "min",
        "max",
        "unit $/h",
        "$/h at min",
        "$/h at max",
        "source",
    ):
        table.add_column(col, justify="right" if col[0] in "m$u" and col != "machine type" else "left")
    for p in cost["by_pool"]:
        unit = p["unit_usd_per_hour"]
        table.add_row(
            f"{p['cluster']}/{p['pool']}",
            p["machine_type"],
            p["capacity_type"],
            str(p["min_nodes"]),
            str(p["max_nodes"]),
            f"{unit:.2f}" if unit is not None else "-",
            f"{p['hourly_usd_at_min']:,.2f}",
            f"{p['hourly_usd_at_max']:,.2f}",
            p["price_source"],
        )
    table.add_row(
        "total", "", "", "", "", "", f"{cost['hourly_usd_at_min']:,.2f}", f"{cost['hourly_usd_at_max']:,.2f}", ""
    )
    return table


def synth(
    stack: Annotated[
        str | None, typer.Option("--stack", help="stack name: reads Pulumi.NAME.yaml from cwd or the repo root")
    ] = None,
    config: Annotated[
        Path | None, typer.Option("--config", help="path of a stack file (Pulumi.<stack>.yaml format)")
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="print one JSON object instead of the tree and price table")
    ] = False,
) -> None:
    """Run the stack program under Pulumi's mocks: resource tree, outputs and hourly price."""
    from fleet.spec.load import SpecError, stack_file
    from fleet.synth.run import synth_file

    if (stack is None) == (config is None):
        typer.echo("error: --stack / --config: give exactly one of them", err=True)
        raise typer.Exit(2)
    try:
        path = config if config is not None else stack_file(stack or "")
        result = synth_file(path, stack=stack)
    except SpecError as exc:
        for line in exc.lines():
            typer.echo(f"error: {line}", err=True)
        raise typer.Exit(2) from None
    except (ValueError, RuntimeError) as exc:  # component argument checks, SynthError (duplicate URNs)
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    out = result.to_json()
    for warning in out["warnings"]:  # as `pulumi up` shows the program's diagnostics
        typer.echo(f"warning: {warning}", err=True)
    if as_json:
        typer.echo(json.dumps(out, indent=2, sort_keys=True, default=str))
        return
    from rich.console import Console

    console = Console()
    if not console.is_terminal:
        console = Console(width=160)
    console.print(_tree(out["resources"], out["stack"]))
    console.print(f"{len(out['resources'])} resources")
    for pool in out["outputs"].get("autoscaler_inventory", []):
        if pool.get("pool_kind") == "capi-machinedeployment":
            group = f"MachineDeployment {pool['capi_namespace']}/{pool['capi_machine_deployment']}"
        else:
            group = "MIGs " + ", ".join((pool.get("instance_groups") or {}).values())
        console.print(
            f"pool {pool['cluster']}/{pool['name']}: {pool['min_nodes']}-{pool['max_nodes']} x {pool['machine_type']}"
            f" ({pool['capacity_type']}), nodes {pool['node_name_prefix']}-<i>, {group}"
        )
    if out["cost"]["by_pool"]:
        console.print(_price_table(out["cost"]))
        for item in out["cost"].get("excluded", []):
            console.print(f"[dim]not priced: {item}[/]")


def register(app: typer.Typer) -> None:
    app.command("synth")(synth)
