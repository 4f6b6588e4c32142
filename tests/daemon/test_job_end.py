"""A job's end wakes the daemon (EpilogSlurmctld -> `hook job-end` -> a wake-up row -> the watcher ticks): what an
admin relies on - the hook never gets in the job's way, a freed node is scaled down at once, never one that is
still COMPLETING or that another job took.  On real slurmctld: tests/e2e/test_job_end.py."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

from autoscaler.daemon import job_end
from autoscaler.daemon.loop import TICK_JOB, RunLoop
from autoscaler.daemon.state import JobEndRow, StateStore
from autoscaler.model import Policy
from autoscaler.slurm.readers import SlurmJob, SlurmNode
from tests.daemon.conftest import NAMES
from tests.daemon.test_ops import daemon_store
from tests.daemon.test_tick import resume

ROOT = Path(__file__).parents[2]
WRAPPER = ROOT / "deploy" / "slurm" / "epilog_slurmctld.sh"


def hook(*args: str, state: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "autoscaler.slurm.hook", *args, "--state", str(state)],
        capture_output=True,
        text=True,
        timeout=60,
    )


def rows(state: Path) -> list[tuple[int | None, tuple[str, ...]]]:
    s = StateStore(state)
    try:
        return [(r.job_id, r.names) for r in s.open_job_ends()]
    finally:
        s.close()


# --- the hook ------------------------------------------------------------------------------------------------
def test_job_end_records_one_wake_up_with_the_jobs_managed_nodes(tmp_path: Path) -> None:
    state = tmp_path / "s.db"
    daemon_store(state, "c1-spot", max_nodes=4)
    cp = hook("job-end", "c1-spot-[1-2],login-0,c1-spot-9", "--job-id", "42", state=state)
    assert cp.returncode == 0, cp.stderr
    assert rows(state) == [(42, ("c1-spot-1", "c1-spot-2"))]  # static / out-of-range names are not ours
    assert "job 42 freed 2 managed node(s)" in cp.stderr


def test_fleet_slurm_job_end_is_the_same_entry(tmp_path: Path) -> None:
    state = tmp_path / "s.db"
    daemon_store(state, "c1-spot")
    fleet = str(ROOT / ".venv" / "bin" / "fleet")
    cp = subprocess.run(
        [fleet, "slurm", "job-end", "c1-spot-2", "--job-id", "5", "--state", str(state)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert cp.returncode == 0, cp.stderr
    cp = subprocess.run(
        [fleet, "slurm", "job-end", "c1-spot-[2", "--state", str(state)], capture_output=True, text=True, timeout=60
    )
    assert cp.returncode == 2 and "HOSTLIST" in cp.stderr
    assert rows(state) == [(5, ("c1-spot-2",))]


def test_a_job_on_no_managed_node_writes_nothing_and_exits_0(tmp_path: Path) -> None:
    state = tmp_path / "s.db"
    daemon_store(state, "c1-spot", max_nodes=4)
    cp = hook("job-end", "login-[0-1]", "--job-id", "7", state=state)
    assert (cp.returncode, cp.stderr) == (0, "") and rows(state) == []


def test_job_end_bad_input_exits_2_and_writes_nothing(tmp_path: Path) -> None:
    state = tmp_path / "s.db"
    daemon_store(state, "c1-spot")
    cp = hook("job-end", "c1-spot-[0-", "--job-id", "1", state=state)
    assert cp.returncode == 2 and "HOSTLIST" in cp.stderr and "Traceback" not in cp.stderr
    cp = hook("job-end", "", state=state)
    assert cp.returncode == 2 and "empty hostlist" in cp.stderr
    cp = hook("job-end", "c1-spot-0", "--job-id", "12x", state=state)
    assert cp.returncode == 2 and "--job-id" in cp.stderr and "12x" in cp.stderr
    cp = hook("resume", "c1-spot-0", "--job-id", "12", state=state)
    assert cp.returncode == 2 and "--job-id: only with job-end" in cp.stderr
    assert rows(state) == []
    s = StateStore(state)
    assert s.open_power() == []
    s.close()


def test_job_end_without_a_usable_store_exits_1_and_never_creates_one(tmp_path: Path) -> None:
    state = tmp_path / "s.db"
    cp = hook("job-end", "c1-spot-0", "--job-id", "3", state=state)
    assert cp.returncode == 1 and "no state store" in cp.stderr and not state.exists()
    StateStore(state).close()  # the daemon never recorded its pools
    cp = hook("job-end", "c1-spot-0", "--job-id", "3", state=state)
    assert cp.returncode == 1 and "has not recorded its pools" in cp.stderr
    assert rows(state) == []


def test_the_shipped_wrapper_reads_slurmctlds_environment(tmp_path: Path) -> None:
    """deploy/slurm/epilog_slurmctld.sh as slurmctld runs it: no arguments, SLURM_JOB_ID / SLURM_JOB_NODELIST."""
    state = tmp_path / "s.db"
    daemon_store(state, "c1-spot")
    env = {
        "GPU_FLEET_PYTHON": sys.executable,
        "GPU_FLEET_AUTOSCALER_STATE": str(state),
        "GPU_FLEET_HOOK_LOG": str(tmp_path / "hooks.log"),
    }  # fmt: skip  (no PATH, like slurmctld)
    cp = subprocess.run(
        [str(WRAPPER)],
        env={**env, "SLURM_JOB_ID": "77", "SLURM_JOB_NODELIST": "c1-spot-[0,3]"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert cp.returncode == 0, cp.stderr
    # a job cancelled before it got nodes: nothing to wake for, and not an error
    cp = subprocess.run([str(WRAPPER)], env={**env, "SLURM_JOB_ID": "78"}, capture_output=True, text=True, timeout=60)
    assert cp.returncode == 0 and cp.stderr == ""
    assert rows(state) == [(77, ("c1-spot-0", "c1-spot-3"))]
    assert (
        (tmp_path / "hooks.log")
        .read_text()
        .endswith("job_end: job 77 freed 2 managed node(s): autoscaler woken (job_end c1-spot-[0,3])\n")
    )


def test_slurm_conf_names_the_wrapper_as_epilog_slurmctld() -> None:
    from fleet.slurm.conf import HOOKS

    assert HOOKS["epilog_slurmctld"] == "/usr/local/libexec/gpu-fleet/epilog_slurmctld.sh" and WRAPPER.is_file()


# --- which wake-ups a tick settles (pure) ------------------------------------------------------------------
def _node(name: str, state: str, *flags: str) -> SlurmNode:
    busy = state in ("mixed", "allocated", "completing")
    return SlurmNode(
        name, state, frozenset({"CLOUD", *flags}), 8, 8 if busy else 0, ("gpu",), (), "", alloc_cpus=int(busy)
    )


def _job(job_id: int, state: str, *nodes: str) -> SlurmJob:
    return SlurmJob(job_id, "j", state, "None", "gpu", len(nodes), 8, None, (), 0, None, 0.0, nodes=tuple(nodes))


def test_a_wake_up_stays_open_while_the_ended_job_still_holds_its_nodes() -> None:
    row = JobEndRow(1, 5, ("a-0", "a-1"), 100.0)
    ended = [_job(5, "COMPLETING", "a-0", "a-1")]
    # what slurmctld 22.05 shows when EpilogSlurmctld fires: `mixed` (no node Epilog) or `completing`
    assert job_end.settled([row], {"a-0": _node("a-0", "mixed"), "a-1": _node("a-1", "idle")}, ended, 101) == []
    assert job_end.settled([row], {"a-0": _node("a-0", "completing", "COMPLETING")}, ended, 101) == []
    assert job_end.settled([row], None, None, 101) == []  # Slurm did not answer: look again
    # freed: idle, powered down / powering down, or gone from Slurm's view
    freed = {"a-0": _node("a-0", "idle"), "a-1": _node("a-1", "idle", "POWERING_DOWN")}
    assert job_end.settled([row], freed, [], 101) == [row]
    assert job_end.settled([row], {}, [], 101) == [row]


def test_a_node_another_job_took_settles_the_wake_up_without_freeing_it() -> None:
    row = JobEndRow(1, 5, ("a-0",), 100.0)
    nodes = {"a-0": _node("a-0", "mixed")}
    assert job_end.settled([row], nodes, [_job(5, "COMPLETING", "a-0"), _job(6, "RUNNING", "a-0")], 101) == [row]
    assert job_end.settled([row], nodes, [_job(5, "RUNNING", "a-0")], 101) == []  # its own record, not another's


def test_a_node_that_never_clears_is_left_to_the_poll() -> None:
    row = JobEndRow(1, 5, ("a-0",), 100.0)
    stuck = {"a-0": _node("a-0", "completing", "COMPLETING")}
    assert job_end.settled([row], stuck, [], 100 + job_end.GIVE_UP_S - 1) == []
    assert job_end.settled([row], stuck, [], 100 + job_end.GIVE_UP_S) == [row]
    assert job_end.settled([row], None, None, 100 + job_end.GIVE_UP_S) == [row]


# --- the tick ------------------------------------------------------------------------------------------------
def test_the_woken_tick_deletes_the_freed_node_and_a_completing_one_gets_another_look(
    make_daemon, cloud, slurm, clock
) -> None:
    d = make_daemon(policy=Policy(idle_timeout_s=0, backoff_s=300))
    resume(d, NAMES[:1], job=9)
    d.tick()
    slurm.set("c1-spot-0", "completing", "COMPLETING", gpus_used=8)  # the job ended; the node's Epilog runs
    clock.advance(0.5)
    d.store.enqueue_job_end(9, ["c1-spot-0"], clock())
    res = d.tick()
    assert res.ok and res.job_ends == [] and cloud.deleted == []  # never a completing node
    assert [r.job_id for r in d.store.open_job_ends()] == [9]  # so the watcher ticks again
    slurm.set("c1-spot-0", "idle", last_busy=clock())
    clock.advance(1)
    res = d.tick()
    assert cloud.deleted == ["c1-spot-0"] and res.job_ends == [9] and d.store.open_job_ends() == []
    assert 'gpu_fleet_autoscaler_job_end_wakes_total{outcome="freed"} 1.0' in d.metrics.render().decode()


def test_a_wake_up_written_after_slurm_was_read_waits_for_the_next_tick(make_daemon, slurm, clock) -> None:
    """The tick's view predates that job's end: settling the row on it would lose the wake-up."""
    d = make_daemon(policy=Policy(idle_timeout_s=0, backoff_s=300))
    real = slurm.nodes

    def hook_fires_during_the_read():  # type: ignore[no-untyped-def]
        out = real()
        d.store.enqueue_job_end(4, ["c1-spot-1"], clock())
        return out

    slurm.nodes = hook_fires_during_the_read  # type: ignore[method-assign]
    d.tick()
    assert [r.job_id for r in d.store.open_job_ends()] == [4]
    slurm.nodes = real  # type: ignore[method-assign]
    assert d.tick().job_ends == [4]


def test_a_passive_daemon_leaves_the_wake_ups_to_the_leader(make_daemon, clock) -> None:
    leader = make_daemon()
    assert leader.tick().leader
    leader.store.enqueue_job_end(2, ["c1-spot-0"], clock())
    standby = make_daemon()
    res = standby.tick()
    assert not res.leader and res.job_ends == [] and len(standby.store.open_job_ends()) == 1


# --- the watcher -----------------------------------------------------------------------------------------------
class CountingDaemon:
    """Stands in for `Daemon` in the run loop: each tick settles the open wake-ups after `looks` ticks saw them."""

    def __init__(self, store: StateStore, looks: int) -> None:
        self.store = store
        self.looks = looks
        self.ticks: list[int] = []  # open wake-ups each tick saw
        self.seen = 0
        self.settled = threading.Event()

        class _Lock:
            def release(self) -> None:
                pass

        self.lock = _Lock()

    def tick(self) -> None:
        open_ = self.store.open_job_ends()
        self.ticks.append(len(open_))
        if open_:
            self.seen += 1
            if self.seen >= self.looks:
                self.store.finish_job_ends([r.id for r in open_], time.time())
                self.settled.set()


def test_the_watcher_ticks_while_a_wake_up_is_open_and_stops_once_it_is_settled_leaving_the_poll_alone(
    tmp_path: Path,
) -> None:
    store = StateStore(tmp_path / "s.db")
    d = CountingDaemon(store, looks=2)  # the first woken tick sees the node still COMPLETING
    loop = RunLoop(d, interval_s=3600)  # type: ignore[arg-type]  # no poll after the first tick
    t = threading.Thread(target=loop.run, kwargs={"install_signals": False}, daemon=True)
    t.start()
    try:
        deadline = time.monotonic() + 30
        while not d.ticks and time.monotonic() < deadline:
            time.sleep(0.05)
        poll = loop.scheduler.get_job(TICK_JOB).next_run_time
        other = StateStore(tmp_path / "s.db", create=False, full_check=False)  # the hook's connection
        other.enqueue_job_end(11, ["c1-spot-0"], time.time())
        other.close()
        assert d.settled.wait(30), f"the watcher did not tick for the wake-up: {d.ticks}"
        after = len(d.ticks)
        time.sleep(2.5)  # a few watcher periods: nothing open, no tick
        assert d.ticks[0] == 0 and d.ticks[1:after] == [1, 1] and len(d.ticks) == after
        # woken ticks are extra ticks: the poll keeps its phase (what the replay's fixed poll grid models)
        assert loop.scheduler.get_job(TICK_JOB).next_run_time == poll
    finally:
        loop.request_stop()
        t.join(30)
