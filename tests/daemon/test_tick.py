"""The daemon's tick against a fake Slurm and a fake cloud: what a Slurm admin relies on."""

from __future__ import annotations

import contextlib

from autoscaler.cloud import FailureKind, ProvisioningFailure, TransientError
from autoscaler.daemon.state import StateStore
from autoscaler.model import Policy
from tests.daemon.conftest import NAMES, ZONE_A, ZONE_B
from tests.daemon.fakes import offering


def resume(d, names, job=None, now=None):  # type: ignore[no-untyped-def]
    """What `fleet slurm resume` does, plus Slurm's side: nodes POWERING_UP with the job on them."""
    d.store.enqueue_power("resume", names, now or d.clock(), {n: (job,) for n in names} if job else {})
    for n in names:
        d.slurm.set(n, "mixed", "POWERING_UP", "NOT_RESPONDING", gpus_used=8)


def launches(res):  # type: ignore[no-untyped-def]
    return [c for c in res.commands if c["command"] == "launch" and c["outcome"] == "ok"]


def test_resume_creates_instances_named_after_the_nodes_in_the_cheapest_zone(make_daemon, cloud) -> None:
    d = make_daemon()
    resume(d, NAMES[:2], job=11)
    res = d.tick()
    assert res.ok and res.leader
    (launch,) = launches(res)
    assert launch["names"] == ["c1-spot-0", "c1-spot-1"]  # one request: the job's gang
    assert launch["offering"] == str(offering(ZONE_A))  # $20 beats $25
    assert sorted(cloud.nodes_) == ["c1-spot-0", "c1-spot-1"]
    assert d.store.open_power() == []  # the requests were served
    (req,) = d.store.requests(["launched"])
    assert req.names == ("c1-spot-0", "c1-spot-1") and req.request_id == launch["request_id"]
    # nothing launched twice on the next tick
    res2 = d.tick()
    assert launches(res2) == [] and cloud.creates["c1-spot-0"] == 1


def test_intent_is_written_before_the_cloud_is_called(make_daemon, cloud, tmp_path) -> None:
    d = make_daemon()
    seen: list[list[str]] = []
    real = cloud.launch

    def spy(request):  # type: ignore[no-untyped-def]
        other = StateStore(tmp_path / "state.db")  # another connection sees the committed intent
        seen.append([r.request_id for r in other.requests(["intent"])])
        other.close()
        return real(request)

    cloud.launch = spy  # type: ignore[method-assign]
    resume(d, NAMES[:1])
    d.tick()
    assert len(seen) == 1 and len(seen[0]) == 1


def test_stockout_backs_off_the_offering_and_falls_back_to_the_next_zone(make_daemon, cloud, clock) -> None:
    d = make_daemon()
    cloud.stocked_out.add(offering(ZONE_A))
    resume(d, NAMES[:2], job=3)
    res = d.tick()
    assert [c["outcome"] for c in res.commands if c["command"] == "launch"] == ["failed"]
    assert [u.key for u in d.store.unavailable(clock())] == [str(offering(ZONE_A))]
    assert len(d.store.open_power()) == 2  # still wanted
    clock.advance(5)
    res = d.tick()
    (launch,) = launches(res)
    assert launch["offering"] == str(offering(ZONE_B)) and launch["names"] == NAMES[:2]
    assert cloud.dup_attempts == 0
    # the backoff expires
    clock.advance(400)
    assert d.store.unavailable(clock()) == []


def test_async_failure_backs_off_and_asks_again(make_daemon, cloud, slurm, clock) -> None:
    d = make_daemon()
    resume(d, NAMES[:1])
    d.tick()
    rid = d.store.requests(["launched"])[0].request_id
    # the VM failed during creation (stockout reported by the MIG later; the provider cancels it as it reports)
    cloud.async_failures.append(
        ProvisioningFailure(rid, offering(ZONE_A), FailureKind.STOCKOUT, ("c1-spot-0",), "ZONE_RESOURCE_POOL_EXHAUSTED")
    )
    clock.advance(5)
    res = d.tick()  # the same tick backs off zone a and asks zone b
    assert d.store.request(rid).state == "failed"
    (launch,) = launches(res)
    assert launch["offering"] == str(offering(ZONE_B)) and launch["names"] == ["c1-spot-0"]


