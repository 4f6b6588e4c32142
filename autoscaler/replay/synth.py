"""Seeded synthetic GPU job traces: workload regimes the ITP clusters lack, for `fleet trace generate`
and `fleet simulate --trace synth:REGIME[:SEED]`; `load_source` is how every command and bench reads a `--trace`.

Each regime is one `Regime` (arrival process, duration law, GPU-count mix, optional gang bursts),
documented in docs/simulate.md and written into the CSV's header comment.  `generate(regime, seed,
jobs)` is pure and deterministic: the same (regime, seed, jobs) gives the same jobs on every machine
(it draws from Python's `random.Random`, seeded with a string, whose streams are stable across
versions).  Submission times start at 0 s; times are rounded to 0.1 s.

- `short`: short jobs (0.5-30 min, median ~10 min), nearly all 1-GPU, a few 2/4/8-GPU, flat Poisson.
- `long-tail`: lognormal durations with a heavy tail (median 30 min, sigma 2: 1% over ~2.5 days), ITP-like sizes.
- `bursty-gangs`: background single-node work plus bursts of 16-128-GPU gangs submitted together.
- `diurnal`: a daily arrival cycle (peak-to-trough 9:1), ITP-like sizes and durations.
- `steady`: flat Poisson arrivals, exponential durations (mean 2 h), no gangs."""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from autoscaler.replay.trace import TraceJob, peak_concurrent_gpus

DAY_S = 86400.0


@dataclass(frozen=True)
class Durations:
    """Lognormal run time: `median_s` and `sigma` of the underlying normal, clipped to [min_s, max_s];
    `exponential` draws Exp(mean `median_s`) instead (then clipped)."""

    median_s: float
    sigma: float
    min_s: float
    max_s: float
    exponential: bool = False

    def draw(self, rng: random.Random) -> float:
        if self.exponential:
            d = rng.expovariate(1.0 / self.median_s)
        else:
            d = rng.lognormvariate(math.log(self.median_s), self.sigma)
        return min(self.max_s, max(self.min_s, d))

    def describe(self) -> str:
        law = (
            f"Exp(mean {self.median_s:g} s)"
            if self.exponential
            else f"lognormal(median {self.median_s:g} s, sigma {self.sigma:g})"
        )
        return f"{law} clipped to [{self.min_s:g}, {self.max_s:g}] s"


@dataclass(frozen=True)
class Bursts:
    """Gang bursts: every Exp(mean `every_s`) seconds, `count` (uniform in the range) gangs are
    submitted within `spread_s`, each of `sizes` GPUs (weights `weights`) running `durations`."""

    every_s: float
    count: tuple[int, int]
    spread_s: float
    sizes: tuple[int, ...]
    weights: tuple[float, ...]
    durations: Durations

    def describe(self) -> str:
        mix = ", ".join(f"{s} GPUs {w:.0%}" for s, w in zip(self.sizes, self.weights, strict=True))
        return (
            f"bursts every Exp(mean {self.every_s:g} s) of {self.count[0]}-{self.count[1]} gangs within "
            f"{self.spread_s:g} s ({mix}), durations {self.durations.describe()}"
        )


@dataclass(frozen=True)
class Regime:
    """One workload regime.  `interarrival_s`: mean time between (non-burst) submissions; `diurnal_amplitude`
    A > 0 makes the arrival rate rate(t) = (1 + A sin(2 pi (t - 6 h) / 1 day)) / interarrival_s (peak at
    12:00, trough at 00:00 of each simulated day; thinning of a Poisson process)."""

    name: str
    summary: str
    jobs: int
    interarrival_s: float
    durations: Durations
    gpus: tuple[int, ...]
    weights: tuple[float, ...]
    diurnal_amplitude: float = 0.0
    bursts: Bursts | None = None

    def describe(self) -> list[str]:
        """The regime's parameters, one line each (the CSV header comment, the docs)."""
        arrivals = f"Poisson, mean interarrival {self.interarrival_s:g} s"
        if self.diurnal_amplitude:
            arrivals += (
                f", daily cycle rate x (1 + {self.diurnal_amplitude:g} sin(2 pi (t - 6 h) / 24 h)) (peak 12:00, "
                "trough 00:00)"
            )
        mix = ", ".join(f"{g} GPU {w:.0%}" for g, w in zip(self.gpus, self.weights, strict=True))
        lines = [
            f"{self.name}: {self.summary}",
            f"arrivals: {arrivals}",
            f"durations: {self.durations.describe()}",
            f"gpus per job: {mix}",
        ]
        if self.bursts:
            lines.append(f"gangs: {self.bursts.describe()}")
        return lines


