"""The Slurm readers on real `squeue --json` / `sinfo --json` output (tests/data/slurm, see SOURCE there)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from autoscaler.slurm.readers import (
    SlurmFormatError,
    parse_gpu_tres,
    parse_job,
    parse_node,
    parse_resume_file,
    parse_sinfo,
    parse_squeue,
    waiting_on_power_up,
)

DATA = Path(__file__).parent.parent / "data" / "slurm"


def load(name: str) -> dict:
    return json.loads((DATA / name).read_text())


def test_squeue_sample_jobs_nodes_gpus_partition_and_reason() -> None:
    jobs = parse_squeue(load("squeue-full.json"))
    assert len(jobs) == 9
    pending = [j for j in jobs if j.pending]
    assert [(j.job_id, j.reason, j.node_count, j.gpus_per_node, j.partition) for j in pending] == [
        (16, "Resources", 2, 8, "gpu")
    ]
    assert pending[0].nodes == () and pending[0].gpus == 16
    first = next(j for j in jobs if j.job_id == 8)
    # allocated at once to powering-up CLOUD nodes: CONFIGURING with the hostlist expanded
    assert first.state == "CONFIGURING" and first.nodes == ("gpu-a3-0", "gpu-a3-1")
    assert first.time_limit_s is None  # INFINITE


def test_squeue_filters_in_code_partition_and_state() -> None:
    data = load("squeue-full.json")
    assert [j.job_id for j in parse_squeue(data, states=["pending"])] == [16]
    assert parse_squeue(data, partitions=["other"]) == []
    assert len(parse_squeue(data, partitions=["gpu", "x"])) == 9


def test_sinfo_sample_cloud_nodes_flags_and_gpus() -> None:
    nodes = parse_sinfo(load("sinfo-full.json"))
    cloud = [n for n in nodes if n.cloud]
    assert len(cloud) == 16
    n0 = cloud[0]
    assert n0.name == "gpu-a3-0" and n0.gpus == 8 and n0.gpus_used == 8 and n0.partitions == ("gpu",)
    assert n0.powering_up and n0.not_responding and n0.has_work and not n0.idle
    assert n0.features == ("a3", "h100")
    local = [n for n in nodes if not n.cloud]
    assert len(local) == 1 and local[0].idle and local[0].gpus == 0
    assert parse_sinfo(load("sinfo-full.json"), cloud_only=True) == cloud


@pytest.mark.parametrize(
    ("tres", "expected"),
    [
        ("gres:gpu:8", (8, None)),
        ("gres:gpu:h100:8", (8, "h100")),
        ("gres:gpu", (1, None)),
        ("gres/gpu=4", (4, None)),
        ("gpu:h100:8(S:0-1)", (8, "h100")),
        ("gpu:0", (0, None)),
        ("cpu=2,mem=10G", (0, None)),
        ("", (0, None)),
        (None, (0, None)),
    ],
)
def test_gpu_tres_forms(tres: str | None, expected: tuple) -> None:
    assert parse_gpu_tres(tres) == expected


def test_gpus_from_per_job_and_per_task_requests() -> None:
    base = {"job_id": 1, "job_state": "PENDING", "node_count": 2, "partition": "gpu", "tres_per_node": ""}
    assert parse_job({**base, "tres_per_job": "gres:gpu:16"}).gpus_per_node == 8
    assert parse_job({**base, "tres_per_task": "gres:gpu:1", "tasks": 8}).gpus_per_node == 4


def test_newer_json_shapes_state_lists_and_number_objects() -> None:
    job = parse_job(
        {
            "job_id": 7,
            "job_state": ["PENDING"],
            "state_reason": "Priority",
            "node_count": {"set": True, "infinite": False, "number": 1},
            "time_limit": {"set": True, "infinite": False, "number": 90},
            "priority": {"set": True, "infinite": False, "number": 100},
            "partition": "a,b",
            "tres_per_node": "gres/gpu:4",
            "features": "h100&spot",
        }
    )
    assert (job.state, job.node_count, job.time_limit_s, job.priority, job.gpus_per_node) == (
        "PENDING",
        1,
        5400.0,
        100,
        4,
    )
    assert job.features == ("h100", "spot")
    node = parse_node({"name": "x-1", "state": ["IDLE", "CLOUD", "POWERED_DOWN"], "gres": "gpu:8"})
    assert node.state == "idle" and node.powered_down and node.cloud and not node.idle


def test_node_predicates_drain_and_idle() -> None:
    drained = parse_node({"name": "a-0", "state": "idle", "state_flags": ["CLOUD", "DRAIN"], "gres": "gpu:8"})
    assert drained.drained and not drained.idle and not drained.has_work
    draining = parse_node({"name": "a-1", "state": "mixed", "state_flags": ["DRAIN"], "gres": "gpu:8", "alloc_cpus": 4})
    assert draining.has_work and not draining.drained


def test_resume_file_maps_nodes_to_jobs() -> None:
    data = {
        "all_nodes_resume": "gpu-a3-[0-2]",
        "jobs": [{"job_id": 4, "nodes_resume": "gpu-a3-[0-1]"}, {"job_id": 5, "nodes_resume": "gpu-a3-2"}],
    }
    assert parse_resume_file(data) == {"gpu-a3-0": (4,), "gpu-a3-1": (4,), "gpu-a3-2": (5,)}
    # what slurmctld 22.05 writes (captured on this host)
    real = {"jobs": [{"job_id": 1, "nodes": "t1-od-[0-1]"}], "all_nodes": "t1-od-[0-1]"}
    assert parse_resume_file(real) == {"t1-od-0": (1,), "t1-od-1": (1,)}


def test_format_errors_name_the_field() -> None:
    with pytest.raises(SlurmFormatError, match="'jobs'"):
        parse_squeue({"meta": {}})
    with pytest.raises(SlurmFormatError, match="'nodes'"):
        parse_sinfo({})
    with pytest.raises(SlurmFormatError, match="job_id"):
        parse_job({"job_state": "PENDING"})


def test_jobs_waiting_on_powering_up_cloud_nodes() -> None:
    jobs = parse_squeue(load("squeue-full.json"))
    nodes = {n.name: n for n in parse_sinfo(load("sinfo-full.json"))}
    waiting = waiting_on_power_up(jobs, nodes)
    assert [j.job_id for j in waiting] == list(range(8, 16))  # the 8 CONFIGURING jobs, not the PENDING one
    assert sum(j.gpus for j in waiting) == 128


DATA_2311 = Path(__file__).parent.parent / "data" / "slurm-23.11"


def load_2311(name: str) -> dict:
    return json.loads((DATA_2311 / name).read_text())


def test_slurm_23_11_nodes_read_as_on_22_05() -> None:
    """Ubuntu 24.04, the stacks' image, ships Slurm 23.11 (tests/data/slurm-23.11/SOURCE): its per-node document
    (`scontrol show nodes --json`) gives each node's base state, flags, GPUs and GPUs in use."""
    nodes = {n.name: n for n in parse_sinfo(load_2311("scontrol-nodes.json"))}
    assert sorted(nodes) == ["gpu-a3-0", "gpu-a3-1", "gpu-a3-2", "gpu-a3-3"]
    assert all(n.cloud and n.gpus == 8 and n.partitions == ("gpu",) for n in nodes.values())
    assert (nodes["gpu-a3-0"].state, nodes["gpu-a3-0"].gpus_used, nodes["gpu-a3-0"].powering_up) == ("mixed", 2, False)
    assert nodes["gpu-a3-1"].powering_up and nodes["gpu-a3-2"].powering_up and nodes["gpu-a3-1"].gpus_used == 8
    assert nodes["gpu-a3-3"].powered_down and nodes["gpu-a3-3"].state == "idle" and nodes["gpu-a3-3"].gpus_used == 0


