"""The Slurm-like scheduler side of the replay: FIFO with backfill, gangs all at once, spot rules,
partial-gang accounting and requeue on preemption."""

from __future__ import annotations

from autoscaler.cloud import OfferingKey
from autoscaler.model import NodeState
from autoscaler.replay.state import ClusterState, Job, JobState, SimNode
from fleet.catalog import CapacityType
from tests.replay.conftest import job


def state_of(*tjobs) -> ClusterState:  # type: ignore[no-untyped-def]
    return ClusterState([Job(i, tj, *tj.shape()) for i, tj in enumerate(tjobs)])


def node(name: str, gpus: int = 8, capacity: CapacityType = CapacityType.ON_DEMAND) -> SimNode:
    key = OfferingKey("sim", "us-central1-a", f"a3-highgpu-{gpus}g", capacity)
    return SimNode(name, "p", key, gpus, 1.0, 0.0)


def test_a_job_that_does_not_fit_does_not_block_smaller_ones_behind_it() -> None:
    st = state_of(job(0, 0, 100, 8), job(1, 1, 100, 2))
    n = node("n-0", gpus=4)
    st.add_node(n)
    st.register(n, 0)
    for j in st.jobs:
        st.submit(j)
    started = st.schedule(1)
    assert [j.id for j in started] == ["j1"]
    assert st.jobs[0].state is JobState.PENDING
    assert n.state is NodeState.BUSY and n.free == 2


def test_small_jobs_pack_best_fit_keeping_empty_nodes_whole() -> None:
    st = state_of(job(0, 0, 100, 1), job(1, 0, 100, 8))
    half, empty = node("half"), node("empty")
    for n in (half, empty):
        st.add_node(n)
        st.register(n, 0)
    st.start(st.jobs[0], [half], 0)  # half now has 7 free
    st.jobs[0].state = JobState.RUNNING
    st.submit(st.jobs[1])
    late = job(2, 1, 10, 1)
    st.jobs.append(Job(2, late, 1, 1))
    st.by_id[late.id] = st.jobs[2]
    st.submit(st.jobs[2])
    st.schedule(1)
    assert st.jobs[2].placed_on == [half]  # the fullest node that fits
    assert st.jobs[1].placed_on == [empty]


def test_a_gang_starts_only_when_all_its_nodes_are_up_and_the_wait_is_counted_as_partial_gang_waste() -> None:
    st = state_of(job(0, 0, 100, 16))  # 2 nodes of 8
    gang = st.jobs[0]
    st.submit(gang)
    a, b = node("a"), node("b")
    for n in (a, b):
        st.add_node(n)
        st.nominate(n, gang, 0)
    st.register(a, 360)
    assert st.schedule(360) == []
    st.register(b, 400)
    assert st.schedule(400) == [gang]
    assert {n.name for n in gang.placed_on} == {"a", "b"}
    assert st.partial_gang_gpu_s == 8 * 40  # node a waited 40 s for b


def test_a_gang_whose_nodes_are_all_up_is_not_partial_while_it_waits_to_start_but_is_again_when_one_is_lost() -> None:
    """On Kubernetes a gang's pods exist only once its request is Provisioned, a poll or a woken tick after its last
    node registered: that wait is start latency, not a partial gang (the nineteenth round's woken ticks made it
    show up as 0.3-0.7 GPU-h of partial gang on the ITP clusters).  A node lost before the start makes its peers
    wait for a partner again."""
    st = state_of(job(0, 0, 100, 16))  # 2 nodes of 8; not submitted: the request is out, not Provisioned yet
    gang = st.jobs[0]
    a, b, c = node("a"), node("b"), node("c")
    for n in (a, b):
        st.add_node(n)
        st.nominate(n, gang, 0)
    st.register(a, 360)
    st.register(b, 400)  # complete: a waited 40 s for b
    st.remove_node(b, 450)  # a spot preemption before the gang started: a waits again from 450
    st.add_node(c)
    st.nominate(c, gang, 450)
    st.register(c, 800)
    st.settle_holds(900)
    assert st.partial_gang_gpu_s == 8 * 40 + 8 * 350