def test_transient_error_retries_the_same_request_id(make_daemon, cloud, clock) -> None:
    d = make_daemon()
    cloud.launch_faults.append(TransientError("HTTP 503"))
    resume(d, NAMES[:1])
    d.tick()
    (intent,) = d.store.requests(["intent"])
    clock.advance(5)
    d.tick()
    assert d.store.request(intent.request_id).state == "launched"
    assert cloud.requests_seen[intent.request_id] == 2 and len(cloud.requests_seen) == 1
    assert cloud.creates["c1-spot-0"] == 1


class Crash(BaseException):
    """Stands for SIGKILL: nothing after it runs."""


def test_killed_between_launch_and_record_adopts_instead_of_relaunching(make_daemon, cloud, clock) -> None:
    d = make_daemon()
    real = cloud.launch

    def launch_then_die(request):  # type: ignore[no-untyped-def]
        real(request)
        raise Crash

    cloud.launch = launch_then_die  # type: ignore[method-assign]
    resume(d, NAMES[:2], job=9)
    with contextlib.suppress(Crash):
        d.tick()
    d.lock.release()
    d.store.close()
    cloud.launch = real  # type: ignore[method-assign]
    clock.advance(3)
    d2 = make_daemon()
    res = d2.tick()
    assert res.ok
    assert launches(res) == []
    assert [r.state for r in d2.store.requests()] == ["launched"]
    assert cloud.creates == {"c1-spot-0": 1, "c1-spot-1": 1} and cloud.dup_attempts == 0
    assert d2.metrics.adopted._value.get() == 2


def test_killed_before_the_launch_reached_the_cloud_launches_once_with_the_same_id(make_daemon, cloud, clock) -> None:
    d = make_daemon()

    def die(request):  # type: ignore[no-untyped-def]
        raise Crash

    real = cloud.launch
    cloud.launch = die  # type: ignore[method-assign]
    resume(d, NAMES[:1])
    with contextlib.suppress(Crash):
        d.tick()
    (intent,) = d.store.requests(["intent"])
    d.lock.release()
    d.store.close()
    cloud.launch = real  # type: ignore[method-assign]
    d2 = make_daemon()
    d2.tick()
    assert d2.store.request(intent.request_id).state == "launched"
    assert cloud.nodes_["c1-spot-0"].request_id == intent.request_id and cloud.creates["c1-spot-0"] == 1


def test_suspend_deletes_idle_nodes_by_name_and_never_a_busy_one(make_daemon, cloud, slurm, clock) -> None:
    d = make_daemon()
    resume(d, NAMES[:2])
    d.tick()
    slurm.set("c1-spot-0", "idle", "POWERING_DOWN")
    slurm.set("c1-spot-1", "allocated", gpus_used=8)  # busy: Slurm would never suspend it; a stale row must not win
    d.store.enqueue_power("suspend", ["c1-spot-0", "c1-spot-1"], clock(), {})
    res = d.tick()
    assert cloud.deleted == ["c1-spot-0"]
    assert "c1-spot-1" in cloud.nodes_
    assert [c["outcome"] for c in res.commands if c["command"] == "delete"] == ["refused", "ok"]
    assert [h.state for h in d.store.history("c1-spot-0")][-1] == "deleting"


def test_resume_fail_backs_off_deletes_and_returns_the_node_to_service(make_daemon, cloud, slurm, clock) -> None:
    d = make_daemon()
    resume(d, NAMES[:1])
    d.tick()
    slurm.set("c1-spot-0", "down", "POWERING_UP", "NOT_RESPONDING")  # ResumeTimeout: job requeued
    d.store.enqueue_power("resume_fail", ["c1-spot-0"], clock(), {})
    d.tick()
    assert cloud.deleted == ["c1-spot-0"]
    assert (("c1-spot-0",), "resume") in slurm.updates
    (u,) = d.store.unavailable(clock())
    assert u.key == str(offering(ZONE_A)) and u.until >= clock() + d.loop.resume_fail_backoff_s
    assert d.store.open_power() == [] and d.store.requests(["launched", "intent"]) == []


