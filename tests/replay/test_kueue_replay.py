"""`fleet simulate --scheduler kueue`: jobs reach the autoscaler only once Kueue admits them (quota, cohort
borrowing, gang admission), the wait splits into quota and provisioning, and every policy is behind the same gate."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from autoscaler.kube.wake import WAKE_LATENCY_S
from autoscaler.replay.engine import ReplayEngine
from autoscaler.replay.gpu_fleet_kube import GpuFleetKubePolicy
from autoscaler.replay.kueue_admission import ClusterQueue, even_queues
from autoscaler.replay.kueue_gate import (
    KueueGate,
    KueueSetup,
    KueueSetupError,
    admitted_schedule,
    default_quota_gpus,
    queues_from_output,
)
from autoscaler.replay.run import run_scenario
from autoscaler.replay.scenario import Scenario
from fleet.cli.main import app
from tests.replay.conftest import SMALL_TRACE, job

runner = CliRunner()
BOOT = 360.0


def replay(jobs, queues, team_of, sc=None, watch=True) -> tuple[ReplayEngine, GpuFleetKubePolicy, KueueGate]:  # type: ignore[no-untyped-def]
    """gpu-fleet's Kubernetes loop behind a Kueue gate over `jobs` (ids j0, j1, ...; their spot flags as given)."""
    sc = sc or Scenario(trace="test", boot_seconds=BOOT)
    gate = KueueGate(queues, team_of, admission_check=True)
    pol = GpuFleetKubePolicy.for_scenario(sc, jobs=jobs)
    pol.gate = gate
    pol.watch = watch
    eng = ReplayEngine(jobs, sc, pol, admission=gate).run()
    return eng, pol, gate


def jobs_by_id(eng: ReplayEngine) -> dict:  # type: ignore[type-arg]
    return {j.id: j for j in eng.state.jobs}


def test_quota_delays_a_job_by_exactly_the_time_the_earlier_job_takes() -> None:
    jobs = [job(0, 0, 3600, 8), job(1, 10, 600, 8)]
    queues = [ClusterQueue("team-1", 8)]  # room for one 8-GPU job at a time
    eng, pol, gate = replay(jobs, queues, {"j0": "team-1", "j1": "team-1"})
    j = jobs_by_id(eng)
    assert gate.admitted_at["j0"] == 0
    assert gate.admitted_at["j1"] == j["j0"].end == j["j0"].first_start + 3600  # admitted the instant j0 ends
    assert pol.first_planned["j1"] >= gate.admitted_at["j1"]  # no ProvisioningRequest before admission
    # its request books the node j0 leaves (no launch), Provisioned at the first poll after (the node is Ready:
    # at once, not a poll later), then its pods run
    assert eng.counters.nodes_launched == 1
    assert 0 <= j["j1"].first_start - j["j0"].end <= pol.interval_s
    # with instant capacity the quota wait is exactly j0's run time minus the gap between the submissions
    sched = {t.id: t.submit for t in admitted_schedule(jobs, queues, {"j0": "team-1", "j1": "team-1"})}
    assert sched["j1"] - 10 == 3600 - 10


def test_borrowing_lets_a_team_exceed_its_nominal_while_the_other_is_idle() -> None:
    jobs = [job(0, 0, 3600, 8), job(1, 0, 3600, 8)]
    team_of = {"j0": "team-1", "j1": "team-1"}  # team-2 has no work
    eng, _, gate = replay(jobs, even_queues(2, 16), team_of)
    assert gate.admitted_at == {"j0": 0, "j1": 0}  # team-1 borrows team-2's idle 8 GPUs
    assert all(j.first_start == pytest.approx(BOOT, abs=20) for j in eng.state.jobs)
    # without borrowing the second job waits for the first to end
    eng, _, gate = replay(jobs, even_queues(2, 16, borrowing_limit=0), team_of)
    first = min(eng.state.jobs, key=lambda j: j.first_start)
    assert sorted(gate.admitted_at.values()) == [0, first.end]


