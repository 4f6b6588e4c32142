"""The Kubernetes daemon runs the settings rule over the ProvisioningRequests it has seen (one workload arriving
at each request's creation) and the runs of their workloads timed from the pods that consume them
(autoscaler/kube/runs.py), as the replay's Kueue path does (autoscaler/core/settings.py)."""

from __future__ import annotations

import datetime as dt

from autoscaler.cloud import Offering, OfferingKey
from autoscaler.core.settings import SettingsTracker
from autoscaler.kube.loop import KubeDaemon, KubePools
from autoscaler.kube.source import request_view
from autoscaler.model import Policy, Pool
from fleet.catalog import CapacityType
from tests.kube.cluster import pod_template, provisioning_request

MT = "a3-ultragpu-8g"
POOL = Pool(
    name="h200", machine_type=MT, gpu_type="nvidia-h200-141gb", gpus_per_node=8, zones=("us-central1-a",),
    capacity_type=CapacityType.ON_DEMAND, max_nodes=8,
)  # fmt: skip
OFFERS = [Offering(OfferingKey("gcp", "us-central1-a", MT, CapacityType.ON_DEMAND), 84.0, "nvidia-h200-141gb", 8)]
T0 = dt.datetime(2026, 12, 1, 10, 0, tzinfo=dt.UTC).timestamp()


