"""One machine, the whole loop: a real slurmctld with CLOUD nodes, the fake Compute API whose "boot" starts a
real slurmd per instance (tests/harness/cloud_nodes.py), the real GceProvider, and the daemon (in a thread
or as its own process, `python -m autoscaler run`).

Pools (inventory as the stacks export it): `e2e-od` on-demand a3-highgpu-8g for partition `gpu` and
`e2e-spot` spot a3-highgpu-8g for the spot-tolerant partition `spot`, each 4 nodes in us-central1-a/-b.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from autoscaler.daemon.build import build_daemon, managed_name_spaces
from autoscaler.daemon.config import parse_config
from autoscaler.daemon.loop import RunLoop
from autoscaler.daemon.state import StateStore
from autoscaler.daemon.tick import Daemon, TickResult
from autoscaler.model import Pool
from autoscaler.slurm.wake import submit_wake_path
from fleet.catalog import CapacityType, load_catalog
from fleet.inventory import InventoryPool
from fleet.slurm.job_submit import render_job_submit
from fleet.slurm.policy import HOLD_SCHEDULER_OPTIONS
from fleet.slurm.topology import render_topology
from fleet.slurm.weights import pool_shapes
from tests.fakes.compute_api import FakeCompute
from tests.harness.cloud_nodes import CloudNodes, Nodeset, cloud_nodes_unavailable_reason, cloud_slurm_conf
from tests.harness.requirements import missing
from tests.harness.slurm import SlurmHarness, harnesses, host_script, poll_until, slurm_unavailable_reason
from tests.harness.slurmrestd import jwt_key_line, jwt_key_path, require_slurmrestd, start_slurmrestd

PROJECT = "e2e-project"
REGION = "us-central1"
ZONES = ["us-central1-a", "us-central1-b"]
DEPLOY_EPILOG = Path(__file__).resolve().parents[2] / "deploy" / "slurm" / "epilog_slurmctld.sh"


def inventory() -> list[InventoryPool]:
    return [pool("od", "on-demand", "gpu", False), pool("spot", "spot", "spot", True)]


def pool(
    name: str, capacity: str, partition: str, spot: bool, *, max_nodes: int = 4, reservation: str | None = None
) -> InventoryPool:
    """One e2e pool of a3-highgpu-8g nodes `e2e-<name>-<i>` over both zones (a reservation: its zone only)."""
    zones = ZONES[:1] if reservation else ZONES
    return InventoryPool(
        name=name,
        cluster="e2e",
        provider="gcp",
        project=PROJECT,
        region=REGION,
        zones=zones,
        machine_type="a3-highgpu-8g",
        gpu_type="nvidia-h100-80gb",
        gpus_per_node=8,
        capacity_type=capacity,
        reservation=reservation,
        min_nodes=0,
        max_nodes=max_nodes,
        instance_group=f"e2e-{name}",
        instance_groups={z: f"e2e-{name}-{z}" for z in zones},
        node_name_prefix=f"e2e-{name}",
        slurm_partitions=[partition],
        spot_tolerant=spot,
    )


def hook_log(state: Path) -> Path:
    """The hook log of the test whose daemon keeps `state` (with the harness's other logs, kept after a failure)."""
    return state.parent / "log" / "hooks.log"


def _hook(bin_dir: Path, action: str, state: Path, *, fail_first: int = 0) -> str:
    """The hook slurmctld runs for `action`; `fail_first`: its first calls exit 1 queuing nothing (a lost call)."""
    log = hook_log(state)
    body = f'exec {sys.executable} -m autoscaler.slurm.hook {action} "$1" --state {state} --log {log}'
    if fail_first:
        calls = bin_dir / f"fleet-{action}.calls"
        lost = f'{{ echo "$(date -u +%FT%TZ) {action} $1: lost (test)" >> {log}; exit 1; }}'
        count = f"n=$(cat {calls} 2>/dev/null || echo 0); echo $((n + 1)) > {calls}"
        body = f'{count}\n[ "$n" -ge {fail_first} ] || {lost}\n{body}'

    return host_script(bin_dir / f"fleet-{action}.sh", body)


def epilog_slurmctld_hook(bin_dir: Path, state: Path) -> str:
    """The shipped deploy/slurm/epilog_slurmctld.sh, pointed at this venv's Python and this test's store (what
    the controller's install puts at /opt/gpu-fleet): slurmctld sets SLURM_JOB_ID / SLURM_JOB_NODELIST."""
    env = f"GPU_FLEET_HOOK_LOG={hook_log(state)} GPU_FLEET_PYTHON={sys.executable} GPU_FLEET_AUTOSCALER_STATE={state}"
    body = f"{env} exec {DEPLOY_EPILOG}"
    return host_script(bin_dir / "fleet-epilog-slurmctld.sh", body)


def late_bind_lua(
    state: Path, partition: str = "gpu", machine_type: str = "a3-highgpu-8g", *more: str, shared: bool = False
) -> str:
    """The job_submit.lua `fleet render slurm-conf` writes under late binding for on-demand pools of `machine_type`
    (and `more` machine types) in `partition`: the hard constraint and the submit wake-up file beside the daemon's
    `state` (`shared`: with `Policy.share_nodes`)."""
    pools = [(f"od{i}", CapacityType.ON_DEMAND, m) for i, m in enumerate((machine_type, *more))]
    shapes = pool_shapes(pools, load_catalog(), REGION)
    wake = str(submit_wake_path(state))
    return render_job_submit({partition: shapes}, partition, constrain=True, shared=shared, wake_path=wake)


def late_bind_lines(harness: SlurmHarness, state: Path) -> list[str]:
    """The slurm.conf lines the stack renders under late binding that the harness's conf lacks: EpilogSlurmctld (the
    job-end wake-up) and the late-binding SchedulerParameters (`fleet.slurm.policy`)."""
    return [
        f"EpilogSlurmctld={epilog_slurmctld_hook(harness.root / 'bin', state)}",
        f"SchedulerParameters={HOLD_SCHEDULER_OPTIONS}",
    ]


class E2E:
    def __init__(
        self,
        make_harness: Callable[..., SlurmHarness],
        *,
        suspend_time: int = 6,
        resume_timeout: int = 60,
        boots: Callable[[str, str], bool] | None = None,
        pools: list[InventoryPool] | None = None,
        nodesets: list[Nodeset] | None = None,
        partitions: dict[str, list[str]] | None = None,
        policy: dict[str, Any] | None = None,
        reservations: dict[str, tuple[str, int]] | None = None,
        topology: bool = False,
        job_submit_lua: str | Callable[[Path], str] | None = None,
        slurm_lines: Callable[[SlurmHarness, Path], list[str]] | None = None,
        interval_s: float = 1.0,
        loop: dict[str, Any] | None = None,
        resume_failures: int = 0,
        suspend_failures: int = 0,
        resume_fail_failures: int = 0,
        slurm_mode: str = "cli",
    ):
        """`boots(name, zone)`: False makes that VM come up without ever registering (a broken boot).
        `topology`: topology/tree as `fleet render slurm-conf` renders it (one tree per nodeset, the lowest Weight
        last: `fleet.slurm.topology`);
        `job_submit_lua`: a job_submit.lua for slurmctld (JobSubmitPlugins=lua), e.g. `fleet.slurm.job_submit`'s, or
        a function of the daemon's state path that renders one (the late-binding lua names its wake-up file);
        `slurm_lines(harness, state)`: extra slurm.conf lines (e.g. EpilogSlurmctld); `interval_s`: the daemon's
        poll (`loop.interval_s`); `loop`: more of the daemon's `loop` settings; `resume_failures`,
        `suspend_failures`, `resume_fail_failures`: the first calls of ResumeProgram, SuspendProgram,
        ResumeFailProgram fail before queuing anything (a lost hook call); `slurm_mode`: "rest" runs slurmrestd
        beside slurmctld (JWT auth, the release's OpenAPI plugin as the controller's wrapper loads it) and the daemon
        in `slurm.mode: rest`, signing its tokens with slurm.conf's key (`slurm.jwt_key_file`), as on the controller."""
        probe = make_harness()
        self.root = probe.root
        self.state = self.root / "autoscaler.db"
        self._init_state()
        b = self.root / "bin"
        self.slurm = make_harness(
            root=self.root,
            resume_program=_hook(b, "resume", self.state, fail_first=resume_failures),
            suspend_program=_hook(b, "suspend", self.state, fail_first=suspend_failures),
            resume_fail_program=_hook(b, "resume-fail", self.state, fail_first=resume_fail_failures),
        )
        self.nodes = CloudNodes(self.slurm, nodesets or [Nodeset("e2e-od", 4), Nodeset("e2e-spot", 4)])
        self.nodes.prepare()
        conf = cloud_slurm_conf(
            self.slurm,
            self.nodes,
            partitions or {"gpu": ["e2e-od"], "spot": ["e2e-spot"]},
            suspend_time=suspend_time,
            resume_timeout=resume_timeout,
        )
        topology_conf = None
        if topology:
            conf += "TopologyPlugin=topology/tree\nTopologyParam=SwitchAsNodeRank\n"
            topology_conf = render_topology(
                {ns.prefix: f"{ns.prefix}-[0-{ns.count - 1}]" for ns in self.nodes.nodesets},
                {},
                {ns.prefix: ns.weight or 1 for ns in self.nodes.nodesets},  # 0: Slurm's default Weight, 1
            )
        if callable(job_submit_lua):
            job_submit_lua = job_submit_lua(self.state)
        if job_submit_lua:
            conf += "JobSubmitPlugins=lua\n"
        if slurm_lines is not None:
            conf += "".join(f"{line}\n" for line in slurm_lines(self.slurm, self.state))
        if slurm_mode == "rest":
            require_slurmrestd()
            conf += jwt_key_line(self.slurm)
        self.slurm.start(conf, self.nodes.gres_conf(), topology_conf=topology_conf, job_submit_lua=job_submit_lua)
        slurm_config: dict[str, Any] = {"mode": "cli", "conf": str(self.slurm.conf_path), "timeout_s": 3}
        if slurm_mode == "rest":  # scontrol's conf stays set: 22.05's openapi cannot update nodes (RestSlurm)
            key = str(jwt_key_path(self.slurm))
            rest = {"rest_url": start_slurmrestd(self.slurm), "jwt_key_file": key, "rest_user": "root"}
            slurm_config |= {"mode": "rest", **rest}

        def on_boot(name: str, zone: str) -> None:
            if boots is None or boots(name, zone):
                self.nodes.boot(name, zone)

        self.fake = FakeCompute(PROJECT, boot_delay=0.3, on_boot=on_boot, on_delete=self.nodes.stop).start()
        self.pools = pools or inventory()
        self.fake.add_inventory(self.pools)
        for name, (zone, count) in (reservations or {}).items():
            self.fake.add_reservation(zone, name, "a3-highgpu-8g", count)
        self.inventory_path = self.root / "inventory.json"
        self.inventory_path.write_text(json.dumps([p.model_dump(mode="json") for p in self.pools]))
        self.config: dict[str, Any] = {
            "inventory": str(self.inventory_path),
            "state_path": str(self.state),
            "policy": policy or {"idle_timeout_s": 3600, "backoff_s": 120},
            "slurm": slurm_config,
            "provider": {
                "kind": "gce",
                "endpoint": self.fake.url,
                "anonymous": True,
                "options": {"retry": {"initial": 0.1, "maximum": 0.5, "deadline": 20, "attempt_timeout": 2}},
            },
            "metrics": {"port": 0},
            "loop": {"interval_s": interval_s, "orphan_grace_s": 5, **(loop or {})},
        }
        self.config_path = self.root / "autoscaler.yaml"
        self.config_path.write_text(yaml.safe_dump(self.config))
        self.ticks: list[TickResult] = []
        self._thread: threading.Thread | None = None
        self._loop: RunLoop | None = None
        self.daemon: Daemon | None = None
        self.proc: subprocess.Popen[str] | None = None

    def _init_state(self) -> None:
        """What `fleet autoscaler init` does before slurmctld starts: the store, with the pools' name spaces
        (the hooks refuse names outside them)."""
        store = StateStore(self.state)
        store.set_managed_pools(managed_name_spaces([Pool.from_inventory(p) for p in inventory()]))
        store.close()

    # --- the daemon in this process ------------------------------------------------------------------
    def start_daemon(self) -> Daemon:
        self.daemon = build_daemon(parse_config(self.config))
        self._loop = RunLoop(self.daemon, interval_s=self.config["loop"]["interval_s"], on_tick=self.ticks.append)
        self._thread = threading.Thread(target=self._loop.run, kwargs={"install_signals": False}, daemon=True)
        self._thread.start()
        return self.daemon

    def stop_daemon(self) -> None:
        if self._loop is not None and self._thread is not None:
            self._loop.request_stop()
            self._thread.join(timeout=30)
        self._loop = self._thread = None

    # --- the daemon as its own process -----------------------------------------------------------------
    def spawn_daemon(self) -> subprocess.Popen[str]:
        log = (self.root / "log" / "daemon.jsonl").open("a")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "autoscaler", "run", "--config", str(self.config_path), "--log-json"],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
        )
        log.close()
        return self.proc

    def daemon_log(self) -> list[dict]:
        p = self.root / "log" / "daemon.jsonl"
        out = []
        for line in p.read_text().splitlines() if p.exists() else []:
            try:
                out.append(json.loads(line))
            except ValueError:
                out.append({"message": line})
        return out

    # --- helpers -------------------------------------------------------------------------------------------
    def sbatch(self, *args: str) -> int:
        return int(self.slurm.run("sbatch", "--parsable", *args, check=True).stdout.strip().split(";")[0])

    def gpu_job(self, seconds: int, partition: str = "gpu", *, stamp: bool = False) -> int:
        """A one-node, 8-GPU batch job that prints the node it runs on (`ran_on`), with `stamp` the time its step
        started on this machine's clock (`step_started`), then sleeps `seconds`."""
        date = " date +%s.%N;" if stamp else ""
        echo = f"srun sh -c 'echo $SLURMD_NODENAME;{date} sleep {seconds}'"
        out = f"{self.root / 'log'}/job-%j.out"
        return self.sbatch("-p", partition, "-N", "1", "--gres=gpu:8", "-o", out, "--wrap", echo)

    def ran_on(self, job: int) -> str:
        """The node a `gpu_job` ran on, as its step printed it: a job slurmctld shows RUNNING may not have printed yet
        (its step starts on slurmd a moment later, longer on a loaded machine), so this waits up to 30 s for it."""
        out = self.root / "log" / f"job-{job}.out"

        def printed() -> list[str]:
            return out.read_text().split() if out.exists() else []

        assert poll_until(printed, 30, 0.2), f"job {job} printed no node name in {out} within 30 s"
        return printed()[0]

    def step_started(self, job: int) -> float | None:
        """When the step of a `gpu_job(..., stamp=True)` started (None: not yet)."""
        words = (self.root / "log" / f"job-{job}.out").read_text().split()
        return float(words[1]) if len(words) > 1 else None

    def job_state(self, job: int) -> str:
        """The job's state as squeue shows it; GONE once it left the queue."""
        for j in self.slurm.squeue_json()["jobs"]:
            if j["job_id"] == job:
                return str(j["job_state"])
        return "GONE"

    def squeue_ids(self) -> set[int]:
        return {
            j["job_id"] for j in self.slurm.squeue_json()["jobs"] if j["job_state"] not in ("COMPLETED", "CANCELLED")
        }

    def sinfo(self) -> dict[str, dict]:
        return {n["name"]: n for n in self.slurm.sinfo_json()["nodes"]}

    def close(self) -> None:
        try:
            self.stop_daemon()
            if self.proc is not None and self.proc.poll() is None:
                self.proc.terminate()
                self.proc.wait(timeout=30)
        finally:
            self.nodes.stop_all()
            self.fake.stop()
            self.slurm.stop(remove=False)
            keep = Path(tempfile.gettempdir()) / "gpu-fleet-e2e-logs" / self.root.name
            shutil.copytree(self.root / "log", keep, dirs_exist_ok=True)  # for a look after a failure
            self.slurm.ports.release()


