"""The baselines behave as the systems they imitate document (and exact-fit as its definition says)."""

from __future__ import annotations

import pytest

from autoscaler.replay.baselines import CaLikePolicy, ExactFitPolicy, KarpenterLikePolicy
from autoscaler.replay.engine import ReplayEngine
from autoscaler.replay.scenario import Scenario
from autoscaler.sim import StockoutWindow
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


# ---- karpenter-like: requeue of unplaced pods, disruption budget, registration timeout ----------------------


@pytest.mark.parametrize(("rate", "seed", "within"), [(0.8, 1, 1000.0), (0.95, 1, 1000.0), (0.95, 2, 3000.0)])
def test_karpenter_like_retries_pods_left_without_a_claim_every_10_s(rate: float, seed: int, within: float) -> None:
    """Every compatible offering stocked out and in the unavailable-offerings cache: the solve launches nothing,
    and the pod's 10 s reconcile requeue triggers the next batch until an offering launches.  Before, the pod
    waited for an unrelated event (j1's submission at 20,000 s: j0 started at 20,362 s at rate 0.8), and at 0.95
    the replay raised "nothing will happen"."""
    jobs = [job(0, 0, 3600, 8), job(1, 20_000, 60, 1)]
    eng = ReplayEngine(jobs, Scenario(stockout_rate=rate, seed=seed), KarpenterLikePolicy()).run()
    assert eng.counters.launch_failures > 3  # every 8g offering (3 zones) refused at least once
    j0 = eng.state.jobs[0]
    assert j0.first_start is not None and j0.first_start < within


def test_karpenter_like_retries_within_one_requeue_of_the_cache_expiring() -> None:
    """Every zone out from 0 to 150 s: the batch at 1 s finds the three 8g offerings out (cached until 181-183 s)
    and launches nothing.  The pod is reconciled every 10 s, so the first solve after the cache expired comes at
    most one requeue and one batch idle (11 s) later; no event at all follows (before: "nothing will happen")."""
    sc = Scenario()
    windows = tuple(StockoutWindow(zone=z, start=0.0, end=150.0) for z in sc.zones)
    cfg = sc.sim_config().model_copy(update={"stockout_windows": windows})
    eng = ReplayEngine([job(0, 0, 600, 8)], sc, KarpenterLikePolicy(), sim_config=cfg).run()
    assert eng.counters.launch_failures == 3
    start = eng.state.jobs[0].first_start
    assert start is not None and 181 + 360 <= start <= 181 + 11 + 360


def test_karpenter_like_disrupts_10_percent_of_registered_nodes_rounded_up() -> None:
    """15 registered nodes go empty together: the first consolidation round deletes ceil(1.5) = 2 (floor gave 1)."""
    jobs = [job(i, 0, 3600, 8) for i in range(15)] + [job(15, 20_000, 60, 1)]
    eng = ReplayEngine(jobs, Scenario(), KarpenterLikePolicy())
    deleted: list[tuple[float, str]] = []
    delete = eng.cloud.delete

    def record(pool, names):  # type: ignore[no-untyped-def]
        deleted.extend((eng.now, n) for n in names)
        return delete(pool, names)

    eng.cloud.delete = record  # type: ignore[method-assign]
    eng.run()
    first = min(t for t, _ in deleted)
    assert sum(1 for t, _ in deleted if t == first) == 2


@pytest.mark.parametrize(
    ("registered", "booting", "budget"),
    [(15, 0, 2), (30, 0, 3), (10, 10, 1), (0, 3, 0)],  # booting nodes neither count nor make the floor of 1
)
def test_karpenter_like_budget_counts_registered_nodes_only(registered: int, booting: int, budget: int) -> None:
    from types import SimpleNamespace

    from autoscaler.cloud import OfferingKey
    from autoscaler.replay.state import ClusterState, SimNode

    key = OfferingKey("sim", "us-central1-a", "a3-highgpu-8g", CapacityType.ON_DEMAND)
    st = ClusterState([])
    for i in range(registered + booting):
        node = SimNode(f"n-{i}", "p", key, 8, 1.0, 0.0)
        st.add_node(node)
        if i < registered:
            st.register(node, 0.0)
    assert KarpenterLikePolicy().budget(SimpleNamespace(state=st)) == budget  # type: ignore[arg-type]


def test_karpenter_like_refuses_a_boot_beyond_its_15_min_registration_timeout() -> None:
    """Karpenter deletes a NodeClaim not registered within 15 min (a constant): with a 1200 s boot no pod would
    ever run, so the replay refuses, naming the flag and the limit; 900 s still runs."""
    jobs = [job(0, 0, 600, 8)]
    with pytest.raises(ValueError, match=r"--boot-seconds: karpenter-like .* 900 s .* 1200 s boot"):
        ReplayEngine(jobs, Scenario(boot_seconds=1200), KarpenterLikePolicy())
    eng = ReplayEngine(jobs, Scenario(boot_seconds=900), KarpenterLikePolicy()).run()
    assert eng.state.jobs[0].first_start == pytest.approx(901)  # the batch closes 1 s after the submission


