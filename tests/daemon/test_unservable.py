"""why_unservable: the reasons a pending job can never be served by the managed pools (pure)."""

from __future__ import annotations

import pytest

from autoscaler.daemon.unservable import why_unservable
from autoscaler.model import WorkUnit
from tests.daemon.conftest import spot_pool


@pytest.mark.parametrize(
    ("unit", "reason", "detail"),
    [
        (WorkUnit("job/1", 0.0, 8, nodes=100, queue="gpu"), "too-many-nodes", "needs 100 nodes"),
        (WorkUnit("job/2", 0.0, 16, queue="gpu"), "too-many-gpus-per-node", "at most 8"),
        (WorkUnit("job/3", 0.0, 8, queue="cpu"), "no-pool", "partition 'cpu'"),
        (WorkUnit("job/4", 0.0, 8, queue="gpu", gpu_types=frozenset({"nvidia-b200"})), "no-gpu-type", "spot"),
    ],
)
def test_reasons(unit: WorkUnit, reason: str, detail: str) -> None:
    got = why_unservable(unit, [spot_pool()])
    assert got is not None and got[0] == reason and detail in got[1]


def test_a_job_that_fits_when_nodes_are_free_is_servable() -> None:
    assert why_unservable(WorkUnit("job/5", 0.0, 8, nodes=4, queue="gpu"), [spot_pool()]) is None
