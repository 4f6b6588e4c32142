"""`fleet autoscaler ...` (the daemon) and `fleet slurm ...` (Slurm's power-saving programs).

`fleet slurm resume|suspend|resume-fail HOSTLIST` are what slurmctld runs as ResumeProgram / SuspendProgram /
ResumeFailProgram (through the wrappers in deploy/slurm/): they expand the hostlist, queue one row per node
in the daemon's state store and exit 0, importing nothing heavy.  `fleet slurm job-end HOSTLIST [--job-id N]`
is the EpilogSlurmctld entry (deploy/slurm/epilog_slurmctld.sh): one wake-up row for the daemon.  Everything
else is imported inside the commands.
"""

from __future__ import annotations

import dataclasses
import json
import sqlite3
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from fleet.input.limits import MAX_SLURM_JOB_ID

if TYPE_CHECKING:
    from autoscaler.daemon.tick import TickResult

autoscaler_app = typer.Typer(
    help="The autoscaler daemon: plan and actuate GPU capacity for Slurm.", no_args_is_help=True
)
slurm_app = typer.Typer(
    help="Slurm power-saving programs (ResumeProgram, SuspendProgram, ResumeFailProgram).", no_args_is_help=True
)
LOG_LEVELS = ("TRACE", "DEBUG", "INFO", "SUCCESS", "WARNING", "ERROR", "CRITICAL")
_STATE_HELP = "state store of the daemon (default: $GPU_FLEET_AUTOSCALER_STATE or /var/lib/gpu-fleet/autoscaler.db)"
StatePath = Annotated[Path | None, typer.Option("--state", help=_STATE_HELP)]
Hostlist = Annotated[str, typer.Argument(help="Slurm hostlist, e.g. a3-spot-[0-3]")]
HookLog = Annotated[
    Path | None, typer.Option("--log", help="also append what the hook says here, with the time (the hook log)")
]


def _fail(msg: str, code: int = 2) -> None:
    typer.echo(msg, err=True)
    raise typer.Exit(code)


@autoscaler_app.command("run")
def run(
    config: Annotated[Path, typer.Option("--config", help="YAML config (see deploy/autoscaler.example.yaml)")],
    once: bool = typer.Option(False, "--once", help="run one tick, print the plan and exit"),
    dry_run: bool = typer.Option(False, "--dry-run", help="plan and log every command, touch nothing"),
    log_json: bool = typer.Option(False, "--log-json", help="one JSON object per log line (and JSON --once output)"),
    log_level: str = typer.Option("INFO", "--log-level", help="DEBUG, INFO, WARNING, ERROR"),
) -> None:
    """Run the autoscaler (until SIGTERM, or one tick with --once)."""
    from autoscaler.daemon.config import ConfigError, load_config
    from autoscaler.daemon.logs import setup_logging
    from autoscaler.daemon.state import StateError

    if log_level.upper() not in LOG_LEVELS:
        _fail(f"--log-level: {log_level!r} is not one of {', '.join(LOG_LEVELS)}")
    setup_logging(json_lines=log_json, level=log_level.upper())
    if _kubernetes_config(config):
        if dry_run:  # the Kubernetes daemon has no read-only mode yet: refuse rather than act
            _fail("--dry-run: not supported for a config with a kubernetes: section yet (nothing was done)")
        _run_kubernetes(config, once=once, log_json=log_json)
        return
    try:
        cfg = load_config(config)
        from autoscaler.daemon.build import CredentialsUnavailable, build_daemon

        daemon = build_daemon(cfg, dry_run=dry_run)
    except ConfigError as exc:
        _fail(str(exc))
        return
    except CredentialsUnavailable as exc:  # may pass: exit 1, which the unit restarts (exit 2 it does not)
        _fail(str(exc), code=1)
        return
    except StateError as exc:
        _state_fail(exc, log_json)
        return
    except (OSError, sqlite3.Error) as exc:  # the state store cannot be opened or created
        where = f"{config}: state_path: {cfg.state_path}"
        _fail(f"{where}: cannot open the daemon's state store: {getattr(exc, 'strerror', None) or exc}")
        return
    if once:
        res = daemon.tick()
        daemon.lock.release()
        daemon.store.close()
        if log_json:
            typer.echo(json.dumps(res.to_json(), default=str))
        else:
            _print_tick(res)
        raise typer.Exit(0 if res.ok else 2 if (res.error or "").startswith("DatabaseError:") else 1)
    from autoscaler.daemon.loop import RunLoop
    from autoscaler.daemon.metrics import MetricsServer

    server = None
    if cfg.metrics.enabled:
        server = MetricsServer(daemon.metrics, cfg.metrics.host, cfg.metrics.port).start()
        from loguru import logger

        logger.info("metrics on http://{}:{}/metrics (health: /healthz)", cfg.metrics.host, server.port)
    try:
        code = RunLoop(daemon, interval_s=cfg.loop.interval_s).run()
    finally:
        if server is not None:
            server.stop()
    raise typer.Exit(code)


