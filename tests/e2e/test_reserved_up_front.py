"""Reserved capacity launched up front on a real slurmctld (`Policy.launch_reserved_nodes`, on by default).

A reservation of two a3-highgpu-8g slots (`e2e-resv-[0-1]`, Weight 1) and an on-demand pool (`e2e-od-[0-1]`,
Weight 10) in one partition, every node CLOUD and powered down, SuspendTime 6 s with the reservation pool in
SuspendExcNodes (what `fleet render slurm-conf` writes for reservation pools).  With no job submitted, the daemon
powers both reserved names up (`scontrol update state=power_up`): slurmctld calls the ResumeProgram, the daemon
creates exactly those instances through the fake Compute API, they register and stay up idle past SuspendTime.  A
2-node gang then starts on them at once: no boot, so no reserved node waits, allocated and idle, for another's
(partial-gang waste), and nothing on-demand is created.  The replay models the same (tests/replay/
test_reserved_up_front.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.e2e.env import E2E, ZONES, e2e_env, pool, wait_for
from tests.harness.cloud_nodes import Nodeset
from tests.harness.slurm import SlurmHarness

pytestmark = [pytest.mark.slurm, pytest.mark.gce, pytest.mark.slow]

RESERVED = ["e2e-resv-0", "e2e-resv-1"]


def _suspend_exc(harness: SlurmHarness, state: Path) -> list[str]:
    return ["SuspendExcNodes=e2e-resv-[0-1]"]


@pytest.fixture
def env(slurm_factory: Callable[..., SlurmHarness]) -> Iterator[E2E]:
    with e2e_env(
        slurm_factory,
        suspend_time=6,  # slurmctld powers idle nodes down after 6 s, except the reservation's
        pools=[
            pool("resv", "reservation", "gpu", False, max_nodes=2, reservation="e2e-resv"),
            pool("od", "on-demand", "gpu", False, max_nodes=2),
        ],
        nodesets=[Nodeset("e2e-resv", 2, weight=1), Nodeset("e2e-od", 2, weight=10)],
        partitions={"gpu": ["e2e-resv", "e2e-od"]},
        policy={"idle_timeout_s": 0, "backoff_s": 120},
        reservations={"e2e-resv": (ZONES[0], 2)},
        slurm_lines=_suspend_exc,
    ) as e:
        yield e


def _idle_up(env: E2E) -> list[str]:
    return sorted(n for n, s in env.sinfo().items() if s["state"] == "idle" and set(s["state_flags"]) == {"CLOUD"})


def _created(env: E2E) -> list[str]:
    return sorted(e.name for e in env.fake.events_of("create"))


def test_the_daemon_brings_every_reserved_node_up_before_work_and_a_gang_starts_on_them_at_once(env: E2E) -> None:
    env.start_daemon()
    wait_for(lambda: _idle_up(env) == RESERVED, 90, "both reserved nodes up and idle with no job", env)
    assert _created(env) == RESERVED
    power_ups = [c for t in env.ticks for c in t.commands if c["command"] == "scontrol-power_up"]
    assert [c["names"] for c in power_ups] == [RESERVED] and power_ups[0]["outcome"] == "ok"
    assert power_ups[0]["reason"].startswith("gpu-fleet reserved capacity launched up front")

    time.sleep(15)  # over two SuspendTimes idle: SuspendExcNodes keeps them, the daemon keeps reserved nodes
    assert _idle_up(env) == RESERVED and not env.fake.events_of("delete")

    out = env.root / "log" / "gang.out"
    script = "srun sh -c 'echo $SLURMD_NODENAME'; sleep 5"
    gang = env.sbatch("-p", "gpu", "-N", "2", "--gres=gpu:8", "-o", str(out), "--wrap", script)
    wait_for(lambda: out.exists() and len(out.read_text().split()) == 2, 30, f"gang {gang} to run", env)
    assert sorted(out.read_text().split()) == RESERVED  # the two nodes that were up: nothing booted for it
    assert _created(env) == RESERVED  # nothing on-demand, nothing twice
    assert env.fake.duplicates() == {}
