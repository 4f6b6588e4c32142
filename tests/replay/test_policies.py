"""Each policy replays a real (small) ITP trace to the end on the sim cloud, with numbers that add up,
and the behaviours that set the policies apart."""

from __future__ import annotations

from dataclasses import replace

import pytest

from autoscaler.cloud import CloudNodeStatus
from autoscaler.model import NodeState
from autoscaler.planner.rule import reservation_hold_s
from autoscaler.replay.baselines import KarpenterLikePolicy, SlurmPowerSavePolicy
from autoscaler.replay.engine import ReplayEngine
from autoscaler.replay.facts import scenario_facts
from autoscaler.replay.gpu_fleet import DEFAULT_POLICY, GpuFleetPolicy
from autoscaler.replay.run import POLICY_NAMES, replay_engine, resolve_policies, run_scenario
from autoscaler.replay.scenario import Scenario
from autoscaler.replay.simslurm import SimSlurm
from fleet.catalog import CapacityType
from tests.replay.conftest import job


@pytest.fixture(scope="module")
def default_run(small_trace):  # type: ignore[no-untyped-def]
    return run_scenario(small_trace, Scenario())


def test_every_policy_runs_every_job_and_never_beats_the_lower_bound(default_run, small_trace) -> None:
    demand_h = sum(j.gpus * j.duration for j in small_trace) / 3600
    assert list(default_run.metrics) == list(POLICY_NAMES)
    for name, m in default_run.metrics.items():
        assert m["jobs"] == len(small_trace), name
        assert m["cost_ratio"] >= 1.0, name
        assert m["gpu_hours_used"] == pytest.approx(demand_h, abs=0.01), name  # no spot: nothing lost
        assert m["gpu_hours_billed"] >= m["gpu_hours_used"], name
        assert m["cost_usd"] == pytest.approx(sum(m["cost_by_capacity_usd"].values()), abs=0.05), name
        assert m["wait_p50_s"] <= m["wait_p95_s"] <= m["wait_max_s"], name


def test_gpu_fleet_is_cheapest_and_waits_at_most_late_bindings_latencies_longer_than_the_baselines(default_run) -> None:
    m = default_run.metrics
    assert m["gpu-fleet"]["cost_ratio"] <= 1.02
    assert m["gpu-fleet"]["cost_usd"] == min(p["cost_usd"] for n, p in m.items() if n != "exact-fit")
    # exact-fit deletes a node the instant its job ends; the daemon sees it at its next 10 s poll (a few
    # seconds of node time per job: 0.01% here, reported rather than hidden)
    assert m["gpu-fleet"]["cost_usd"] <= m["exact-fit"]["cost_usd"] * 1.0002
    assert m["gpu-fleet"]["partial_gang_gpu_hours"] == 0
    best_wait = min(m[n]["wait_p95_s"] for n in ("slurm-power-save", "ca-like", "karpenter-like"))
    # late binding's price: the daemon hears of a submission through the job_submit.lua wake-up and undrains a
    # booted node once its watcher sees it registered (a second each), and the boot waits one ResumeProgram batch
    from autoscaler.replay.gpu_fleet import HELD_BOOT_LATENCY_S, SUBMIT_WAKE_LATENCY_S

    assert m["gpu-fleet"]["wait_p95_s"] <= best_wait + SUBMIT_WAKE_LATENCY_S + HELD_BOOT_LATENCY_S + 1.0


def test_static_peak_buys_the_peak_and_waits_for_no_boot(default_run) -> None:
    m = default_run.metrics["static-peak"]
    assert m["wait_p50_s"] == 0
    assert m["cost_ratio"] > 2  # the fleet idles most of the time


