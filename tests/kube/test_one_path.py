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
tests/kube/test_wake.py).  Not modelled on either side: Kueue's flavor assignment (the replay lets the planner
choose the pool, docs/simulate.md), so the request's PodTemplate selects no pool here."""

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
from tests.daemon.fakes import FakeCloud
from tests.fakes.kube_api import FakeKube
from tests.kube.cluster import LEASE, deployed_rbac, pod_template, provisioning_request

NS = "team-a"
POOL_LABEL = "gpu-fleet.dev/pool"
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


@dataclass
class Tick:
    at: float
    nodes: list[SeenNode]
    jobs: list[SeenJob]  # every workload with quota reserved whose request Kueue has not deleted, or whose pods stay
    offerings: list[Any]
    launches: list[tuple[str, Any, tuple[str, ...]]] = field(default_factory=list)  # (pool, offering key, names)
    provisioned: list[str] = field(default_factory=list)
    cordoned: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)


class RecordingKubeFleet(GpuFleetKubePolicy):
    """The replay's Kubernetes driver, recording the world each tick saw and what it decided."""

    log: list[Tick]

    def decide(self, view, now, reasons):  # type: ignore[no-untyped-def]
        if not hasattr(self, "log"):
            self.log = []
        before = self.ticks
        seen = self._world(view, now)
        self._answered: list[str] = []
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
        self._answered.append(job.id)
        super()._provisioned(job, names, st)

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
                )
            )
        return Tick(now, nodes, jobs, list(view.offerings()))


def _trace() -> list[TraceJob]:
    shapes = [(0, 3000, 8, False), (0, 3000, 8, True), (5, 400, 1, False), (5, 2000, 2, True), (30, 4000, 16, False)]
    shapes += [(400, 1000, 8, False), (420, 1000, 4, True), (900, 300, 1, False), (1000, 200, 1, False)]
    shapes += [(2000, 600, 8, False), (2100, 900, 24, True), (2150, 900, 1, False), (2300, 3000, 8, False)]
    return [TraceJob(f"j{i}", float(t), float(d), g, s) for i, (t, d, g, s) in enumerate(shapes)]


def _replay(wait_value: float | None = None) -> tuple[RecordingKubeFleet, Scenario]:
    sc = Scenario(trace="test", spot_fraction=0.5, preemption_rate_per_hour=0.0)
    out = StockoutWindow(
        zone=OUT_ZONE, start=OUT_FROM, end=OUT_TO, machine_type="a3-highgpu-8g", capacity_type=CapacityType.ON_DEMAND
    )
    cfg = sc.sim_config().model_copy(update={"stockout_windows": (out,)})
    jobs = _trace()
    gate = KueueGate([ClusterQueue("team-a", 40)], {j.id: "team-a" for j in jobs}, admission_check=True)
    base = GpuFleetKubePolicy.for_scenario(sc, wait_value)
    driver = RecordingKubeFleet(policy=base.policy, tracker=base.tracker)
    driver.gate = gate
    ReplayEngine(jobs, sc, driver, admission=gate, sim_config=cfg).run()
    return driver, sc


class World:
    """The rest of the cluster around the daemon, set to what the replay saw at each tick."""

    def __init__(self, fake: FakeKube, cloud: FakeCloud, gpus: dict[str, int]) -> None:
        self.fake, self.cloud, self.gpus = fake, cloud, gpus
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
            self.fake.create(pod_template(f"{jid}-tmpl", NS, j.gpus_per_pod, spot=j.spot_ok))
            self.fake.create(provisioning_request(_pr(jid), NS, f"{jid}-tmpl", j.pods))
            with self.fake.lock:  # created when Kueue reserved the quota (the fake stamps its own clock)
                self.fake.objects[("provisioningrequests", NS, _pr(jid))]["metadata"]["creationTimestamp"] = _iso(
                    j.admitted_at
                )
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
        """The Job controller and kube-scheduler: a workload's pods on the nodes it runs on, in its pool (the
        flavor's node selector), Succeeded once it ended (a Job's finished pods stay listed)."""
        for j in tick.jobs:
            if j.state is JobState.PENDING:
                continue
            phase = "Succeeded" if j.state is JobState.DONE else "Running"
            # a finished job's nodes are where its pods ran (the replay forgets them at its end)
            for k, node in enumerate(j.nodes or self.ran_on.get(j.id, ())):
                name = f"{j.id}-{k}"
                if self.pods.get(name) == phase:
                    continue
                obj = _pod(name, j, node, phase)
                if name in self.pods:
                    self.fake.update("pods", name, NS, lambda o, new=obj: o.update(status=new["status"]))
                else:
                    self.fake.create(obj)
                self.pods[name] = phase
            if j.nodes:
                self.ran_on[j.id] = j.nodes


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
        "metadata": {"name": n.name, "labels": {POOL_LABEL: n.pool, "topology.kubernetes.io/zone": n.offering.zone}},
        "spec": {"unschedulable": True, "taints": [SPOT_TAINT]} if n.cordoned and spot
        else {"unschedulable": True} if n.cordoned
        else {"taints": [SPOT_TAINT]} if spot
        else {},
        "status": {
            "allocatable": {"nvidia.com/gpu": str(n.gpus), "cpu": "200"},
            "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": _iso(n.ready_at)}],
        },
    }  # fmt: skip


