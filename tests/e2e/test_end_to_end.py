"""End to end on one machine: real slurmctld with CLOUD nodes + the daemon + the fake Compute API.

A 2-node 8-GPU job and two 1-node jobs -> instances created in the right MIGs with the offering the planner
chose -> the nodes register with Slurm (the fake's boot starts a slurmd per node) -> the jobs run -> idle
nodes are suspended by Slurm and their instances deleted by name.
"""

from __future__ import annotations

import pytest

from tests.e2e.env import E2E, wait_for

pytestmark = [pytest.mark.slurm, pytest.mark.gce, pytest.mark.slow]


def test_jobs_get_instances_run_and_idle_nodes_are_deleted(env: E2E) -> None:
    out = env.root / "log"
    daemon = env.start_daemon()
    # every fake node is this host: the job prints the Slurm node name it ran on and the GPUs it saw
    echo = "srun sh -c 'echo $SLURMD_NODENAME:$SLURM_GPUS_ON_NODE'"
    gang = env.sbatch("-p", "gpu", "-N", "2", "--gres=gpu:8", "-o", f"{out}/job-%j.out", "--wrap", echo)
    small = [
        env.sbatch("-p", "spot", "-N", "1", "--gres=gpu:8", "-o", f"{out}/job-%j.out", "--wrap", echo) for _ in range(2)
    ]
    wait_for(lambda: not env.squeue_ids() & {gang, *small}, 150, "all jobs to finish", env)

    # every job ran on cloud nodes of its partition's pool
    lines = {j: (out / f"job-{j}.out").read_text().split() for j in (gang, *small)}
    assert all(line.endswith(":8") for v in lines.values() for line in v), lines  # 8 GPUs on every node
    ran = {j: [line.split(":")[0] for line in v] for j, v in lines.items()}
    assert len(set(ran[gang])) == 2 and all(n.startswith("e2e-od-") for n in ran[gang])
    assert all(len(ran[j]) == 1 and ran[j][0].startswith("e2e-spot-") for j in small)

    # instances were created in the MIG of the pool and zone the planner chose, named after the nodes
    launches = [c for t in env.ticks for c in t.commands if c["command"] == "launch" and c["outcome"] == "ok"]
    created = {e.name: e.zone for e in env.fake.events_of("create")}
    assert set(created) == set(ran[gang]) | {n for j in small for n in ran[j]}
    gang_launch = next(c for c in launches if set(ran[gang]) <= set(c["names"]))
    assert gang_launch["pool"] == "od" and ":on-demand" in gang_launch["offering"]
    assert {created[n] for n in ran[gang]} == {gang_launch["offering"].split(":")[1]}  # a gang: one zone
    for c in launches:
        zone = c["offering"].split(":")[1]
        assert all(created[n] == zone for n in c["names"])
        spot = c["pool"] == "spot"
        assert (":spot" in c["offering"]) == spot
    assert env.nodes.boots and set(env.nodes.boots) == set(created)

    # Slurm suspends the idle nodes (SuspendTime=6 s): the daemon deletes exactly those instances
    wait_for(lambda: not env.fake.instance_names(), 90, "idle instances to be deleted", env)
    deleted = [e.name for e in env.fake.events_of("delete-requested")]
    assert sorted(deleted) == sorted(created) and env.fake.duplicates() == {}
    wait_for(lambda: not env.nodes.running(), 30, "fake slurmds to stop", env)
    wait_for(
        lambda: all("POWERED_DOWN" in env.sinfo()[n]["state_flags"] for n in created),
        40,
        "Slurm to see the nodes powered down (SuspendTimeout)",
        env,
    )
    text = daemon.metrics.render().decode()
    assert 'gpu_fleet_autoscaler_commands_total{command="launch",outcome="ok"}' in text
    assert daemon.metrics.healthy()
