"""The baselines behave as the systems they imitate document (and exact-fit as its definition says)."""

from __future__ import annotations

import pytest

from autoscaler.replay.baselines import ExactFitPolicy
from autoscaler.replay.engine import ReplayEngine
from autoscaler.replay.scenario import Scenario
from fleet.catalog import CapacityType, load_catalog
from tests.replay.conftest import job

PRICES = {m.name: m.price("us-central1") for m in load_catalog().family("a3-highgpu")}


def test_exact_fit_gives_each_job_its_own_smallest_node_for_boot_plus_run_time() -> None:
    jobs = [job(0, 0, 600, 1), job(1, 0, 600, 1), job(2, 0, 1200, 2)]
    eng = ReplayEngine(jobs, Scenario(), ExactFitPolicy()).run()
    assert eng.counters.nodes_launched == 3
    billed = eng.cloud.ledger.gpu_hours_by_capacity(eng.t_end)[CapacityType.ON_DEMAND]
    assert billed == pytest.approx((1 * 960 + 1 * 960 + 2 * 1560) / 3600)  # 360 s boot + run, per node
    cost = eng.cloud.ledger.cost(eng.t_end)
    expected = (2 * 960 * PRICES["a3-highgpu-1g"].on_demand + 1560 * PRICES["a3-highgpu-2g"].on_demand) / 3600
    assert cost == pytest.approx(expected, rel=1e-6)
    assert all(j.first_start == 360 for j in eng.state.jobs)


def test_exact_fit_never_reuses_a_node_not_even_its_spare_gpus() -> None:
    """A 3-GPU job gets a 4g node; a 1-GPU job arriving while it runs gets a node of its own, and a job
    arriving after the first ended does not find it: it was deleted at the end."""
    jobs = [job(0, 0, 3600, 3), job(1, 1000, 600, 1), job(2, 5000, 600, 4)]
    eng = ReplayEngine(jobs, Scenario(), ExactFitPolicy()).run()
    assert eng.counters.nodes_launched == 3
    by_id = {j.id: j for j in eng.state.jobs}
    assert by_id["j1"].first_start == 1360 and by_id["j2"].first_start == 5360  # each waited a boot
    assert eng.cloud.ledger.closed_count == 3


def test_exact_fit_launches_a_gang_in_one_request_and_uses_a_free_reservation_slot_first() -> None:
    sc = Scenario(reserved_nodes=1)
    jobs = [job(0, 0, 3600, 1), job(1, 10, 3600, 16)]
    eng = ReplayEngine(jobs, sc, ExactFitPolicy()).run()
    assert eng.counters.launches == 2 and eng.counters.nodes_launched == 3
    # the 1-GPU job took the free reserved slot (paid for anyway); the gang's two 8g nodes are on-demand
    assert eng.cloud.ledger.cost(eng.t_end) == pytest.approx(
        2 * (3600 + 360) * PRICES["a3-highgpu-8g"].on_demand / 3600, rel=1e-6
    )
    assert eng.state.partial_gang_gpu_s == 0
