"""The replay's Kubernetes gpu-fleet and the Kubernetes daemon take the same decisions for the same inputs (issue 8,
"one decision path", on the Kueue side; tests/daemon/test_one_path.py is Slurm's).

A small Kueue scenario (two teams' quota, so some workloads wait for it; shapes from 1 to 16 GPUs, a gang,
spot-tolerant work, a stockout in one zone, short and long runs) is replayed through `GpuFleetKubePolicy`,
recording at each of its ticks the world it saw (the ProvisioningRequests out, the nodes, whether each registered
or is cordoned, the workloads' pods running or finished) and what it decided (launch attempts, requests answered
Provisioned, nodes cordoned, nodes deleted).  Then `KubeDaemon.tick` - the real `kubernetes` client against the
fake API server, bound by the deployed RBAC, with the same settings rule - runs at the same instants over that
world, played as the rest of a cluster leaves it: requests and PodTemplates as Kueue creates them (and deletes
them once the workload finished, as Kueue's provisioning controller does), Nodes as kubelets register them, the
workloads' pods as the Job controller and kube-scheduler leave them (in the booked pool, by the pool's flavor),
and the cloud listing the replay's nodes.  Every tick's decisions must be the same.

Open loop: each tick starts from the replay's world, so a difference shows at the tick it happens instead of
compounding.  Not compared: when the daemon wakes (the ticks are the replay's; `autoscaler/kube/wake.py` and
tests/kube/test_wake.py).  The layout played is one Kueue flavor over every pool (`kueue.flavors`, the one the
replay scores, docs/simulate.md): a request's PodTemplate selects no pool, and the pods run in the pool booked for
them (the pool label Kueue adds from the Provisioned request's details, `podSetUpdates`).  Kueue's assignment among
several flavors is modelled on neither side."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import pytest

from autoscaler.core.settings import SettingsTracker
from autoscaler.kube.api import KubeApi
from autoscaler.kube.lease import LeaseElector
from autoscaler.kube.loop import KubeDaemon, KubePools
from autoscaler.kube.source import CONSUMES
from autoscaler.model import DeleteNodes, Drain, NodeState, ScaleUp
from autoscaler.replay.engine import ReplayEngine
from autoscaler.replay.gpu_fleet_kube import GpuFleetKubePolicy
from autoscaler.replay.kueue_admission import ClusterQueue
from autoscaler.replay.kueue_gate import KueueGate
from autoscaler.replay.scenario import Scenario
from autoscaler.replay.state import JobState
from autoscaler.replay.trace import TraceJob
from autoscaler.sim import StockoutWindow
from fleet.catalog import CapacityType
from fleet.spec.kube import GKE_FLAVOR_LABEL
from tests.daemon.fakes import FakeCloud
from tests.fakes.kube_api import FakeKube
from tests.kube.cluster import LEASE, deployed_rbac, pod_template, provisioning_request

NS = "team-a"
POOL_LABEL = "gpu-fleet.dev/pool"
# One Kueue flavor over every pool (`kueue.flavors`): its node label is on every node and in every request's
# PodTemplate, as Kueue copies the flavor's nodeLabels there
FLAVOR = {GKE_FLAVOR_LABEL: "gpus"}
SPOT_TAINT = {"key": "gpu-fleet/spot", "value": "true", "effect": "NoSchedule"}
T0 = dt.datetime(2026, 12, 1, 10, 0, tzinfo=dt.UTC).timestamp()  # replay time 0 on the daemon's clock
OUT_ZONE = "us-central1-a"
OUT_FROM, OUT_TO = 0.0, 1500.0  # on-demand 8g stocks out in one zone for the first 25 minutes


def _iso(t: float) -> str:
    return dt.datetime.fromtimestamp(T0 + t, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class SeenNode:
    name: str
    pool: str
    offering: Any
    gpus: int
    launched_at: float
    ready_at: float | None  # None: booting
    cordoned: bool


@dataclass(frozen=True)
class SeenJob:
    id: str
    pods: int
    gpus_per_pod: int
    spot_ok: bool
    admitted_at: float
    state: JobState
    pool: str | None
    nodes: tuple[str, ...]  # where its pods run (or ran)
    start: float | None
    end: float | None
    attempt: int  # a preempted job runs again as new pods


@dataclass
class Tick:
    at: float
    nodes: list[SeenNode]
    jobs: list[SeenJob]  # every workload with quota reserved whose request Kueue has not deleted, or whose pods stay
    offerings: list[Any]
    launches: list[tuple[str, Any, tuple[str, ...]]] = field(default_factory=list)  # (pool, offering key, names)
    provisioned: list[tuple[str, str]] = field(default_factory=list)  # (workload, the pool its pods are pinned to)
    cordoned: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)


@dataclass
class RecordingKubeFleet(GpuFleetKubePolicy):
    """The replay's Kubernetes driver, recording the world each tick saw and what it decided."""

    log: list[Tick] = field(default_factory=list)
    _answered: list[tuple[str, str]] = field(default_factory=list)

    def decide(self, view, now, reasons):  # type: ignore[no-untyped-def]
        before = self.ticks
        seen = self._world(view, now)
        self._answered = []
        d = super().decide(view, now, reasons)
        if self.ticks == before:
            return d
        seen.provisioned = sorted(self._answered)
        for c in d.commands:
            if isinstance(c, ScaleUp):
                seen.launches.append((c.pool, c.offering, tuple(c.names)))
            elif isinstance(c, Drain):
                seen.cordoned += c.nodes
            elif isinstance(c, DeleteNodes):
                seen.deleted += c.names
        self.log.append(seen)
        return d

    def _provisioned(self, job, names, st) -> None:  # type: ignore[no-untyped-def]
        super()._provisioned(job, names, st)
        self._answered.append((job.id, job.pool))

    def _world(self, view, now: float) -> Tick:  # type: ignore[no-untyped-def]
        st, gate = view.state, self.gate
        nodes = [
            SeenNode(
                n.name,
                n.pool,
                n.offering,
                n.gpus,
                n.launched_at,
                n.ready_at if n.registered else None,
                n.state is NodeState.DRAINING,
            )
            for n in st.nodes.values()
        ]
        jobs = []
        for jid, at in gate.admitted_at.items():
            j = st.by_id[jid]
            jobs.append(
                SeenJob(
                    jid,
                    j.nodes,
                    j.gpus_per_node,
                    j.spot_ok,
                    at,
                    j.state,
                    j.pool,
                    tuple(n.name for n in j.placed_on),
                    j.start,
                    j.end,
                    j.attempt,
                )
            )
        return Tick(now, nodes, jobs, list(view.offerings()))


