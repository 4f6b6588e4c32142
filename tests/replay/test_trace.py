"""Loading traces: the ITP format, gang shapes, and errors that name the line and the column."""

from __future__ import annotations

from pathlib import Path

import pytest

from autoscaler.replay.trace import TraceError, load_trace, mark_spot_tolerant, peak_concurrent_gpus
from tests.replay.conftest import job


def test_itp_trace_loads_sorted_with_gangs_of_eight_gpu_nodes(small_trace) -> None:
    assert len(small_trace) == 150
    assert [j.submit for j in small_trace] == sorted(j.submit for j in small_trace)
    gangs = [j for j in small_trace if j.gpus > 8]
    assert gangs and all(j.shape() == (j.gpus // 8, 8) for j in gangs)
    assert job(0, 0, 1, 12).shape() == (2, 8)  # ceil(12 / 8) nodes of 8
    assert job(0, 0, 1, 4).shape() == (1, 4)


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "t.csv"
    p.write_text(text)
    return p


def test_missing_column_is_named(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match=r"header lacks column.*num_gpu"):
        load_trace(write(tmp_path, "submission_time,duration\n1,2\n"))


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ("1,abc,1", r"t.csv:3: column duration: 'abc' is not a number"),
        ("1,0,1", r"t.csv:3: column duration: must be > 0"),
        ("1,10,1.5", r"t.csv:3: column num_gpu: must be an integer"),
        ("-5,10,1", r"t.csv:3: column submission_time: must be >= 0"),
    ],
)
def test_bad_values_name_line_and_column(tmp_path: Path, row: str, message: str) -> None:
    with pytest.raises(TraceError, match=message):
        load_trace(write(tmp_path, f"submission_time,duration,num_gpu\n0,10,1\n{row}\n"))


def test_missing_file_and_empty_trace(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="no such trace file"):
        load_trace(tmp_path / "nope.csv")
    with pytest.raises(TraceError, match="no jobs"):
        load_trace(write(tmp_path, "submission_time,duration,num_gpu\n"))


def test_spot_tolerant_share_is_exact_and_seeded(small_trace) -> None:
    a = mark_spot_tolerant(small_trace, 0.3, seed=1)
    assert sum(j.spot_ok for j in a) == 45
    assert a == mark_spot_tolerant(small_trace, 0.3, seed=1)
    assert a != mark_spot_tolerant(small_trace, 0.3, seed=2)
    with pytest.raises(ValueError, match="spot_fraction"):
        mark_spot_tolerant(small_trace, 1.5, seed=1)


def test_peak_counts_overlap_only() -> None:
    jobs = [job(1, 0, 100, 8), job(2, 50, 100, 4), job(3, 100, 10, 2)]  # job 1 ends as job 3 starts
    assert peak_concurrent_gpus(jobs) == 12