def test_orphans_are_deleted_after_the_grace_period_and_used_instances_adopted(
    make_daemon, cloud, slurm, clock
) -> None:
    d = make_daemon()
    from autoscaler.cloud import LaunchRequest

    # two instances the store knows nothing about: one Slurm has powered down, one running a job
    cloud.launch(LaunchRequest("x", "spot", offering(ZONE_A), ("c1-spot-2", "c1-spot-3")))
    slurm.set("c1-spot-3", "allocated", gpus_used=8)
    d.tick()
    assert cloud.deleted == [] and set(d.store.orphans()) == {"c1-spot-2"}
    assert [r.names for r in d.store.requests(["launched"])] == [("c1-spot-3",)]  # adopted
    clock.advance(121)
    d.tick()
    assert cloud.deleted == ["c1-spot-2"] and "c1-spot-3" in cloud.nodes_
    assert d.metrics.orphans_deleted._value.get() == 1


def test_slurm_not_answering_means_no_deletes_but_resumes_still_served(make_daemon, cloud, slurm, clock) -> None:
    d = make_daemon()
    resume(d, NAMES[:1])
    d.tick()
    slurm.set("c1-spot-0", "idle", "POWERING_DOWN")
    d.store.enqueue_power("suspend", ["c1-spot-0"], clock(), {})
    d.store.enqueue_power("resume", ["c1-spot-1"], clock(), {})
    slurm.down = True
    res = d.tick()
    assert res.ok and not res.slurm_ok
    assert cloud.deleted == [] and "c1-spot-1" in cloud.nodes_
    assert [r.action for r in d.store.open_power()] == ["suspend"]
    slurm.down = False
    d.tick()
    assert cloud.deleted == ["c1-spot-0"]


def test_dry_run_plans_and_logs_but_touches_nothing(make_daemon, cloud, tmp_path) -> None:
    d = make_daemon(dry_run=True)
    resume(d, NAMES[:2], job=1)
    before = d.store.open_power()
    res = d.tick()
    assert [c["outcome"] for c in res.commands] == ["dry-run"]
    assert res.commands[0]["names"] == NAMES[:2]
    assert cloud.nodes_ == {} and d.store.open_power() == before and d.store.requests() == []


def test_a_second_daemon_on_the_same_state_stays_passive(make_daemon, cloud) -> None:
    d1 = make_daemon()
    d2 = make_daemon()
    assert d1.tick().leader
    resume(d2, NAMES[:1])
    res = d2.tick()
    assert not res.leader and res.commands == [] and cloud.nodes_ == {}
    assert d2.metrics.leader._value.get() == 0
    d1.lock.release()
    assert d2.tick().leader and "c1-spot-0" in cloud.nodes_


def test_idle_scale_down_drains_then_powers_down_and_deletes_by_name(make_daemon, cloud, slurm, clock) -> None:
    d = make_daemon(policy=Policy(idle_timeout_s=60, backoff_s=300, late_bind=False))
    resume(d, NAMES[:2])
    d.tick()
    slurm.set("c1-spot-0", "idle", last_busy=clock())
    slurm.set("c1-spot-1", "allocated", gpus_used=8)
    clock.advance(61)
    d.tick()  # drained, re-read (drained, no job), powered down and deleted in the same tick
    assert cloud.deleted == ["c1-spot-0"] and "c1-spot-1" in cloud.nodes_
    assert [u[1] for u in slurm.updates if u[0] == ("c1-spot-0",)] == ["drain", "power_down", "undrain"]


def test_a_job_slurm_placed_while_the_node_was_being_drained_keeps_it(make_daemon, cloud, slurm, clock) -> None:
    d = make_daemon(policy=Policy(idle_timeout_s=60, backoff_s=300, late_bind=False))
    resume(d, NAMES[:1])
    d.tick()
    slurm.set("c1-spot-0", "idle", last_busy=clock())
    clock.advance(61)
    real = slurm.update_nodes

    def drain_races_a_job(names, state, reason=None):  # type: ignore[no-untyped-def]
        real(names, state, reason)
        if state == "drain":  # Slurm had allocated a job just before the drain: draining, not drained
            slurm.set("c1-spot-0", "mixed", "DRAIN", gpus_used=8)

    slurm.update_nodes = drain_races_a_job  # type: ignore[method-assign]
    d.tick()
    assert cloud.deleted == [] and [u[1] for u in slurm.updates] == ["drain"]


def test_metrics_after_a_tick(make_daemon, slurm) -> None:
    d = make_daemon()
    resume(d, NAMES[:2], job=4)
    d.tick()
    d.tick()  # gauges describe the view a tick starts from
    text = d.metrics.render().decode()
    assert 'gpu_fleet_autoscaler_commands_total{command="launch",outcome="ok"} 1.0' in text
    assert 'gpu_fleet_autoscaler_nodes{pool="spot",state="booting"} 2.0' in text
    assert 'gpu_fleet_autoscaler_hourly_usd{capacity_type="spot"} 40.0' in text
    assert "gpu_fleet_autoscaler_tick_duration_seconds_count 2.0" in text
    assert d.metrics.healthy(d.clock()) and not d.metrics.healthy(d.clock() + 121)


