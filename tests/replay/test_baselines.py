"""The baselines behave as the systems they imitate document (and exact-fit as its definition says)."""

from __future__ import annotations

import pytest

from autoscaler.replay.baselines import CaLikePolicy, ExactFitPolicy, KarpenterLikePolicy
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
    starts = {j.first_start for j in eng.state.jobs}
    assert len(starts) == 1 and 360 <= starts.pop() < 372  # all on that node once it is up


def test_exact_fit_never_reuses_a_node_not_even_its_spare_gpus() -> None:
    """A 3-GPU job gets a 4g node; a 1-GPU job arriving while it runs gets a node of its own, and a job
    arriving after the first ended does not find it: it was deleted at the end."""
    jobs = [job(0, 0, 3600, 3), job(1, 1000, 600, 1), job(2, 5000, 600, 4)]
    eng = ReplayEngine(jobs, Scenario(), ExactFitPolicy()).run()
    assert eng.counters.nodes_launched == 3
    by_id = {j.id: j for j in eng.state.jobs}
    assert by_id["j1"].first_start == 1360 and by_id["j2"].first_start == 5360  # each waited a boot
    assert eng.cloud.ledger.closed_count == 3


@pytest.mark.parametrize("t0", [0.3, 1_932_025.0])  # at ITP trace times, (t + 0.7) - t < 0.7 in floating point
def test_exact_fit_with_hook_delays_launches_and_deletes_exactly_that_much_later(t0: float) -> None:
    """The what-if of bench/exact_fit_latency.py: a launch seen 1 s after the submission and a delete seen 0.7 s
    after the end shift the wait by 1 s and the bill by 0.7 s per node, no more (a wake-up at t + delay finds
    the node due, whatever the rounding).  The run ends with the last job, so the last node's delay is not billed:
    a third job keeps the run going past the first two deletes."""
    jobs = [job(0, t0, 600.0, 1), job(1, t0, 600.0, 2), job(2, t0 + 5000.0, 60.0, 1)]
    floor = ReplayEngine(jobs, Scenario(), ExactFitPolicy()).run()
    late = ReplayEngine(jobs, Scenario(), ExactFitPolicy(launch_delay_s=1.0, delete_delay_s=0.7)).run()
    assert [j.first_start - j.submit for j in late.state.jobs] == pytest.approx(
        [j.first_start - j.submit + 1.0 for j in floor.state.jobs]
    )
    extra = 0.7 * (PRICES["a3-highgpu-1g"].on_demand + PRICES["a3-highgpu-2g"].on_demand) / 3600
    assert late.cloud.ledger.cost(late.t_end) - floor.cloud.ledger.cost(floor.t_end) == pytest.approx(extra, rel=1e-6)
    assert late.cloud.ledger.closed_count == floor.cloud.ledger.closed_count == 3  # every node deleted


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


def _run(jobs: list, sc: Scenario, policy: object) -> tuple[ReplayEngine, list[tuple[str, str]]]:
    """Replay, recording (machine type, capacity type) of every node launched."""
    eng = ReplayEngine(jobs, sc, policy)  # type: ignore[arg-type]
    launched: list[tuple[str, str]] = []
    launch = eng.cloud.launch

    def record(req):  # type: ignore[no-untyped-def]
        out = launch(req)
        launched.extend((req.offering.machine_type, str(req.offering.capacity_type)) for _ in req.names)
        return out

    eng.cloud.launch = record  # type: ignore[method-assign]
    return eng.run(), sorted(launched)


@pytest.mark.parametrize(
    ("pods", "machines"),
    [
        (8, ["a3-highgpu-8g"]),  # one claim: the cheapest type that fits all 8 (per-GPU prices are equal)
        (3, ["a3-highgpu-4g"]),
        (1, ["a3-highgpu-1g"]),
        (9, ["a3-highgpu-1g", "a3-highgpu-8g"]),  # the ninth pod fits no type of the first claim: a second claim
    ],
)
def test_karpenter_like_packs_a_batch_into_claims_of_the_cheapest_type_fitting_all_their_pods(
    pods: int, machines: list[str]
) -> None:
    jobs = [job(i, i * 0.2, 1200, 1) for i in range(pods)]  # one batch (< 1 s apart)
    eng, launched = _run(jobs, Scenario(), KarpenterLikePolicy())
    assert [m for m, _ in launched] == machines
    assert all(j.first_start is not None and j.first_start - j.submit < 372 for j in eng.state.jobs)