def test_a_gang_is_admitted_only_when_all_its_gpus_fit_and_smaller_work_passes_it() -> None:
    jobs = [job(0, 0, 3600, 8), job(1, 100, 600, 16), job(2, 200, 600, 8)]
    team_of = dict.fromkeys(("j0", "j1", "j2"), "team-1")
    eng, pol, gate = replay(jobs, [ClusterQueue("team-1", 16)], team_of)
    j = jobs_by_id(eng)
    # 8 of 16 GPUs free while j0 runs: the 16-GPU gang waits, the 8-GPU job behind it is admitted (BestEffortFIFO)
    assert gate.admitted_at["j2"] == 200
    assert gate.admitted_at["j1"] == max(j["j0"].end, j["j2"].end)
    assert pol.first_planned.get("j1", gate.admitted_at["j1"]) >= gate.admitted_at["j1"]  # no request before
    # the gang's two nodes start together and it never waited on half of them (gangs all or nothing)
    assert eng.state.partial_gang_gpu_s == 0
    assert j["j1"].first_start >= gate.admitted_at["j1"]


def test_the_gang_of_an_admitted_workload_is_one_launch_of_all_its_nodes_in_one_zone() -> None:
    jobs = [job(0, 0, 3600, 32)]
    eng, _, _ = replay(jobs, [ClusterQueue("team-1", 64)], {"j0": "team-1"})
    assert eng.counters.launches == 1 and eng.counters.nodes_launched == 4
    assert eng.state.jobs[0].first_start == pytest.approx(BOOT, abs=20)


def test_run_puts_every_policy_behind_the_same_gate_and_scores_them_against_the_admitted_bound() -> None:
    jobs = [job(0, 0, 3600, 8), job(1, 0, 3600, 8)]  # one 8-GPU job at a time fits the quota
    sc = Scenario(trace="test", reserved_nodes=1)
    policies = ["gpu-fleet", "static-peak", "ca-like", "karpenter-like", "exact-fit"]
    res = run_scenario(jobs, sc, policies, kueue=KueueSetup(teams=1, quota_gpus=8))
    out = res.as_json()
    kq = out["scenario"]["kueue"]
    assert out["scenario"]["scheduler"] == "kueue" and list(out["policies"]) == policies
    assert kq["admitted_peak_demand_gpus"] == 8 and kq["raw_peak_demand_gpus"] == 16
    # raw demand: 1 h of the reservation + 1 h of an on-demand node; admitted: the reservation for 2 h, no overflow
    node_h = 8 * res.bound.on_demand_gpu_rate
    assert kq["raw_lower_bound_usd"] == pytest.approx(sc.reservation_hourly_usd + node_h, rel=1e-3)
    assert out["scenario"]["lower_bound_usd"] == pytest.approx(2 * sc.reservation_hourly_usd, rel=1e-3)
    for name in policies:
        eng = res.engines[name]
        gate = eng.admission
        first, second = sorted(eng.state.jobs, key=lambda j: gate.admitted_at[j.id])
        assert gate.admitted_at[second.id] == first.end  # the same gate for every policy
        assert sum(gate.usage().values()) == 0  # every admitted workload finished: all quota returned
        m = out["policies"][name]
        assert m["wait_quota_p95_s"] > 3000 and m["wait_p95_s"] >= m["wait_provisioning_p95_s"]


def test_default_quota_is_the_p95_concurrent_demand_in_whole_nodes_and_fits_the_largest_job() -> None:
    jobs = [job(i, i * 100.0, 100.0, 4) for i in range(100)] + [job(100, 20_000, 10.0, 64)]
    assert default_quota_gpus(jobs) == 64  # p95 demand is 4 GPUs; the 64-GPU job must fit
    jobs = [job(i, 0, 100.0 if i < 10 else 10_000.0, 8) for i in range(12)]  # 96 GPUs briefly, then 16
    assert default_quota_gpus(jobs) == 16