def test_slurm_23_11_node_times_are_numbers() -> None:
    """23.02+ wraps `last_busy` like every number: the daemon's idle clock starts at it (`snapshot._since`), so it
    must read as the epoch second 22.05 printed, not be dropped (the clock then ran from the VM's creation)."""
    raw = load_2311("scontrol-nodes.json")["nodes"][0]
    node = parse_sinfo({"nodes": [raw]})[0]
    assert node.extra["last_busy"] == raw["last_busy"]["number"] == node.extra["boot_time"]
    unset = {**raw, "last_busy": {"set": False, "infinite": False, "number": 0}}
    assert "last_busy" not in parse_sinfo({"nodes": [unset]})[0].extra


def test_slurm_23_11_grouped_sinfo_is_refused_naming_the_per_node_command() -> None:
    with pytest.raises(SlurmFormatError, match="scontrol show nodes --json"):
        parse_sinfo(load_2311("sinfo.json"))


def test_slurm_23_11_jobs_read_as_on_22_05() -> None:
    """23.02+ prints a job's state as a list; a job on powering-up nodes is ["RUNNING", "CONFIGURING",
    "POWER_UP_NODE"], which 22.05 printed as CONFIGURING, and reads so."""
    jobs = {j.job_id: j for j in parse_squeue(load_2311("squeue.json"))}
    assert (jobs[1].state, jobs[1].nodes, jobs[1].gpus_per_node) == ("RUNNING", ("gpu-a3-0",), 2)
    assert (jobs[2].state, jobs[2].nodes, jobs[2].gpus_per_node, jobs[2].node_count) == (
        "CONFIGURING", ("gpu-a3-1", "gpu-a3-2"), 8, 2,
    )  # fmt: skip
    assert (jobs[3].state, jobs[3].reason, jobs[3].pending, jobs[3].node_count) == ("PENDING", "Resources", True, 4)
    nodes = {n.name: n for n in parse_sinfo(load_2311("scontrol-nodes.json"))}
    assert [j.job_id for j in waiting_on_power_up(jobs.values(), nodes)] == [2]


