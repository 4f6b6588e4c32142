"""The Kubernetes daemon runs the settings rule over the ProvisioningRequests it has seen (one workload arriving
at each request's creation), as the replay's Kueue path does (autoscaler/core/settings.py)."""

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


def _daemon() -> KubeDaemon:
    kp = KubePools(pools=[POOL], labels={"h200": {}}, spot_taints=[], providers={})
    return KubeDaemon(
        api=None, pools=kp, policy=Policy(), elector=None,  # type: ignore[arg-type]
        settings=SettingsTracker(base=Policy(), boot_s=360.0),
    )  # fmt: skip


def test_requests_seen_raise_the_idle_keep_of_their_shape() -> None:
    d = _daemon()
    views = []
    for k in range(0, 7200 // 10):  # the daemon polls every 10 s; a request every 2 minutes
        now = T0 + 10.0 * k
        if k % 12 == 0:
            views.append(_view(k, now))
        d._learn(list(views[-3:]), OFFERS, now)  # only the requests still out are listed
    assert d.policy.idle_timeout_for(MT) == 360.0  # 30 an hour, one per boot's worth of idle: keep one boot
    assert d.policy.expected_run_s is None and d.policy.batch_window_s == 0  # runs are not observed here


def test_a_new_leader_starts_from_nothing_the_cheap_side() -> None:
    d = _daemon()
    d._learn([_view(1, T0)], OFFERS, T0 + 5.0)
    assert d.policy.idle_timeout_for(MT) == 0.0
