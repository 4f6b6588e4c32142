"""Operations: /metrics and /healthz, the dashboard's queries, the systemd unit, the hooks' hand-off, SIGTERM."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx

from autoscaler.daemon.loop import RunLoop
from autoscaler.daemon.metrics import Metrics, MetricsServer
from autoscaler.daemon.state import StateStore

ROOT = Path(__file__).parents[2]


def test_metrics_and_healthz_served_on_a_local_port() -> None:
    m = Metrics()
    server = MetricsServer(m, "127.0.0.1", 0).start()
    try:
        base = f"http://127.0.0.1:{server.port}"
        assert httpx.get(f"{base}/healthz").status_code == 503  # no tick yet
        m.tick_succeeded(time.time())
        assert httpx.get(f"{base}/healthz").status_code == 200
        r = httpx.get(f"{base}/metrics")
        assert r.status_code == 200 and "gpu_fleet_autoscaler_tick_duration_seconds_bucket" in r.text
        assert httpx.get(f"{base}/other").status_code == 404
    finally:
        server.stop()


def test_every_dashboard_query_uses_a_metric_the_daemon_exports() -> None:
    dash = json.loads((ROOT / "deploy" / "grafana" / "gpu-fleet-autoscaler.json").read_text())
    exported = {s.name for metric in Metrics().registry.collect() for s in metric.samples} | {
        f"{metric.name}{suffix}" for metric in Metrics().registry.collect() for suffix in ("", "_total", "_bucket")
    }
    used = set()
    for p in dash["panels"]:
        for t in p["targets"]:
            used |= set(re.findall(r"gpu_fleet_autoscaler_[a-z_]+", t["expr"]))
    assert used and used <= exported, used - exported


def test_systemd_unit_is_hardened() -> None:
    unit = (ROOT / "deploy" / "systemd" / "gpu-fleet-autoscaler.service").read_text()
    for line in (
        "NoNewPrivileges=yes",
        "ProtectSystem=strict",
        "ReadWritePaths=/var/lib/gpu-fleet",
        "Restart=on-failure",
        "RestartPreventExitStatus=2",
    ):
        assert re.search(rf"^{re.escape(line)}$", unit, re.M), line
    assert "fleet autoscaler run --config" in unit


def daemon_store(state: Path, *prefixes: str, max_nodes: int = 16) -> None:
    """What the daemon does at start: create the store and record the pools' name spaces."""
    s = StateStore(state)
    s.set_managed_pools([(p.rsplit("-", 1)[-1], p, max_nodes) for p in prefixes])
    s.close()