@contextmanager
def e2e_env(make_harness: Callable[..., SlurmHarness], **kwargs: Any) -> Iterator[E2E]:
    """An `E2E(make_harness, **kwargs)`, closed afterwards; skips (or fails under FLEET_REQUIRE_SLURM=1) where
    cloud nodes cannot run on this host."""
    reason = cloud_nodes_unavailable_reason()
    if reason:
        missing(reason)
    e = E2E(make_harness, **kwargs)
    yield e
    e.close()


def standalone_unavailable_reason() -> str | None:
    """Why an `E2E` cannot run outside pytest on this host (the benches and probes): no Slurm, or no root for the
    cloud nodes' slurmds; None when it can."""
    return slurm_unavailable_reason() or cloud_nodes_unavailable_reason()


@contextmanager
def standalone_e2e(**kwargs: Any) -> Iterator[E2E]:
    """An `E2E(**kwargs)` outside pytest (the benches and probes): its own harness factory; closed afterwards, and
    every harness it made stopped (the tests' `slurm_factory` fixture does that for `e2e_env`)."""
    with harnesses() as make:
        env = E2E(make, **kwargs)
        try:
            yield env
        finally:
            env.close()


def wait_for(pred: Callable[[], Any], timeout: float, what: str, env: E2E | None = None) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(0.5)
    logs = env.slurm.logs(15) if env is not None else ""
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}\n{logs}")
