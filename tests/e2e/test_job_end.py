"""A job's end wakes the daemon (EpilogSlurmctld) on a real slurmctld: the freed node is deleted at once, not at the
next poll, and never while it is still COMPLETING or has another job.

The daemon polls every 300 s here, so every tick after the first is one the 1 s watcher started (the resume
hook's rows, then the job-end wake-ups).  slurm.conf names the shipped deploy/slurm/epilog_slurmctld.sh as
EpilogSlurmctld, and a compute-node Epilog that takes 5 s, so the hook fires while the node is still COMPLETING
(slurmctld 22.05 runs EpilogSlurmctld as the job turns COMPLETING, alongside the nodes' Epilog).
- `gpu` (pool `od`): one job; the ticks the wake-up starts first see the node completing and leave it, the tick
  after the node's Epilog returned deletes the instance and settles the wake-up.
- `one` (pool `one`, a single node): two jobs; the second waits for the node and runs on it as soon as the first
  ends, so the first's wake-up must not delete it; the second's end does.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.e2e.env import E2E, e2e_env, epilog_slurmctld_hook, pool, wait_for
from tests.harness.cloud_nodes import Nodeset
from tests.harness.slurm import SlurmHarness

pytestmark = [pytest.mark.slurm, pytest.mark.gce, pytest.mark.slow]

POLL_S = 300  # loop.interval_s: longer than the whole test, so no regular poll runs after the first tick
NODE_EPILOG_S = 5


def _slurm_lines(h: SlurmHarness, state: Path) -> list[str]:
    node_epilog = h.root / "bin" / "node-epilog.sh"
    log = h.root / "log" / "node-epilog.log"
    node_epilog.write_text(
        f'#!/bin/sh\necho "start $(date +%s.%N) $SLURM_JOB_ID" >> {log}\nsleep {NODE_EPILOG_S}\n'
        f'echo "end $(date +%s.%N) $SLURM_JOB_ID" >> {log}\n'
    )
    node_epilog.chmod(0o755)
    return [f"EpilogSlurmctld={epilog_slurmctld_hook(h.root / 'bin', state)}", f"Epilog={node_epilog}"]


@pytest.fixture
def env(slurm_factory: Callable[..., SlurmHarness]) -> Iterator[E2E]:
    with e2e_env(
        slurm_factory,
        suspend_time=600,  # SuspendProgram stays out of it: only the daemon's scale-down deletes
        pools=[pool("od", "on-demand", "gpu", False), pool("one", "on-demand", "one", False, max_nodes=1)],
        nodesets=[Nodeset("e2e-od", 4), Nodeset("e2e-one", 1)],
        partitions={"gpu": ["e2e-od"], "one": ["e2e-one"]},
        # a freed node is not kept; late binding off: with no job_submit.lua here, ResumeProgram is what wakes the
        # daemon at a submission (the poll is 300 s), as on the binding path this test is about
        policy={"idle_timeout_s": 0, "backoff_s": 120, "late_bind": False},
        slurm_lines=_slurm_lines,
        interval_s=POLL_S,
    ) as e:
        yield e


def _job(env: E2E, partition: str) -> int:
    out = env.root / "log"
    return env.sbatch(
        "-p",
        partition,
        "-N",
        "1",
        "--gres=gpu:8",
        "-o",
        f"{out}/job-%j.out",
        "--wrap",
        "srun sh -c 'echo $SLURMD_NODENAME; sleep 3'",
    )


def _epilog_end(env: E2E, job: int) -> float:
    for line in (env.root / "log" / "node-epilog.log").read_text().splitlines():
        kind, at, jid = line.split()
        if kind == "end" and int(jid) == job:
            return float(at)
    raise AssertionError(f"no node Epilog end for job {job}")


def _deletes(env: E2E, name: str) -> list[tuple[int, float]]:
    """(tick index, tick start) of every tick that deleted `name`."""
    return [
        (i, t.at)
        for i, t in enumerate(env.ticks)
        if any(c["command"] == "delete" and name in c["names"] and c["outcome"] == "ok" for c in t.commands)
    ]


def test_a_job_end_deletes_the_freed_node_within_seconds_never_a_completing_or_reused_one(env: E2E) -> None:
    env.start_daemon()
    single = _job(env, "gpu")
    first, second = _job(env, "one"), _job(env, "one")
    wait_for(lambda: not env.squeue_ids() & {single, first, second}, 150, "the three jobs to finish", env)
    wait_for(lambda: not env.fake.instance_names(), 60, "the freed instances to be deleted", env)
    out = env.root / "log"
    ran = {j: (out / f"job-{j}.out").read_text().split()[0] for j in (single, first, second)}
    assert ran == {single: "e2e-od-0", first: "e2e-one-0", second: "e2e-one-0"}

    poll0 = env.ticks[0].at

    def wakes() -> dict[int, dict]:
        return {r["job_id"]: r for r in map(dict, env.daemon.store.conn.execute("SELECT * FROM job_end_wakes"))}

    # every wake-up is settled; the last may be by a tick after the one that deleted the last instance (the daemon
    # runs on, in its own thread: on a loaded machine that tick can come a moment after the deletion is seen)
    wait_for(lambda: len(wakes()) == 3 and all(r["done_at"] is not None for r in wakes().values()), 30,
             "every job-end wake-up to be settled", env)  # fmt: skip
    rows = wakes()
    assert set(rows) == {single, first, second}
    assert rows[single]["names"] == '["e2e-od-0"]'

    # the single job's node: deleted by a woken tick, after the node's Epilog returned, before any poll
    [(i, at)] = _deletes(env, "e2e-od-0")
    assert single in env.ticks[i].job_ends  # the tick that deleted it settled the job's wake-up
    assert at < poll0 + POLL_S  # no regular poll had run: the wake-up did it
    hook_at, epilog_end = rows[single]["at"], _epilog_end(env, single)
    # ticks that ran and finished while the node's Epilog ran (one that starts a moment before it ends may read the
    # node after it: its start says nothing)
    looked = [t for t in env.ticks if hook_at <= t.at and t.at + t.duration_s < epilog_end]
    assert looked and not any(c["command"] == "delete" for t in looked for c in t.commands)  # COMPLETING: kept
    deleted = [e for e in env.fake.events_of("delete-requested") if e.name == "e2e-od-0"]
    assert len(deleted) == 1 and deleted[0].at > epilog_end

    # the reused node: the first job's end did not delete it (the second job took it), the second's did
    [(i, at)] = _deletes(env, "e2e-one-0")
    [reused] = [e for e in env.fake.events_of("delete-requested") if e.name == "e2e-one-0"]
    assert second in env.ticks[i].job_ends and reused.at > _epilog_end(env, second) and at < poll0 + POLL_S
    assert [e.name for e in env.fake.events_of("create") if e.name == "e2e-one-0"] == ["e2e-one-0"]
    assert env.fake.duplicates() == {}
