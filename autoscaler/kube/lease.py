"""Leader election through a `coordination.k8s.io/v1` Lease, as the Cluster Autoscaler and Karpenter do.

One replica holds the Lease (`holderIdentity`) and renews it every tick; another takes it over only once the Lease's
record has not changed for `leaseDurationSeconds` by its own clock, as client-go's leader election does ("only acts
on timestamps captured locally": the holder's `renewTime` is compared with nothing, so clock skew between the
replicas cannot hand the Lease to a standby while its holder is healthy; until the forty-seventh round the holder's
`renewTime` was compared with the local clock). A leader acts only while its last renewal is younger than
`renew_deadline_s` (client-go's RenewDeadline, 10 s of a 15 s Lease): a tick that runs longer stops before its next
write (`check_leading`), so two replicas never actuate at once. Every write is a replace on the Lease's
resourceVersion, so two replicas racing for an expired Lease cannot both win (the loser gets 409 Conflict). A
replica that is not the leader reads and exports metrics but actuates nothing. A leader that stops (SIGTERM: a
rollout, a drain) releases the Lease, as client-go's `ReleaseOnCancel` does (Karpenter turns it on): the other
replica takes over at its next tick instead of waiting `leaseDurationSeconds` for it to expire.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

from loguru import logger

from autoscaler.kube.api import KubeApi, KubeError


def micro_time(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(s: str | None) -> float:
    if not s:
        return 0.0
    return datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()


#: the Lease annotations that carry the leader's state to the next leader (`autoscaler.kube.leader_state`)
STATE_PREFIX = "autoscaling.gpu-fleet.dev/"


class LeadershipLost(RuntimeError):
    """This replica's last renewal is older than its renew deadline: it must not write (another may lead)."""


class LeaseElector:
    def __init__(
        self,
        api: KubeApi,
        namespace: str,
        name: str,
        identity: str,
        duration_s: float,
        clock: Callable[[], float],
        renew_deadline_s: float | None = None,
    ) -> None:
        self.api, self.namespace, self.name, self.identity = api, namespace, name, identity
        self.duration_s = duration_s
        #: client-go's default ratio (10 s of 15 s) when not given
        self.renew_deadline_s = renew_deadline_s if renew_deadline_s is not None else duration_s * 2 / 3
        self.clock = clock
        self.leader = False
        #: the other holder's record as last seen, and when (this replica's clock): the Lease expires
        #: `leaseDurationSeconds` after its record last changed here
        self._seen: tuple[str, str, int] | None = None
        self._seen_at = 0.0
        self._renewed_at: float | None = None
        #: annotations (keys under STATE_PREFIX) written with every renewal: read back by whoever takes over
        self.state: dict[str, str] = {}

    def _body(self, now: float, acquired: float, transitions: int, rv: str | None) -> dict:
        md: dict = {"name": self.name, "namespace": self.namespace}
        if rv:
            md["resourceVersion"] = rv
        if self.state:
            md["annotations"] = dict(self.state)
        return {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": md,
            "spec": {
                "holderIdentity": self.identity,
                "leaseDurationSeconds": int(self.duration_s),
                "acquireTime": micro_time(acquired),
                "renewTime": micro_time(now),
                "leaseTransitions": transitions,
            },
        }

    def try_acquire(self) -> bool:
        """Acquire or renew; False when another replica holds an unexpired Lease or won a race."""
        now = self.clock()
        try:
            lease = self.api.lease(self.namespace, self.name)
            if lease is None:
                self.api.create_lease(self.namespace, self._body(now, now, 0, None))
                self._renewed_at = now
                return self._set(True, "created the lease")
            spec = lease.get("spec") or {}
            holder = spec.get("holderIdentity")
            duration = float(spec.get("leaseDurationSeconds") or self.duration_s)
            if holder and holder != self.identity:
                record = (holder, str(spec.get("renewTime") or ""), int(spec.get("leaseTransitions") or 0))
                if record != self._seen:  # renewed (or changed hands) since last seen: expires a duration from now
                    self._seen, self._seen_at = record, now
                if now < self._seen_at + duration:
                    return self._set(False, f"held by {holder}")
            mine = holder == self.identity
            if not self.leader:  # becoming the leader (or again, after a restart): the last leader's state
                annotations = (lease.get("metadata") or {}).get("annotations") or {}
                self.state = {k: v for k, v in annotations.items() if k.startswith(STATE_PREFIX)}
            acquired = parse_time(spec.get("acquireTime")) if mine else now
            transitions = int(spec.get("leaseTransitions") or 0) + (0 if mine else 1)
            self.api.replace_lease(
                self.namespace, self.name, self._body(now, acquired, transitions, lease["metadata"]["resourceVersion"])
            )
            self._renewed_at = now
            return self._set(True, "renewed" if mine else f"took over from {holder or 'nobody'}")
        except KubeError as exc:
            if exc.status == 409:
                return self._set(False, "lost a race for the lease")
            logger.bind(error=str(exc)).warning("lease {}/{}: {}", self.namespace, self.name, exc)
            return self._set(False, "API server not answering")  # never act on a lease we cannot renew

    def check_leading(self) -> None:
        """Raise LeadershipLost unless this replica leads and renewed within its renew deadline (by its own
        clock): called before every write that acts on the cluster or the cloud."""
        now = self.clock()
        if not self.leader or self._renewed_at is None or now - self._renewed_at > self.renew_deadline_s:
            since = "never" if self._renewed_at is None else f"{now - self._renewed_at:.1f} s ago"
            self._set(False, f"last renewal {since}, past the {self.renew_deadline_s:g} s renew deadline")
            raise LeadershipLost(f"lease {self.namespace}/{self.name}: last renewal {since}; not acting")

    def release(self) -> None:
        """Give the Lease up, if this replica still holds it: no holder, a 1 s duration (client-go's release record;
        the API server refuses 0), the hand-on annotations kept for the next leader.  A failure is logged and the
        Lease left to expire, which is where it would be without a release."""
        if not self.leader:
            return
        now = self.clock()
        try:
            lease = self.api.lease(self.namespace, self.name)
            spec = (lease or {}).get("spec") or {}
            if lease is None or spec.get("holderIdentity") != self.identity:
                self._set(False, "lease no longer ours")
                return
            transitions = int(spec.get("leaseTransitions") or 0)
            body = self._body(now, now, transitions, lease["metadata"]["resourceVersion"])
            del body["spec"]["holderIdentity"]
            body["spec"]["leaseDurationSeconds"] = 1
            self.api.replace_lease(self.namespace, self.name, body)
            self._set(False, "released the lease")
        except KubeError as exc:
            logger.bind(error=str(exc)).warning("lease {}/{}: not released: {}", self.namespace, self.name, exc)
            self._set(False, "stopping; the lease expires on its own")

    def _set(self, leader: bool, why: str) -> bool:
        if leader != self.leader:
            logger.bind(identity=self.identity, leader=leader).info("leader election: {} ({})", leader, why)
        self.leader = leader
        return leader