def test_reservation_is_billed_over_the_demand_span_for_every_policy_and_kept_warm_by_gpu_fleet(small_trace) -> None:
    res = run_scenario(small_trace, Scenario(reserved_nodes=2), ["gpu-fleet", "karpenter-like"])
    demand_span_h = res.bound.span_s / 3600.0
    for name, m in res.metrics.items():
        # the commitment is billed whether used or not: one figure in the run, the bound's, even for a policy
        # whose last job ends later (that shows in its wait, not in reservation dollars)
        assert m["cost_by_capacity_usd"]["reservation"] == pytest.approx(
            2 * res.scenario.reservation_hourly_usd * demand_span_h, rel=1e-6
        ), name
        assert m["cost_by_capacity_usd"]["reservation"] == pytest.approx(res.bound.reservation_usd, rel=1e-6)
        assert m["gpu_hours_billed_by_capacity"]["reservation"] == pytest.approx(2 * 8 * demand_span_h, abs=0.01)
    # gpu-fleet keeps paid-for reserved nodes up, so work that fits there starts at once
    assert res.metrics["gpu-fleet"]["wait_p50_s"] < res.metrics["karpenter-like"]["wait_p50_s"]


def test_a_policy_whose_last_job_ends_after_the_demand_span_pays_the_same_reservation() -> None:
    # two reserved nodes: j0 and j1 (4 GPUs each) fill node 0, j2 (1 GPU) takes node 1; j3 (8 GPUs), the job that
    # ends last, finds no whole reserved node and waits a boot, so every policy's last job ends after the bound's
    # last demanded second
    trace = [job(0, 0, 2000, 4), job(1, 10, 20000, 4), job(2, 20, 20000, 1), job(3, 3000, 20000, 8)]
    res = run_scenario(trace, Scenario(reserved_nodes=2), ["gpu-fleet", "exact-fit"])
    for name, m in res.metrics.items():
        assert m["span_h"] > res.bound.span_s / 3600.0 + 0.05, name
        assert m["cost_by_capacity_usd"]["reservation"] == pytest.approx(res.bound.reservation_usd, abs=0.01), name
        assert m["overflow_cost_usd"] == pytest.approx(m["cost_usd"] - res.bound.reservation_usd, abs=0.01), name


def test_karpenter_like_launches_gang_nodes_independently_and_bills_the_wait(small_trace) -> None:
    """A quota lets only 3 of a 4-node gang's nodes in at first: karpenter-like launches those and
    they idle, held for the gang, until quota frees up; gpu-fleet launches the gang all or nothing."""
    jobs = [job(0, 0, 1800, 8), job(1, 10, 3600, 32)]
    sc = Scenario()
    cfg = sc.sim_config().model_copy(update={"gpu_quota": {CapacityType.ON_DEMAND: 32}})
    karp = ReplayEngine(jobs, sc, KarpenterLikePolicy(), sim_config=cfg).run()
    fleet = SimSlurm(jobs, sc, GpuFleetPolicy(), sim_config=cfg).run()
    assert karp.state.partial_gang_gpu_s / 3600 > 3 * 8 * 0.4  # 3 nodes held ~half an hour
    assert fleet.state.partial_gang_gpu_s == 0
    assert fleet.cloud.ledger.cost(fleet.t_end) < karp.cloud.ledger.cost(karp.t_end)


def test_slurm_power_save_packs_small_jobs_onto_one_eight_gpu_node_and_suspends_it_after_300_s() -> None:
    """On an 8-GPU machine type without GPU NICs (a2-highgpu-8g) the partition is not OverSubscribe=EXCLUSIVE: small
    jobs share a node (an A3/A4 8-GPU one takes each whole: tests/replay/test_exclusive_partition.py)."""
    jobs = [job(i, 0, 600, 1) for i in range(3)]
    eng = replay_engine(jobs, Scenario(machine_family="a2-highgpu"), SlurmPowerSavePolicy()).run()
    assert eng.counters.nodes_launched == 1
    assert eng.cloud.ledger.closed_count == 1
    # billed from launch (1 s: ResumeProgram) to deletion: boot 360 s, slurmctld's launch pass at 390 s, 600 s of
    # work (the replay ends with the last job)
    assert eng.cloud.ledger.gpu_hours_by_capacity(eng.t_end)[CapacityType.ON_DEMAND] == pytest.approx(8 * 989 / 3600)