def _kubernetes_config(path: Path) -> bool:
    """A config with a `kubernetes:` section runs the Kubernetes daemon (autoscaler/kube/run.py)."""
    from fleet.input import InputError, load_yaml
    from fleet.input.limits import MAX_CONFIG_BYTES

    try:
        data = load_yaml(path, what="autoscaler config", max_bytes=MAX_CONFIG_BYTES)
    except (InputError, OSError, ValueError):
        return False  # not readable: the Slurm path's loader reports it, with the file and the position
    from autoscaler.kube.run import is_kube_config

    return is_kube_config(data)


def _run_kubernetes(path: Path, *, once: bool, log_json: bool) -> None:
    from autoscaler.kube.run import KubeConfigError, build, load, run_forever

    try:
        cfg = load(path)
        daemon = build(cfg)
    except (KubeConfigError, OSError, ValueError) as exc:
        _fail(f"error: {exc}")
        return
    if once:
        res = daemon.tick()
        daemon.elector.release()  # a one-off tick must not hold the running replicas off for a lease duration
        typer.echo(json.dumps(dataclasses.asdict(res), default=str) if log_json else str(res))
        raise typer.Exit(0 if res.ok else 1)
    raise typer.Exit(run_forever(daemon, cfg))


def _state_fail(exc: Exception, log_json: bool) -> None:
    """A damaged / foreign / missing state store: one clear message (a JSON line under --log-json), exit 2."""
    if log_json:
        from loguru import logger

        logger.bind(error="StateError").error("{}", exc)
        raise typer.Exit(2)
    _fail(f"state_path: {exc}")


@autoscaler_app.command("init")
def init(
    config: Annotated[Path, typer.Option("--config", help="YAML config (see deploy/autoscaler.example.yaml)")],
) -> None:
    """Create (or check) the state store and record the managed pools, so Slurm's hooks can queue requests
    before the daemon's first tick (run it before slurmctld starts).  Idempotent; no cloud or Slurm call.
    The config and inventory pass the checks `run` makes (`check_config`) before the store is touched."""
    from autoscaler.daemon.build import check_config, open_store
    from autoscaler.daemon.config import ConfigError, load_config
    from autoscaler.daemon.state import StateError

    try:
        cfg = load_config(config)
        store = open_store(cfg, check_config(cfg).pools)
    except ConfigError as exc:
        _fail(str(exc))
        return
    except StateError as exc:
        _fail(f"state_path: {exc}")
        return
    except (OSError, sqlite3.Error) as exc:  # the state store cannot be opened or created
        where = f"{config}: state_path: {cfg.state_path}"
        _fail(f"{where}: cannot open the daemon's state store: {getattr(exc, 'strerror', None) or exc}")
        return
    n = len(store.managed_pools())
    store.close()
    typer.echo(f"{cfg.state_path}: ready, {n} managed pool(s) recorded", err=True)


