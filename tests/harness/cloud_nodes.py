"""Fake cloud nodes on this host: one real slurmd per Slurm CLOUD node, started when its "VM boots".

Used with `tests.harness.slurm.SlurmHarness` and the fake Compute server (`on_boot` / `on_delete` hooks):
booting an instance named like a CLOUD node starts `slurmd -D -N <name>`, deleting it stops that slurmd, so
jobs really run on cloud nodes.  What a slurmd on a shared host needs (learned running real Slurm here):
- per-node `Port=` (several slurmd on one host) and `NodeAddr=127.0.0.1` (no DNS for cloud names);
- GPU `File=` entries pointing at dummy character devices plus `SlurmdParameters=config_overrides`
  (slurmd drops file-less GPUs and would report the host's real CPUs/memory);
- an uptime shim (uptime_shim.c, LD_PRELOAD): slurmctld ignores a registration whose boot time predates
  the power-up;
- open stdin/stdout/stderr and no inherited blocked signals (slurmd must stop on SIGTERM);
- slurmd leaves its job steps running when it stops, so deleting a fake VM also kills its slurmstepds and the
  job's processes (`stop`), as a deleted VM's die with it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import signal
import subprocess
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tests.harness.slurm import SlurmHarness, processes, spec_release

SHIM_SOURCE = Path(__file__).with_name("uptime_shim.c")
#: environment variable marking a fake VM's slurmd (and the slurmstepds it forks): `<harness root>:<node name>`
VM_MARKER = "FLEET_FAKE_VM"


def cloud_nodes_unavailable_reason() -> str | None:
    if shutil.which("gcc") is None:
        return "gcc is needed to build the fake cloud nodes' uptime shim (scripts/setup.sh installs it)"
    if shutil.which("slurmd") is None and not Path("/usr/sbin/slurmd").exists():
        return "slurmd is not installed (scripts/setup.sh installs it)"
    return None


@dataclass(frozen=True)
class Nodeset:
    """A CLOUD nodeset: names `prefix-0..count-1`, slurmd ports `port0..port0+count-1` (0: free ones)."""

    prefix: str
    count: int
    port0: int = 0
    gpus: int = 8
    cpus: int = 4
    features: str = ""
    weight: int = 0  # slurm.conf node Weight (0: Slurm's default)
    memory_mib: int = 1000  # RealMemory

    @property
    def names(self) -> list[str]:
        return [f"{self.prefix}-{i}" for i in range(self.count)]

    def node_line(self) -> str:
        feat = f" Features={self.features}" if self.features else ""
        feat += f" Weight={self.weight}" if self.weight else ""
        return (
            f"NodeName={self.prefix}-[0-{self.count - 1}] State=CLOUD NodeAddr=127.0.0.1 "
            f"Port=[{self.port0}-{self.port0 + self.count - 1}] CPUs={self.cpus} RealMemory={self.memory_mib} "
            f"Gres=gpu:{self.gpus}{feat}"
        )


class CloudNodes:
    """Start/stop one slurmd per cloud node name (thread-safe: the fake server calls from its threads)."""

    def __init__(self, harness: SlurmHarness, nodesets: Sequence[Nodeset]) -> None:
        self.harness = harness
        self.nodesets: list[Nodeset] = []
        for ns in nodesets:  # ports leased with the harness's own: held as long as its slurm.conf names them
            self.nodesets.append(ns if ns.port0 else dataclasses.replace(ns, port0=harness.ports.lease(ns.count)))
        self.known = {n for ns in self.nodesets for n in ns.names}
        self.dev = harness.root / "fakedev"
        self.shim = harness.root / "shim" / "uptime_shim.so"
        self._procs: dict[str, subprocess.Popen[bytes]] = {}
        self._lock = threading.Lock()
        self.boots: list[str] = []
        self.stops: list[str] = []

    def prepare(self) -> None:
        """Dummy GPU devices and the shim (call before `harness.start`)."""
        self.dev.mkdir(parents=True, exist_ok=True)
        gpus = max(ns.gpus for ns in self.nodesets)
        for i in range(gpus):
            p = self.dev / f"nvidia{i}"
            if not p.exists():
                os.mknod(p, 0o666 | 0o020000, os.makedev(1, 3))  # a char device like /dev/null
        self.shim.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            ["gcc", "-O2", "-shared", "-fPIC", "-o", str(self.shim), str(SHIM_SOURCE), "-ldl"],
            check=True,
            capture_output=True,
        )

    def conf_lines(self) -> list[str]:
        """slurm.conf lines: the nodesets (partitions are the caller's)."""
        return ["SlurmdParameters=config_overrides", *(ns.node_line() for ns in self.nodesets)]

    def gres_conf(self) -> str:
        return "".join(
            f"NodeName={ns.prefix}-[0-{ns.count - 1}] Name=gpu File={self.dev}/nvidia[0-{ns.gpus - 1}]\n"
            for ns in self.nodesets
        )

    def boot(self, name: str, zone: str = "") -> None:
        """The fake VM `name` booted: start its slurmd (ignored for names that are not cloud nodes)."""
        if name not in self.known:
            return
        with self._lock:
            proc = self._procs.get(name)
            if proc is not None and proc.poll() is None:
                return
            (self.harness.root / "state" / "d" / name).mkdir(parents=True, exist_ok=True)
            log = (self.harness.root / "log" / f"cloud-{name}.out").open("ab")
            env = {**self.harness.env, "LD_PRELOAD": str(self.shim), VM_MARKER: self._marker(name)}
            self._procs[name] = subprocess.Popen(
                ["slurmd", "-D", "-N", name, "-f", str(self.harness.conf_path)],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                restore_signals=True,
            )
            log.close()
            self.boots.append(name)

    def _marker(self, name: str) -> str:
        return f"{self.harness.root}:{name}"

    def stop(self, name: str, zone: str = "") -> None:
        """The fake VM `name` was deleted: stop its slurmd, then kill what else ran on it, as a deleted VM's
        processes die with it (slurmd leaves its job steps running when it stops): the job's processes, which carry
        the node's name and this cluster's conf, and the slurmstepds that run them (`_kill_vm_processes`)."""
        with self._lock:
            proc = self._procs.pop(name, None)
            if proc is None:
                return
            self.stops.append(name)
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
        self._kill_vm_processes(name)

    def vanish(self, name: str) -> None:
        """Every process of the fake VM `name` stops at once and dies, saying nothing to slurmctld, as a VM the cloud
        takes back does (a preemption): its slurmd too, with no SIGTERM first.  The slurmd is then reaped by `stop`,
        when the cloud stops the VM."""
        self._kill_vm_processes(name)

    def _kill_vm_processes(self, name: str) -> None:
        """Freeze (SIGSTOP), then kill, every process of the fake VM `name`: those with its marker or the job's
        variables, and the slurmstepds that run them.  A slurmstepd carries neither (it starts with an environment of
        its own: seen on 23.11); left alive, the batch step's slurmstepd outlives the batch script, reports it
        killed by signal 9, and slurmctld ends the job FAILED instead of requeuing it, a message a VM that is gone
        never sends.  Frozen first, so none reports another's death."""
        marker, conf = self._marker(name), str(self.harness.conf_path)
        frozen: set[int] = set()
        while True:
            found: set[int] = set()
            for pid, _, env in processes():
                if pid == os.getpid():
                    continue
                if env.get(VM_MARKER) == marker or (
                    env.get("SLURMD_NODENAME") == name and env.get("SLURM_CONF") == conf
                ):
                    found.add(pid)
                    ppid, parent = _parent(pid)
                    if parent.startswith("slurmstepd:"):  # the step's slurmstepd, which runs this job process
                        found.add(ppid)
            if not found - frozen:
                break
            for pid in found - frozen:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGSTOP)
            frozen |= found
        for pid in frozen:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def running(self) -> set[str]:
        with self._lock:
            return {n for n, p in self._procs.items() if p.poll() is None}

    def stop_all(self) -> None:
        for name in list(self._procs):
            self.stop(name)