def test_policy_names_resolve_and_unknown_ones_are_named() -> None:
    assert resolve_policies("all") == list(POLICY_NAMES)
    assert resolve_policies("karpenter-like,gpu-fleet") == ["karpenter-like", "gpu-fleet"]
    with pytest.raises(ValueError, match="--policy: unknown policy 'nope'"):
        resolve_policies("gpu-fleet,nope")


def test_same_seed_same_numbers_and_spot_scenarios_count_preemptions(small_trace) -> None:
    sc = Scenario(spot_fraction=0.5, stockout_rate=0.3, preemption_rate_per_hour=0.2, seed=7)
    a = run_scenario(small_trace, sc, ["gpu-fleet", "karpenter-like"]).metrics
    b = run_scenario(small_trace, sc, ["gpu-fleet", "karpenter-like"]).metrics
    strip = {k: {f: v for f, v in m.items() if f != "replay_wall_s"} for k, m in a.items()}
    assert strip == {k: {f: v for f, v in m.items() if f != "replay_wall_s"} for k, m in b.items()}
    for m in a.values():
        assert m["jobs"] == len(small_trace)
        assert m["preempted_jobs"] > 0 and m["gpu_hours_lost_to_preemption"] > 0
        assert "spot" in m["cost_by_capacity_usd"]


def _fixed(sc: Scenario, trace: list, wait_value: float, hold_budget_s: float = 3600.0) -> GpuFleetPolicy:  # type: ignore[type-arg]
    """gpu-fleet with the settings rule's policy over the whole trace, fixed for the run, with an operator's hold
    budget (`FleetFacts.reservation_hold_max_s`; the default budget, 0, never holds)."""
    from autoscaler.core.settings import settings_policy

    pol = GpuFleetPolicy.for_scenario(sc, wait_value_usd_per_gpu_hour=wait_value)
    base = replace(DEFAULT_POLICY, wait_value_usd_per_gpu_hour=wait_value)
    facts = replace(scenario_facts(sc, trace, wait_value), reservation_hold_max_s=hold_budget_s)
    return replace(pol, policy=settings_policy(base, (), facts), tracker=None)


def test_with_a_reservation_overflow_is_held_so_jobs_wait_for_paid_for_gpus_then_bought() -> None:
    """The reservation hold on the simulated Slurm: overflow pools' powered-down nodes are drained, so a job that
    finds the reserved node busy stays PENDING (Slurm cannot power anything up for it); it takes the reserved node
    if that frees up within the rule's hold, else the plan releases an on-demand node for it once the hold ends."""
    sc = Scenario(reserved_nodes=1)
    a, b, c = job(0, 0, 400, 8), job(1, 900, 100, 8), job(2, 2000, 5000, 8)
    late = job(3, 2010, 100, 8)  # the reserved node is busy until 7000: held, then bought
    trace = [a, b, c, late]
    # the default hold budget is 0 (no job waits beyond its boot): an operator who allows one hour gets the rule's H
    assert _fixed(sc, trace, 0.5, hold_budget_s=0.0).policy.batch_window_s == 0
    pol = _fixed(sc, trace, 0.5)  # the rule's settings for this trace, fixed (the hold's mechanics, not its learning)
    facts = replace(scenario_facts(sc, trace, 0.5), reservation_hold_max_s=3600.0)
    hold = pol.policy.batch_window_s
    assert hold == round(reservation_hold_s(facts), 1) and hold > 0
    eng = replay_engine(trace, sc, pol).run()
    jobs = {j.id: j for j in eng.state.jobs}
    # the reserved node is launched up front, one boot before the first submission (the replay starts there), and
    # registers 1 s after it (the ResumeProgram's second); j0, allocated it while it boots, starts at slurmctld's
    # next launch pass
    assert jobs["j0"].first_start == 30
    assert jobs["j1"].first_start == 900 and jobs["j2"].first_start == 2000  # the reserved node stays up
    # released at the daemon's first poll after the hold, ResumeProgram 1 s later, the 360 s boot, then slurmctld's
    # next 30 s launch pass
    assert 2010 + hold + 361 <= jobs["j3"].first_start <= 2010 + hold + 10 + 361 + 30
    assert jobs["j3"].first_start % 30 == 0
    assert eng.counters.nodes_launched == 2
    assert eng.cloud.ledger.cost_by_capacity(eng.t_end)[CapacityType.ON_DEMAND] > 0
    # a wait worth more than the saving: no hold, Slurm powers up on-demand at submit (without standby nodes,
    # which a wait value this high also buys: then j3 starts on one at once)
    eager = _fixed(sc, trace, 1e4)
    assert eager.policy.batch_window_s == 0 and eager.policy.standby_by_machine
    no_standby = replace(eager, policy=replace(eager.policy, standby_by_machine={}))
    eng = replay_engine(trace, sc, no_standby).run()
    assert {j.id: j for j in eng.state.jobs}["j3"].first_start == 2400  # registered at 2010 + 361, the next pass
    eng = replay_engine(trace, sc, eager).run()
    assert {j.id: j for j in eng.state.jobs}["j3"].first_start == 2010


