"""A real Slurm 22.05 controller on this host, for tests: root, no systemd, nothing shared with the system.

Everything lives in one private directory: its own munged (own key and socket), `slurmctld -D -c`
(saved state cleared), optionally a slurmd for this host, config files under `etc/`, logs under
`log/`.  Client commands run with `SLURM_CONF` pointing there, so /etc/slurm is never read or
written and several harnesses (on different ports) can run side by side.

Typical use (see tests/conftest.py for the `slurm_factory` fixture)::

    h = SlurmHarness()
    conf = render_slurm_conf(spec, cluster, overrides=h.overrides())
    h.start(conf.slurm_conf, conf.gres_conf)
    nodes = h.sinfo_json()["nodes"]
    h.stop()

Extending it (fake cloud nodes, the autoscaler's own hooks): pass `resume_program=` etc., add
node/partition lines with `extra_lines`, start extra daemons with `spawn` (stopped with the rest).
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tests.harness.ports import PortLeases

if TYPE_CHECKING:
    from fleet.slurm.conf import SlurmConf
    from fleet.spec import FleetSpec

CRED_EXPIRE_S = 30
#: where a Slurm run in another root (tests/slurm_compat/noble.py) sees this machine's root: `host_script`s run there
HOST_ROOT = "/run/gpu-fleet-host"


def processes() -> list[tuple[int, str, dict[str, str]]]:
    """(pid, command line, environment) of every process this host lets us read (root reads them all)."""
    out: list[tuple[int, str, dict[str, str]]] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
            raw = (entry / "environ").read_bytes()
        except OSError:  # gone meanwhile, or not ours to read
            continue
        env = dict(kv.split("=", 1) for kv in raw.decode(errors="replace").split("\0") if "=" in kv)
        out.append((int(entry.name), cmdline, env))
    return out


def kill_processes(match: Callable[[dict[str, str]], bool], timeout: float = 10.0) -> int:
    """SIGKILL every process whose environment `match`es (never this one), again until none is left (a job may
    fork meanwhile) or `timeout`; returns how many were killed."""
    killed: set[int] = set()
    deadline = time.monotonic() + timeout
    while True:
        pids = [pid for pid, _, env in processes() if pid != os.getpid() and match(env)]
        if not pids or time.monotonic() > deadline:
            return len(killed)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            killed.add(pid)
        time.sleep(0.05)


DAEMONS = ("slurmctld", "munged", "mungekey", "sinfo", "scontrol")


def binary(name: str) -> str:
    """Absolute path of a Slurm/munge program (daemons live in /usr/sbin, which may not be on PATH)."""
    if found := shutil.which(name):
        return found
    return next((str(Path(d, name)) for d in ("/usr/sbin", "/usr/bin") if Path(d, name).exists()), name)


def host_script(path: Path, body: str) -> str:
    """Write an executable sh script that slurmctld runs (ResumeProgram, EpilogSlurmctld, ...) and that runs
    `body` on this machine: where slurmctld runs in another root (Ubuntu's Slurm in a chroot, which binds this
    machine's root at HOST_ROOT) the script re-runs itself there, so this venv's Python and its libraries are
    the ones it finds.  Returns the path as a string (for slurm.conf)."""
    path.write_text(f'#!/bin/sh\n[ -d {HOST_ROOT}/proc/self ] && exec chroot {HOST_ROOT} "$0" "$@"\n{body}\n')
    path.chmod(0o755)
    return str(path)


def slurm_release(slurmd: str | None = None) -> tuple[int, int]:
    """(major, minor) of the Slurm the harness would start (`slurmd -V`: "slurm 22.05.8", "slurm-wlm 23.11.4")."""
    return _release_of(slurmd or binary("slurmd"))


def spec_release() -> str:
    """The Slurm the harness starts as `clusters[].slurm.release` names it: "22.05" (Debian 12, this machine) or
    "23.11" (Ubuntu 24.04, tests/slurm_compat), the releases whose slurm.conf keys differ
    (`fleet.slurm.conf.release_settings`)."""
    return "22.05" if slurm_release() < (23, 11) else "23.11"


def for_this_slurm(spec: FleetSpec) -> FleetSpec:
    """`spec` with every Slurm cluster's `slurm.release` that of the Slurm the harness starts (`spec_release`): a
    stack rendered for a release runs on that release."""
    release = spec_release()
    clusters = [
        c.model_copy(update={"slurm": c.slurm.model_copy(update={"release": release})}) if c.slurm else c
        for c in spec.clusters
    ]
    return spec.model_copy(update={"clusters": clusters})


@functools.cache
def _release_of(slurmd: str) -> tuple[int, int]:
    """`slurmd -V` once per program path (every harness start asks: `overrides`)."""
    out = subprocess.run([slurmd, "-V"], capture_output=True, text=True, check=False).stdout
    found = re.search(r"(\d+)\.(\d+)\.\d+", out)
    return (int(found[1]), int(found[2])) if found else (0, 0)


def slurm_unavailable_reason() -> str | None:
    """Why a real Slurm cannot run here (None when it can)."""
    missing = [d for d in DAEMONS if not Path(binary(d)).is_absolute()]
    if missing:
        return f"Slurm/munge not installed ({', '.join(missing)} missing; scripts/setup.sh installs them)"
    if os.geteuid() != 0:
        return "real-Slurm tests run slurmctld/munged as root; run as root (CI does)"
    return None


def poll_until(predicate: Callable[[], object], timeout: float, interval: float = 0.2) -> bool:
    """Call `predicate` every `interval` seconds until it is true (True) or `timeout` seconds pass (False)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return False


def short_hostname() -> str:
    return socket.gethostname().split(".")[0]


def _die_with_parent() -> None:
    """Child-side: SIGTERM this daemon when the test process dies, so a killed run leaves no daemons."""
    with contextlib.suppress(OSError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class SlurmStartError(RuntimeError):
    """A daemon did not come up; the message carries the tail of its logs."""


_HOOK = """#!/bin/sh
# test hook: record the call; the real ones are the autoscaler's `fleet slurm ...` commands
echo "$(date +%s.%N) {name} $*" >> "{log}"
"""


class SlurmHarness:
    """One private Slurm controller (and optional local slurmd) started from a given slurm.conf."""

    def __init__(
        self,
        root: Path | None = None,
        *,
        ctld_port: int | None = None,
        slurmd_port: int | None = None,
        resume_program: str | None = None,
        suspend_program: str | None = None,
        resume_fail_program: str | None = None,
    ) -> None:
        if root is None:
            # not under pytest's 0700 tmp dirs: munged insists every directory above its socket is world-executable
            root = Path(tempfile.mkdtemp(prefix="fleet-slurm-", dir="/tmp"))
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.root.chmod(0o755)
        for sub in ("etc", "state/ctld", "state/d", "run", "log", "bin", "munge"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        self.ports = PortLeases()  # every port this cluster names, held until `stop` removes it
        self.ctld_port = ctld_port or self.ports.lease()
        self.slurmd_port = slurmd_port or self.ports.lease()
        self.hostname = short_hostname()
        self.power_log = self.root / "log" / "power.log"
        self.resume_program = resume_program or self._hook("resume")
        self.suspend_program = suspend_program or self._hook("suspend")
        self.resume_fail_program = resume_fail_program or self._hook("resume_fail")
        self.conf_path = self.root / "etc" / "slurm.conf"
        self.munge_socket = self.root / "munge" / "munge.socket"
        self._procs: dict[str, subprocess.Popen[bytes]] = {}

    # ------------------------------------------------------------------ configuration

    def _hook(self, name: str) -> str:
        path = self.root / "bin" / f"{name}.sh"
        path.write_text(_HOOK.format(name=name, log=self.power_log))
        path.chmod(0o755)
        return str(path)

    def overrides(self, *, cgroup: bool = False) -> dict[str, str]:
        """The host-specific slurm.conf keys that make a generated config start on this machine.

        `cgroup=True` keeps the config's cgroup plugins (slurmctld accepts them without loading
        them; a slurmd here needs them replaced, which is the default).
        """
        r = self.root
        keys = {
            "SlurmctldHost": f"{self.hostname}(127.0.0.1)",
            "SlurmctldPort": str(self.ctld_port),
            "SlurmdPort": str(self.slurmd_port),
            "SlurmUser": "root",
            "SlurmdUser": "root",
            # cred_expire: also how long slurmctld holds a requeued job before it may run again (default 120 s);
            # 30 s still covers a step launch on a loaded test host
            "AuthInfo": f"socket={self.munge_socket},cred_expire={CRED_EXPIRE_S}",
            "StateSaveLocation": str(r / "state" / "ctld"),
            "SlurmdSpoolDir": str(r / "state" / "d" / "%n"),
            "SlurmctldPidFile": str(r / "run" / "slurmctld.pid"),
            "SlurmdPidFile": str(r / "run" / "slurmd-%n.pid"),
            "SlurmctldLogFile": str(r / "log" / "slurmctld.log"),
            "SlurmdLogFile": str(r / "log" / "slurmd-%n.log"),
            # the stacks' JobCompType=jobcomp/filetxt would write this machine's /var/log/slurm/jobcomp.log
            "JobCompLoc": str(r / "log" / "jobcomp.log"),
            # no slurmdbd here (the first-boot VMs run the stacks' own: tests/firstboot); "" removes a key
            "AccountingStorageType": "accounting_storage/none",
            "AccountingStorageHost": "",
            "AccountingStoragePort": "",
            "AccountingStorageTRES": "",
            "ResumeProgram": self.resume_program,
            "SuspendProgram": self.suspend_program,
            "ResumeFailProgram": self.resume_fail_program,
            # cloud node names have no DNS here (else ~10 s getaddrinfo retries per message)
            "NodeAddr": "127.0.0.1",
        }
        if not cgroup:  # no systemd / cgroups on this host
            keys |= {
                "ProctrackType": "proctrack/linuxproc",
                # 23.02 dropped the task/none plugin (slurmd does not start naming it): task/affinity needs no cgroup
                "TaskPlugin": "task/none" if slurm_release() < (23, 2) else "task/affinity",
                "JobAcctGatherType": "jobacct_gather/none",
            }
        return keys

    def local_node_lines(self, partition: str = "local", cpus: int | None = None) -> list[str]:
        """slurm.conf lines for a real node = this host (for `start(..., slurmd=True)`)."""
        cpus = cpus or os.cpu_count() or 1
        return [
            f"NodeName={self.hostname} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory=1000 State=UNKNOWN",
            f"PartitionName={partition} Nodes={self.hostname} MaxTime=INFINITE State=UP",
        ]

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.conf_path)}

    # ------------------------------------------------------------------ lifecycle

    def start_rendered(self, conf: SlurmConf, *, cgroup: bool = False, **kw: Any) -> None:
        """`start` with what `fleet render slurm-conf` writes (`fleet.slurm.conf.SlurmConf`): its slurm.conf,
        gres.conf, topology.conf and job_submit.lua, and its cgroup.conf with `cgroup` (for
        `overrides(cgroup=True)`).  `kw`: `start`'s other arguments (a `topology_conf` given replaces the file's)."""
        kw.setdefault("topology_conf", conf.topology_conf)
        cgroup_conf = conf.cgroup_conf if cgroup else None
        self.start(conf.slurm_conf, conf.gres_conf, cgroup_conf=cgroup_conf, job_submit_lua=conf.job_submit_lua, **kw)

    def start(
        self,
        slurm_conf: str,
        gres_conf: str = "",
        *,
        extra_lines: Sequence[str] = (),
        cgroup_conf: str | None = None,
        topology_conf: str | None = None,
        job_submit_lua: str | None = None,
        slurmd: bool = False,
        timeout: float = 30.0,
    ) -> None:
        """Write the configs, start munged and slurmctld (state cleared), optionally a local slurmd.
        A config with `TopologyPlugin=topology/tree` needs `topology_conf` (written next to slurm.conf)."""
        text = slurm_conf.rstrip("\n") + "\n" + "".join(f"{line}\n" for line in extra_lines)
        if slurmd and f"NodeName={self.hostname} " not in text:
            text += "".join(f"{line}\n" for line in self.local_node_lines())
        self.conf_path.write_text(text)
        (self.root / "etc" / "gres.conf").write_text(gres_conf)
        if cgroup_conf is not None:
            (self.root / "etc" / "cgroup.conf").write_text(cgroup_conf)
        if topology_conf is not None:
            (self.root / "etc" / "topology.conf").write_text(topology_conf)
        if job_submit_lua:  # JobSubmitPlugins=lua reads it next to slurm.conf
            (self.root / "etc" / "job_submit.lua").write_text(job_submit_lua)
        try:
            self._start_munge(timeout)
            self.spawn("slurmctld", [binary("slurmctld"), "-D", "-c", "-f", str(self.conf_path)])
            self._wait(lambda: "UP" in self.run("scontrol", "ping").stdout, "slurmctld", timeout)
            if slurmd:
                self.spawn("slurmd", [binary("slurmd"), "-D", "-N", self.hostname, "-f", str(self.conf_path)])
                self._wait(lambda: self._node_state(self.hostname).startswith("idle"), "slurmd", timeout)
        except BaseException:
            self.stop(remove=False)
            raise

    def _start_munge(self, timeout: float) -> None:
        key = self.root / "munge" / "munge.key"
        if not key.exists():
            subprocess.run([binary("mungekey"), "-c", "-k", str(key)], check=True, capture_output=True)
        key.chmod(0o400)
        m = self.root / "munge"
        self.spawn(
            "munged",
            [
                binary("munged"),
                "-F",
                f"--key-file={key}",
                f"--socket={self.munge_socket}",
                f"--pid-file={m / 'munged.pid'}",
                f"--log-file={m / 'munged.log'}",
                f"--seed-file={m / 'munged.seed'}",
            ],
        )
        self._wait(self.munge_socket.exists, "munged", timeout)

    def spawn(self, name: str, argv: Sequence[str], env: Mapping[str, str] | None = None) -> subprocess.Popen[bytes]:
        """Start a foreground daemon whose output goes to log/<name>.out; `stop()` ends it by PID."""
        if name in self._procs and self._procs[name].poll() is None:
            raise SlurmStartError(f"{name} is already running (pid {self._procs[name].pid})")
        out = (self.root / "log" / f"{name}.out").open("ab")
        proc = subprocess.Popen(
            list(argv),
            env=dict(env or self.env),
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            preexec_fn=_die_with_parent,  # a daemon must not outlive the tests
        )
        out.close()
        self._procs[name] = proc
        return proc

    def _wait(self, ready: Any, name: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            proc = self._procs.get(name)
            if proc is not None and proc.poll() is not None:
                raise SlurmStartError(f"{name} exited with {proc.returncode}\n{self.logs()}")
            if ready():
                return
            time.sleep(0.1)
        raise SlurmStartError(f"{name} not ready after {timeout:.0f}s\n{self.logs()}")

    def stop(self, remove: bool = True) -> None:
        """Stop every daemon this harness started (slurmd, slurmctld, munged last), by PID, then kill whatever
        else runs with its `SLURM_CONF` (job steps the slurmds left behind, their `srun`s)."""
        for name in sorted(self._procs, key=lambda n: n == "munged"):
            proc = self._procs[name]
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=5)
        self._procs.clear()
        conf = str(self.conf_path)
        kill_processes(lambda env: env.get("SLURM_CONF") == conf)
        if remove:
            shutil.rmtree(self.root, ignore_errors=True)
            self.ports.release()

    def __enter__(self) -> SlurmHarness:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop(remove=exc[0] is None)

    @property
    def running(self) -> bool:
        return any(p.poll() is None for p in self._procs.values())

    def logs(self, lines: int = 40) -> str:
        """Tail of every log file, for failure messages."""
        out = []
        for path in [*sorted((self.root / "log").glob("*")), self.root / "munge" / "munged.log"]:
            if path.is_file():
                tail = path.read_text(errors="replace").splitlines()[-lines:]
                out.append(f"--- {path.name} ---\n" + "\n".join(tail))
        return "\n".join(out)

    # ------------------------------------------------------------------ clients

    def run(self, *args: str, check: bool = False, timeout: float = 30.0) -> subprocess.CompletedProcess[str]:
        """Run a Slurm client (sinfo, squeue, scontrol, sbatch ...) against this cluster."""
        argv = [binary(args[0]), *args[1:]]
        proc = subprocess.run(argv, env=self.env, capture_output=True, text=True, timeout=timeout)
        if check and proc.returncode != 0:
            raise subprocess.CalledProcessError(proc.returncode, args, proc.stdout, proc.stderr)
        return proc

    def sinfo_json(self) -> dict[str, Any]:
        """Every node, as 22.05's `sinfo --json` shows it whatever the release (`as_2205`): on 23.02 and later the
        per-node document is `scontrol show nodes --json` (`fleet.slurm.nodes_json`, the daemon's reader)."""
        from fleet.slurm.nodes_json import NodeSource

        document = NodeSource().read(lambda argv: self.run(*argv, check=True).stdout)
        return {**document, "nodes": [as_2205(n, "node") for n in document["nodes"]]}

    def squeue_json(self) -> dict[str, Any]:
        """Every job, as 22.05's `squeue --json` shows it whatever the release (`as_2205`)."""
        document = json.loads(self.run("squeue", "--json", check=True).stdout)
        return {**document, "jobs": [as_2205(j, "job") for j in document["jobs"]]}

    def _node_state(self, node: str) -> str:
        return self.run("sinfo", "-h", "-n", node, "-o", "%t").stdout.strip()

    def power_calls(self) -> list[str]:
        """Lines the default Resume/Suspend hooks logged: `<time> resume <hostlist>`."""
        return self.power_log.read_text().splitlines() if self.power_log.exists() else []


def as_2205(item: dict[str, Any], kind: str) -> dict[str, Any]:
    """A node or job of Slurm's JSON with the fields the tests read as 22.05 prints them, whatever the release
    (the daemon reads both shapes in `autoscaler.slurm.readers`; the tests assert one).  From 23.02 on numbers
    come wrapped (``{"set": true, "infinite": false, "number": 5}``), a node's `state` is a list (base state, then
    its flags: 22.05's lower-case `state` and upper-case `state_flags`), a node's features are a list (22.05's one
    comma-separated string), and a job's `job_state` is a list (read as 22.05 named it: `readers.job_state`)."""
    from autoscaler.slurm.readers import job_state

    out = {k: _unwrapped(v) for k, v in item.items()}
    if kind == "node" and isinstance(out.get("state"), list):
        base, *flags = [str(s) for s in out["state"]] or ["unknown"]
        out["state"], out["state_flags"] = base.lower(), flags
    for key in ("features", "active_features"):
        if kind == "node" and isinstance(out.get(key), list):
            out[key] = ",".join(map(str, out[key]))
    if kind == "job" and isinstance(out.get("job_state"), list):
        out["job_state"] = job_state(out["job_state"])
    return out


def _unwrapped(value: Any) -> Any:
    """23.02+'s ``{"set", "infinite", "number"}`` as 22.05's plain number (None when not set); anything else as is."""
    if isinstance(value, dict) and {"set", "number"} <= value.keys():
        return value["number"] if value["set"] and not value.get("infinite") else None
    return value


@contextlib.contextmanager
def harnesses() -> Iterator[Callable[..., SlurmHarness]]:
    """`make(**SlurmHarness kwargs)` -> a new, not yet started harness; every one made is stopped on exit."""
    made: list[SlurmHarness] = []

    def make(**kwargs: Any) -> SlurmHarness:
        harness = SlurmHarness(**kwargs)
        made.append(harness)
        return harness

    try:
        yield make
    finally:
        for harness in made:
            harness.stop()
