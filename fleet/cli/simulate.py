"""`fleet simulate`: replay a GPU job trace through gpu-fleet and the baseline policies on the sim cloud.

Zero credentials: the simulated cloud, the real planner and the catalog's list prices.  Human output is
a table per policy; `--json` prints `{"scenario": {...}, "policies": {NAME: {...}}}`; `--report PATH`
writes an HTML page (or a PNG when PATH ends in .png).  Every flag is checked before the replay starts: `--report`
(its directory must exist; an existing file is replaced only with `--force`), and the bounds that keep a replay
finite (`--reserved-nodes` at most one zonal MIG, a boot that beats ResumeTimeout, a stockout rate below 1)."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from importlib import resources
from pathlib import Path
from typing import Annotated, Any

import typer

from fleet.catalog.model import DEFAULT_READY_S
from fleet.input.limits import MAX_RESERVED_NODES, MAX_STACK_OUTPUT_BYTES
from fleet.input.scenario_bounds import reserved_nodes_problem, stockout_rate_problem

POLICY_HELP = (
    "gpu-fleet, static-peak, slurm-power-save, ca-like, karpenter-like, exact-fit, a comma-separated list, or all"
)
FLAG_OF = {
    "machine_family": "--machine-family",
    "region": "--region",
    "reserved_nodes": "--reserved-nodes",
    "spot_fraction": "--spot-fraction",
    "boot_seconds": "--boot-seconds",
    "stockout_rate": "--stockout-rate",
    "stockout_window_s": "--stockout-window",
    "stockout_mode": "--stockout-mode",
    "preemption_rate_per_hour": "--preemption-rate",
    "checkpoint_interval_s": "--checkpoint-interval",
    "reservation_rate": "--reservation-rate",
    "slurm_launch_pass_s": "--slurm-launch-pass",
    "seed": "--seed",
    "trace": "--trace",
}


def demo_trace() -> Path:
    """The small demo trace shipped in the package (see autoscaler/replay/data/SOURCE.md)."""
    return Path(str(resources.files("autoscaler.replay").joinpath("data", "demo.csv")))


def simulate(
    trace: Annotated[
        str | None,
        typer.Option(
            "--trace",
            help="CSV with submission_time,duration,num_gpu (ITP format), or synth:REGIME[:SEED] (a generated trace: "
            "short, long-tail, bursty-gangs, diurnal, steady; SEED defaults to --seed); default: the shipped demo",
        ),
    ] = None,
    policy: str = typer.Option("all", "--policy", help=POLICY_HELP),
    machine_family: str = typer.Option("a3-highgpu", "--machine-family", help="catalog family (1g/2g/4g/8g shapes)"),
    region: str = typer.Option("us-central1", "--region", help="region; every zone of it offering the family"),
    reserved_nodes: int = typer.Option(
        0, "--reserved-nodes", help=f"reserved 8-GPU nodes in one zone, billed always (at most {MAX_RESERVED_NODES:,})"
    ),
    spot_fraction: float = typer.Option(0.0, "--spot-fraction", help="share of jobs (seeded) that tolerate spot"),
    boot_seconds: float = typer.Option(DEFAULT_READY_S, "--boot-seconds", help="launch request to node ready, seconds"),
    stockout_rate: float = typer.Option(
        0.0, "--stockout-rate", help="probability a launch in an offering stocks out (below 1)"
    ),
    stockout_window: float = typer.Option(1800.0, "--stockout-window", help="seconds a stocked-out offering stays out"),
    stockout_mode: str = typer.Option(
        "timeline", "--stockout-mode", help="timeline (same outages whoever asks) or per-attempt (each try may fail)"
    ),
    preemption_rate: float = typer.Option(0.01, "--preemption-rate", help="spot preemptions per node-hour"),
    checkpoint_interval: float = typer.Option(
        1800.0, "--checkpoint-interval", help="seconds between checkpoints of spot-tolerant jobs (0: restart)"
    ),
    reservation_rate: str = typer.Option("commit-1y", "--reservation-rate", help="commit-1y or on-demand"),
    slurm_launch_pass: Annotated[
        float | None,
        typer.Option(
            "--slurm-launch-pass",
            help="seconds between slurmctld's passes that launch a job bound to a booting node (default: 30, as "
            "measured on 22.05.8; 0: at once)",
        ),
    ] = None,
    seed: int = typer.Option(0, "--seed", help="seed of every random choice (spot-tolerant jobs, stockouts, ...)"),
    ca_expander: str = typer.Option(
        "random", "--ca-expander", help="ca-like's expander: random (CA's default), least-waste, price or priority"
    ),
    wait_value: Annotated[
        float | None,
        typer.Option("--wait-value", help="gpu-fleet: value in USD of one GPU-hour a job spends waiting (the knob)"),
    ] = None,
    frontier: Annotated[
        str | None,
        typer.Option(
            "--frontier",
            help="also replay gpu-fleet at each of these comma-separated --wait-value settings (W; "
            "W:no-warm-cap for that wait value without the warm-node cap; W:shared with shared nodes; both flags "
            "may be given)",
        ),
    ] = None,
    no_warm_cap: bool = typer.Option(
        False,
        "--no-warm-cap",
        help="gpu-fleet: no warm-node cap (Policy.warm_cap false): every idle node of a kept shape stays for its "
        "break-even time",
    ),
    no_preempt_spot: bool = typer.Option(
        False,
        "--no-preempt-spot",
        help="gpu-fleet: no partition-priority preemption of spot-tolerant work off the reservation "
        "(Policy.preempt_spot false): the on-demand overflow is not held for it",
    ),
    no_late_bind: bool = typer.Option(
        False,
        "--no-late-bind",
        help="gpu-fleet: no strict late binding (Policy.late_bind false): Slurm binds each job to a powered-down "
        "name at submit (the job_submit.lua's --prefer) instead of the daemon booting held nodes for it",
    ),
    no_gang_gate: bool = typer.Option(
        False,
        "--no-gang-gate",
        help="gpu-fleet: no gang gate (Policy.gang_gate false): slurmctld tries a gang at submission, and in a pool "
        "the daemon does not hold it gets the nodes that are up plus powered-down names",
    ),
    share_nodes: bool = typer.Option(
        False,
        "--share-nodes",
        help="gpu-fleet: small work shares larger nodes of its machine family at the same $/GPU-h "
        "(Policy.share_nodes): the largest shape is kept warm for every size and the job_submit.lua's constraint "
        "allows the whole family",
    ),
    scheduler: str = typer.Option(
        "slurm", "--scheduler", help="slurm (the simulated slurmctld) or kueue (Kueue's admission gate, Kubernetes)"
    ),
    kueue_teams: Annotated[
        int | None, typer.Option("--kueue-teams", help="kueue: teams (ClusterQueues in one cohort), default 2")
    ] = None,
    kueue_quota_gpus: Annotated[
        int | None,
        typer.Option(
            "--kueue-quota-gpus",
            help="kueue: nominal GPU quota the teams share evenly (default: the trace's p95 concurrent demand)",
        ),
    ] = None,
    kueue_borrowing_limit: Annotated[
        int | None,
        typer.Option("--kueue-borrowing-limit", help="kueue: GPUs a team may borrow from the cohort (default: no cap)"),
    ] = None,
    kueue_queues: Annotated[
        Path | None,
        typer.Option(
            "--kueue-queues",
            help="kueue: JSON of a stack's clusters.<name>.kueue_queues output (replaces teams, quota, borrowing)",
        ),
    ] = None,
    as_json: bool = typer.Option(False, "--json", help="print the result as JSON"),
    report: Annotated[
        Path | None, typer.Option("--report", help="write an HTML report (PNG if PATH ends in .png)")
    ] = None,
    force: bool = typer.Option(False, "--force", help="replace an existing --report file"),
) -> None:
    """Replay a job trace through the real planner and the baselines on the simulated cloud."""
    from pydantic import ValidationError

    from autoscaler.replay.baselines.ca_like import EXPANDERS
    from autoscaler.replay.run import (
        PolicyOptions,
        gpu_fleet_policy,
        parse_frontier,
        resolve_policies,
        run_frontier,
        run_scenario,
    )
    from autoscaler.replay.scenario import Scenario
    from autoscaler.replay.state import ReplayError
    from autoscaler.replay.synth import SynthError, load_source
    from autoscaler.replay.trace import TraceError
    from fleet.input import InputError, check_output_file

    source = trace or str(demo_trace())
    try:
        if report is not None:
            check_output_file(report, option="--report", force=force)
        if scheduler not in ("slurm", "kueue"):
            raise ValueError(f"--scheduler: unknown scheduler {scheduler!r} (known: slurm, kueue)")
        _check_bounds(scheduler, reserved_nodes, boot_seconds, stockout_rate)
        kueue = _kueue_setup(scheduler, kueue_teams, kueue_quota_gpus, kueue_borrowing_limit, kueue_queues, seed)
        if no_preempt_spot and scheduler != "slurm":
            raise ValueError("--no-preempt-spot: only with --scheduler slurm (it turns off Slurm's preemption)")
        if no_late_bind and scheduler != "slurm":
            raise ValueError("--no-late-bind: only with --scheduler slurm (late binding is the Slurm daemon's)")
        if no_gang_gate and scheduler != "slurm":
            raise ValueError("--no-gang-gate: only with --scheduler slurm (the gate is the Slurm daemon's)")
        if share_nodes and scheduler != "slurm":
            raise ValueError("--share-nodes: only with --scheduler slurm (shared nodes are the Slurm daemon's)")
        if slurm_launch_pass is not None and scheduler != "slurm":
            raise ValueError("--slurm-launch-pass: only with --scheduler slurm (it is slurmctld's)")
        names = resolve_policies(policy, scheduler)
        if ca_expander not in EXPANDERS:
            raise ValueError(f"--ca-expander: unknown expander {ca_expander!r} (known: {', '.join(EXPANDERS)})")
        settings = parse_frontier(frontier) if frontier else []
        if no_warm_cap:  # the flag is gpu-fleet's setting: its frontier points go without the cap too
            settings = [replace(st, warm_cap=False) for st in settings]
        if share_nodes:
            settings = [replace(st, share_nodes=True) for st in settings]
        if scheduler != "slurm" and any(st.share_nodes for st in settings):
            raise ValueError("--frontier: W:shared only with --scheduler slurm (shared nodes are the Slurm daemon's)")
        options = PolicyOptions(
            ca_expander=ca_expander,
            wait_value_usd_per_gpu_hour=wait_value,
            warm_cap=not no_warm_cap,
            preempt_spot=not no_preempt_spot,
            late_bind=not no_late_bind,
            share_nodes=share_nodes,
            gang_gate=not no_gang_gate,
        )
        if wait_value is not None and not wait_value >= 0:
            raise ValueError(f"--wait-value: must be >= 0 USD per GPU-hour, got {wait_value:g}")
        source, jobs = load_source(source, seed)
        _check_kueue_teams(kueue, kueue_teams, jobs)
        scenario = Scenario(
            trace=source,
            machine_family=machine_family,
            region=region,
            reserved_nodes=reserved_nodes,
            reservation_rate=reservation_rate,  # type: ignore[arg-type]
            spot_fraction=spot_fraction,
            boot_seconds=boot_seconds,
            stockout_rate=stockout_rate,
            stockout_window_s=stockout_window,
            stockout_mode=stockout_mode,  # type: ignore[arg-type]
            preemption_rate_per_hour=preemption_rate,
            checkpoint_interval_s=checkpoint_interval,
            seed=seed,
            **({} if slurm_launch_pass is None else {"slurm_launch_pass_s": slurm_launch_pass}),
        )
        if wait_value is not None or settings:
            probe = wait_value if wait_value is not None else settings[0].wait_value_usd_per_gpu_hour
            gpu_fleet_policy(scenario, probe)  # knob present?
    except ValidationError as exc:
        for err in exc.errors():
            typer.echo(f"error: {_cli_message(err)}", err=True)
        raise typer.Exit(2) from None
    except InputError as exc:
        for line in exc.lines():
            typer.echo(f"error: {line}", err=True)
        raise typer.Exit(2) from None
    except (TraceError, SynthError, ValueError) as exc:
        typer.echo(f"error: {exc}" if str(exc).startswith("--") else f"error: --trace: {exc}", err=True)
        raise typer.Exit(2) from None

    progress = None
    if not as_json:
        from rich.console import Console

        err_console = Console(stderr=True)

        def progress(name: str, m: dict) -> None:
            err_console.print(f"[dim]replayed {name} in {m['replay_wall_s']:.1f} s[/dim]")

    try:
        result = run_scenario(jobs, scenario, names, progress=progress, options=options, kueue=kueue)
        if settings:
            run_frontier(
                result,
                settings,
                progress=progress,
                preempt_spot=not no_preempt_spot,
                late_bind=not no_late_bind,
                gang_gate=not no_gang_gate,
            )
    except ReplayError as exc:
        typer.echo(f"error: replay failed: {exc}", err=True)
        raise typer.Exit(1) from None
    except ValueError as exc:  # the trace does not fit the machine family
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    if report is not None:
        _write_report(result, report, force)
    if as_json:
        typer.echo(json.dumps(result.as_json(), indent=2))
        return
    _print_table(result, report)


def _check_bounds(scheduler: str, reserved_nodes: int, boot_seconds: float, stockout_rate: float) -> None:
    """Refuse (ValueError naming the flag) the values a replay never finishes with or cannot hold in memory."""
    from autoscaler.replay.scenario import Scenario
    from autoscaler.replay.simslurm import SlurmSettings

    for problem in (reserved_nodes_problem("--reserved-nodes", reserved_nodes), stockout_rate_problem(stockout_rate)):
        if problem:
            raise ValueError(problem)
    timeout = SlurmSettings().resume_timeout_s
    register = Scenario.model_fields["register_seconds"].default
    # a non-finite boot is the scenario's to refuse ("Input should be a finite number")
    if scheduler == "slurm" and math.isfinite(boot_seconds) and boot_seconds + register >= timeout:
        raise ValueError(
            f"--boot-seconds: must be below {timeout - register:g} s with --scheduler slurm: slurmctld's ResumeTimeout "
            f"({timeout:g} s, the spec default) marks a node DOWN that has not registered by then ({register:g} s "
            f"after it booted), so every launch would fail, got {boot_seconds:g}"
        )


def _check_kueue_teams(kueue: Any, teams: int | None, jobs: list[Any]) -> None:
    """`--kueue-teams` beyond the default quota (no `--kueue-quota-gpus`): name the teams flag, not the quota one."""
    from autoscaler.replay.kueue_gate import default_quota_gpus

    if kueue is None or teams is None or kueue.quota_gpus is not None or kueue.queues:
        return
    quota = default_quota_gpus(jobs)
    if teams > quota:
        raise ValueError(
            f"--kueue-teams: {teams:,} teams cannot each get a nominal GPU quota out of the default {quota:,} GPUs "
            "(the trace's p95 concurrent demand): give fewer teams, or a larger --kueue-quota-gpus"
        )


def _write_report(result: Any, report: Path, force: bool) -> None:
    """The HTML page (PNG when `report` ends in .png), written atomically; exit 2 naming --report on failure."""
    from autoscaler.replay.report import render_report
    from fleet.input import InputError, write_atomic

    try:
        write_atomic(report, render_report(result, png=report.suffix.lower() == ".png"), option="--report", force=force)
    except InputError as exc:
        for line in exc.lines():
            typer.echo(f"error: {line}", err=True)
        raise typer.Exit(2) from None


def _kueue_setup(
    scheduler: str,
    teams: int | None,
    quota: int | None,
    borrowing: int | None,
    queues_file: Path | None,
    seed: int,
) -> Any:
    """The `--kueue-*` flags -> a `KueueSetup` (None on the Slurm path); bad values raise ValueError naming the flag."""
    from autoscaler.replay.kueue_gate import KueueSetup, queues_from_output

    given = {
        "--kueue-teams": teams,
        "--kueue-quota-gpus": quota,
        "--kueue-borrowing-limit": borrowing,
        "--kueue-queues": queues_file,
    }
    if scheduler != "kueue":
        flags = [f for f, v in given.items() if v is not None]
        if flags:
            raise ValueError(f"{flags[0]}: only with --scheduler kueue")
        return None
    if teams is not None and teams < 1:
        raise ValueError(f"--kueue-teams: must be >= 1, got {teams}")
    if quota is not None and quota < 1:
        raise ValueError(f"--kueue-quota-gpus: must be >= 1 GPU, got {quota}")
    if borrowing is not None and borrowing < 0:
        raise ValueError(f"--kueue-borrowing-limit: must be >= 0 GPUs, got {borrowing}")
    if queues_file is None:
        return KueueSetup(teams=teams or 2, quota_gpus=quota, borrowing_limit=borrowing, seed=seed)
    clash = [f for f, v in given.items() if v is not None and f != "--kueue-queues"]
    if clash:
        raise ValueError(f"{clash[0]}: not with --kueue-queues (the file's ClusterQueues set teams and quotas)")
    from fleet.input import InputError, load_json

    try:
        data = load_json(queues_file, what="stack output file", max_bytes=MAX_STACK_OUTPUT_BYTES)
    except InputError as exc:
        raise ValueError("; ".join(f"--kueue-queues: {line}" for line in exc.lines())) from None
    queues = queues_from_output(data, f"--kueue-queues: {queues_file}")
    return KueueSetup(queues=tuple(queues), queues_source=f"--kueue-queues {queues_file}", seed=seed)


def _cli_message(err: Any) -> str:
    """A pydantic error as `--flag: reason` (model-level checks say `field: reason` themselves)."""
    msg = str(err["msg"]).removeprefix("Value error, ")
    if err["loc"]:
        field = str(err["loc"][0])
        return f"{FLAG_OF.get(field, field)}: {msg}"
    field, sep, rest = msg.partition(": ")
    return f"{FLAG_OF[field]}: {rest}" if sep and field in FLAG_OF else msg


def _gpu_fleet_setting(settings: dict[str, Any]) -> str:
    """One line saying which operator settings gpu-fleet ran with (the rule derived the rest from the history)."""
    w = settings.get("wait_value_usd_per_gpu_hour")
    value = "each shape's on-demand $/GPU-h" if w is None else f"${w:g}/GPU-h"
    cap = "on" if settings.get("warm_cap", True) else "off (--no-warm-cap)"
    preempt = (
        ""
        if "preempt_spot" not in settings
        else (
            ", reservation taken back from spot work "
            + ("on" if settings["preempt_spot"] else "off (--no-preempt-spot)")
        )
    )
    late = (
        ""
        if "late_bind" not in settings
        else ", late binding " + ("on" if settings["late_bind"] else "off (--no-late-bind)")
    )
    shared = ", shared nodes on (--share-nodes)" if settings.get("share_nodes") else ""
    shared += ", no gang gate (--no-gang-gate)" if settings.get("gang_gate") is False else ""
    return (
        f"gpu-fleet: wait value {value} (--wait-value), warm-node cap {cap}{preempt}{late}{shared}; "
        f"{settings.get('settings_source', '')}"
    )


def _print_table(result: object, report: Path | None) -> None:
    from rich import box
    from rich.console import Console
    from rich.table import Table

    from autoscaler.replay.run import RunResult

    assert isinstance(result, RunResult)
    sc = result.as_json()["scenario"]
    console = Console()
    console.print(
        f"[bold]{Path(sc['trace']).name}[/bold]: {sc['jobs']:,} jobs, {sc['demand_gpu_hours']:,.0f} GPU-h used by "
        f"every policy, peak {sc['peak_demand_gpus']:,} GPUs | {sc['machine_family']} in {sc['region']} "
        f"({', '.join(sc['zones'])}) | reserved {sc['reserved_nodes']} | spot {sc['spot_fraction']:g} | "
        f"boot {sc['boot_seconds']:g}s | stockout {sc['stockout_rate']:g} | seed {sc['seed']}"
    )
    kq = sc.get("kueue")
    if kq:
        console.print(
            f"kueue: {kq['teams']} ClusterQueues sharing {kq['quota_gpus']:,} GPUs ({kq['quota_rule']}); admitted peak "
            f"{kq['admitted_peak_demand_gpus']:,} GPUs; bound over the admitted demand (raw demand's bound "
            f"${kq['raw_lower_bound_usd']:,.0f}); quota wait with instant capacity p95 "
            f"{kq['quota_wait_floor_p95_s']:,.0f} s"
        )
        console.print(f"kueue flavors: {kq['flavors']}")
    bound = result.bound
    reserved = bound.reservation_usd > 0
    columns: list[tuple[str, Any]] = [
        ("cost $", lambda m: f"{m['cost_usd']:,.0f}"),
        (f"x bound\n${bound.usd:,.0f}", lambda m: f"{m['cost_ratio']:.4f}"),
    ]
    if reserved:  # most of the bound is the sunk reservation: show the spend beyond it apart
        columns += [
            ("overflow $", lambda m: f"{m['overflow_cost_usd']:,.0f}"),
            (f"x overflow\n${bound.overflow_usd:,.0f}", lambda m: _fmt_ratio(m["overflow_ratio"])),
        ]
    columns += [
        ("billed\nGPU-h", lambda m: f"{m['gpu_hours_billed']:,.0f}"),
        ("gang\nwaste", lambda m: f"{m['partial_gang_gpu_hours']:,.1f}"),
        ("wait\np50 s", lambda m: f"{m['wait_p50_s']:,.0f}"),
        ("wait\np95 s", lambda m: f"{m['wait_p95_s']:,.0f}"),
        ("wait\nmax s", lambda m: f"{m['wait_max_s']:,.0f}"),
    ]
    if sc.get("scheduler") == "kueue":  # the wait is quota + provisioning: show the parts
        columns += [
            ("quota\np95 s", lambda m: f"{m['wait_quota_p95_s']:,.0f}"),
            ("provision\np95 s", lambda m: f"{m['wait_provisioning_p95_s']:,.0f}"),
        ]
    if sc["spot_fraction"]:  # nothing to preempt otherwise: keep the table narrow
        columns.append(("pre-\nempted", lambda m: f"{m['preempted_jobs']:,}"))
    headers = ("policy", *(h for h, _ in columns))
    best = min(result.metrics, key=lambda n: result.metrics[n]["cost_usd"])
    rows = [(name, *(f(m) for _, f in columns)) for name, m in result.metrics.items()]
    title = f"every policy against one lower bound: ${bound.usd:,.0f} (clairvoyant, demand span)"
    if reserved:
        title += f", of which reservation ${bound.reservation_usd:,.0f}"
    if sc.get("boot_floor_ratio"):
        title += f"; boots alone put it at x{sc['boot_floor_ratio']:.4f}"
    table = Table(title=title, box=box.SIMPLE_HEAD, pad_edge=False, padding=(0, 1))
    for i, header in enumerate(headers):
        width = max(*(len(r[i]) for r in rows), *(len(line) for line in header.split("\n")))
        table.add_column(header, justify="left" if i == 0 else "right", no_wrap=True, min_width=width)
    for row in rows:
        name = row[0]
        table.add_row(f"[bold green]{name}[/bold green]" if name == best else name, *row[1:])
    console.print(table)
    gf = result.metrics.get("gpu-fleet", {}).get("settings")
    if gf:
        console.print(_gpu_fleet_setting(gf))
    if result.frontier:
        ft = Table(title="gpu-fleet cost vs wait frontier (--frontier)", box=box.SIMPLE_HEAD, pad_edge=False)
        for header in ("--wait-value $/GPU-h", "cost $", "x bound", "wait p50 s", "wait p95 s"):
            ft.add_column(header, justify="right", no_wrap=True)
        for pt in result.frontier:
            ft.add_row(
                pt.get("setting", f"{pt['wait_value_usd_per_gpu_hour']:g}"),
                f"{pt['cost_usd']:,.0f}",
                f"{pt['cost_ratio']:.4f}",
                f"{pt['wait_p50_s']:,.0f}",
                f"{pt['wait_p95_s']:,.0f}",
            )
        console.print(ft)
    if report is not None:
        console.print(f"report: {report}")


def _fmt_ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def register(app: typer.Typer) -> None:
    app.command("simulate")(simulate)