def test_queues_from_a_stack_output_sum_each_team_over_its_flavors() -> None:
    row = {
        "team": "research",
        "cluster_queue": "a3u-research",
        "cohort": "a3u",
        "flavors": {
            "a3u-reserved": {"nominal_gpus": 64, "borrowing_limit_gpus": 32, "lending_limit_gpus": None},
            "a3u-spot": {"nominal_gpus": 32, "borrowing_limit_gpus": 16, "lending_limit_gpus": None},
        },
    }
    out = {"outputs": {"clusters": {"a3u": {"kueue_queues": [row, {**row, "cluster_queue": "a3u-product"}]}}}}
    qs = queues_from_output(out, "f.json")
    flavors = ("a3u-reserved", "a3u-spot")
    assert qs[0] == ClusterQueue("a3u-research", 96, "a3u", borrowing_limit=48, lending_limit=None, flavors=flavors)
    with pytest.raises(KueueSetupError, match=r"f.json: kueue_queues\[0\].flavors.a3u-spot.nominal_gpus"):
        bad = {**row, "flavors": {"a3u-spot": {"nominal_gpus": -1}}}
        queues_from_output([bad], "f.json")


def test_cli_kueue_json_reports_the_quota_and_provisioning_waits_apart() -> None:
    res = runner.invoke(
        app,
        ["simulate", "--trace", str(SMALL_TRACE), "--scheduler", "kueue", "--kueue-quota-gpus", "32", "--json"],
    )
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert "slurm-power-save" not in out["policies"]  # Slurm's own power saving has no Kubernetes form
    for m in out["policies"].values():
        for key in ("wait_quota_p50_s", "wait_quota_p95_s", "wait_provisioning_p50_s", "wait_provisioning_p95_s"):
            assert key in m
    assert out["policies"]["gpu-fleet"]["settings"]["scheduler"] == "kueue"


def test_cli_kueue_frontier_points_without_the_warm_cap_reach_the_kubernetes_gpu_fleet() -> None:
    args = ["simulate", "--trace", str(SMALL_TRACE), "--scheduler", "kueue", "--kueue-quota-gpus", "32"]
    res = runner.invoke(app, [*args, "--policy", "gpu-fleet", "--frontier", "50,50:no-warm-cap", "--json"])
    assert res.exit_code == 0, res.output
    points = json.loads(res.stdout)["frontier"]
    assert [(p["setting"], p["settings"]["scheduler"], p["settings"]["warm_cap"]) for p in points] == [
        ("50", "kueue", True),
        ("50:no-warm-cap", "kueue", False),
    ]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--kueue-teams", "3"], "--kueue-teams: only with --scheduler kueue"),
        (["--scheduler", "kube"], "--scheduler: unknown scheduler 'kube'"),
        (["--scheduler", "kueue", "--policy", "slurm-power-save"], "--policy: slurm-power-save is Slurm's own"),
        (["--scheduler", "kueue", "--kueue-quota-gpus", "8"], "--kueue-quota-gpus: job "),
        (["--scheduler", "kueue", "--kueue-borrowing-limit", "-1"], "--kueue-borrowing-limit: must be >= 0"),
        (
            ["--scheduler", "kueue", "--kueue-borrowing-limit", "0", "--kueue-teams", "4"],
            "--kueue-borrowing-limit: job",
        ),
        (["--scheduler", "kueue", "--kueue-queues", "/nonexistent.json"], "--kueue-queues: /nonexistent.json: no such"),
    ],
)
def test_cli_kueue_bad_input_names_the_flag_and_exits_2(args: list[str], message: str) -> None:
    res = runner.invoke(app, ["simulate", "--trace", str(SMALL_TRACE), *args])
    assert res.exit_code == 2, res.output
    assert message in res.output
    assert "Traceback" not in res.output


