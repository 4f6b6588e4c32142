"""Two replicas, one Lease: the leader dies in the middle of a launch; the other takes over after the lease
expires and finishes the same launch - no double launch, the request is provisioned once.  A leader that stops
(SIGTERM) releases the Lease, and the other replica leads from its next tick."""

from __future__ import annotations

import json

import pytest

from autoscaler.kube.capi import APPLIED
from tests.fakes.kube_api import FakeKube
from tests.kube.cluster import LEASE, pod_template, provisioning_request, reconcile_capi
from tests.kube.test_capi_e2e import NS, Clock, cluster, cond, daemon, replicas  # noqa: F401


class Died(BaseException):
    """The leader's process killed mid-actuation (not an error any tick handles)."""


@pytest.mark.parametrize("when", ["after-the-launch-call", "before-the-launch-call"])
def test_the_other_replica_takes_over_with_no_double_launch(cluster: FakeKube, when: str) -> None:  # noqa: F811
    clock = Clock()
    a, b = daemon(cluster, clock, "replica-a"), daemon(cluster, clock, "replica-b")
    cluster.create(pod_template("train", "team-a", 8))
    cluster.create(provisioning_request("wl-1", "team-a", "train", 3))

    provider = a.kp.providers["h100"]
    real = provider.launch

    def dying_launch(request):
        if when == "after-the-launch-call":
            real(request)
        raise Died()

    provider.launch = dying_launch  # type: ignore[method-assign]
    with pytest.raises(Died):
        a.tick()
    assert b.tick().leader is False  # a's lease is still fresh
    assert replicas(cluster) == (3 if when == "after-the-launch-call" else 0)

    clock.t += 16  # the 15 s lease expires
    r = b.tick()
    assert r.leader and r.ok, r.error
    assert replicas(cluster) == 3
    md = cluster.get("machinedeployments", "neo-h100", NS)
    assert len(json.loads(md["metadata"]["annotations"][APPLIED])) == 1
    reconcile_capi(cluster, NS)
    clock.t += 5
    b.tick()
    assert cond(cluster, "wl-1", "Provisioned")["status"] == "True"
    assert replicas(cluster) == 3 and len(cluster.list("machines", NS)) == 3
    lease = cluster.get("leases", LEASE, "gpu-fleet-system")
    assert lease["spec"]["holderIdentity"] == "replica-b" and lease["spec"]["leaseTransitions"] == 1


def test_a_stopping_leader_releases_the_lease_and_the_other_replica_leads_at_its_next_tick(
    cluster: FakeKube,  # noqa: F811
) -> None:
    """client-go's ReleaseOnCancel, as Karpenter runs it: on SIGTERM (a rollout, a node drain) the leader gives
    the Lease up (no holder, 1 s, its hand-on annotations kept), so the standby does not wait out the 15 s
    duration.  A replica that does not hold the Lease leaves it alone; a released Lease is taken with one more
    transition."""
    clock = Clock()
    a, b = daemon(cluster, clock, "replica-a"), daemon(cluster, clock, "replica-b")
    assert a.tick().leader and not b.tick().leader
    annotations = cluster.get("leases", LEASE, "gpu-fleet-system")["metadata"].get("annotations")

    b.elector.release()  # not the leader: nothing written
    assert cluster.get("leases", LEASE, "gpu-fleet-system")["spec"]["holderIdentity"] == "replica-a"

    a.elector.release()
    lease = cluster.get("leases", LEASE, "gpu-fleet-system")
    assert "holderIdentity" not in lease["spec"] and lease["spec"]["leaseDurationSeconds"] == 1
    assert lease["metadata"].get("annotations") == annotations and not a.elector.leader

    clock.t += 1  # well inside the 15 s the Lease had
    r = b.tick()
    assert r.leader and r.ok, r.error
    lease = cluster.get("leases", LEASE, "gpu-fleet-system")
    assert lease["spec"]["holderIdentity"] == "replica-b" and lease["spec"]["leaseTransitions"] == 1
    assert not a.tick().leader  # the stopped replica, were it to tick again, finds it held


def test_a_standby_whose_clock_runs_ahead_does_not_take_a_lease_its_holder_renews(cluster: FakeKube) -> None:  # noqa: F811
    """The standby's clock is 40 s ahead of the leader's: the leader's renewTime looks 40 s old to it, yet the
    record keeps changing, so by its own clock the Lease never expires (client-go acts only on timestamps it
    captured).  Until the forty-seventh round the standby compared renewTime with its clock and took over from a
    healthy leader at once."""
    clock = Clock()
    ahead = Clock()
    ahead.t = clock.t + 40
    a, b = daemon(cluster, clock, "replica-a"), daemon(cluster, ahead, "replica-b")
    for _ in range(4):
        assert a.tick().leader
        assert b.tick().leader is False
        clock.t += 10
        ahead.t += 10
    # the leader stops renewing (its process gone): a Lease duration later by the standby's clock, it takes over
    ahead.t += 16
    assert b.tick().leader


def test_a_leader_past_its_renew_deadline_stops_before_its_next_write() -> None:
    """client-go's RenewDeadline: the last renewal 10 s or more ago (of a 15 s Lease), the leader writes nothing
    more and says it no longer leads; within the deadline it may."""
    from autoscaler.kube.lease import LeadershipLost, LeaseElector

    class Api:
        def lease(self, namespace: str, name: str) -> None:
            return None

        def create_lease(self, namespace: str, body: dict) -> dict:
            return body

    now = [1000.0]
    elector = LeaseElector(Api(), "ns", "lease", "me", 15.0, lambda: now[0])  # type: ignore[arg-type]
    assert elector.renew_deadline_s == 10.0 and elector.try_acquire()
    now[0] += 9.5
    elector.check_leading()  # within the deadline
    now[0] += 1.0
    with pytest.raises(LeadershipLost, match="not acting"):
        elector.check_leading()
    assert elector.leader is False