def test_hooks_reach_the_daemon_state_and_are_fast(tmp_path: Path) -> None:
    state = tmp_path / "s.db"
    daemon_store(state, "c1-spot")
    resume_file = tmp_path / "resume.json"
    resume_file.write_text(json.dumps({"jobs": [{"job_id": 42, "nodes_resume": "c1-spot-[0-1]"}]}))
    t0 = time.perf_counter()
    cp = subprocess.run(
        [sys.executable, "-m", "autoscaler.slurm.hook", "resume", "c1-spot-[0-1]", "--state", str(state)],
        env={"SLURM_RESUME_FILE": str(resume_file), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=30,
    )
    elapsed = time.perf_counter() - t0
    assert cp.returncode == 0, cp.stderr
    cp = subprocess.run(
        [str(ROOT / ".venv" / "bin" / "fleet"), "slurm", "suspend", "c1-spot-3", "--state", str(state)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert cp.returncode == 0, cp.stderr
    rows = StateStore(state).open_power()
    assert [(r.action, r.name, r.jobs) for r in rows] == [
        ("resume", "c1-spot-0", (42,)),
        ("resume", "c1-spot-1", (42,)),
        ("suspend", "c1-spot-3", ()),
    ]
    assert elapsed < 10  # generous on a shared 2-core box; typically ~0.1 s (see docs/autoscaler.md)


def hook(action: str, hostlist: str, state: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "autoscaler.slurm.hook", action, hostlist, "--state", str(state)],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_hook_refuses_names_outside_the_managed_pools_with_one_line(tmp_path: Path) -> None:
    state = tmp_path / "s.db"
    daemon_store(state, "c1-spot", max_nodes=4)
    # 60,000 unknown names (another cluster's, and beyond the pool's max_nodes) -> one summary line, exit 2
    cp = hook("resume-fail", "other-gpu-[0-59995],c1-spot-[4-7]", state)
    assert cp.returncode == 2
    lines = cp.stderr.strip().splitlines()
    assert len(lines) == 1 and "refused 60000 node name(s)" in lines[0] and "other-gpu-0" in lines[0]
    # 100,000: one line too, whether refused as names outside the pools or by the hostlist size limit
    cp = hook("resume-fail", "other-gpu-[0-99999]", state)
    assert cp.returncode == 2 and len(cp.stderr.strip().splitlines()) == 1
    assert StateStore(state).open_power() == []
    # a mix: the managed names are queued, the others refused in one line
    cp = hook("resume", "c1-spot-[0-1],login-0", state)
    assert cp.returncode == 0, cp.stderr
    assert "refused 1 node name(s)" in cp.stderr and "queued 2 node(s)" in cp.stderr
    assert [r.name for r in StateStore(state).open_power()] == ["c1-spot-0", "c1-spot-1"]


def test_hook_never_creates_the_store(tmp_path: Path) -> None:
    state = tmp_path / "s.db"
    cp = hook("resume", "c1-spot-0", state)
    assert cp.returncode == 1 and "no state store" in cp.stderr
    assert not state.exists()
    StateStore(state).close()  # a store without recorded pools (daemon never started): nothing queued
    cp = hook("resume", "c1-spot-0", state)
    assert cp.returncode == 1 and "has not recorded its pools" in cp.stderr
    assert StateStore(state).open_power() == []


def test_bad_hostlist_exits_2_and_queues_nothing(tmp_path: Path) -> None:
    state = tmp_path / "s.db"
    daemon_store(state, "c1-spot")
    cp = subprocess.run(
        [sys.executable, "-m", "autoscaler.slurm.hook", "resume", "c1-spot-[0-", "--state", str(state)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert cp.returncode == 2 and "HOSTLIST" in cp.stderr and "unbalanced" in cp.stderr
    assert not state.exists() or StateStore(state).open_power() == []


class SlowDaemon:
    """Stands in for `Daemon` in the loop: a tick takes a while, so a stop request lands mid-tick."""

    def __init__(self, store: StateStore) -> None:
        self.store = store
        self.ticks = 0
        self.finished = 0
        self.running = threading.Event()

        class _Lock:
            def release(self) -> None:
                pass

        self.lock = _Lock()

    def tick(self) -> None:
        self.ticks += 1
        self.running.set()
        time.sleep(0.5)
        self.finished += 1


def test_stop_request_lets_the_running_tick_finish_and_returns_0(tmp_path: Path) -> None:
    d = SlowDaemon(StateStore(tmp_path / "s.db"))
    loop = RunLoop(d, interval_s=0.1)  # type: ignore[arg-type]
    threading.Thread(target=lambda: (d.running.wait(5), loop.request_stop()), daemon=True).start()
    assert loop.run(install_signals=False) == 0
    assert d.ticks >= 1 and d.finished == d.ticks  # never cut short, never overlapping


def test_deploy_wrappers_are_the_paths_the_slurm_conf_renderer_uses(tmp_path: Path) -> None:
    from fleet.slurm.conf import HOOKS

    state = tmp_path / "s.db"
    daemon_store(state, "a")
    log = tmp_path / "hooks.log"
    env = {"PATH": "/usr/bin:/bin", "GPU_FLEET_PYTHON": sys.executable, "GPU_FLEET_AUTOSCALER_STATE": str(state),
           "GPU_FLEET_HOOK_LOG": str(log)}  # fmt: skip
    for action, arg in (("resume", "a-[0-1]"), ("suspend", "a-0"), ("resume_fail", "a-1")):
        assert HOOKS[action].endswith(f"/{action}.sh")  # deploy/slurm's wrapper, written there by the controller
        script = ROOT / "deploy" / "slurm" / f"{action}.sh"
        cp = subprocess.run([str(script), arg], env=env, capture_output=True, text=True, timeout=30)
        assert cp.returncode == 0, cp.stderr
    assert [(r.action, r.name) for r in StateStore(state).open_power()] == [
        ("resume", "a-0"),
        ("resume", "a-1"),
        ("suspend", "a-0"),
        ("resume_fail", "a-1"),
    ]
    # slurmctld keeps none of what a power program says: the wrappers append it to the hook log, with the time
    said = log.read_text().splitlines()
    assert [line.split(" ", 2)[2] for line in said] == [
        "resume: queued 2 node(s) for the autoscaler (resume a-[0-1])",
        "suspend: queued 1 node(s) for the autoscaler (suspend a-0)",
        "resume_fail: queued 1 node(s) for the autoscaler (resume_fail a-1)",
    ]
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ \[\d+\] .+", line) for line in said), said


def test_a_hook_says_why_it_failed_in_the_log_and_never_fails_over_the_log(tmp_path: Path) -> None:
    """A refused call is what an operator looks for (slurmctld logs only an exit status): it is in the log; a log
    that cannot be written (here a directory) changes nothing of the call."""
    state = tmp_path / "s.db"
    daemon_store(state, "a")
    log = tmp_path / "hooks.log"
    hook = [sys.executable, "-m", "autoscaler.slurm.hook"]
    cp = subprocess.run([*hook, "resume", "a-[0", "--state", str(state), "--log", str(log)], capture_output=True,
                        text=True, timeout=30)  # fmt: skip
    assert cp.returncode == 2 and "HOSTLIST" in cp.stderr
    assert "HOSTLIST: " in log.read_text() and log.read_text().endswith(" (resume a-[0)\n")
    cp = subprocess.run([*hook, "resume", "a-0\nforged line", "--state", str(state), "--log", str(log)],
                        capture_output=True, text=True, timeout=30)  # fmt: skip
    assert cp.returncode == 2 and len(log.read_text().splitlines()) == 2  # a newline in the call stays in its line
    cp = subprocess.run([*hook, "resume", "a-0", "--state", str(state), "--log", str(tmp_path)], capture_output=True,
                        text=True, timeout=30)  # fmt: skip
    assert cp.returncode == 0 and "queued 1 node(s)" in cp.stderr
    assert [(r.action, r.name) for r in StateStore(state).open_power()] == [("resume", "a-0")]


def test_a_store_damaged_while_running_stops_the_loop_with_exit_2(tmp_path: Path) -> None:
    """A tick that hits sqlite's "database disk image is malformed" stops the daemon (exit 2: the unit's
    RestartPreventExitStatus=2 keeps systemd from restarting into the same failure) instead of failing forever."""
    from autoscaler.daemon.tick import TickResult

    class Damaged(SlowDaemon):
        def tick(self) -> TickResult:  # type: ignore[override]
            self.ticks += 1
            return TickResult(at=0.0, error="DatabaseError: database disk image is malformed")

    d = Damaged(StateStore(tmp_path / "s.db"))
    loop = RunLoop(d, interval_s=0.1)  # type: ignore[arg-type]
    assert loop.run(install_signals=False) == 2
    assert d.ticks == 1