def test_every_policy_is_divided_by_one_bound_so_ratio_and_dollar_rankings_agree(small_trace) -> None:
    res = run_scenario(small_trace, Scenario(reserved_nodes=2), ["gpu-fleet", "karpenter-like", "ca-like"])
    bounds = {m["lower_bound_usd"] for m in res.metrics.values()}
    assert bounds == {round(res.bound.usd, 2)}  # one denominator, the demand span's
    assert res.bound.span_s == max(j.submit + j.duration for j in small_trace) - small_trace[0].submit
    by_cost = sorted(res.metrics, key=lambda n: res.metrics[n]["cost_usd"])
    # (ratios are rounded to 4 digits: equal ratios rank by dollars)
    assert by_cost == sorted(res.metrics, key=lambda n: (res.metrics[n]["cost_ratio"], res.metrics[n]["cost_usd"]))
    for name, m in res.metrics.items():
        # overflow: everything but the reservation, against the bound beyond the reservation
        assert m["overflow_cost_usd"] == pytest.approx(
            m["cost_usd"] - m["cost_by_capacity_usd"]["reservation"], abs=0.02
        )
        assert m["overflow_bound_usd"] == round(res.bound.usd - res.bound.reservation_usd, 2) > 0
        assert m["overflow_ratio"] == pytest.approx(m["overflow_cost_usd"] / m["overflow_bound_usd"], rel=1e-3), name
        assert m["overflow_ratio"] > m["cost_ratio"]  # the sunk reservation no longer hides the overflow spend
    sc = res.as_json()["scenario"]
    assert sc["lower_bound_usd"] == round(res.bound.usd, 2) and sc["overflow_bound_usd"] > 0


class _FailWatch(GpuFleetPolicy):
    """gpu-fleet recording, right after each ResumeFailProgram call, what Slurm shows of the failed names."""

    def __init__(self, scenario: Scenario, late_bind: bool) -> None:
        base = GpuFleetPolicy.for_scenario(scenario, late_bind=late_bind)
        super().__init__(policy=base.policy, slurm=base.slurm)
        self.after_fail: list[tuple[float, str, str, bool]] = []

    def resume_fail(self, sim, names) -> None:  # type: ignore[no-untyped-def]
        super().resume_fail(sim, names)
        up = {
            c.name
            for c in sim.cloud.list_nodes()
            if c.status in (CloudNodeStatus.PROVISIONING, CloudNodeStatus.RUNNING)
        }
        for n in names:
            nm = sim.names.get(n)
            self.after_fail.append((sim.now, n, "powered down" if nm is None else nm.node.state.value, n in up))


