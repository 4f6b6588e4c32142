"""What a ProvisioningRequest's booking holds once the request is Provisioned: the nodes it was Provisioned on,
until its pods arrive (or the booking TTL passes), and never a later node that took the same name."""

from __future__ import annotations

import datetime as dt
from dataclasses import replace

from autoscaler.kube.loop import KubeDaemon, KubePools
from autoscaler.kube.source import ARRIVED, BOOKING, CONSUMES, Booking, request_view
from autoscaler.model import Policy, Pool
from fleet.catalog import CapacityType
from tests.kube.cluster import bound_pod, pod_template, provisioning_request

T = dt.datetime(2026, 12, 1, 10, 0, tzinfo=dt.UTC).timestamp()
POOL = Pool(
    name="h100", machine_type="a3-highgpu-8g", gpu_type="nvidia-h100-80gb", gpus_per_node=8,
    zones=("us-central1-a",), capacity_type=CapacityType.SPOT, max_nodes=8,
)  # fmt: skip
NAMES = ("h100-0", "h100-1")


def _iso(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _provisioned_gang() -> dict:
    """A 2-pod gang's request, booked on two launched nodes and Provisioned at T."""
    pr = provisioning_request("wl-1", "team-a", "train", 2)
    pr["metadata"]["creationTimestamp"] = _iso(T - 400)
    booking = Booking("su-1", "h100", {"zone": "us-central1-a"}, NAMES, 2, T - 400)
    pr["metadata"]["annotations"] = {BOOKING: booking.to_json()}
    pr["status"] = {"conditions": [{"type": "Provisioned", "status": "True", "lastTransitionTime": _iso(T)}]}
    return pr


class Requests:
    """The ProvisioningRequests the daemon patches (metadata annotations merged as a merge patch does)."""

    def __init__(self, pr: dict) -> None:
        self.pr = pr

    def patch_provisioning_request(self, namespace: str, name: str, body: dict) -> dict:
        annotations = self.pr["metadata"].setdefault("annotations", {})
        for k, v in body["metadata"].get("annotations", {}).items():
            if v is None:
                annotations.pop(k, None)
            else:
                annotations[k] = v
        return self.pr


def _daemon(pr: dict | None = None) -> KubeDaemon:
    kp = KubePools(pools=[POOL], labels={"h100": {}}, spot_taints=[], providers={})
    api = Requests(pr) if pr is not None else None
    return KubeDaemon(api=api, pools=kp, policy=Policy(), elector=None)  # type: ignore[arg-type]


def _views(pr: dict) -> list:
    return [request_view(pr, {("team-a", "train"): pod_template("train", "team-a", 8)}, [], {"h100": {}})]


def test_a_provisioned_booking_holds_its_nodes_until_the_pods_arrive() -> None:
    pr = _provisioned_gang()
    d = _daemon()
    held = d._booked(_views(pr), T + 60, {n: T - 30 for n in NAMES})
    assert set(held) == set(NAMES)


def test_a_node_created_after_the_request_was_provisioned_is_not_held_by_it() -> None:
    """h100-1 was reclaimed under the running gang and a new launch took its free name: the old booking holds the
    node it was Provisioned on, not the new one (a new leader has no memory of the pods that arrived)."""
    pr = _provisioned_gang()
    d = _daemon()
    held = d._booked(_views(pr), T + 300, {"h100-0": T - 30, "h100-1": T + 250})
    assert set(held) == {"h100-0"}


def test_once_all_its_pods_were_bound_the_booking_holds_nothing_even_after_they_are_gone() -> None:
    pr = _provisioned_gang()
    d = _daemon(pr)
    pods = [bound_pod(f"train-{i}", "team-a", n, **{CONSUMES: "wl-1"}) for i, n in enumerate(NAMES)]
    d._see_arrivals(_views(pr), pods[:1], T + 30)
    assert set(d._booked(_views(pr), T + 60, {n: T - 30 for n in NAMES})) == set(NAMES)  # one pod of two: held
    assert ARRIVED not in pr["metadata"]["annotations"]
    d._see_arrivals(_views(pr), pods, T + 60)
    d._see_arrivals(_views(pr), [], T + 90)  # the node under them was reclaimed: the pods gone, new ones pend
    assert d._booked(_views(pr), T + 120, {n: T - 30 for n in NAMES}) == {}


def test_a_new_leader_knows_the_pods_arrived_from_the_request_itself() -> None:
    """The mark is on the request, not in the leader's memory: after a failover the consumed booking still holds
    nothing, though the pods that consumed it are gone (before the twenty-eighth round it held until the TTL)."""
    pr = _provisioned_gang()
    pods = [bound_pod(f"train-{i}", "team-a", n, **{CONSUMES: "wl-1"}) for i, n in enumerate(NAMES)]
    _daemon(pr)._see_arrivals(_views(pr), pods, T + 60)
    assert pr["metadata"]["annotations"][ARRIVED] == _iso(T + 60)
    successor = _daemon(pr)
    successor._see_arrivals(_views(pr), [], T + 90)  # its first tick: the pods are gone (their node reclaimed)
    assert successor._booked(_views(pr), T + 120, {n: T - 30 for n in NAMES}) == {}
    assert set(_daemon()._booked(_views(_provisioned_gang()), T + 120, {n: T - 30 for n in NAMES})) == set(NAMES)


class Conditions(Requests):
    """Also records the status patches (conditions) the daemon writes."""

    def patch_provisioning_request_status(self, namespace: str, name: str, body: dict) -> dict:
        self.pr["status"] = body["status"]
        return self.pr


def test_a_request_no_offering_can_serve_yet_waits_a_week_before_it_fails_as_the_cluster_autoscaler_does() -> None:
    """Without ValidUntilSeconds a request in a stockout stays Provisioned=False (Kueue keeps it queued) for the
    Cluster Autoscaler's seven days, then Failed (Expired): each Failed costs one of Kueue's three retries and the
    last deactivates the workload, which an hour's validity did after a four-hour stockout."""
    from autoscaler.kube.loop import DEFAULT_VALID_S
    from autoscaler.kube.loop import KubeTickResult as Result
    from autoscaler.model import UnservedReason

    pr = provisioning_request("wl-1", "team-a", "train", 1)
    pr["metadata"]["creationTimestamp"] = _iso(T)
    on_demand = replace(POOL, capacity_type=CapacityType.ON_DEMAND)  # the pod tolerates no spot
    kp = KubePools(pools=[on_demand], labels={"h100": {}}, spot_taints=[], providers={})
    d = KubeDaemon(api=Conditions(pr), pools=kp, policy=Policy(), elector=None)  # type: ignore[arg-type]
    (view,) = _views(pr)
    d._unserved(view, UnservedReason.BACKED_OFF, "every offering stocked out", T + 5 * 3600, Result(at=T))
    assert [(c["type"], c["status"]) for c in pr["status"]["conditions"]] == [("Provisioned", "False")]
    d._current.clear()
    d._unserved(view, UnservedReason.BACKED_OFF, "every offering stocked out", T + DEFAULT_VALID_S + 1, Result(at=T))
    failed = [c for c in pr["status"]["conditions"] if c["type"] == "Failed"]
    assert DEFAULT_VALID_S == 7 * 24 * 3600 and failed and failed[0]["reason"] == "Expired"