def _trace() -> list[TraceJob]:
    shapes = [(0, 3000, 8, False), (0, 3000, 8, True), (5, 400, 1, False), (5, 2000, 2, True), (30, 4000, 16, False)]
    shapes += [(400, 1000, 8, False), (420, 1000, 4, True), (900, 300, 1, False), (1000, 200, 1, False)]
    shapes += [(2000, 600, 8, False), (2100, 900, 24, True), (2150, 900, 1, False), (2300, 3000, 8, False)]
    return [TraceJob(f"j{i}", float(t), float(d), g, s) for i, (t, d, g, s) in enumerate(shapes)]


@dataclass(frozen=True)
class Case:
    """One scenario both sides run: the replay's `Scenario` fields, the wait value, what it must exercise."""

    name: str
    scenario: dict[str, Any]
    wait_value: float | None = None
    must_launch_in: frozenset[str] = frozenset()
    policy: dict[str, Any] = field(default_factory=dict)  # Policy fields the operator sets (`kueue.autoscaler.policy`)

    @property
    def out_type(self) -> str:  # the family's 8-GPU shape, stocked out on demand in one zone for a while
        return f"{self.scenario.get('machine_family', 'a3-highgpu')}-8g"


CASES = [
    # several shapes, spot-tolerant work, a stockout: nothing kept warm (the default wait value)
    Case("mixed", {}, None, frozenset({"a3-highgpu-8g-on-demand", "a3-highgpu-8g-spot", "a3-highgpu-1g-on-demand"})),
    # the same kept warm: idle timeouts from the settings rule
    Case("mixed-warm", {}, 50.0, frozenset({"a3-highgpu-8g-on-demand", "a3-highgpu-1g-on-demand"})),
    # 8-GPU nodes only: small requests booked onto the free GPUs of nodes running or booting for others
    Case("8g-only-warm", {"machine_family": "a3-megagpu"}, 50.0, frozenset({"a3-megagpu-8g-on-demand"})),
    # a reservation launched up front, spot nodes reclaimed under running work (its pods pending again)
    Case(
        "reserved-reclaimed",
        {"reserved_nodes": 1, "preemption_rate_per_hour": 1.0},
        None,
        frozenset({"a3-highgpu-8g-reserved", "a3-highgpu-8g-spot"}),
    ),
    # the same under a reservation hold (the settings rule gives a batch window): requests are booked on the
    # reserved node whenever it is free, and only paid launches wait out the window (the daemon took Slurm's hold
    # until the forty-eighth round and left every request unbooked for the window)
    Case(
        "reserved-hold",
        {"reserved_nodes": 1},
        None,
        frozenset({"a3-highgpu-8g-reserved", "a3-highgpu-8g-spot"}),
        {"reservation_hold_max_s": 600.0},
    ),
]