def test_karpenter_like_puts_a_pod_on_a_node_coming_up_before_opening_a_claim() -> None:
    """A pod of a later batch fits on the 4g node still booting for three earlier pods: no new claim."""
    jobs = [job(i, 0, 1200, 1) for i in range(3)] + [job(3, 60, 1200, 1)]
    _, launched = _run(jobs, Scenario(), KarpenterLikePolicy())
    assert launched == [("a3-highgpu-4g", "on-demand")]


def test_karpenter_like_prefers_the_reservation_then_spot_for_tolerant_pods() -> None:
    sc = Scenario(reserved_nodes=1, spot_fraction=0.5)
    jobs = [job(0, 0, 1200, 8), job(1, 0, 1200, 8, spot_ok=True), job(2, 0, 1200, 8)]
    _, launched = _run(jobs, sc, KarpenterLikePolicy())
    # largest first, FIFO: j0 takes the one reserved slot, j1 (tolerant) spot, j2 on-demand
    assert sorted(c for _, c in launched) == ["on-demand", "reservation", "spot"]


def test_ca_like_defaults_are_the_documented_ones_and_a_bad_expander_is_named() -> None:
    ca = CaLikePolicy()
    assert ca.expander == "random" and ca.utilization_threshold == 0.5
    assert (ca.unneeded_time_s, ca.delay_after_add_s, ca.scan_interval_s) == (600, 600, 10)
    with pytest.raises(ValueError, match="--ca-expander: unknown expander 'cheapest'"):
        CaLikePolicy(expander="cheapest")


def test_ca_like_utilisation_threshold_is_read_and_busy_gpu_nodes_are_never_unneeded() -> None:
    from autoscaler.replay.state import SimNode

    ca = CaLikePolicy()
    node = SimNode("n-0", "p", None, 8, 1.0, 0.0)  # type: ignore[arg-type]
    node.free = 8
    assert ca.utilization(node) == 0 and ca.unneeded(node)
    node.free, node.jobs = 7, {0: 1}  # 1 of 8 GPUs busy: under the threshold, but the batch pod cannot move
    assert ca.utilization(node) == pytest.approx(0.125) and not ca.unneeded(node)
    assert not CaLikePolicy(utilization_threshold=0.0).unneeded(SimNode("n-1", "p", None, 8, 1.0, 0.0))  # type: ignore[arg-type]
    # threshold 0: an empty node is never under it, so nothing is ever scaled down
    jobs = [job(0, 0, 600, 8), job(1, 5000, 600, 8)]
    kept = ReplayEngine(jobs, Scenario(), CaLikePolicy(utilization_threshold=0.0)).run()
    dropped = ReplayEngine(jobs, Scenario(), CaLikePolicy()).run()
    assert kept.counters.nodes_launched == 1 and dropped.counters.nodes_launched == 2


def test_ca_like_priority_expander_takes_the_reservation_and_random_may_not() -> None:
    sc = Scenario(reserved_nodes=2)
    jobs = [job(i, i * 3600.0, 1800, 8) for i in range(6)]
    prio = ReplayEngine(jobs, sc, CaLikePolicy(expander="priority")).run()
    assert prio.cloud.ledger.cost(prio.t_end) == 0  # every node from the reservation: nothing beyond it billed
    rnd = ReplayEngine(jobs, sc, CaLikePolicy(expander="random", seed=1)).run()
    assert rnd.cloud.ledger.cost(rnd.t_end) > 0  # random picks on-demand groups too


def test_karpenter_like_counts_the_free_room_of_a_reserved_node_coming_up_for_one_pod() -> None:
    """One pod takes the reserved 8g slot (reserved first); seven more pods a batch later fit on it while it
    boots: no second node."""
    jobs = [job(0, 0, 1200, 1)] + [job(i, 60 + i, 1200, 1) for i in range(1, 8)]
    eng, launched = _run(jobs, Scenario(reserved_nodes=1), KarpenterLikePolicy())
    assert launched == [("a3-highgpu-8g", "reservation")]
    starts = {j.first_start for j in eng.state.jobs}
    assert len(starts) == 1 and 360 <= starts.pop() < 372  # all on that node once it is up