ITP_LIKE_GPUS = (1, 2, 4, 8, 16, 32, 64)
ITP_LIKE_WEIGHTS = (0.75, 0.07, 0.07, 0.08, 0.015, 0.01, 0.005)

REGIMES: dict[str, Regime] = {
    r.name: r
    for r in (
        Regime(
            "short",
            "short jobs, nearly all 1-GPU, a few 2/4/8-GPU",
            jobs=5000,
            interarrival_s=18.0,
            durations=Durations(median_s=600.0, sigma=0.9, min_s=30.0, max_s=1800.0),
            gpus=(1, 2, 4, 8),
            weights=(0.90, 0.03, 0.02, 0.05),
        ),
        Regime(
            "long-tail",
            "heavy-tailed durations, ITP-like sizes up to 64-GPU gangs",
            jobs=3000,
            interarrival_s=140.0,
            durations=Durations(median_s=1800.0, sigma=2.0, min_s=60.0, max_s=7 * DAY_S),
            gpus=ITP_LIKE_GPUS,
            weights=ITP_LIKE_WEIGHTS,
        ),
        Regime(
            "bursty-gangs",
            "single-node background work plus bursts of 16-128-GPU gangs submitted together",
            jobs=2000,
            interarrival_s=120.0,
            durations=Durations(median_s=3600.0, sigma=1.0, min_s=60.0, max_s=2 * DAY_S),
            gpus=(1, 2, 4, 8),
            weights=(0.80, 0.05, 0.05, 0.10),
            bursts=Bursts(
                every_s=3 * 3600.0,
                count=(2, 6),
                spread_s=120.0,
                sizes=(16, 32, 64, 128),
                weights=(0.4, 0.3, 0.2, 0.1),
                durations=Durations(median_s=7200.0, sigma=0.7, min_s=600.0, max_s=DAY_S),
            ),
        ),
        Regime(
            "diurnal",
            "a daily arrival cycle (peak 9x the trough), ITP-like sizes",
            jobs=5000,
            interarrival_s=90.0,
            durations=Durations(median_s=3600.0, sigma=1.2, min_s=60.0, max_s=3 * DAY_S),
            gpus=ITP_LIKE_GPUS,
            weights=ITP_LIKE_WEIGHTS,
            diurnal_amplitude=0.8,
        ),
        Regime(
            "steady",
            "flat Poisson arrivals, exponential durations, single-node jobs",
            jobs=3000,
            interarrival_s=110.0,
            durations=Durations(median_s=7200.0, sigma=0.0, min_s=60.0, max_s=7 * DAY_S, exponential=True),
            gpus=(1, 2, 4, 8),
            weights=(0.70, 0.10, 0.10, 0.10),
        ),
    )
}


class SynthError(ValueError):
    """A bad regime, seed or job count; the message names the option."""


def regime(name: str) -> Regime:
    if name not in REGIMES:
        raise SynthError(f"--regime: unknown regime {name!r} (known: {', '.join(REGIMES)})")
    return REGIMES[name]