def test_simulate_refuses_karpenter_like_with_a_boot_beyond_15_min() -> None:
    from typer.testing import CliRunner

    from fleet.cli.main import app
    from tests.replay.conftest import SMALL_TRACE

    args = ["simulate", "--trace", str(SMALL_TRACE), "--policy", "karpenter-like", "--boot-seconds", "1200"]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 2
    assert "error: --boot-seconds: karpenter-like" in res.output and "Traceback" not in res.output


def test_a_policy_that_cannot_run_the_scenario_refuses_before_any_policy_replays() -> None:
    """`fleet simulate` replays its policies one after another (minutes each on a large trace): a refusal by the
    last one comes before the first starts, not after it finished."""
    from autoscaler.replay.run import run_scenario

    replayed: list[str] = []
    with pytest.raises(ValueError, match="--boot-seconds: karpenter-like"):
        run_scenario([job(0, 0, 600, 8)], Scenario(boot_seconds=1200), ["gpu-fleet", "ca-like", "karpenter-like"],
                     progress=lambda name, _: replayed.append(name))  # fmt: skip
    assert replayed == []


# ---- ca-like: node-group backoff, max-node-provision-time ----------------------------------------------------


def _refused(key: object) -> object:
    from autoscaler.model import ScaleUp

    return ScaleUp(pool="p", offering=key, names=("n-0",), request_id="r", units=(), reason="test")  # type: ignore[arg-type]


def test_ca_like_backoff_doubles_after_each_ended_backoff_and_resets_3_h_after_the_last_failure() -> None:
    """exponential_backoff.go: 5 min, then double the previous duration once it ended, capped at 30 min; the
    entry is forgotten 3 h (`--node-group-backoff-reset-timeout`) after the group's last failure."""
    from autoscaler.cloud import InsufficientCapacity, OfferingKey

    key = OfferingKey("sim", "us-central1-a", "a3-highgpu-8g", CapacityType.ON_DEMAND)
    ca = CaLikePolicy()
    durations = []
    for t in (0.0, 301.0, 902.0, 2103.0, 2103.0 + 4 * 3600):
        ca.on_launch_failure(_refused(key), InsufficientCapacity("out"), t)  # type: ignore[arg-type]
        durations.append(ca.backoff_duration(key))
        assert ca.backed_off(key, t + durations[-1] - 1) and not ca.backed_off(key, t + durations[-1])
    assert durations == [300, 600, 1200, 1800, 300]  # the last was 1,800 s: the count never reset


def test_ca_like_a_failure_during_a_backoff_keeps_its_duration() -> None:
    """A scale-up started before the group was backed off fails while the backoff runs: CA neither doubles the
    duration nor starts over at 5 min ("multiple concurrent scale-ups failing shouldn't cause backoff duration to
    increase", exponential_backoff.go); the backoff runs that long from the new failure."""
    from autoscaler.cloud import InsufficientCapacity, OfferingKey

    key = OfferingKey("sim", "us-central1-a", "a3-highgpu-8g", CapacityType.ON_DEMAND)
    ca = CaLikePolicy()
    for t in (0.0, 301.0, 500.0):
        ca.on_launch_failure(_refused(key), InsufficientCapacity("out"), t)  # type: ignore[arg-type]
    assert ca.backoff_duration(key) == 600 and ca.backed_off(key, 1099) and not ca.backed_off(key, 1100)


def test_ca_like_backoff_is_removed_when_a_scale_up_of_the_group_finishes() -> None:
    """One zone, out from 0 to 100 s and from 2000 to 2100 s.  j0's scale-up fails at 0 s (backoff 300 s) and
    succeeds at 300 s; once its node registered, CA removes the group's backoff (clusterstate.go
    `updateScaleRequests`), so j1's failure at 2000 s backs off 300 s again, not 600 s: j1 starts at 2660 s."""
    sc = Scenario()
    zone = "us-central1-a"
    windows = (StockoutWindow(zone=zone, start=0.0, end=100.0), StockoutWindow(zone=zone, start=2000.0, end=2100.0))
    cfg = sc.sim_config().model_copy(update={"zones": (zone,), "stockout_windows": windows})
    jobs = [job(0, 0, 600, 8), job(1, 2000, 600, 8)]
    eng = ReplayEngine(jobs, sc, CaLikePolicy(), sim_config=cfg).run()
    assert eng.counters.launch_failures == 2
    assert [j.first_start for j in eng.state.jobs] == [660, 2660]  # 2960 while the backoff kept doubling


@pytest.mark.parametrize(("boot", "provision_time"), [(360, 900), (900, 900), (1200, 1500)])
def test_ca_like_raises_max_node_provision_time_past_the_boot_and_says_so(boot: float, provision_time: float) -> None:
    """`--max-node-provision-time` (15 min) is an operator's flag: a slower boot gets the next multiple of 5 min
    above it (every scale-up would time out otherwise), reported in the run's settings."""
    eng = ReplayEngine([job(0, 0, 600, 8)], Scenario(boot_seconds=boot), CaLikePolicy()).run()
    assert eng.policy.settings()["max_node_provision_time_s"] == provision_time  # type: ignore[attr-defined]
    assert eng.state.jobs[0].first_start == boot  # the scan at 0 s launched it; it ran once booted
