"""Run one scenario through several policies: the engine of `fleet simulate` and the benchmark.

Every policy replays the same trace (same spot-tolerant jobs) on a fresh sim cloud built from
the same scenario and seed, and is scored against the same lower bound: the clairvoyant bound over
the demand span (`lower_bound`), one figure for the whole run, so ranking by ratio and ranking by
dollars agree."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from autoscaler.replay.engine import ReplayEngine
from autoscaler.replay.lower_bound import LowerBound, boot_floor_usd, lower_bound
from autoscaler.replay.metrics import policy_metrics
from autoscaler.replay.policy import ReplayPolicy
from autoscaler.replay.scenario import Scenario
from autoscaler.replay.trace import (
    MAX_EXPECTED_PREEMPTIONS,
    TraceJob,
    expected_preemptions,
    mark_spot_tolerant,
    peak_concurrent_gpus,
)


@dataclass(frozen=True)
class PolicyOptions:
    """Settings of the policies themselves (the scenario is the world they run in).

    `ca_expander`: Cluster Autoscaler's `--expander` for ca-like (CA's default is `random`).
    `wait_value_usd_per_gpu_hour`: gpu-fleet's wait-vs-cost knob (`Policy.wait_value_usd_per_gpu_hour`,
    interfaces.md); None: gpu-fleet's documented default.  `warm_cap`: gpu-fleet's `Policy.warm_cap`.
    `preempt_spot`: gpu-fleet's `Policy.preempt_spot` (the simulated Slurm's partition-priority preemption of
    spot-tolerant work off the reservation, and the overflow hold that lets it happen).  `late_bind`: gpu-fleet's
    `Policy.late_bind` (strict late binding, without a reservation).  `share_nodes`: gpu-fleet's
    `Policy.share_nodes` (small work shares larger nodes of its family).  `gang_gate`: gpu-fleet's
    `Policy.gang_gate` (gangs wait for the daemon before slurmctld first tries them, where a pool is unheld)."""

    ca_expander: str = "random"
    wait_value_usd_per_gpu_hour: float | None = None
    warm_cap: bool = True
    preempt_spot: bool = True
    late_bind: bool = True
    share_nodes: bool = False
    gang_gate: bool = True


@dataclass(frozen=True)
class FrontierSetting:
    """One gpu-fleet setting of the cost-vs-wait frontier: a wait value, with or without the warm-node cap, with or
    without shared nodes.  Written `W`, `W:no-warm-cap`, `W:shared` or `W:no-warm-cap:shared` (`parse_frontier`)."""

    wait_value_usd_per_gpu_hour: float
    warm_cap: bool = True
    share_nodes: bool = False

    @property
    def label(self) -> str:
        flags = ("" if self.warm_cap else ":no-warm-cap") + (":shared" if self.share_nodes else "")
        return f"{self.wait_value_usd_per_gpu_hour:g}{flags}"


FRONTIER_FLAGS = ("no-warm-cap", "shared")


def parse_frontier(text: str, option: str = "--frontier") -> list[FrontierSetting]:
    """`2,50,50:no-warm-cap,50:shared` -> the settings, in order; a ValueError names `option` and the bad item."""
    out: list[FrontierSetting] = []
    for item in (v.strip() for v in text.split(",")):
        if not item:
            continue
        value, *flags = item.split(":")
        for flag in flags:
            if flag not in FRONTIER_FLAGS:
                raise ValueError(
                    f"{option}: {item!r}: unknown setting {flag!r} (known: W, W:no-warm-cap, W:shared, "
                    "W:no-warm-cap:shared)"
                )
            if flags.count(flag) > 1:
                raise ValueError(f"{option}: {item!r}: setting {flag!r} given twice")
        try:
            w = float(value)
        except ValueError:
            raise ValueError(f"{option}: {item!r} is not a number (USD per GPU-hour)") from None
        if not w >= 0:  # also refuses nan
            raise ValueError(f"{option}: {item!r}: a wait value must be >= 0 USD per GPU-hour")
        out.append(FrontierSetting(w, warm_cap="no-warm-cap" not in flags, share_nodes="shared" in flags))
    if not out:
        raise ValueError(f"{option}: no wait value given")
    return out


def gpu_fleet_policy(
    scenario: Scenario,
    wait_value_usd_per_gpu_hour: float | None = None,
    jobs: Sequence[TraceJob] = (),
    warm_cap: bool = True,
    preempt_spot: bool = True,
    late_bind: bool = True,
    share_nodes: bool = False,
    gang_gate: bool = True,
) -> ReplayPolicy:
    """gpu-fleet configured for `scenario` (and the trace's arrival rates, when its settings rule reads
    them), with the wait-value knob when one is given, `Policy.warm_cap`, `Policy.preempt_spot`,
    `Policy.late_bind`, `Policy.share_nodes` and `Policy.gang_gate`."""
    from autoscaler.replay.gpu_fleet import GpuFleetPolicy

    params = inspect.signature(GpuFleetPolicy.for_scenario).parameters
    kwargs: dict[str, Any] = {"jobs": jobs} if "jobs" in params else {}
    if wait_value_usd_per_gpu_hour is not None:
        # The knob plugs in here: GpuFleetPolicy.for_scenario(scenario, wait_value_usd_per_gpu_hour=...) (a3-onpolicy
        # defines its semantics).  A build whose gpu-fleet lacks it refuses the option instead of ignoring it.
        if "wait_value_usd_per_gpu_hour" not in params:
            raise ValueError(
                "--wait-value/--frontier: this build's gpu-fleet policy has no wait-value knob "
                "(GpuFleetPolicy.for_scenario(..., wait_value_usd_per_gpu_hour=...))"
            )
        kwargs["wait_value_usd_per_gpu_hour"] = wait_value_usd_per_gpu_hour
    if not warm_cap:
        kwargs["warm_cap"] = False
    if not preempt_spot:
        kwargs["preempt_spot"] = False
    if not late_bind:
        kwargs["late_bind"] = False
    if share_nodes:
        kwargs["share_nodes"] = True
    if not gang_gate:
        kwargs["gang_gate"] = False
    return GpuFleetPolicy.for_scenario(scenario, **kwargs)


def policy_factories(
    options: PolicyOptions | None = None,
) -> dict[str, Callable[[Scenario, Sequence[TraceJob]], ReplayPolicy]]:
    """Every policy `fleet simulate --policy` knows, in report order."""
    from autoscaler.replay.baselines import (
        CaLikePolicy,
        ExactFitPolicy,
        KarpenterLikePolicy,
        SlurmPowerSavePolicy,
        StaticPeakPolicy,
    )

    opts = options or PolicyOptions()
    return {
        "gpu-fleet": lambda s, jobs: gpu_fleet_policy(
            s,
            opts.wait_value_usd_per_gpu_hour,
            jobs,
            opts.warm_cap,
            opts.preempt_spot,
            opts.late_bind,
            opts.share_nodes,
            opts.gang_gate,
        ),
        "static-peak": lambda s, jobs: StaticPeakPolicy(peak_gpus=peak_concurrent_gpus(jobs)),
        "slurm-power-save": lambda s, jobs: SlurmPowerSavePolicy(),
        "ca-like": lambda s, jobs: CaLikePolicy(seed=s.seed, expander=opts.ca_expander),
        "karpenter-like": lambda s, jobs: KarpenterLikePolicy(),
        "exact-fit": lambda s, jobs: ExactFitPolicy(),
    }


POLICY_NAMES = ("gpu-fleet", "static-peak", "slurm-power-save", "ca-like", "karpenter-like", "exact-fit")


@dataclass
class RunResult:
    scenario: Scenario
    bound: LowerBound
    jobs: list[TraceJob]
    engines: dict[str, ReplayEngine] = field(default_factory=dict)
    metrics: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: the bound plus what boots alone add (`boot_floor_usd`): how far boots put the bound out of reach
    boot_floor_usd: float = 0.0
    #: gpu-fleet over a list of settings (`run_frontier`), in the order given
    frontier: list[dict[str, Any]] = field(default_factory=list)
    #: `--scheduler kueue`: the admission gate's queues and admitted demand (`kueue_run.KueueContext`)
    kueue: Any = None

    def as_json(self) -> dict[str, Any]:
        sc = self.scenario.model_dump(mode="json")
        sc.update(
            {
                "jobs": len(self.jobs),
                "spot_tolerant_jobs": sum(j.spot_ok for j in self.jobs),
                "peak_demand_gpus": peak_concurrent_gpus(self.jobs),
                "demand_gpu_hours": round(self.bound.demand_gpu_hours, 2),
                "on_demand_usd_per_gpu_hour": round(self.bound.on_demand_gpu_rate, 4),
                "spot_usd_per_gpu_hour": round(self.bound.spot_gpu_rate, 4) if self.bound.spot_gpu_rate else None,
                "reservation_usd": round(self.bound.reservation_usd, 2),
                "lower_bound_usd": round(self.bound.usd, 2),
                "overflow_bound_usd": round(self.bound.overflow_usd, 2),
                "demand_span_h": round(self.bound.span_s / 3600.0, 3),
                "boot_floor_usd": round(self.boot_floor_usd, 2),
                "boot_floor_ratio": round(self.boot_floor_usd / self.bound.usd, 4) if self.bound.usd > 0 else None,
                "prices": "catalog list prices (fleet/catalog/data/gcp_prices.csv), per-second billing",
                "policies": list(self.metrics),
                "scheduler": "kueue" if self.kueue is not None else "slurm",
            }
        )
        if self.kueue is not None:
            sc["kueue"] = self.kueue.as_json()
        out: dict[str, Any] = {"scenario": sc, "policies": self.metrics, "cost_vs_wait": self.cost_vs_wait()}
        if self.frontier:
            out["frontier"] = self.frontier
        return out

    def cost_vs_wait(self) -> list[dict[str, Any]]:
        """Cost against p50/p95 wait, one point per policy (the report's scatter), cheapest first."""
        keys = ("cost_usd", "cost_ratio", "overflow_ratio", "wait_p50_s", "wait_p95_s", "wait_mean_s")
        points = [{"policy": n, **{k: m[k] for k in keys}} for n, m in self.metrics.items()]
        return sorted(points, key=lambda p: p["cost_usd"])


def replay_engine(jobs: Sequence[TraceJob], scenario: Scenario, policy: Any) -> Any:
    """The replay loop for `policy`: the simulated Slurm for policies behind Slurm's power-save hooks (they have
    `slurm_settings`), else the generic engine."""
    if hasattr(policy, "slurm_settings"):
        from autoscaler.replay.simslurm import SimSlurm

        return SimSlurm(jobs, scenario, policy)
    return ReplayEngine(jobs, scenario, policy)


def resolve_policies(names: str | Sequence[str], scheduler: str = "slurm") -> list[str]:
    """`all`, one name, or a comma-separated list -> known policy names (error names the bad one).  With
    `scheduler="kueue"`, `all` leaves out the Slurm-only policies and naming one is an error."""
    from autoscaler.replay.kueue_run import SLURM_ONLY

    skip = SLURM_ONLY if scheduler == "kueue" else ()
    raw = [names] if isinstance(names, str) else list(names)
    out: list[str] = []
    for item in raw:
        for name in (p.strip() for p in item.split(",")):
            if not name:
                continue
            if name == "all":
                out.extend(p for p in POLICY_NAMES if p not in out and p not in skip)
            elif name in skip:
                raise ValueError(f"--policy: {name} is Slurm's own power saving; it has no form on --scheduler kueue")
            elif name in POLICY_NAMES:
                if name not in out:
                    out.append(name)
            else:
                raise ValueError(f"--policy: unknown policy {name!r} (known: all, {', '.join(POLICY_NAMES)})")
    if not out:
        raise ValueError("--policy: no policy given")
    return out


def preemption_overload(jobs: Sequence[TraceJob], scenario: Scenario) -> str | None:
    """The spot-tolerant job of `jobs` that expects more than MAX_EXPECTED_PREEMPTIONS preemptions in `scenario`,
    said in a sentence each command prefixes with its own flags (its replay would re-run that job for ever instead
    of ending); None when there is none."""
    rate, every = scenario.preemption_rate_per_hour, scenario.checkpoint_interval_s
    if not rate:
        return None
    worst = max(((expected_preemptions(j, rate, every), j) for j in jobs if j.spot_ok), default=None,
                key=lambda pair: pair[0])  # fmt: skip
    if worst is None or worst[0] <= MAX_EXPECTED_PREEMPTIONS:
        return None
    count, job = worst
    checkpoints = "no checkpoints" if every <= 0 else f"a checkpoint every {every:g} s"
    return (
        f"spot-tolerant job {job.id} ({job.shape()[0]} node(s), {job.duration / 3600:,.1f} h) would be preempted "
        f"about {count:,.3g} times before it finishes at {rate:g} preemptions per node-hour with {checkpoints}"
        f" (at most {MAX_EXPECTED_PREEMPTIONS:,.0f})"
    )


def _check_preemption_load(jobs: Sequence[TraceJob], scenario: Scenario) -> None:
    """Refuse (ValueError naming `fleet simulate`'s flags) a scenario of `preemption_overload`."""
    if overload := preemption_overload(jobs, scenario):
        raise ValueError(
            f"--preemption-rate / --checkpoint-interval: {overload}: the replay would not end; lower the rate or "
            "checkpoint more often"
        )


def run_scenario(
    jobs: Sequence[TraceJob],
    scenario: Scenario,
    policies: Sequence[str] = POLICY_NAMES,
    progress: Callable[[str, dict[str, Any]], None] | None = None,
    options: PolicyOptions | None = None,
    kueue: Any = None,
) -> RunResult:
    """Replay `jobs` through `policies`.  `kueue` (a `kueue_gate.KueueSetup`): every policy behind the same Kueue
    admission gate, scored against the bound of the admitted demand (`kueue_run`)."""
    biggest = max(m.gpu_count for m in scenario.machines)
    for j in jobs:
        if j.shape()[1] > biggest:
            raise ValueError(
                f"--trace: job {j.id} needs {j.shape()[1]} GPUs on one node; the largest {scenario.machine_family} "
                f"machine has {biggest}"
            )
    marked = mark_spot_tolerant(list(jobs), scenario.spot_fraction, scenario.seed)
    _check_preemption_load(marked, scenario)
    opts = options or PolicyOptions()
    if kueue is not None:
        from autoscaler.replay import kueue_run

        ctx = kueue_run.KueueContext.build(kueue, marked, scenario)
        bound = ctx.bound(scenario)
        floor = boot_floor_usd(ctx.admitted, scenario, bound)
        factories = kueue_run.policy_factories(ctx, opts.wait_value_usd_per_gpu_hour, opts.ca_expander, opts.warm_cap)
    else:
        ctx = None
        bound = lower_bound(marked, scenario)
        floor = boot_floor_usd(marked, scenario, bound)
        factories = policy_factories(opts)
    result = RunResult(scenario, bound, marked, boot_floor_usd=floor, kueue=ctx)
    built: dict[str, ReplayPolicy] = {}
    for name in policies:
        if name not in factories:
            raise ValueError(f"--policy: {name} does not run on --scheduler {'kueue' if ctx else 'slurm'}")
        built[name] = factories[name](scenario, marked)
        built[name].pools(scenario)  # a policy that cannot run this scenario says so before any replay starts
    for name, policy in built.items():
        engine = (ctx.engine(policy, scenario) if ctx else replay_engine(marked, scenario, policy)).run()
        result.engines[name] = engine
        result.metrics[name] = policy_metrics(engine, bound)
        if ctx is not None:
            result.metrics[name].update(kueue_run.wait_split(engine))
        if progress:
            progress(name, result.metrics[name])
    return result


FRONTIER_KEYS = ("cost_usd", "cost_ratio", "overflow_ratio", "wait_p50_s", "wait_p95_s", "wait_mean_s", "wait_max_s")


def run_frontier(
    result: RunResult,
    settings: Sequence[float | FrontierSetting],
    progress: Callable[[str, dict[str, Any]], None] | None = None,
    preempt_spot: bool = True,
    late_bind: bool = True,
    gang_gate: bool = True,
) -> list[dict[str, Any]]:
    """gpu-fleet replayed once per setting (a wait value, or a `FrontierSetting`; same jobs, same cloud, same
    bound; `preempt_spot`, `late_bind` and `gang_gate` as the main run's): its cost-vs-wait frontier.  Stored in
    `result.frontier` (and the JSON's `frontier`); each point carries its setting (`wait_value_usd_per_gpu_hour`,
    `warm_cap`, `share_nodes`, `setting`) and the settings the rule derived."""
    points: list[dict[str, Any]] = []
    ctx = result.kueue
    for item in settings:
        setting = item if isinstance(item, FrontierSetting) else FrontierSetting(float(item))
        value, warm_cap, share = setting.wait_value_usd_per_gpu_hour, setting.warm_cap, setting.share_nodes
        if ctx is not None:
            if share:
                raise ValueError(f"--frontier: {setting.label}: shared nodes are the Slurm daemon's")
            from autoscaler.replay.gpu_fleet_kube import GpuFleetKubePolicy

            kp = GpuFleetKubePolicy.for_scenario(result.scenario, value, result.jobs, warm_cap)
            engine = ctx.engine(kp, result.scenario).run()
        else:
            policy = gpu_fleet_policy(
                result.scenario, value, result.jobs, warm_cap, preempt_spot, late_bind, share, gang_gate
            )
            engine = replay_engine(result.jobs, result.scenario, policy).run()
        m = policy_metrics(engine, result.bound)
        point = {
            "wait_value_usd_per_gpu_hour": value,
            "warm_cap": warm_cap,
            "share_nodes": share,
            "setting": setting.label,
            **{k: m[k] for k in FRONTIER_KEYS},
        }
        point["partial_gang_gpu_hours"] = m["partial_gang_gpu_hours"]
        point["replay_wall_s"] = m["replay_wall_s"]
        if "settings" in m:
            point["settings"] = m["settings"]
        points.append(point)
        if progress:
            progress(f"gpu-fleet --wait-value {setting.label}", m)
    result.frontier = points
    return points
