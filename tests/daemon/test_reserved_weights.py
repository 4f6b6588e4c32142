"""The tick's best fit on the reservation (`autoscaler.core.weights`), against the fake Slurm: each registered
reserved node's Weight becomes its rendered Weight plus its free GPUs, so slurmctld (lowest Weight first among
registered nodes) gives a small job the fullest reserved node it fits instead of an empty one."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest

from autoscaler.cloud import CloudNode, CloudNodeStatus, Offering, OfferingKey
from autoscaler.daemon.tick import Daemon
from autoscaler.model import Pool
from autoscaler.slurm.client import SlurmUnavailable
from autoscaler.slurm.readers import SlurmNode
from fleet.catalog import CapacityType, load_catalog
from fleet.slurm.weights import TIER_BASE, pool_weights
from tests.daemon.conftest import ZONE_A, spot_pool
from tests.daemon.fakes import FakeCloud, FakeSlurm, offering

MT = "a3-highgpu-8g"
RESV = [f"c1-resv-{i}" for i in range(4)]
RESV_KEY = OfferingKey("gcp", ZONE_A, MT, CapacityType.RESERVATION, "r1")
# what `fleet render slurm-conf` writes on the pools' NodeName lines
RENDERED = pool_weights(
    [("spot", CapacityType.SPOT, MT), ("resv", CapacityType.RESERVATION, MT)], load_catalog(), "us-central1"
)
BASE = RENDERED["resv"]
REASON = "gpu-fleet: best fit on the reservation (rendered Weight + free GPUs)"


def resv_pool() -> Pool:
    return Pool(
        name="resv",
        machine_type=MT,
        gpu_type="nvidia-h100-80gb",
        gpus_per_node=8,
        zones=(ZONE_A,),
        capacity_type=CapacityType.RESERVATION,
        max_nodes=len(RESV),
        reservation="r1",
        node_name_prefix="c1-resv",
        queues=frozenset({"gpu"}),
    )


@pytest.fixture
def resv(slurm: FakeSlurm, cloud: FakeCloud) -> FakeSlurm:
    """Four reserved nodes as slurmctld reports them, with the rendered Weights: -0 half used, -1 up and empty,
    -2 full, -3 powered down; and one spot node up and empty (not the reservation's: its Weight stays)."""
    cloud.offers.append(Offering(RESV_KEY, 0.0, "nvidia-h100-80gb", 8, available_nodes=1))
    slurm.add_cloud_nodes(RESV, weight=BASE)
    for n in RESV[:3]:
        cloud.nodes_[n] = CloudNode(n, "resv", RESV_KEY, CloudNodeStatus.RUNNING, 0.0, f"r-{n}")
    slurm.set("c1-resv-0", "mixed", gpus_used=4)
    slurm.set("c1-resv-1", "idle")
    slurm.set("c1-resv-2", "allocated", gpus_used=8)
    slurm.nodes_["c1-spot-0"] = SlurmNode(
        "c1-spot-0", "idle", frozenset({"CLOUD"}), 8, 0, ("gpu",), (), weight=RENDERED["spot"]
    )
    cloud.nodes_["c1-spot-0"] = CloudNode("c1-spot-0", "spot", offering(ZONE_A), CloudNodeStatus.RUNNING, 0.0, "s")
    return slurm


@pytest.fixture
def daemon(make_daemon: Callable[..., Daemon], resv: FakeSlurm) -> Callable[..., Daemon]:
    return lambda **kw: make_daemon(pools=[spot_pool(), resv_pool()], **kw)


def weights(slurm: FakeSlurm) -> dict[str, int | None]:
    return {n: s.weight for n, s in slurm.nodes_.items()}


def weight_commands(res) -> list[tuple[list[str], int, str]]:  # type: ignore[no-untyped-def]
    return [(c["names"], c["weight"], c["outcome"]) for c in res.commands if c["command"] == "scontrol-weight"]


def counted(d: Daemon, outcome: str) -> float:
    return d.metrics.commands.labels(command="scontrol-weight", outcome=outcome)._value.get()


def test_the_fuller_reserved_node_gets_the_lower_weight(daemon, resv) -> None:  # type: ignore[no-untyped-def]
    assert TIER_BASE[CapacityType.RESERVATION] <= BASE < RENDERED["spot"]
    before = weights(resv)
    d = daemon()
    res = d.tick()
    assert res.ok
    # rendered + free GPUs, one scontrol per Weight; the full node (-2) already has rendered + 0, so no call
    assert resv.weight_updates == [(("c1-resv-0",), BASE + 4), (("c1-resv-1",), BASE + 8)]
    assert weight_commands(res) == [(["c1-resv-0"], BASE + 4, "ok"), (["c1-resv-1"], BASE + 8, "ok")]
    assert {c["reason"] for c in res.commands if c["command"] == "scontrol-weight"} == {REASON}
    assert counted(d, "ok") == 2
    after = weights(resv)
    assert after["c1-resv-2"] < after["c1-resv-0"] < after["c1-resv-1"] < RENDERED["spot"]  # fullest first
    untouched = set(resv.nodes_) - {"c1-resv-0", "c1-resv-1"}
    assert {n: after[n] for n in untouched} == {n: before[n] for n in untouched}  # powered down, full, spot
    assert after["c1-resv-3"] == BASE and after["c1-spot-0"] == RENDERED["spot"]

    # nothing changed: nothing issued
    assert weight_commands(d.tick()) == []

    # the half-used node's job ends, a job fills the empty one: both Weights follow, the two with 8 free together
    resv.set("c1-resv-0", "idle")
    resv.set("c1-resv-1", "allocated", gpus_used=8)
    resv.set("c1-resv-2", "idle")
    res = d.tick()
    assert weight_commands(res) == [(["c1-resv-1"], BASE, "ok"), (["c1-resv-0", "c1-resv-2"], BASE + 8, "ok")]


def test_a_node_leaving_service_keeps_its_weight(daemon, resv) -> None:  # type: ignore[no-untyped-def]
    """Powering down, down or powering up: slurmctld puts it after every registered node whatever its Weight."""
    resv.set("c1-resv-0", "idle", "POWERING_DOWN")
    resv.set("c1-resv-1", "down", "NOT_RESPONDING")
    resv.set("c1-resv-3", "mixed", "POWERING_UP", "NOT_RESPONDING", gpus_used=8)
    res = daemon().tick()
    assert res.ok and weight_commands(res) == [] and resv.weight_updates == []


def test_weights_unknown_to_slurm_are_set(daemon, resv) -> None:  # type: ignore[no-untyped-def]
    """A Slurm that does not report Weights (None): every registered reserved node gets one."""
    for n in RESV:
        resv.nodes_[n] = replace(resv.nodes_[n], weight=None)
    res = daemon().tick()
    assert weight_commands(res) == [
        (["c1-resv-2"], BASE, "ok"),
        (["c1-resv-0"], BASE + 4, "ok"),
        (["c1-resv-1"], BASE + 8, "ok"),
    ]


def test_dry_run_issues_nothing(daemon, resv) -> None:  # type: ignore[no-untyped-def]
    d = daemon(dry_run=True)
    res = d.tick()
    assert res.ok
    assert weight_commands(res) == [(["c1-resv-0"], BASE + 4, "dry-run"), (["c1-resv-1"], BASE + 8, "dry-run")]
    assert resv.weight_updates == [] and weights(resv)["c1-resv-1"] == BASE
    assert counted(d, "dry-run") == 2


def test_a_failed_scontrol_does_not_fail_the_tick_and_is_retried(daemon, resv) -> None:  # type: ignore[no-untyped-def]
    real = resv.update_weight
    calls: list[tuple[str, ...]] = []

    def refuse(names, weight):  # type: ignore[no-untyped-def]
        calls.append(tuple(names))
        raise SlurmUnavailable("scontrol update nodename=c1-resv-0 weight=1004 exited 1: Invalid node name")

    resv.update_weight = refuse  # type: ignore[method-assign]
    d = daemon()
    res = d.tick()
    assert res.ok and res.error is None
    assert calls == [("c1-resv-0",), ("c1-resv-1",)]  # one failure does not stop the next Weight
    assert [o for *_, o in weight_commands(res)] == ["failed", "failed"] and counted(d, "failed") == 2
    resv.update_weight = real  # type: ignore[method-assign]
    assert weight_commands(d.tick()) == [(["c1-resv-0"], BASE + 4, "ok"), (["c1-resv-1"], BASE + 8, "ok")]


def test_slurm_not_answering_sets_no_weight(daemon, resv) -> None:  # type: ignore[no-untyped-def]
    resv.down = True
    res = daemon().tick()
    assert not res.slurm_ok and weight_commands(res) == [] and resv.weight_updates == []


def test_a_cluster_without_a_reservation_sets_no_weight(make_daemon, slurm) -> None:  # type: ignore[no-untyped-def]
    slurm.set("c1-spot-0", "mixed", gpus_used=4)
    res = make_daemon().tick()
    assert res.ok and weight_commands(res) == [] and slurm.weight_updates == []