def _pod(name: str, j: SeenJob, node: str, phase: str) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "nodeName": node,
        "nodeSelector": {POOL_LABEL: j.pool} if j.pool else {},
        "containers": [
            {"name": "train", "image": "trainer@sha256:" + "a" * 64,
             "resources": {"limits": {"nvidia.com/gpu": str(j.gpus_per_pod)}}}
        ],
        "restartPolicy": "Never",
    }  # fmt: skip
    if j.spot_ok:
        spec["tolerations"] = [{"key": "gpu-fleet/spot", "operator": "Exists", "effect": "NoSchedule"}]
    status: dict[str, Any] = {"phase": phase, "startTime": _iso(j.start or 0.0)}
    if phase == "Succeeded":
        status["containerStatuses"] = [
            {"name": "train", "state": {"terminated": {"exitCode": 0, "finishedAt": _iso(j.end or 0.0)}}}
        ]
    labels = {"kueue.x-k8s.io/workload-name": j.id}
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


@pytest.mark.parametrize("wait_value", [None, 50.0])
def test_the_kubernetes_daemon_decides_what_the_replay_decided_tick_by_tick(
    fake: FakeKube, wait_value: float | None
) -> None:
    """At the default wait value (nothing kept warm) and at one that keeps idle nodes warm (idle timeouts)."""
    driver, sc = _replay(wait_value)
    log = driver.log
    launches = [la for t in log for la in t.launches]
    assert any(len(names) > 1 for *_, names in launches), "the scenario must exercise a gang"
    assert any(t.deleted for t in log) and any(t.cordoned for t in log), "and scale-down"
    assert any(j.admitted_at > 0 and j.admitted_at > _submit(j.id) for t in log for j in t.jobs), "and quota waits"
    assert {p for p, *_ in launches} >= {"a3-highgpu-8g-on-demand", "a3-highgpu-8g-spot", "a3-highgpu-1g-on-demand"}

    pools = driver._pools
    cloud = RecordingCloud(offers=[])
    cloud.attempts = []
    clock = [T0]
    api = KubeApi.from_kubeconfig(fake.kubeconfig())
    kp = KubePools(
        pools=pools,
        labels={p.name: {POOL_LABEL: p.name} for p in pools},
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
    world = World(fake, cloud, {p.name: p.gpus_per_node for p in pools})
    diffs = []
    for tick in log:
        clock[0] = T0 + tick.at
        world.play(tick)
        cloud.attempts = []
        cloud.stocked_out = {
            o.key
            for o in tick.offerings
            if o.key.zone == OUT_ZONE
            and o.key.machine_type == "a3-highgpu-8g"
            and o.key.capacity_type is CapacityType.ON_DEMAND
            and OUT_FROM <= tick.at < OUT_TO
        }
        res = daemon.tick()
        assert res.ok and res.leader, res.error
        got = {
            "launches": sorted(cloud.attempts),
            "provisioned": sorted(
                k.rsplit("/", 1)[1].removesuffix("-prov-1")
                for k, v in res.answered.items()
                if v.startswith("Provisioned=True")
            ),
            "cordoned": sorted(res.cordoned),
            "deleted": sorted(res.deleted),
        }
        want = {
            "launches": sorted(tick.launches),
            "provisioned": tick.provisioned,
            "cordoned": sorted(tick.cordoned),
            "deleted": sorted(tick.deleted),
        }
        if got != want:
            diffs.append((tick.at, {k: (want[k], got[k]) for k in want if want[k] != got[k]}))
    assert not diffs, "\n".join(f"t={t:.0f}: (replay, daemon) {d}" for t, d in diffs[:8])


def _submit(jid: str) -> float:
    return next(j.submit for j in _trace() if j.id == jid)


def test_the_world_replayed_keeps_the_daemon_s_policy_in_step_with_the_replay_s() -> None:
    """The settings rule runs on both sides from the same base policy (the comparison above would be vacuous if
    one side ran fixed settings)."""
    driver, _ = _replay()
    assert driver.tracker is not None and driver.tracker.log, "the replay's rule refreshed"
    assert replace(driver.tracker.base, late_bind=False) == driver.tracker.base