def replay(case: Case, jobs: list[TraceJob] | None = None, quota_gpus: int = 40) -> tuple[RecordingKubeFleet, Scenario]:
    """The replay's Kubernetes driver over `jobs` (default: this module's small trace) behind one team's quota,
    recording each tick's world and decisions."""
    sc = Scenario(**{"trace": "test", "spot_fraction": 0.5, "preemption_rate_per_hour": 0.0, **case.scenario})
    out = StockoutWindow(
        zone=OUT_ZONE, start=OUT_FROM, end=OUT_TO, machine_type=case.out_type, capacity_type=CapacityType.ON_DEMAND
    )
    cfg = sc.sim_config().model_copy(update={"stockout_windows": (out,)})
    jobs = jobs if jobs is not None else _trace()
    gate = KueueGate([ClusterQueue("team-a", quota_gpus)], {j.id: "team-a" for j in jobs}, admission_check=True)
    base = GpuFleetKubePolicy.for_scenario(sc, case.wait_value)
    policy = replace(base.policy, **case.policy)
    driver = RecordingKubeFleet(policy=policy, tracker=SettingsTracker(base=policy, boot_s=sc.ready_s))
    driver.gate = gate
    ReplayEngine(jobs, sc, driver, admission=gate, sim_config=cfg).run()
    return driver, sc


class World:
    """The rest of the cluster around the daemon, set to what the replay saw at each tick."""

    def __init__(self, fake: FakeKube, cloud: FakeCloud) -> None:
        self.fake, self.cloud = fake, cloud
        self.requests: set[str] = set()
        self.pods: dict[str, str] = {}  # pod name -> phase written
        self.ran_on: dict[str, tuple[str, ...]] = {}  # job id -> the nodes its pods were bound to

    def play(self, tick: Tick) -> None:
        self._requests(tick)
        self._nodes(tick)
        self._pods(tick)
        self.cloud.offers = list(tick.offerings)
        self.cloud.nodes_ = {n.name: _cloud_node(n) for n in tick.nodes}

    def _requests(self, tick: Tick) -> None:
        """Kueue: a request and its PodTemplate once the workload has quota; both deleted once it finished."""
        live = {j.id: j for j in tick.jobs if j.state is not JobState.DONE}
        for jid in sorted(set(live) - self.requests):
            j = live[jid]
            self.fake.create(pod_template(f"{jid}-tmpl", NS, j.gpus_per_pod, spot=j.spot_ok, selector=dict(FLAVOR)))
            self.fake.create(provisioning_request(_pr(jid), NS, f"{jid}-tmpl", j.pods))
            self._created_at(("provisioningrequests", NS, _pr(jid)), j.admitted_at)  # when Kueue reserved quota
            self.requests.add(jid)
        for jid in sorted(self.requests - set(live)):
            self.fake.delete("provisioningrequests", _pr(jid), NS)
            self.fake.delete("podtemplates", f"{jid}-tmpl", NS)
            self.requests.discard(jid)

    def _nodes(self, tick: Tick) -> None:
        """Kubelets: a Node once the replay's node registered, cordoned as the replay's, gone with it."""
        want = {n.name: n for n in tick.nodes if n.ready_at is not None}
        have = {o["metadata"]["name"] for o in self.fake.list("nodes")}
        for name in sorted(have - set(want)):
            self.fake.delete("nodes", name)
        for name, n in sorted(want.items()):
            obj = _node(n)
            if name in have:
                self.fake.update("nodes", name, "", lambda o, new=obj: o.update(spec=new["spec"]))
            else:
                self.fake.create(obj)

    def _pods(self, tick: Tick) -> None:
        """The Job controller, kube-scheduler and the pod garbage collector: a provisioned workload's pods in its pool
        (the flavor's node selector), bound where they run, Pending and Unschedulable while nothing holds room for
        them (their node was preempted), Succeeded once it ended (a Job's finished pods stay listed); an earlier
        attempt's pods are gone with their node."""
        want: dict[str, dict[str, Any]] = {}
        for j in tick.jobs:
            if j.pool is None:  # not provisioned yet: no pods
                continue
            if j.state is JobState.DONE:  # the replay forgets a finished job's nodes: where its pods ran
                nodes: tuple[str | None, ...] = self.ran_on.get(j.id, ())
            elif j.state is JobState.RUNNING:
                nodes = j.nodes
                self.ran_on[j.id] = j.nodes
            else:
                nodes = (None,) * j.pods
            for k, node in enumerate(nodes):
                name = f"{j.id}-{j.attempt}-{k}"
                want[name] = _pod(name, j, node)
        for name in sorted(set(self.pods) - set(want)):
            self.fake.delete("pods", name, NS)
            del self.pods[name]
        for name, obj in want.items():
            phase = obj["status"]["phase"]
            if self.pods.get(name) == phase:
                continue
            if name in self.pods:
                self.fake.update("pods", name, NS, lambda o, new=obj: o.update(spec=new["spec"], status=new["status"]))
            else:
                self.fake.create(obj)
                self._created_at(("pods", NS, name), tick.at)
            self.pods[name] = phase

    def _created_at(self, key: tuple[str, str, str], at: float) -> None:
        """Stamp an object as created at replay time `at` (the fake stamps its own clock)."""
        with self.fake.lock:
            self.fake.objects[key]["metadata"]["creationTimestamp"] = _iso(at)