@pytest.mark.parametrize(
    ("late_bind", "scenario", "after"),
    [
        (True, Scenario(stockout_rate=1.0), NodeState.DELETING.value),
        (True, Scenario(boot_seconds=2400), NodeState.DELETING.value),
        (False, Scenario(stockout_rate=1.0), "powered down"),
        (False, Scenario(boot_seconds=2400), "powered down"),
    ],
    ids=["held-no-instance", "held-slow-boot", "unheld-no-instance", "unheld-slow-boot"],
)
def test_a_name_that_missed_resume_timeout_comes_back_as_the_daemon_brings_it_back(
    late_bind: bool, scenario: Scenario, after: str
) -> None:
    """The job's node misses ResumeTimeout: it never gets an instance (every launch stocks out) or boots for longer.
    The daemon deletes the instance, then powers a held pool's name down ("resume failed; held again": POWERING_DOWN
    for SuspendTimeout, no job can be bound to it meanwhile, then powered down and drained) and returns any other
    name to service at once (`state=resume`).  The replay must do the same, and bill no instance after it."""
    d = _FailWatch(scenario, late_bind)
    sim = SimSlurm([job(0, 0, 600, 1)], scenario, d)
    sim.run(until=d.slurm.resume_timeout_s + 60)
    at, name, state, instance = d.after_fail[0]
    assert name.startswith("a3-highgpu-1g-on-demand-")
    assert at == pytest.approx(d.slurm.resume_timeout_s, abs=20.0)  # from the power-up (a tick after the submit)
    assert (state, instance) == (after, False)  # and the instance, if there was one, is deleted


def test_an_aborted_held_boot_does_not_hold_back_the_next_jobs_boot() -> None:
    """Late binding: `a`'s boot turns surplus when `x`'s node frees and is aborted (deleted, POWERING_DOWN for
    SuspendTimeout).  `b` arrives during that power-down and gets a boot of its own at once, as the daemon's `_hold`
    does (it skips POWERING_DOWN names before counting boots under way); counted as on its way, the aborted name
    held `b` back until it powered off (SuspendTimeout, then a boot: 662 s)."""
    jobs = [job(0, 0, 70, 1), job(1, 400, 5000, 1), job(2, 440, 5000, 1)]
    scenario = Scenario()
    policy = GpuFleetPolicy.for_scenario(scenario, jobs=jobs)
    sim = SimSlurm(jobs, scenario, policy).run()
    waits = {j.trace.id: j.first_start - j.submit for j in sim.state.jobs}
    assert waits["j1"] < 60  # took j0's node, freed at 432, while its own boot ran
    assert waits["j2"] <= scenario.boot_seconds + 5  # one boot, launched on arrival
    # x's node at 1 s, a's surplus boot at 401 s (aborted), b's own at 441 s under a third name
    assert [(e[0], e[4]) for e in policy.launch_log] == [
        (1.0, ("a3-highgpu-1g-on-demand-0",)),
        (401.0, ("a3-highgpu-1g-on-demand-1",)),
        (441.0, ("a3-highgpu-1g-on-demand-2",)),
    ]


def test_under_late_binding_spot_tolerant_work_leaves_an_on_demand_node_to_work_that_needs_it() -> None:
    """j1 (spot-tolerant) and j2 (not) wait for their own boots, spot and on-demand, when j0's on-demand node frees:
    j1 is first in the queue, but the lua pins its constraint to spot (`job_submit.spot_pinned`), so the freed node
    goes to j2 and j1 runs on the spot node booted for it.  Unpinned, j1 took the on-demand node for its whole run
    and j2 waited for its boot (the held-out spot-heavy scenario cost up to 7 % more than exact-fit that way)."""
    jobs = [job(0, 0, 400, 1), job(1, 500, 3000, 1, spot_ok=True), job(2, 510, 3000, 1)]
    scenario = Scenario(spot_fraction=0.5)  # spot pools; which jobs tolerate spot is the trace's here
    policy = GpuFleetPolicy.for_scenario(scenario, jobs=jobs)
    sim = SimSlurm(jobs, scenario, policy).run()
    assert sim.allowed(sim.state.jobs[1]) == {"a3-highgpu-1g&spot"} and sim.allowed(sim.state.jobs[2]) == {
        "a3-highgpu-1g"
    }
    waits = {j.trace.id: j.first_start - j.submit for j in sim.state.jobs}
    assert waits["j2"] < 300  # j0's node, freed at about 762 s
    assert waits["j1"] == pytest.approx(waits["j0"], abs=15)  # a boot of its own
    spot = [e for e in policy.launch_log if any("spot" in n for n in e[4])]
    assert len(spot) == 1 and len(policy.launch_log) == 3  # j0's, j1's spot node, j2's aborted on-demand boot