def pending_job(job_id: int, nodes: int = 1, gpus: int = 8, reason: str = "Resources"):  # type: ignore[no-untyped-def]
    from autoscaler.slurm.readers import SlurmJob

    return SlurmJob(job_id, "j", "PENDING", reason, "gpu", nodes, gpus, None, (), 100, None, 1.0)


def test_queue_depth_prewarm_powers_up_free_nodes_through_slurm_only_when_enabled(make_daemon, cloud, slurm) -> None:
    from autoscaler.daemon.config import LoopConfig

    slurm.jobs_ = [pending_job(7, nodes=2)]
    off = make_daemon()
    res = off.tick()
    assert res.pending_units == 1 and slurm.updates == [] and cloud.nodes_ == {}
    off.lock.release()
    on = make_daemon(loop=LoopConfig(prewarm=True))
    on.tick()
    # Slurm is asked to power the nodes up (it then calls ResumeProgram); nothing is launched behind its back
    assert slurm.updates == [(("c1-spot-0", "c1-spot-1"), "power_up")] and cloud.nodes_ == {}


def test_pending_jobs_that_capacity_cannot_help_are_not_demand(make_daemon, slurm) -> None:
    slurm.jobs_ = [pending_job(1, reason="Dependency"), pending_job(2, reason="JobHeldUser"), pending_job(3)]
    res = make_daemon().tick()
    assert res.pending_units == 1


def _preempted_under_a_job(make_daemon, cloud, slurm):  # type: ignore[no-untyped-def]
    """A daemon whose launched spot node `c1-spot-0` runs a job, and whose instance the cloud then preempted."""
    import dataclasses

    from autoscaler.cloud import CloudNodeStatus

    d = make_daemon()
    resume(d, NAMES[:1], job=3)
    d.tick()
    slurm.set("c1-spot-0", "allocated", gpus_used=8)
    cloud.nodes_["c1-spot-0"] = dataclasses.replace(
        cloud.nodes_["c1-spot-0"], status=CloudNodeStatus.GONE, preempted=True
    )
    return d


def test_preempted_instance_powers_its_slurm_node_down_at_once(make_daemon, cloud, slurm, clock) -> None:
    d = _preempted_under_a_job(make_daemon, cloud, slurm)
    clock.advance(5)
    d.tick()
    # DOWN first (slurmctld requeues the jobs without waiting on the dead slurmd), then the power-down
    preempt = [(("c1-spot-0",), "down"), (("c1-spot-0",), "power_down")]
    assert [u for u in slurm.updates if u[0] == ("c1-spot-0",) and u[1] in ("down", "power_down")] == preempt
    assert slurm.nodes_["c1-spot-0"].reason == "gpu-fleet: instance preempted"
    assert not [u for u in slurm.updates if u[1] == "power_down_force"]
    assert d.store.requests(["launched"]) == []  # released: a later resume launches it afresh
    clock.advance(5)
    d.tick()
    assert [u for u in slurm.updates if u[1] in ("down", "power_down", "power_down_force")] == preempt


def test_a_preemption_seen_while_slurm_is_down_is_acted_on_when_it_answers(make_daemon, cloud, slurm, clock) -> None:
    """The tick that sees the preemption cannot reach slurmctld; its request lets the gone name go meanwhile.  The
    next tick still marks the node DOWN (its job is still allocated on it): otherwise the job would wait out
    SlurmdTimeout, as with no DOWN at all."""
    d = _preempted_under_a_job(make_daemon, cloud, slurm)
    slurm.down = True
    clock.advance(5)
    d.tick()
    slurm.down = False
    clock.advance(5)
    d.tick()
    preempt = [(("c1-spot-0",), "down"), (("c1-spot-0",), "power_down")]
    assert [u for u in slurm.updates if u[1] in ("down", "power_down", "power_down_force")] == preempt
    clock.advance(5)
    d.tick()  # DOWN, no work: nothing again
    assert [u for u in slurm.updates if u[1] in ("down", "power_down", "power_down_force")] == preempt