def test_cli_kueue_replays_the_cluster_queues_of_a_stack_output(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """`--kueue-queues` takes `fleet synth --json`'s outputs (clusters.<name>.kueue_queues) as they are."""
    flavor = {"nominal_gpus": 16, "borrowing_limit_gpus": 8, "lending_limit_gpus": None}
    rows = [{"cluster_queue": f"c-{t}", "cohort": "gpu", "flavors": {"f": flavor}} for t in ("a", "b")]
    path = tmp_path / "synth.json"
    path.write_text(json.dumps({"outputs": {"clusters": {"c": {"kueue_queues": rows}}}}), encoding="utf-8")
    args = ["simulate", "--trace", str(SMALL_TRACE), "--scheduler", "kueue", "--policy", "gpu-fleet", "--json"]
    res = runner.invoke(app, [*args, "--kueue-queues", str(path)])
    assert res.exit_code == 0, res.output
    kq = json.loads(res.stdout)["scenario"]["kueue"]
    assert [(q["name"], q["nominal_gpus"], q["borrowing_limit_gpus"]) for q in kq["cluster_queues"]] == [
        ("c-a", 16, 8),
        ("c-b", 16, 8),
    ]
    assert kq["admitted_peak_demand_gpus"] <= 32
    assert kq["flavors"].startswith("one per team over every pool")  # one flavor each: what the replay models
    rows[0]["flavors"] = {"resv": flavor, "spot": flavor}
    path.write_text(json.dumps({"outputs": {"clusters": {"c": {"kueue_queues": rows}}}}), encoding="utf-8")
    res = runner.invoke(app, [*args, "--kueue-queues", str(path)])
    assert res.exit_code == 0, res.output
    flavors = json.loads(res.stdout)["scenario"]["kueue"]["flavors"]
    assert flavors.startswith("c-a: several flavors summed into one quota") and "not modelled" in flavors
    res = runner.invoke(app, [*args, "--kueue-queues", str(path), "--kueue-teams", "3"])
    assert res.exit_code == 2 and "--kueue-teams: not with --kueue-queues" in res.output


def test_a_quota_above_the_peak_changes_nothing_for_the_baselines(small_trace) -> None:  # type: ignore[no-untyped-def]
    """The gate is transparent when quota never binds: the same costs and waits as without it."""
    sc = Scenario(trace=str(SMALL_TRACE))
    policies = ["exact-fit", "karpenter-like"]
    plain = run_scenario(small_trace, sc, policies).as_json()
    gated = run_scenario(small_trace, sc, policies, kueue=KueueSetup(teams=2, quota_gpus=4096)).as_json()
    assert gated["scenario"]["kueue"]["quota_wait_floor_p95_s"] == 0
    assert gated["scenario"]["lower_bound_usd"] == plain["scenario"]["lower_bound_usd"]
    for name in policies:
        a, b = plain["policies"][name], gated["policies"][name]
        assert (b["cost_usd"], b["wait_p95_s"], b["wait_quota_p95_s"]) == (a["cost_usd"], a["wait_p95_s"], 0)


def test_a_small_request_is_booked_onto_the_free_gpus_of_a_node_running_pods() -> None:
    """On an 8-GPU-only family a 1-GPU workload admitted while another runs goes onto that node's free GPUs, as the
    daemon's `inventory_nodes` counts a node running pods (the GPUs they ask for), not a node of its own; the
    replay counted such a node wholly used until the seventeenth round (synth:short on a3-megagpu: $34,026 against
    karpenter-like's $22,265; $25,466 after)."""
    jobs = [job(0, 0, 3600, 1), job(1, 600, 600, 1)]
    sc = Scenario(trace="test", machine_family="a3-megagpu")
    res = run_scenario(jobs, sc, ["gpu-fleet"], kueue=KueueSetup(teams=1, quota_gpus=8))
    m = res.as_json()["policies"]["gpu-fleet"]
    assert m["nodes_launched"] == 1
    second = jobs_by_id(res.engines["gpu-fleet"])["j1"]
    assert second.first_start - second.submit < 60  # no boot: the first node's free GPUs


def test_the_kubernetes_gpu_fleet_learns_the_runs_of_the_workloads_it_served() -> None:
    """The daemon times each workload from its pods (`autoscaler.kube.runs`); the replay gives its settings rule the
    same runs, so `expected_run_s` is the mean run of the workloads ended by a refresh (20 min here), not None as
    before the eighteenth round (with it, spot-tolerant work is priced against a spot node of its own)."""
    jobs = [job(i, 300.0 * i, 1200, 8) for i in range(12)]
    eng, pol, _ = replay(jobs, [ClusterQueue("q", 64)], {j.id: "q" for j in jobs})
    assert pol.tracker is not None
    learned = {p.expected_run_s for _, p in pol.tracker.log}
    assert learned >= {None, 1200.0}, learned
    assert all(j.state.value == "done" for j in eng.state.jobs)


def test_a_provisioned_workload_runs_in_the_pool_it_was_booked_in() -> None:
    """The deployed stack gives each pool its own Kueue flavor, whose node selector the workload's pods carry; the
    replay confines a provisioned workload's pods to its booking's pool (`Job.pool`), so a spot-tolerant pod
    never drifts onto an on-demand node's free GPUs (synth:long-tail, 70 % spot-tolerant: 1,152 GPU-h of
    spot-tolerant work ran on on-demand nodes before the eighteenth round's confinement, 252 after, all 8-GPU)."""
    jobs = [job(0, 0, 3600, 8, spot_ok=True), job(1, 60, 3600, 1), job(2, 120, 1800, 1, spot_ok=True)]
    sc = Scenario(trace="test", boot_seconds=BOOT, spot_fraction=0.5, preemption_rate_per_hour=0.0)
    eng, _, _ = replay(jobs, [ClusterQueue("q", 64)], {j.id: "q" for j in jobs}, sc)
    done = jobs_by_id(eng)
    assert all(j.state.value == "done" for j in done.values())
    assert {j.id: j.pool for j in done.values()} == {
        "j0": "a3-highgpu-8g-spot", "j1": "a3-highgpu-1g-on-demand", "j2": "a3-highgpu-1g-spot",
    }  # fmt: skip


def test_a_request_arriving_during_a_boot_is_booked_onto_the_booting_nodes_free_gpus() -> None:
    """On an 8-GPU-only family a 1-GPU request admitted while the node launched for another 1-GPU request boots is
    booked onto that node's 7 free GPUs (the daemon's `inventory_nodes` counts a booking's GPUs, not the node):
    one launch, both start when it registers.  Before the eighteenth round the replay's engine held a one-request
    launch's node for its job alone (a Slurm-style nomination), and every such request got a node of its own."""
    jobs = [job(0, 0, 3600, 1), job(1, 60, 3600, 1)]
    sc = Scenario(trace="test", machine_family="a3-megagpu")
    res = run_scenario(jobs, sc, ["gpu-fleet"], kueue=KueueSetup(teams=1, quota_gpus=8))
    assert res.as_json()["policies"]["gpu-fleet"]["nodes_launched"] == 1
    done = jobs_by_id(res.engines["gpu-fleet"])
    assert abs(done["j1"].first_start - done["j0"].first_start) <= 10  # both wait for the one boot


@pytest.mark.parametrize(("watch", "wait_s"), [(True, WAKE_LATENCY_S), (False, 5.0)])
def test_a_request_is_served_when_the_daemons_watch_wakes_it_not_at_the_next_poll(watch: bool, wait_s: float) -> None:
    """The daemon watches ProvisioningRequests (`autoscaler/kube/wake.py`): a 1-GPU request created at t=605, while
    the node of an earlier 1-GPU workload runs with 7 free GPUs, is booked there and Provisioned by the tick its
    creation wakes, `WAKE_LATENCY_S` later; polling alone (`watch` off, as before the nineteenth round) it waits for
    the poll at t=610."""
    jobs = [job(0, 0, 3600, 1), job(1, 605, 600, 1)]
    sc = Scenario(trace="test", boot_seconds=BOOT, machine_family="a3-megagpu")
    eng, pol, _ = replay(jobs, [ClusterQueue("q", 64)], {j.id: "q" for j in jobs}, sc, watch=watch)
    second = jobs_by_id(eng)["j1"]
    assert eng.counters.nodes_launched == 1
    assert second.first_start - second.submit == pytest.approx(wait_s)
    assert (pol.woken_ticks > 0) is watch


def test_the_kubernetes_loop_launches_every_reserved_slot_before_work_as_the_slurm_daemon_does() -> None:
    """`Policy.launch_reserved_nodes` on Kubernetes: the plan brings the reservation pool to its floor with no request
    out (the daemon's loop launches a floor's scale-up like any launch for pods), so the first job runs on a reserved
    node that is up and the overflow job boots on-demand."""
    jobs = [job(0, 1000, 600, 8), job(1, 1000, 600, 8)]
    sc = Scenario(trace="test", boot_seconds=BOOT, reserved_nodes=1)
    eng, pol, _ = replay(jobs, [ClusterQueue("team-1", 16)], dict.fromkeys(("j0", "j1"), "team-1"), sc=sc)
    starts = sorted(j.first_start - j.submit for j in eng.state.jobs)
    assert starts[0] <= pol.interval_s and starts[1] >= BOOT  # one on the reserved node up front, one booted
    assert eng.counters.nodes_launched == 2