def _pr(jid: str) -> str:
    return f"{jid}-prov-1"


def _cloud_node(n: SeenNode) -> Any:
    from autoscaler.cloud import CloudNode, CloudNodeStatus

    status = CloudNodeStatus.RUNNING if n.ready_at is not None else CloudNodeStatus.PROVISIONING
    return CloudNode(n.name, n.pool, n.offering, status, T0 + n.launched_at, None)


def _node(n: SeenNode) -> dict[str, Any]:
    spot = n.offering.capacity_type is CapacityType.SPOT
    assert n.ready_at is not None
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": n.name,
                     "labels": {POOL_LABEL: n.pool, **FLAVOR, "topology.kubernetes.io/zone": n.offering.zone}},
        "spec": {"unschedulable": True, "taints": [SPOT_TAINT]} if n.cordoned and spot
        else {"unschedulable": True} if n.cordoned
        else {"taints": [SPOT_TAINT]} if spot
        else {},
        "status": {
            "allocatable": {"nvidia.com/gpu": str(n.gpus), "cpu": "200"},
            "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": _iso(n.ready_at)}],
        },
    }  # fmt: skip


def _pod(name: str, j: SeenJob, node: str | None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        # the flavor's labels, and the booked pool's label Kueue adds from the Provisioned request's details
        "nodeSelector": {**FLAVOR, POOL_LABEL: j.pool} if j.pool else dict(FLAVOR),
        "containers": [
            {"name": "train", "image": "trainer@sha256:" + "a" * 64,
             "resources": {"limits": {"nvidia.com/gpu": str(j.gpus_per_pod)}}}
        ],
        "restartPolicy": "Never",
    }  # fmt: skip
    if j.spot_ok:
        spec["tolerations"] = [{"key": "gpu-fleet/spot", "operator": "Exists", "effect": "NoSchedule"}]
    status: dict[str, Any]
    if node is None:
        status = {
            "phase": "Pending",
            "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
        }
    else:
        spec["nodeName"] = node
        status = {"phase": "Running", "startTime": _iso(j.start or 0.0)}
        if j.state is JobState.DONE:
            finished = {"terminated": {"exitCode": 0, "finishedAt": _iso(j.end or 0.0)}}
            status.update(phase="Succeeded", containerStatuses=[{"name": "train", "state": finished}])
    labels = {"kueue.x-k8s.io/podset": "main"}  # Kueue's pod label; the request it consumes is the annotation
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": NS, "labels": labels, "annotations": {CONSUMES: _pr(j.id)}},
            "spec": spec, "status": status}  # fmt: skip


@pytest.fixture
def fake() -> Iterator[FakeKube]:
    f = FakeKube(rbac=deployed_rbac(cluster_api=False))
    f.start()
    yield f
    f.stop()
    assert not f.forbidden, f"calls the deployed ServiceAccount may not make: {f.forbidden}"