@pytest.mark.parametrize(
    ("printed", "state"),
    [
        ("CONFIGURING", "CONFIGURING"),
        (["PENDING"], "PENDING"),
        (["RUNNING", "CONFIGURING", "POWER_UP_NODE"], "CONFIGURING"),
        (["RUNNING", "COMPLETING"], "COMPLETING"),
        (["PENDING", "REQUEUED"], "REQUEUED"),
        (["RUNNING", "POWER_UP_NODE"], "RUNNING"),
        ([], ""),
    ],
)
def test_a_job_state_list_names_the_flag_22_05_named(printed, state) -> None:
    """22.05's job_state_string(): COMPLETING, STAGE_OUT, CONFIGURING, ... before the base state."""
    assert parse_job({"job_id": 1, "job_state": printed}).state == state


def test_the_cli_reads_nodes_from_the_command_this_slurm_prints_them_one_by_one() -> None:
    """`CliSlurm.nodes()` on 23.11: `sinfo --json` answers grouped, so it asks `scontrol show nodes --json`, and from
    then on that alone (one call a tick); on 22.05 `sinfo --json` lists the nodes and is kept."""
    import subprocess

    from autoscaler.slurm.client import CliSlurm

    def fake(outputs: dict[str, str], calls: list[str]):
        def run(argv, **_):
            key = " ".join(argv)
            calls.append(key)
            return subprocess.CompletedProcess(argv, 0, outputs[key], "")

        return run

    calls: list[str] = []
    newer = {"sinfo --json": (DATA_2311 / "sinfo.json").read_text(),
             "scontrol show nodes --json": (DATA_2311 / "scontrol-nodes.json").read_text()}  # fmt: skip
    cli = CliSlurm(runner=fake(newer, calls))
    assert len(cli.nodes()) == 4 and len(cli.nodes()) == 4
    assert calls == ["sinfo --json", "scontrol show nodes --json", "scontrol show nodes --json"]
    calls.clear()
    older = CliSlurm(runner=fake({"sinfo --json": (DATA / "sinfo-full.json").read_text()}, calls))
    assert len(older.nodes()) == len(older.nodes()) == 17  # the 16 CLOUD nodes and the host's own
    assert calls == ["sinfo --json", "sinfo --json"]
