"""Synthetic traces: deterministic per seed, each regime has the shape its documentation states, and the CSV
round-trips through the trace reader."""

from __future__ import annotations

import itertools
import statistics
from collections import Counter
from pathlib import Path

import pytest
from typer.testing import CliRunner

from autoscaler.replay.synth import REGIMES, SynthError, generate, parse_synth_spec, to_csv
from autoscaler.replay.trace import load_trace
from fleet.cli.main import app

runner = CliRunner()


@pytest.mark.parametrize("name", list(REGIMES))
def test_same_seed_same_jobs_other_seed_other_jobs(name: str) -> None:
    a, b, c = generate(name, 7, 300), generate(name, 7, 300), generate(name, 8, 300)
    assert a == b and a != c
    assert len(a) == 300 and a[0].submit == 0
    assert [j.submit for j in a] == sorted(j.submit for j in a)
    assert len({j.id for j in a}) == 300


def test_short_jobs_are_half_a_minute_to_half_an_hour_nearly_all_one_gpu() -> None:
    jobs = generate("short", 0)
    assert len(jobs) == REGIMES["short"].jobs
    assert all(30 <= j.duration <= 1800 for j in jobs)
    assert 480 <= statistics.median(j.duration for j in jobs) <= 720  # median ~10 min
    sizes = Counter(j.gpus for j in jobs)
    assert sizes[1] / len(jobs) > 0.85 and 0.02 < sizes[8] / len(jobs) < 0.08 and max(sizes) == 8


def test_long_tail_durations_are_heavy_tailed() -> None:
    d = sorted(j.duration for j in generate("long-tail", 0))
    median, p99 = d[len(d) // 2], d[int(len(d) * 0.99)]
    assert 1200 < median < 2700 and p99 / median > 30


def test_bursty_gangs_arrive_together_and_reach_128_gpus() -> None:
    jobs = generate("bursty-gangs", 0)
    gangs = [j for j in jobs if j.gpus > 8]
    assert max(j.gpus for j in gangs) == 128 and {16, 32, 64, 128} <= {j.gpus for j in gangs}
    together = sum(1 for a, b in itertools.pairwise(gangs) if b.submit - a.submit <= 120)
    assert together > len(gangs) / 2  # most gangs have a burst-mate within 120 s


def test_diurnal_arrivals_follow_a_daily_cycle_and_steady_ones_do_not() -> None:
    def by_hour(name: str) -> Counter[int]:  # arrivals per hour of the day, over whole days only
        jobs = generate(name, 0)
        days = int(jobs[-1].submit // 86400)
        return Counter(int(j.submit // 3600) % 24 for j in jobs if j.submit < days * 86400)

    diurnal, steady = by_hour("diurnal"), by_hour("steady")
    peak = sum(diurnal[h] for h in range(10, 15))
    trough = sum(diurnal[h] for h in (22, 23, 0, 1, 2))
    assert peak > 3 * trough
    quarters = [sum(steady[h] for h in range(q * 6, q * 6 + 6)) for q in range(4)]  # ~600 arrivals each
    assert max(quarters) < 1.25 * min(quarters)


def test_csv_round_trips_and_its_header_names_the_regime_and_parameters(tmp_path: Path) -> None:
    jobs = generate("bursty-gangs", 3, 200)
    path = tmp_path / "t.csv"
    path.write_text(to_csv("bursty-gangs", 3, jobs))
    text = path.read_text()
    assert text.startswith("# synthetic GPU job trace: regime=bursty-gangs seed=3 jobs=200")
    assert "# gangs: bursts every" in text and "# durations: lognormal(median 3600 s" in text
    assert load_trace(path) == jobs


def test_fleet_trace_generate_writes_the_same_file_for_the_same_arguments(tmp_path: Path) -> None:
    a, b = tmp_path / "a.csv", tmp_path / "b.csv"
    for out in (a, b):
        res = runner.invoke(
            app, ["trace", "generate", "--regime", "diurnal", "--seed", "5", "--jobs", "400", "--out", str(out)]
        )
        assert res.exit_code == 0, res.output
    assert a.read_bytes() == b.read_bytes() and len(load_trace(a)) == 400
    bad = {
        ("--regime", "nope"): "--regime: unknown regime 'nope'",
        ("--jobs", "0"): "--jobs: must be at least 1",
    }
    for (flag, value), message in bad.items():
        args = ["trace", "generate", "--regime", "short", "--out", str(tmp_path / "c.csv"), flag, value]
        res = runner.invoke(app, args)
        assert res.exit_code == 2 and message in res.output, res.output
        assert not (tmp_path / "c.csv").exists()  # nothing written


def test_synth_specs_parse_with_the_run_seed_as_default() -> None:
    assert parse_synth_spec("synth:short", 4) == ("short", 4)
    assert parse_synth_spec("synth:long-tail:9", 4) == ("long-tail", 9)
    with pytest.raises(SynthError, match="unknown regime"):
        parse_synth_spec("synth:medium")
