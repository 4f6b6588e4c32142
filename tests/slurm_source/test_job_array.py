"""Job arrays as squeue shows them (`autoscaler.slurm.job_array`, `SlurmJob.unit_ids`): the task list of a pending
array's record, its throttle, and a list squeue cut, on the forms slurmctld 22.05 prints (tests/data/slurm/SOURCE)."""

from __future__ import annotations

import pytest

from autoscaler.slurm.job_array import parse_array_tasks
from autoscaler.slurm.readers import parse_squeue
from tests.slurm_source.test_readers import load


@pytest.mark.parametrize(
    ("text", "ids", "throttle", "whole"),
    [
        ("0-3", [0, 1, 2, 3], 0, True),
        ("0,2-3", [0, 2, 3], 0, True),
        ("1-9:4", [1, 5, 9], 0, True),  # slurmctld prints a regular stride this way (--array=1-999:2 -> "1-999:2")
        ("2-4%2", [2, 3, 4], 2, True),
        ("1-2,5,8-9,578...", [1, 2, 5, 8, 9], 0, False),  # cut: the last part may be a number cut short
        ("x,4", [4], 0, False),
        ("3-1", [], 0, False),
        ("", [], 0, True),
    ],
)
def test_task_list_forms(text: str, ids: list[int], throttle: int, whole: bool) -> None:
    tasks = parse_array_tasks(text)
    assert (list(tasks.ids()), tasks.count, tasks.throttle, tasks.whole) == (ids, len(ids), throttle, whole)


def test_a_throttle_leaves_as_many_tasks_as_may_start() -> None:
    tasks = parse_array_tasks("2-9%3")
    assert [tasks.startable(r) for r in (0, 1, 3, 5)] == [3, 2, 0, 0]
    assert parse_array_tasks("0-1").startable(7) == 2  # no throttle: every task


def test_squeue_arrays_sample() -> None:
    """Array 1 (``0-9%2``): tasks 0 and 1 split off and allocated, its record holding 2-9 at the throttle
    (JobArrayTaskLimit): no task may start.  Array 2 (two-node gangs over 209 irregular ids, held): squeue without
    SLURM_BITSTR_LEN cut the list, which reads as the tasks it lists whole."""
    jobs = {j.job_id: j for j in parse_squeue(load("squeue-arrays.json"))}
    throttled, cut = jobs[1], jobs[2]
    assert (throttled.reason, throttled.array_tasks.count, throttled.array_running, throttled.tasks) == (
        "JobArrayTaskLimit", 8, 2, 0
    )  # fmt: skip
    assert throttled.unit_ids() == ()
    split = [j for j in jobs.values() if j.array_job_id == 1 and j.job_id != 1]
    assert sorted((j.array_task_id, j.unit_ids()) for j in split) == [(0, ("job/3",)), (1, ("job/4",))]
    assert not cut.array_tasks.whole and cut.node_count == 2
    assert cut.unit_ids(limit=4) == ("job/2_0", "job/2_1", "job/2_7", "job/2_14")
    assert 0 < cut.tasks < 209


def test_a_record_of_one_task_or_of_no_array_is_one_unit() -> None:
    jobs = parse_squeue(load("squeue-full.json"))
    assert all(j.tasks == 1 and j.unit_ids() == (f"job/{j.job_id}",) for j in jobs)