def _print_tick(res: TickResult) -> None:
    from rich.console import Console
    from rich.table import Table

    con = Console()
    state = "ok" if res.ok else f"FAILED: {res.error}"
    con.print(
        f"tick {state} in {res.duration_s * 1000:.0f} ms; leader={'dry-run' if res.dry_run else res.leader}"
        f" slurm={'up' if res.slurm_ok else 'DOWN'}"
        f" resume units={res.resume_units} pending units={res.pending_units}"
    )
    t = Table("command", "outcome", "names", "detail")
    for c in res.commands:
        t.add_row(
            c["command"], c.get("outcome", ""), ",".join(c.get("names", [])), c.get("offering") or c.get("reason", "")
        )
    con.print(t)
    if res.unserved:
        u = Table("unserved unit", "reason", "detail")
        for x in res.unserved:
            u.add_row(x["unit"], x["reason"], x["detail"])
        con.print(u)


@autoscaler_app.command("status")
def status(
    config: Annotated[Path | None, typer.Option("--config", help="YAML config (for its state_path)")] = None,
    state: StatePath = None,
) -> None:
    """Print the state store as JSON: leader, open launch requests, queued power-save requests, backoffs."""
    import time

    from autoscaler.daemon.state import OPEN_REQUEST_STATES, StateError, StateStore
    from autoscaler.slurm.handoff import default_state_path

    path = state
    if path is None and config is not None:
        from autoscaler.daemon.config import ConfigError, load_config

        try:
            path = load_config(config).state_path
        except ConfigError as exc:
            _fail(str(exc))
    path = path or default_state_path()
    if path.is_dir() or not path.is_file():
        _fail(f"--state: {path}: {'is a directory' if path.is_dir() else 'no such state store'} (status reads it)")
    try:
        store = StateStore.read_only_copy(path)  # checked, in memory: status never writes the file
    except StateError as exc:
        _fail(f"--state: {exc}")
        return
    except (OSError, sqlite3.Error) as exc:
        _fail(f"--state: {path}: cannot open the daemon's state store: {exc}")
        return
    out = {
        "state_path": str(store.path),
        "leader": store.leader(),
        "open_requests": [r.__dict__ for r in store.requests(OPEN_REQUEST_STATES)],
        "power_queue": [r.__dict__ for r in store.open_power()],
        "job_end_wakes": [r.__dict__ for r in store.open_job_ends()],
        "unavailable": [u.__dict__ for u in store.unavailable(time.time())],
    }
    typer.echo(json.dumps(out, indent=2, default=str))


def _hook(action: str, hostlist: str, state: Path | None, log: Path | None, job_id: int | None = None) -> None:
    from autoscaler.slurm.hook import run as run_hook

    code = run_hook(action, hostlist, state, job_id=job_id, log=log)
    if code:
        raise typer.Exit(code)


@slurm_app.command("resume")
def resume(
    hostlist: Hostlist,
    state: StatePath = None,
    log: HookLog = None,
) -> None:
    """ResumeProgram: ask the daemon to create these nodes (reads SLURM_RESUME_FILE for the job map)."""
    _hook("resume", hostlist, state, log)


@slurm_app.command("suspend")
def suspend(
    hostlist: Hostlist,
    state: StatePath = None,
    log: HookLog = None,
) -> None:
    """SuspendProgram: ask the daemon to delete these nodes' instances."""
    _hook("suspend", hostlist, state, log)


@slurm_app.command("resume-fail")
def resume_fail(
    hostlist: Hostlist,
    state: StatePath = None,
    log: HookLog = None,
) -> None:
    """ResumeFailProgram: these nodes missed ResumeTimeout; back off their offering, put them back in service."""
    _hook("resume_fail", hostlist, state, log)


@slurm_app.command("job-end")
def job_end(
    hostlist: Hostlist,
    state: StatePath = None,
    log: HookLog = None,
    job_id: Annotated[
        int | None,
        typer.Option(
            "--job-id", min=1, max=MAX_SLURM_JOB_ID, help="the job that ended (SLURM_JOB_ID: a Slurm job id, uint32)"
        ),
    ] = None,
) -> None:
    """EpilogSlurmctld: a job ended on these nodes; wake the daemon so it scales the freed ones down at once."""
    _hook("job_end", hostlist, state, log, job_id)


def register(app: typer.Typer) -> None:
    app.add_typer(autoscaler_app, name="autoscaler")
    app.add_typer(slurm_app, name="slurm")