def test_spot_nodes_take_only_spot_tolerant_work() -> None:
    st = state_of(job(0, 0, 100, 1), job(1, 0, 100, 1, spot_ok=True))
    s = node("s", gpus=1, capacity=CapacityType.SPOT)
    st.add_node(s)
    st.register(s, 0)
    for j in st.jobs:
        st.submit(j)
    assert [j.id for j in st.schedule(0)] == ["j1"]


def test_preemption_requeues_the_job_and_frees_its_other_gang_nodes() -> None:
    st = state_of(job(0, 0, 1000, 16, spot_ok=True))
    gang = st.jobs[0]
    st.submit(gang)
    a, b = node("a", capacity=CapacityType.SPOT), node("b", capacity=CapacityType.SPOT)
    for n in (a, b):
        st.add_node(n)
        st.register(n, 0)
    assert st.schedule(0) == [gang]
    requeued = st.remove_node(a, 500)
    assert requeued == [gang]
    assert gang.state is JobState.PENDING and gang.preemptions == 1
    assert gang.gpu_seconds == 16 * 500  # the lost run still used GPUs
    assert b.state is NodeState.READY_IDLE and b.free == 8
    assert st.provisioned_gpus == 8


def test_names_are_reused_lowest_first() -> None:
    st = state_of(job(0, 0, 1, 1))
    assert st.free_names("p", 2) == ["p-0", "p-1"]
    n0, n1 = node("p-0"), node("p-1")
    st.add_node(n0)
    st.add_node(n1)
    assert st.free_names("p", 1) == ["p-2"]
    st.remove_node(n0, 1)
    assert st.free_names("p", 2) == ["p-0", "p-2"]


def test_node_weights_send_work_to_paid_for_capacity_first_then_best_fit() -> None:
    st = state_of(job(0, 0, 100, 1), job(1, 0, 100, 1))
    od, res = node("od", gpus=2), node("res", capacity=CapacityType.RESERVATION)
    for n in (od, res):
        st.add_node(n)
        st.register(n, 0)
    st.submit(st.jobs[0])
    st.schedule(0)  # plain best fit: the fuller (2-GPU) on-demand node
    assert st.jobs[0].placed_on == [od]
    st.submit(st.jobs[1])
    st.schedule(1, weights={CapacityType.RESERVATION: 1, CapacityType.ON_DEMAND: 30})
    assert st.jobs[1].placed_on == [res]  # Weight first: the reservation is paid for anyway


def test_a_preempted_job_resumes_from_its_last_checkpoint() -> None:
    st = ClusterState([Job(0, job(0, 0, 1000, 1, spot_ok=True), 1, 1)], checkpoint_interval_s=300)
    j = st.jobs[0]
    st.submit(j)
    s = node("s", gpus=1, capacity=CapacityType.SPOT)
    st.add_node(s)
    st.register(s, 0)
    st.schedule(0)
    st.remove_node(s, 700)  # preempted after 700 s: checkpoints at 300 and 600
    assert j.progress_s == 600 and j.remaining_s == 400
    assert j.gpu_seconds == 700  # the 100 s after the last checkpoint are lost and run again


def test_a_job_confined_to_a_pool_waits_for_room_there_and_takes_no_other_pools_free_gpus() -> None:
    """On Kubernetes a workload's pods carry its Kueue flavor's node selector (one flavor per pool in the deployed
    stack): a pod confined to the spot pool does not take the free GPUs of an on-demand node, however well they
    fit; it runs once its own pool has room.  Unconfined pods still take the best fit anywhere."""
    st = state_of(job(0, 0, 100, 1, spot_ok=True), job(1, 0, 100, 1, spot_ok=True))
    on_demand = node("od", gpus=2)
    spot = SimNode("sp", "spot", OfferingKey("sim", "us-central1-a", "a3-highgpu-1g", CapacityType.SPOT), 1, 1.0, 0.0)
    st.add_node(on_demand)
    st.register(on_demand, 0)
    confined, free = st.jobs
    confined.pool = "spot"
    for j in st.jobs:
        st.submit(j)
    started = st.schedule(1)
    assert [j.id for j in started] == ["j1"] and free.placed_on == [on_demand]
    assert confined.state is JobState.PENDING and on_demand.free == 1  # room, but not its pool
    st.add_node(spot)
    st.register(spot, 2)
    assert st.schedule(2) == [confined] and confined.placed_on == [spot]