def _view(i: int, created: float):  # type: ignore[no-untyped-def]
    pr = provisioning_request(f"wl{i}-prov-1", "team-a", "tmpl", 1)
    pr["metadata"]["creationTimestamp"] = dt.datetime.fromtimestamp(created, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return request_view(pr, {("team-a", "tmpl"): pod_template("tmpl", "team-a", 8)}, [], {"h200": {}})


class _Lease:
    """The elector as `KubeDaemon` uses it to hand state on: the Lease's gpu-fleet annotations (`state`), written
    with a renewal (`try_acquire`)."""

    def __init__(self, state: dict[str, str] | None = None) -> None:
        self.state = state if state is not None else {}
        self.renewals = 0

    def try_acquire(self) -> bool:
        self.renewals += 1
        return True


def _daemon(lease: _Lease | None = None) -> KubeDaemon:
    kp = KubePools(pools=[POOL], labels={"h200": {}}, spot_taints=[], providers={})
    return KubeDaemon(
        api=None, pools=kp, policy=Policy(), elector=lease,  # type: ignore[arg-type]
        settings=SettingsTracker(base=Policy(), boot_s=360.0),
    )  # fmt: skip


def test_requests_seen_raise_the_idle_keep_of_their_shape() -> None:
    d = _daemon()
    views = []
    for k in range(0, 7200 // 10):  # the daemon polls every 10 s; a request every 2 minutes
        now = T0 + 10.0 * k
        if k % 12 == 0:
            views.append(_view(k, now))
        d._learn(list(views[-3:]), OFFERS, now, [])  # only the requests still out are listed
    assert d.policy.idle_timeout_for(MT) == 360.0  # 30 an hour, one per boot's worth of idle: keep one boot
    assert d.policy.expected_run_s is None and d.policy.batch_window_s == 0  # no pod ran: no run seen


def test_a_new_leader_starts_from_nothing_the_cheap_side() -> None:
    d = _daemon()
    d._learn([_view(1, T0)], OFFERS, T0 + 5.0, [])
    assert d.policy.idle_timeout_for(MT) == 0.0


def test_the_next_leader_starts_from_the_history_the_last_one_handed_on_through_the_lease() -> None:
    """Replica a serves two hours of work (a request every 2 minutes, 20-minute runs) and hands its history on at
    each refresh of the settings grid; replica b takes the Lease over and runs with a's settings at once (the idle
    keep its arrivals earn, the mean run), where a replica starting from nothing keeps nothing warm (before the
    twenty-ninth round the history lived in the leader's process)."""
    from autoscaler.kube.leader_state import HISTORY

    lease = _Lease()
    a = _daemon(lease)
    views = []
    for k in range(0, 7200 // 10):
        now = T0 + 10.0 * k
        if k % 12 == 0:
            views.append(_view(k, now))
        pods = [_pod(v.name, 0, v.created + 360, v.created + 1560) for v in views if v.created + 1560 <= now]
        a._current = {v.key: {} for v in views[-3:]}  # what the tick listed
        a._learn(list(views[-3:]), OFFERS, now, pods)
        renewals = lease.renewals
        a._hand_on(now)
        if lease.renewals > renewals:
            written = set(a._arrivals.entries)  # the arrivals on the Lease
    assert a.policy.idle_timeout_for(MT) == 360.0 and a.policy.expected_run_s == 1200.0
    assert HISTORY in lease.state and 0 < lease.renewals <= 7200 // 600 + 1  # one write per refresh, not per tick
    renewals = lease.renewals
    a._hand_on(T0 + 7195.0)  # same grid point: nothing new to write
    assert lease.renewals == renewals

    b = _daemon(_Lease(dict(lease.state)))
    b._take_over(T0 + 7210.0)
    b._learn(list(views[-3:]), OFFERS, T0 + 7210.0, [])
    assert b.policy.idle_timeout_for(MT) == 360.0 and b.policy.expected_run_s == 1200.0
    # every arrival on the Lease, and the requests still listed, each once (a request arriving between a's last
    # write and the take-over that is no longer listed is the one thing b misses)
    assert len(b._arrivals.entries) == len(written | {v.key for v in views[-3:]})

    fresh = _daemon(_Lease())
    fresh._take_over(T0 + 7210.0)
    fresh._learn(list(views[-3:]), OFFERS, T0 + 7210.0, [])
    assert fresh.policy.idle_timeout_for(MT) == 0.0 and fresh.policy.expected_run_s is None


def test_the_handed_on_history_keeps_to_its_budget_and_a_bad_one_is_learned_afresh() -> None:
    """The API server refuses an object whose annotations exceed 256 KiB: past its budget the history keeps the
    latest arrivals (about 8 bytes each), and text that is not a history reads as none (logged)."""
    import random

    from autoscaler.core.settings import SeenJob
    from autoscaler.kube.leader_state import HISTORY_MAX_BYTES, history_from_text, history_to_text

    rng = random.Random(1)
    t, entries = T0, {}
    for i in range(30_000):  # three weeks of a busy cluster
        t += rng.expovariate(1 / 60.0)
        run = round(rng.expovariate(1 / 1800.0))
        entries[f"pr/team-{i % 7}/wl-{rng.getrandbits(40):x}-prov-1"] = (
            t + 1.4, SeenJob(float(round(t)), rng.choice((1, 2, 4)), 8, float(round(t) + 360 + run), float(run)),
        )  # fmt: skip
    listed = set(list(entries)[-20:])
    text = history_to_text(T0, entries, listed)
    assert len(text) <= HISTORY_MAX_BYTES
    since, back = history_from_text(text)
    assert since == T0 and 10_000 < len(back) < len(entries)
    latest = sorted(entries.values(), key=lambda e: e[1].submit)[-len(back) :]  # the latest, to the second
    key = lambda e: (e[1].submit, e[1].nodes, e[1].run_s or 0.0, e[0])  # noqa: E731
    assert sorted(((round(f), j) for f, j in back.values()), key=key) == sorted(
        ((round(f), j) for f, j in latest), key=key
    )
    assert listed <= set(back)  # the requests still out keep their keys: seen again, not counted twice
    for bad in ("not base64 !", "eyJ2IjogMX0=", ""):
        assert history_from_text(bad) == (None, {})


def _iso(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _pod(request: str, i: int, start: float, end: float | None, *, phase: str = "Succeeded") -> dict:
    """A pod of the workload Kueue released for `request` (the admission check's PodSetUpdates annotation)."""
    status: dict = {"phase": "Running" if end is None else phase, "startTime": _iso(start)}
    if end is not None:
        status["containerStatuses"] = [
            {"name": "train", "state": {"terminated": {"exitCode": 0, "finishedAt": _iso(end)}}}
        ]
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": f"{request}-{i}", "namespace": "team-a",
                     "annotations": {"autoscaling.x-k8s.io/consume-provisioning-request": request}},
        "spec": {"nodeName": f"node-{i}", "containers": [{"name": "train", "image": "x"}]},
        "status": status,
    }  # fmt: skip


def _serve(d: KubeDaemon, seconds: float, boot_s: float, run_s: float) -> None:
    """Poll every 10 s for `seconds`: a request every 2 minutes (the last three listed), its workload's pod starting
    `boot_s` after it and running `run_s`."""
    views = []
    for k in range(0, int(seconds // 10)):
        now = T0 + 10.0 * k
        if k % 12 == 0:
            views.append(_view(k, now))
        pods = []
        for v in views:
            start = v.created + boot_s
            if start <= now:
                end = start + run_s
                pods.append(_pod(v.name, 0, start, end if end <= now else None))
        d._learn(list(views[-3:]), OFFERS, now, pods)


def test_runs_timed_from_the_pods_give_the_rule_the_mean_run() -> None:
    """Each request's workload runs 20 minutes (its pods' startTime to finishedAt), after a 6-minute boot; once the
    grid refreshes, the rule's `expected_run_s` is that mean, as the Slurm daemon's is from squeue."""
    d = _daemon()
    _serve(d, 7200, 360.0, 1200.0)
    assert d.policy.expected_run_s == 1200.0


def test_a_change_of_settings_is_logged_with_the_mean_run() -> None:
    """An operator reads the settings the rule chose in the log, as on Slurm: one line per change, with the mean
    run behind them."""
    import io
    import json

    from autoscaler.daemon.logs import setup_logging

    buf = io.StringIO()
    setup_logging(json_lines=True, stream=buf)
    d = _daemon()
    _serve(d, 3600, 0.0, 600.0)
    changes = [x for x in map(json.loads, buf.getvalue().splitlines()) if x["message"].startswith("settings:")]
    assert changes and changes[-1]["mean_run_s"] == 600.0 and "expected run 600 s" in changes[-1]["message"]
    assert "rule over the requests seen" in changes[-1]["message"]
    assert d.settings is not None and len(changes) <= d.settings.changes < 360  # a line per change, not per tick


def test_a_workload_whose_pods_failed_or_vanished_is_not_a_run() -> None:
    """A reclaimed spot node: its pod failed (or the pod garbage collector deleted it with the node); the workload
    runs again, so that is not its run, and it is timed from the new attempt's start."""
    from autoscaler.kube.runs import RunWatch

    w = RunWatch()
    assert w.observe([_pod("wl1", 0, T0, None)], T0 + 10) == []
    assert w.observe([_pod("wl1", 0, T0, T0 + 60, phase="Failed")], T0 + 70) == []  # failed: not a run
    assert w.observe([_pod("wl2", 0, T0, None)], T0 + 80) == []
    assert w.observe([], T0 + 90) == []  # wl2's pod vanished unseen finishing: not a run either
    retry = _pod("wl1", 1, T0 + 100, T0 + 700)
    old = _pod("wl1", 0, T0, T0 + 60, phase="Failed")
    (run,) = w.observe([old, retry], T0 + 710)
    assert (run.key, run.ended_at, run.run_s) == ("pr/team-a/wl1", T0 + 710, 600.0)
    assert w.observe([old, retry], T0 + 720) == []  # reported once


def test_a_gang_ends_with_its_last_pod_and_the_legacy_annotation_counts() -> None:
    """A 2-pod gang: started with its first pod, ended with its last; Kueue before 0.9 wrote only the
    cluster-autoscaler.kubernetes.io key; a run shorter than the poll is timed by the pods' own times."""
    from autoscaler.kube.runs import RunWatch
    from autoscaler.kube.source import CONSUMES, CONSUMES_LEGACY

    w = RunWatch()
    a, b = _pod("gang", 0, T0, T0 + 300), _pod("gang", 1, T0 + 5, None)
    for p in (a, b):
        ann = p["metadata"]["annotations"]
        ann[CONSUMES_LEGACY] = ann.pop(CONSUMES)
    assert w.observe([a, b], T0 + 310) == []  # one pod still runs
    b = _pod("gang", 1, T0 + 5, T0 + 900)
    b["metadata"]["annotations"] = dict(a["metadata"]["annotations"])
    (run,) = w.observe([a, b], T0 + 905)
    assert run.run_s == 900.0
    (quick,) = RunWatch().observe([_pod("blink", 0, T0, T0 + 4)], T0 + 10)  # started and ended between polls
    assert quick.run_s == 4.0