def test_a_failing_cloud_fails_the_tick_not_the_daemon(make_daemon, cloud) -> None:
    from autoscaler.cloud import TransientError

    d = make_daemon()

    def broken(pools=None):  # type: ignore[no-untyped-def]
        raise TransientError("HTTP 503 from listManagedInstances after retries")

    cloud.list_nodes = broken  # type: ignore[method-assign]
    res = d.tick()
    assert not res.ok and "503" in res.error
    assert not d.metrics.healthy(d.clock())
    assert 'gpu_fleet_autoscaler_ticks_total{outcome="failed"} 1.0' in d.metrics.render().decode()


def test_a_batch_window_never_holds_nodes_slurm_already_bound_to_a_job(make_daemon, cloud) -> None:
    """Slurm allocated these names to the job at submit: holding their launch cannot send the job elsewhere."""
    d = make_daemon(
        policy=Policy(idle_timeout_s=600, backoff_s=300, batch_window_s=600, batch_idle_s=600, late_bind=False)
    )
    resume(d, NAMES[:1], job=5)
    (launch,) = launches(d.tick())
    assert launch["names"] == NAMES[:1]


def test_nodes_asked_for_again_after_an_async_stockout_keep_their_jobs(make_daemon, cloud, clock) -> None:
    """Four independent 1-node jobs stay four units (not one all-or-nothing unit) when the MIG reports a
    per-instance stockout after accepting them, and each keeps its job (and so the job's priority)."""
    d = make_daemon()
    for i, n in enumerate(NAMES[:4]):
        resume(d, [n], job=100 + i)
    res = d.tick()
    assert res.resume_units == 4
    failures = [
        ProvisioningFailure(
            r.request_id, offering(ZONE_A), FailureKind.STOCKOUT, r.names, "ZONE_RESOURCE_POOL_EXHAUSTED"
        )
        for r in d.store.requests(["launched"])
    ]
    assert sorted(n for f in failures for n in f.names) == NAMES[:4]
    cloud.async_failures.extend(failures)
    clock.advance(5)
    res = d.tick()
    assert res.resume_units == 4  # without the job ids they came back as one unit
    relaunched = sorted(n for c in launches(res) for n in c["names"])
    assert relaunched == NAMES[:4] and all(c["offering"] == str(offering(ZONE_B)) for c in launches(res))
    rows = d.store.conn.execute("SELECT name, jobs FROM power_queue WHERE at = ? ORDER BY name", (clock(),)).fetchall()
    assert [(r["name"], r["jobs"]) for r in rows] == [(n, f"[{100 + i}]") for i, n in enumerate(NAMES[:4])]


def test_resume_fail_rows_for_unmanaged_names_run_no_scontrol(make_daemon, slurm) -> None:
    """Rows that bypassed the hook's filter (an older hook, a hand-made row) still never reach scontrol."""
    d = make_daemon()
    d.store.enqueue_power("resume_fail", ["login-0", "other-gpu-7"], d.clock(), {})
    res = d.tick()
    assert res.ok and slurm.updates == []
    assert d.store.open_power() == []  # finished, not retried forever


def test_a_job_no_pool_can_ever_serve_is_logged_once_and_counted(make_daemon, slurm, clock) -> None:
    import io
    import json

    from autoscaler.daemon.logs import setup_logging

    buf = io.StringIO()
    setup_logging(json_lines=True, stream=buf, level="WARNING")
    try:
        # -N 100 on a partition whose pool has 4 nodes; a job that fits
        slurm.jobs_ = [pending_job(41, nodes=100, reason="PartitionNodeLimit"), pending_job(42, nodes=2)]
        d = make_daemon()
        for _ in range(3):
            assert d.tick().ok
            clock.advance(10)
    finally:
        setup_logging()
    said = [json.loads(x) for x in buf.getvalue().splitlines() if "never be served" in x]
    assert len(said) == 1 and said[0]["reason"] == "too-many-nodes"
    assert "needs 100 nodes" in said[0]["message"] and "has 4" in said[0]["message"]
    text = d.metrics.render().decode()
    assert 'gpu_fleet_autoscaler_unservable_jobs{reason="too-many-nodes"} 1.0' in text
    slurm.jobs_ = [pending_job(42, nodes=2)]  # the user cancelled it: the gauge drops
    d.tick()
    assert 'unservable_jobs{reason="too-many-nodes"}' not in d.metrics.render().decode()