class RecordingCloud(FakeCloud):
    """The cloud the daemon talks to: lists what the replay's cloud listed; records every launch attempt."""

    attempts: list[tuple[str, Any, tuple[str, ...]]]

    def launch(self, request):  # type: ignore[no-untyped-def]
        self.attempts.append((request.pool, request.offering, tuple(request.names)))
        return super().launch(request)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_the_kubernetes_daemon_decides_what_the_replay_decided_tick_by_tick(fake: FakeKube, case: Case) -> None:
    driver, sc = replay(case)
    log = driver.log
    launches = [la for t in log for la in t.launches]
    assert any(len(names) > 1 for *_, names in launches), "the scenario must exercise a gang"
    assert any(t.deleted for t in log) and any(t.cordoned for t in log), "and scale-down"
    assert any(j.admitted_at > 0 and j.admitted_at > _submit(j.id) for t in log for j in t.jobs), "and quota waits"
    assert {p for p, *_ in launches} >= case.must_launch_in
    assert driver.tracker is not None
    warm = any(t > 0 for _, p in driver.tracker.log for t in p.idle_timeout_by_machine.values())
    assert warm is (case.wait_value is not None), "the wait value keeps nodes warm, the default does not"
    reclaimed = any(j.attempt > 0 for t in log for j in t.jobs)
    assert reclaimed is (case.scenario.get("preemption_rate_per_hour", 0) > 0), "pods pending again after a reclaim"

    diffs = daemon_differences(fake, driver, sc, case)
    assert not diffs, "\n".join(f"t={t:.0f}: (replay, daemon) {d}" for t, d in diffs[:8])


def daemon_differences(
    fake: FakeKube, driver: RecordingKubeFleet, sc: Scenario, case: Case
) -> list[tuple[float, dict[str, Any]]]:
    """Run `KubeDaemon.tick` at each of the replay's ticks over the world it saw; (time, {what: (replay, daemon)})
    for every tick whose decisions differ."""
    pools = driver._pools
    cloud = RecordingCloud(offers=[])
    cloud.attempts = []
    clock = [T0]
    api = KubeApi.from_kubeconfig(fake.kubeconfig())
    kp = KubePools(
        pools=pools,
        labels={p.name: {POOL_LABEL: p.name, **FLAVOR} for p in pools},
        spot_taints=[SPOT_TAINT],
        providers=dict.fromkeys((p.name for p in pools), cloud),
        taints={p.name: [SPOT_TAINT] if p.capacity_type is CapacityType.SPOT else [] for p in pools},
    )
    assert driver.tracker is not None
    daemon = KubeDaemon(
        api=api,
        pools=kp,
        policy=driver.tracker.base,
        elector=LeaseElector(api, "gpu-fleet-system", LEASE, "a", 15.0, lambda: clock[0]),
        clock=lambda: clock[0],
        settings=SettingsTracker(base=driver.tracker.base, boot_s=sc.ready_s),
    )
    world = World(fake, cloud)
    diffs = []
    for tick in driver.log:
        clock[0] = T0 + tick.at
        world.play(tick)
        cloud.attempts = []
        cloud.stocked_out = {
            o.key
            for o in tick.offerings
            if o.key.zone == OUT_ZONE
            and o.key.machine_type == case.out_type
            and o.key.capacity_type is CapacityType.ON_DEMAND
            and OUT_FROM <= tick.at < OUT_TO
        }
        res = daemon.tick()
        assert res.ok and res.leader, res.error
        got = {
            "launches": sorted(_per_node(cloud.attempts)),
            "provisioned": sorted(
                (k.rsplit("/", 1)[1].removesuffix("-prov-1"), _pinned_pool(fake, k))
                for k, v in res.answered.items()
                if v.startswith("Provisioned=True")
            ),
            "cordoned": sorted(res.cordoned),
            "deleted": sorted(res.deleted),
        }
        want = {
            "launches": sorted(_per_node(tick.launches)),
            "provisioned": tick.provisioned,
            "cordoned": sorted(tick.cordoned),
            "deleted": sorted(tick.deleted),
        }
        if got != want:
            diffs.append((tick.at, {k: (want[k], got[k]) for k in want if want[k] != got[k]}))
    return diffs


def _pinned_pool(fake: FakeKube, key: str) -> str:
    """The pool Kueue pins a Provisioned request's pods to: the pool label among its `provisioningClassDetails`
    (the stack's ProvisioningRequestConfig `podSetUpdates`, tests/kube/test_deployed.py)."""
    _, namespace, name = key.split("/", 2)  # `autoscaler.kube.source.pr_key`: pr/<namespace>/<name>
    details = (fake.get("provisioningrequests", name, namespace).get("status") or {}).get("provisioningClassDetails")
    return str((details or {}).get(POOL_LABEL))


def _per_node(launches: list[tuple[str, Any, tuple[str, ...]]]) -> list[tuple[str, str, str]]:
    """Each node launched: (pool, offering, name).  The replay launches a plan's scale-up as one command, the
    daemon each request's own nodes; what must agree is which nodes are launched where."""
    return [(pool, str(key), name) for pool, key, names in launches for name in names]


def _submit(jid: str) -> float:
    return next(j.submit for j in _trace() if j.id == jid)
