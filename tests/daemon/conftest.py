"""Fixtures for daemon unit tests: one spot pool of 4 a3-highgpu-8g nodes in two zones, a fake Slurm and cloud."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from autoscaler.cloud import Offering
from autoscaler.daemon.config import LoopConfig
from autoscaler.daemon.lock import LeaderLock
from autoscaler.daemon.state import StateStore
from autoscaler.daemon.tick import Daemon
from autoscaler.model import Policy, Pool
from fleet.catalog import CapacityType
from tests.daemon.fakes import FakeCloud, FakeSlurm, offering

ZONE_A, ZONE_B = "us-central1-a", "us-central1-b"
NAMES = [f"c1-spot-{i}" for i in range(4)]


def spot_pool() -> Pool:
    return Pool(
        name="spot",
        machine_type="a3-highgpu-8g",
        gpu_type="nvidia-h100-80gb",
        gpus_per_node=8,
        zones=(ZONE_A, ZONE_B),
        capacity_type=CapacityType.SPOT,
        max_nodes=4,
        node_name_prefix="c1-spot",
        queues=frozenset({"gpu"}),
        spot_tolerant=True,
    )


class Clock:
    def __init__(self, t: float = 1_000_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t

    def advance(self, s: float) -> None:
        self.t += s


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def slurm() -> FakeSlurm:
    s = FakeSlurm()
    s.add_cloud_nodes(NAMES)
    return s


@pytest.fixture
def cloud() -> FakeCloud:
    return FakeCloud(
        offers=[
            Offering(offering(ZONE_A), 20.0, "nvidia-h100-80gb", 8),
            Offering(offering(ZONE_B), 25.0, "nvidia-h100-80gb", 8),
        ]
    )


@pytest.fixture
def make_daemon(tmp_path: Path, slurm: FakeSlurm, cloud: FakeCloud, clock: Clock) -> Callable[..., Daemon]:
    made: list[Daemon] = []

    def make(**kw: object) -> Daemon:
        store = StateStore(tmp_path / "state.db")
        d = Daemon(
            pools=kw.pop("pools", [spot_pool()]),  # type: ignore[arg-type]
            provider=kw.pop("provider", cloud),  # type: ignore[arg-type]
            slurm=kw.pop("slurm", slurm),  # type: ignore[arg-type]
            store=store,
            # late binding off: these tests drive the resume path (Slurm binds jobs to powered-down names);
            # late binding has its own (test_late_binding.py, test_one_path.py)
            policy=kw.pop("policy", Policy(idle_timeout_s=600, backoff_s=300, late_bind=False)),  # type: ignore[arg-type]
            loop=kw.pop("loop", LoopConfig(orphan_grace_s=120)),  # type: ignore[arg-type]
            lock=LeaderLock(store.path),
            clock=clock,
            **kw,  # type: ignore[arg-type]
        )
        made.append(d)
        return d

    yield make
    for d in made:
        d.lock.release()
        d.store.close()