def generate(name: str, seed: int = 0, jobs: int | None = None) -> list[TraceJob]:
    """`jobs` jobs (default: the regime's) of regime `name`, deterministic for (`name`, `seed`, `jobs`),
    sorted by submission time."""
    r = regime(name)
    n = r.jobs if jobs is None else jobs
    if n < 1:
        raise SynthError(f"--jobs: must be at least 1, got {n}")
    rng = random.Random(f"gpu-fleet-synth:{r.name}:{seed}")
    out: list[tuple[float, float, int]] = []
    t = 0.0
    next_burst = rng.expovariate(1.0 / r.bursts.every_s) if r.bursts else math.inf
    rate_max = (1.0 + r.diurnal_amplitude) / r.interarrival_s
    while len(out) < n:
        t += rng.expovariate(rate_max)
        while r.bursts and next_burst <= t and len(out) < n:
            b = r.bursts
            for _ in range(rng.randint(*b.count)):
                if len(out) >= n:
                    break
                size = rng.choices(b.sizes, b.weights)[0]
                out.append((next_burst + rng.uniform(0.0, b.spread_s), b.durations.draw(rng), size))
            next_burst += rng.expovariate(1.0 / b.every_s)
        if len(out) >= n:
            break
        if r.diurnal_amplitude:  # thinning: keep an arrival with probability rate(t) / rate_max
            rate = (1.0 + r.diurnal_amplitude * math.sin(2 * math.pi * (t - 6 * 3600.0) / DAY_S)) / r.interarrival_s
            if rng.random() * rate_max > rate:
                continue
        out.append((t, r.durations.draw(rng), rng.choices(r.gpus, r.weights)[0]))
    out.sort(key=lambda e: e[0])
    t0 = out[0][0]
    return [
        TraceJob(f"{r.name}-{i:06d}", round(s - t0, 1), max(1.0, round(d, 1)), g) for i, (s, d, g) in enumerate(out)
    ]


def header(name: str, seed: int, jobs: Sequence[TraceJob]) -> list[str]:
    """The CSV header comment lines (without '# '): what generated the file and the regime's parameters."""
    r = regime(name)
    span_h = (max(j.submit + j.duration for j in jobs) - jobs[0].submit) / 3600.0
    gpu_h = sum(j.gpus * j.duration for j in jobs) / 3600.0
    return [
        f"synthetic GPU job trace: regime={r.name} seed={seed} jobs={len(jobs)} "
        "(fleet trace generate; autoscaler/replay/synth.py)",
        *r.describe()[1:],
        f"totals: {gpu_h:,.1f} GPU-hours over {span_h:,.1f} h (mean {gpu_h / span_h:,.0f} GPUs busy), "
        f"peak {peak_concurrent_gpus(jobs):,} GPUs if every job started at submit",
    ]


def to_csv(name: str, seed: int, jobs: Sequence[TraceJob]) -> str:
    """The trace as CSV text in the ITP format (`job_id,submission_time,duration,num_gpu`), header comment first."""
    lines = [f"# {line}" for line in header(name, seed, jobs)]
    lines.append("job_id,submission_time,duration,num_gpu")
    lines += [f"{j.id},{j.submit:g},{j.duration:g},{j.gpus}" for j in jobs]
    return "\n".join(lines) + "\n"


def parse_synth_spec(spec: str, default_seed: int = 0) -> tuple[str, int]:
    """`synth:REGIME[:SEED]` -> (regime, seed); the seed defaults to `default_seed` (the run's --seed)."""
    parts = spec.split(":")
    if parts[0] != "synth" or not 2 <= len(parts) <= 3 or not parts[1]:
        raise SynthError(f"--trace: {spec!r}: expected synth:REGIME[:SEED] (regimes: {', '.join(REGIMES)})")
    name = parts[1]
    if name not in REGIMES:
        raise SynthError(f"--trace: {spec!r}: unknown regime {name!r} (known: {', '.join(REGIMES)})")
    if len(parts) == 3:
        try:
            return name, int(parts[2])
        except ValueError:
            raise SynthError(f"--trace: {spec!r}: seed {parts[2]!r} is not an integer") from None
    return name, default_seed


def load_source(source: str, default_seed: int = 0) -> tuple[str, list[TraceJob]]:
    """A `--trace` as every command takes it: `synth:REGIME[:SEED]` (generated; the seed defaults to `default_seed`)
    or a trace CSV's path.  Returns the source's canonical name (`synth:REGIME:SEED`, or the path as given) and its
    jobs; raises SynthError or TraceError naming what is wrong."""
    from autoscaler.replay.trace import load_trace

    if source.startswith("synth:"):
        regime, seed = parse_synth_spec(source, default_seed)
        return f"synth:{regime}:{seed}", generate(regime, seed)
    return source, list(load_trace(Path(source)))