def cloud_slurm_conf(
    harness: SlurmHarness,
    cloud: CloudNodes,
    partitions: dict[str, Sequence[str]],
    *,
    suspend_time: int = 30,
    resume_timeout: int = 60,
    suspend_timeout: int = 10,
) -> str:
    """A complete slurm.conf for this host: power saving on, the nodesets, `partitions` (name -> node prefixes)."""
    keys = {
        "ClusterName": "fleettest",
        **harness.overrides(),
        "AuthType": "auth/munge",
        "AccountingStorageType": "accounting_storage/none",
        "JobCompType": "jobcomp/none",
        "MpiDefault": "none",
        "SwitchType": "switch/none",
        "SelectType": "select/cons_tres",
        "SelectTypeParameters": "CR_Core",
        "SchedulerType": "sched/backfill",
        "GresTypes": "gpu",
        "ReturnToService": "2",
        "MailProg": "/bin/true",
        "SuspendTime": str(suspend_time),
        "SuspendTimeout": str(suspend_timeout),
        "ResumeTimeout": str(resume_timeout),
        "ResumeRate": "0",
        "SuspendRate": "0",
        "SlurmctldParameters": "idle_on_node_suspend",
        # what 23.11 does by default and calls defunct (fleet.slurm.conf.release_settings)
        **({"CommunicationParameters": "NoAddrCache", "PrivateData": "cloud"} if spec_release() == "22.05" else {}),
        "SlurmctldTimeout": "30",
        "SlurmdTimeout": "30",
        "InactiveLimit": "0",
        "KillWait": "5",
    }
    keys.pop("NodeAddr", None)  # a node attribute, set on each NodeName line
    lines = [f"{k}={v}" for k, v in keys.items() if v != ""]  # "": a key the overrides remove
    lines += cloud.conf_lines()
    by_prefix = {ns.prefix: ns for ns in cloud.nodesets}
    for name, prefixes in partitions.items():
        nodes = ",".join(f"{p}-[0-{by_prefix[p].count - 1}]" for p in prefixes)
        lines.append(f"PartitionName={name} Nodes={nodes} MaxTime=INFINITE State=UP")
    return "\n".join(lines) + "\n"


def _parent(pid: int) -> tuple[int, str]:
    """(parent pid, its command line); (0, "") once either is gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        ppid = int(next(line.split()[1] for line in status.splitlines() if line.startswith("PPid:")))
        return ppid, Path(f"/proc/{ppid}/cmdline").read_bytes().decode(errors="replace")
    except (OSError, StopIteration, ValueError):
        return 0, ""
