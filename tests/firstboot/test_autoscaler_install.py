"""First boot of a controller that installs the autoscaler, as every stack's controller does: the script's own
`autoscaler_install` step, run, not read.

The test stack with `slurm.autoscaler.source` and `ref` set: this checkout's repository (served by `git daemon`)
at its HEAD commit, and the wheels of that commit's `deploy/controller-requirements.txt` (downloaded once from
PyPI, served as pip's only source: tests/firstboot/mirror.py).  Its controller boots alone, on a cloud of its own,
and its script clones and checks the pinned commit, builds the venv from the hash-pinned lock (the daemon's
dependencies alone: deploy/controller.in), puts the checkout on its path, creates the state
store as SlurmUser and starts `gpu-fleet-autoscaler` from the unit the checkout ships.  Until the fortieth round no
test ran this step: the other first-boot controllers stop at it (no source, nothing baked).

Not covered: GitHub and PyPI themselves, the unit's sandboxing other than MemoryDenyWriteExecute, SystemCallFilter
(whose native-architecture filter is what SystemCallArchitectures=native asks, not tested apart),
RestrictAddressFamilies, the file-system keys (ProtectSystem, ProtectHome,
PrivateTmp, ReadWritePaths, StateDirectory, PrivateDevices, and the mounts of ProtectKernelTunables,
ProtectKernelModules, ProtectKernelLogs, ProtectControlGroups), NoNewPrivileges, CapabilityBoundingSet and the
seccomp restrictions (RestrictNamespaces, RestrictSUIDSGID, RestrictRealtime, ProtectClock, ProtectHostname,
LockPersonality, and the system calls ProtectKernelModules and ProtectKernelLogs deny): the first-boot `systemctl`
applies those alone, the filters on the Ubuntu image only;
`systemd-analyze` reads the others (tests/firstboot/units.py), and
any Compute call (nothing routes off the test network: the daemon's cloud calls fail, and it says so)."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from components.gcp.startup import (
    AUTOSCALER_HOME,
    AUTOSCALER_LOCK,
    AUTOSCALER_STATE_DIR,
    STATE_DISK_DEVICE,
    VENV_LOCK_SUM,
)
from tests.firstboot import os_image
from tests.firstboot.cloud import FirstBootCloud
from tests.firstboot.conftest import CLUSTER, STACK, Booted, held_job, must_run, slurm_variant, synthesized
from tests.firstboot.mirror import REPO_URL, Mirror, MirrorUnavailable, head_commit, wheelhouse
from tests.firstboot.stubs import stub_image
from tests.firstboot.units import exposure, require_systemd_analyze, unit_complaints, written_units
from tests.firstboot.vm import Vm
from tests.harness.slurm import poll_until

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
VENV = f"{AUTOSCALER_HOME}/.venv/bin"
CONFIG = "/etc/gpu-fleet/autoscaler.yaml"


def _lock_at(sha: str, directory: Path) -> Path:
    """The lock as the pinned commit has it (what the controller installs), not as the working tree has it."""
    shown = subprocess.run(["git", "-C", str(REPO), "show", f"{sha}:{AUTOSCALER_LOCK}"], capture_output=True,
                           text=True, check=True)  # fmt: skip
    path = directory / "controller-requirements.txt"
    path.write_text(shown.stdout)
    return path


@pytest.fixture(scope="module")
def installed(root_image: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Booted, str, str]]:
    """(the booted cloud, the controller's name, the pinned commit)."""
    try:
        sha = head_commit(REPO)
        wheels = wheelhouse(root_image, _lock_at(sha, tmp_path_factory.mktemp("lock")))
    except MirrorUnavailable as exc:
        must_run(str(exc), "the autoscaler's first boot")
    decl = synthesized(slurm_variant(STACK, autoscaler={"source": REPO_URL, "ref": sha}))
    name = decl.controller(CLUSTER).name
    work = tmp_path_factory.mktemp("autoscaler-boot")
    mirror = Mirror(REPO, wheels, work)
    with FirstBootCloud(decl, root_image, work, **stub_image(), prefix="fba", mirror=mirror) as cloud:
        booted = Booted(cloud, decl)
        cloud.create(name)
        booted.results[name] = cloud.vms[name].startup(timeout=900)
        yield booted, name, sha


def test_the_controller_boot_completes_with_the_pinned_autoscaler_running(installed) -> None:
    """The script runs to its end: the checkout is at the pinned commit, every package the lock installs has
    what it requires (`pip check`: the lock is complete for --no-deps), and the daemon runs as SlurmUser from the
    checkout's unit."""
    booted, name, sha = installed
    result = booted.results[name]
    assert result.returncode == 0 and "boot complete" in result.stderr, booted.explain(name)
    ctl = booted.vm(name)
    head = ctl.run(["git", "-C", AUTOSCALER_HOME, "rev-parse", "HEAD"], check=True).stdout.strip()
    assert head == sha
    check = ctl.run([f"{VENV}/pip", "check"])
    assert check.returncode == 0, check.stdout + check.stderr
    assert ctl.run(["systemctl", "is-active", "gpu-fleet-autoscaler"]).returncode == 0, booted.explain(name)

    def daemon_processes() -> list[list[str]]:
        lines = ctl.run(["ps", "-o", "user=,pid=,args=", "-e"], check=True).stdout.splitlines()
        return [line.split()[:2] for line in lines if "fleet.cli.main autoscaler run" in line]

    # the shim's wrappers log each restriction as they apply it, then exec the daemon: the unit is active from the
    # first wrapper on, and under load the seccomp filters (systemd-analyze's groups) can take seconds, so the log
    # is read once the daemon itself runs (read at once, it lacked the SystemCallFilter line one CI run in ~20)
    assert poll_until(daemon_processes, 120, 0.5), booted.explain(name)
    # under the unit's MemoryDenyWriteExecute=yes, which the shim applies (the kernel's PR_SET_MDWE)
    # and its SystemCallFilter=@system-service (seccomp): the daemon and the Slurm commands it runs live within it
    unit_log = ctl.read("/var/log/fb-units/gpu-fleet-autoscaler.log")
    assert "MemoryDenyWriteExecute=yes (PR_SET_MDWE)" in unit_log
    # and its ProtectSystem=strict (all read-only but /var/lib/gpu-fleet), ProtectHome and PrivateTmp
    assert "file-system sandbox in a mount namespace of its own" in unit_log
    assert "RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6 (seccomp on socket())" in unit_log  # AF_NETLINK refused
    if os_image.chosen().name == os_image.UBUNTU.name:  # Debian 12's stand-in has no systemd-analyze to expand it
        assert re.search(r"SystemCallFilter=@system-service \(seccomp: \d{3} system calls", unit_log), unit_log
        restricted = re.search(r"systemctl: (Restrict\S+=yes .*) \(seccomp: \d+ rules, EPERM\)", unit_log)
        assert restricted and restricted.group(1).split() == [
            "RestrictNamespaces=yes", "RestrictSUIDSGID=yes", "RestrictRealtime=yes", "ProtectClock=yes",
            "ProtectHostname=yes", "ProtectKernelModules=yes", "ProtectKernelLogs=yes", "LockPersonality=yes",
        ], unit_log  # fmt: skip
    # and PrivateDevices, ProtectKernelTunables / Modules / Logs, ProtectControlGroups (the same mount namespace)
    assert (
        "mount -n --move /run/fb-units/gpu-fleet-autoscaler.dev /dev" in unit_log and "/proc/sysrq-trigger" in unit_log
    )
    assert "--no-new-privs --bounding-set=-all (setpriv)" in unit_log  # NoNewPrivileges=yes, CapabilityBoundingSet=
    daemon = daemon_processes()
    assert [user for user, _ in daemon] == ["slurm"], daemon
    status = dict(
        line.split(":\t", 1) for line in ctl.read(f"/proc/{daemon[0][1]}/status").splitlines() if ":\t" in line
    )
    assert status["CapBnd"] == "0000000000000000" and status["NoNewPrivs"] == "1", status
    owner = ctl.run(["stat", "-c", "%U %a", AUTOSCALER_STATE_DIR], check=True).stdout.split()
    assert owner == ["slurm", "750"], owner


def test_the_controllers_venv_holds_the_daemons_dependencies_and_runs_the_checkout(installed) -> None:
    """The venv is the lock and nothing else: no Pulumi, no matplotlib, no installed gpu-fleet (the checkout is on
    its path); it records the lock it was built from; `fleet` there runs the pinned checkout, and a command that
    needs the stacks' tooling says which package it lacks."""
    booted, name, _ = installed
    ctl = booted.vm(name)
    listed = json.loads(ctl.run([f"{VENV}/pip", "list", "--format", "json"], check=True).stdout)
    names = {p["name"].lower() for p in listed}
    assert {"apscheduler", "google-cloud-compute", "loguru"} <= names
    assert not names & {"pulumi", "pulumi-gcp", "matplotlib", "jsonschema", "gpu-fleet"}, sorted(names)
    where = ctl.sh(f"cd / && {VENV}/python -c 'import fleet; print(fleet.__file__)'", check=True)
    assert where.stdout.strip() == f"{AUTOSCALER_HOME}/fleet/__init__.py"
    lock_sum = ctl.run(["sha256sum", f"{AUTOSCALER_HOME}/{AUTOSCALER_LOCK}"], check=True).stdout.split()[0]
    assert ctl.read(f"{AUTOSCALER_HOME}/{VENV_LOCK_SUM}").strip() == lock_sum
    synth = ctl.sh(f"cd {AUTOSCALER_HOME} && {VENV}/fleet synth --stack gcp-l4-dev")
    assert synth.returncode == 1 and "needs the Python package 'pulumi'" in synth.stderr, synth.stderr


def test_a_power_up_slurmctld_asks_for_reaches_the_daemons_store_through_the_installed_hook(installed) -> None:
    """slurm.conf's ResumeProgram is the checkout's hook, run by slurmctld as SlurmUser: a node slurmctld powers up
    becomes a request in the store the running daemon reads (`fleet autoscaler status`, as SlurmUser).  The
    daemon's own tick then fails at its first Compute call, minting the autoscaler account's token (nothing routes
    off the test network), and says so."""
    booted, name, _ = installed
    ctl = booted.vm(name)
    node = booted.declared.nodes(CLUSTER, "mega")[0].name
    ctl.run(["scontrol", "update", f"nodename={node}", "state=power_up"], check=True)
    status = ["runuser", "-u", "slurm", "--", f"{VENV}/fleet", "autoscaler", "status", "--config", CONFIG]

    def queued() -> bool:
        return node in ctl.run(status).stdout

    assert poll_until(queued, 60, 1), booted.explain(name)
    assert isinstance(json.loads(ctl.run(status, check=True).stdout), dict)
    log = ctl.read("/var/log/fb-units/gpu-fleet-autoscaler.log")
    # its Compute calls act as the autoscaler's own account, impersonated with the controller's metadata token
    account = f"serviceAccounts/{CLUSTER}-autoscaler@"
    assert "tick failed" in log and "iamcredentials.googleapis.com" in log and account in log, log[-3000:]


def test_the_topology_timers_service_moves_a_placed_node_under_its_block_in_slurmctlds_tree(installed) -> None:
    """The controller's `gpu-fleet-topology.service`, as the script wrote it and from the venv the script built, run
    once: a node that published its physical host (as a GPU node's script does) moves under its block's switch in
    the tree slurmctld 23.11 then reports (`scontrol reconfigure`).  The timer's own schedule is not exercised."""
    booted, name, _ = installed
    ctl = booted.vm(name)
    node = booted.declared.nodes(CLUSTER, "mega")[0].name
    pool = node.rsplit("-", 1)[0]
    ctl.run(["scontrol", "update", f"NodeName={node}", "Comment=physical_host=/c1/b7/h2"], check=True)
    ctl.run(["systemctl", "start", "gpu-fleet-topology.service"], check=True)

    def moved() -> bool:
        return f"SwitchName=b-{pool}-c1-b7 " in ctl.run(["scontrol", "show", "topology"]).stdout

    assert poll_until(moved, 60, 1), ctl.read("/var/log/fb-units/gpu-fleet-topology.log")[-2000:]
    assert f"Nodes={node}" in ctl.read("/etc/slurm/topology.conf")


def test_the_daemons_unit_is_as_systemd_reads_it_and_keeps_its_hardening(installed) -> None:
    """The unit the checkout ships, as the controller's systemd reads it: no key it ignores (a misspelt hardening
    line would simply not apply), and `systemd-analyze security`'s exposure stays "OK" (1.7 when measured; it
    was never measured before the forty-first round): a hardening line dropped or misspelt raises it."""
    require_systemd_analyze()
    booted, name, _ = installed
    ctl = booted.vm(name)
    assert not unit_complaints(ctl), unit_complaints(ctl)
    unit = "/etc/systemd/system/gpu-fleet-autoscaler.service"
    assert {unit, "/etc/systemd/system/gpu-fleet-topology.timer"} <= set(written_units(ctl)[0])
    assert exposure(ctl, unit) <= 2.0


def _nonblank(text: str) -> bool:
    return bool(text.strip())


def _install_probe(ctl: Vm, path: str, text: str) -> None:
    """An executable `path` on the VM holding `text`."""
    ctl.path(path).write_text(text)
    ctl.path(path).chmod(0o755)


def _run_probe_unit(ctl: Vm, unit: str, exec_start: str, keys: list[str], out: str, done: Callable[[str], bool]) -> str:
    """`unit`.service with `exec_start` and the unit `keys` (lines of [Service]), started by the VM's `systemctl`;
    the text of `out` once `done` says it is complete (30 s), else a failure showing the unit's log."""
    ctl.path(f"/etc/systemd/system/{unit}.service").write_text(
        "[Service]\n" + f"ExecStart={exec_start}\n" + "".join(f"{key}\n" for key in keys)
    )
    ctl.run(["systemctl", "start", unit], check=True)
    finished = poll_until(lambda: done(ctl.run(["cat", out]).stdout), 30, 0.5)
    assert finished, ctl.read(f"/var/log/fb-units/{unit}.log")
    return ctl.read(out)


def test_the_shim_applies_memory_deny_write_execute_as_the_kernel_refuses_it(installed) -> None:
    """What makes the daemon's run under its unit's MemoryDenyWriteExecute=yes mean something: a unit with the key,
    started by the same `systemctl`, cannot map memory writable and executable; one without it can."""
    booted, name, _ = installed
    ctl = booted.vm(name)
    _install_probe(ctl, "/usr/local/bin/fb-wx-probe", (
        "#!/usr/bin/python3\nimport mmap\n"
        "try:\n    mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)\n    print('mapped')\n"
        "except PermissionError:\n    print('refused')\n"
    ))  # fmt: skip
    for key, want in (("yes", "refused"), ("no", "mapped")):
        out = f"/run/fb-wx-{key}.out"
        said = _run_probe_unit(ctl, f"fb-wx-{key}", f'/bin/sh -c "/usr/local/bin/fb-wx-probe > {out}"',
                               [f"MemoryDenyWriteExecute={key}"], out, _nonblank)  # fmt: skip
        assert said.strip() == want, key


def test_the_shim_applies_system_call_filter_as_the_kernel_enforces_it(installed) -> None:
    """What makes the daemon's run under its unit's SystemCallFilter=@system-service mean something: a unit with
    that filter, started by the same `systemctl`, is killed (SIGSYS) at a system call outside it (`acct`, in
    @privileged); one without the filter gets the kernel's own refusal (EPERM: not root) and goes on."""
    require_systemd_analyze()
    booted, name, _ = installed
    ctl = booted.vm(name)
    _install_probe(ctl, "/usr/local/bin/fb-acct-probe", (
        "#!/usr/bin/python3\nimport ctypes, sys\nprint('started', flush=True)\n"
        "ctypes.CDLL(None, use_errno=True).acct(None)\nprint('returned', flush=True)\n"
    ))  # fmt: skip
    _install_probe(ctl, "/usr/local/bin/fb-acct-run",
                   '#!/bin/sh\n/usr/local/bin/fb-acct-probe > "/tmp/$1.out"; echo $? > "/tmp/$1.rc"\n')  # fmt: skip
    for filtered, want in ((True, ["started"]), (False, ["started", "returned"])):
        unit = f"fb-acct-{'filtered' if filtered else 'open'}"
        keys = ["User=nobody", "Group=nogroup", *(["SystemCallFilter=@system-service"] if filtered else [])]
        rc = _run_probe_unit(ctl, unit, f"/usr/local/bin/fb-acct-run {unit}", keys, f"/tmp/{unit}.rc", _nonblank)
        assert ctl.read(f"/tmp/{unit}.out").split() == want, unit
        assert rc.strip() == ("159" if filtered else "0"), unit  # 128 + SIGSYS (31)


def test_the_shim_applies_restrict_address_families_as_the_kernel_enforces_it(installed) -> None:
    """What makes the daemon's run under its unit's RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6 mean something:
    a unit with that key, started by the same `systemctl`, gets EAFNOSUPPORT (97) for a netlink socket and still
    makes an IPv4 one; the same unit without the key makes both."""
    booted, name, _ = installed
    ctl = booted.vm(name)
    _install_probe(ctl, "/usr/local/bin/fb-af-probe", (
        "#!/usr/bin/python3\nimport socket\n"
        "for family in (socket.AF_NETLINK, socket.AF_INET):\n"
        "    try:\n        socket.socket(family, socket.SOCK_DGRAM).close()\n        print(family.name, 'made')\n"
        "    except OSError as exc:\n        print(family.name, 'refused', exc.errno)\n"
    ))  # fmt: skip
    for restricted, want in (
        (True, ["AF_NETLINK refused 97", "AF_INET made"]),
        (False, ["AF_NETLINK made", "AF_INET made"]),
    ):
        unit = f"fb-af-{'restricted' if restricted else 'open'}"
        keys = ["RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6"] if restricted else []
        out = f"/run/{unit}.out"
        said = _run_probe_unit(ctl, unit, f'/bin/sh -c "/usr/local/bin/fb-af-probe > {out}"', keys, out,
                               lambda text: "AF_INET " in text)  # fmt: skip
        assert said.splitlines() == want, unit


def test_the_shim_applies_the_file_system_keys_as_systemd_does(installed) -> None:
    """What makes the daemon's run under its unit's ProtectSystem=strict, ReadWritePaths=, ProtectHome=yes and
    PrivateTmp=yes mean something: a unit with those keys, started by the same `systemctl`, cannot write /etc or
    /var/lib outside its path (read-only file system), can write its path, finds /root empty (root still lists it,
    as under systemd's inaccessible mount), and writes /tmp in a /tmp of its own; the same unit without the keys
    writes /etc and sees /root's files."""
    booted, name, _ = installed
    ctl = booted.vm(name)
    ctl.run(["mkdir", "-p", "/var/lib/fb-probe", "/run/fb-probe"], check=True)
    ctl.run(["touch", "/root/fb-marker"], check=True)
    _install_probe(ctl, "/usr/local/bin/fb-fs-probe", (
        "#!/bin/sh\nfor p in /etc/fb-probe /var/lib/fb-probe-other /var/lib/fb-probe/ok /tmp/fb-probe; do\n"
        '  if touch "$p" 2>/dev/null; then echo "$p written"; else echo "$p refused"; fi\ndone\n'
        'echo "/root holds $(ls -A /root 2>/dev/null | wc -l)"\n'
    ))  # fmt: skip
    keys = ["ProtectSystem=strict", "ReadWritePaths=/var/lib/fb-probe /run/fb-probe", "ProtectHome=yes",
            "PrivateTmp=yes"]  # fmt: skip
    for sandboxed in (True, False):
        unit = f"fb-fs-{'sandboxed' if sandboxed else 'open'}"
        out = f"/run/fb-probe/{unit}.out"
        said = _run_probe_unit(ctl, unit, f'/bin/sh -c "/usr/local/bin/fb-fs-probe > {out}"',
                               keys if sandboxed else [], out, lambda text: "/root" in text).splitlines()  # fmt: skip
        if sandboxed:
            assert said == ["/etc/fb-probe refused", "/var/lib/fb-probe-other refused", "/var/lib/fb-probe/ok written",
                            "/tmp/fb-probe written", "/root holds 0"], said  # fmt: skip
            assert not ctl.path("/tmp/fb-probe").exists()  # its own /tmp
        else:
            assert said[0] == "/etc/fb-probe written" and said[-1] != "/root holds 0", said
        ctl.run(["rm", "-f", "/etc/fb-probe", "/var/lib/fb-probe-other", "/tmp/fb-probe"], check=True)


#: what a unit sees of devices, kernel tunables, modules, kernel logs and its own privileges (one "key value" a line)
KERNEL_PROBE = r"""#!/bin/sh
echo "disks $(ls /dev | grep -c '^fb-')"
echo "null $(head -c0 /dev/null && echo ok)"
ttl=$(cat /proc/sys/net/ipv4/ip_default_ttl)
if (echo "$ttl" > /proc/sys/net/ipv4/ip_default_ttl) 2>/dev/null; then echo "sysctl written"
else echo "sysctl refused"; fi
echo "sys $(awk '$5 == "/sys" {split($6, o, ","); m = o[1]} END {print m}' /proc/self/mountinfo)"
echo "modules $(ls -A /usr/lib/modules 2>/dev/null | wc -l)"
echo "kmsg $(stat -c %a /proc/kmsg)"
f=$(mktemp -u /run/fb-kprobe/umask.XXXXXX); : > "$f"; echo "file $(stat -c %a "$f")"; rm -f "$f"
grep -E '^(CapBnd|NoNewPrivs):' /proc/self/status | tr -s '\t' ' '
"""


def test_the_shim_applies_the_device_kernel_and_privilege_keys_as_systemd_does(installed) -> None:
    """What makes the daemon's run under its unit's PrivateDevices=, ProtectKernelTunables=, ProtectControlGroups=,
    ProtectKernelModules=, ProtectKernelLogs=, NoNewPrivileges=, an empty CapabilityBoundingSet= and UMask= mean
    something: a unit with those keys, run as root by the same `systemctl`, sees a /dev of the basic nodes only (not
    the VM's disks), cannot write a sysctl (a per-network-namespace one: the VM's own), finds /sys read-only, no
    kernel modules and /proc/kmsg inaccessible, creates files 0640, and holds no capability and no_new_privs;
    without the keys it writes the sysctl, sees the disks and the modules, creates files 0644 and keeps root's
    capabilities."""
    booted, name, _ = installed
    ctl = booted.vm(name)
    ctl.run(["mkdir", "-p", "/usr/lib/modules/fb-probe", "/run/fb-kprobe"], check=True)
    _install_probe(ctl, "/usr/local/bin/fb-kernel-probe", KERNEL_PROBE)
    keys = ["PrivateDevices=yes", "ProtectKernelTunables=yes", "ProtectControlGroups=yes", "ProtectKernelModules=yes",
            "ProtectKernelLogs=yes", "NoNewPrivileges=yes", "CapabilityBoundingSet=", "UMask=0027"]  # fmt: skip
    said = {}
    for sandboxed in (True, False):
        unit = f"fb-kernel-{'sandboxed' if sandboxed else 'open'}"
        out = f"/run/fb-kprobe/{unit}.out"
        text = _run_probe_unit(ctl, unit, f'/bin/sh -c "/usr/local/bin/fb-kernel-probe > {out} 2>&1"',
                               keys if sandboxed else [], out, lambda t: "NoNewPrivs" in t)  # fmt: skip
        said[sandboxed] = dict(line.split(" ", 1) for line in text.splitlines())
    ctl.run(["rmdir", "/usr/lib/modules/fb-probe"], check=True)
    want = {"disks": "0", "null": "ok", "sysctl": "refused", "sys": "ro", "modules": "0", "kmsg": "0", "file": "640",
            "CapBnd:": "0000000000000000", "NoNewPrivs:": "1"}  # fmt: skip
    assert said[True] == want, said[True]
    assert int(said[False]["disks"]) > 0 and said[False]["sysctl"] == "written" and said[False]["sys"] == "rw"
    assert said[False]["modules"] == "1" and said[False]["CapBnd:"] != "0000000000000000", said[False]
    assert said[False]["NoNewPrivs:"] == "0" and said[False]["file"] == "644"  # systemd's default UMask, 0022


#: system calls the restriction keys answer EPERM, each made harmlessly (as root): a UTS namespace of the probe's
#: own, a set-user-ID bit on a scratch file, SCHED_FIFO for the probe itself, a read-only adjtimex, the VM's own
#: hostname set again
RESTRICTION_PROBE = r"""#!/usr/bin/python3
import ctypes, socket
libc = ctypes.CDLL(None, use_errno=True)
def report(name, rc):
    print(name, "ok" if rc >= 0 else "errno %d" % ctypes.get_errno(), flush=True)
class Param(ctypes.Structure):
    _fields_ = [("priority", ctypes.c_int)]
name = socket.gethostname().encode()
report("unshare", libc.unshare(0x04000000))  # CLONE_NEWUTS
open("/run/fb-rprobe/suid", "w").close()
report("chmod", libc.chmod(b"/run/fb-rprobe/suid", 0o4755))
report("sched_setscheduler", libc.sched_setscheduler(0, 1, ctypes.byref(Param(1))))  # SCHED_FIFO
report("adjtimex", libc.adjtimex(ctypes.create_string_buffer(256)))  # modes 0: a read
report("sethostname", libc.sethostname(name, len(name)))
report("personality", libc.personality(0x0008))  # PER_LINUX32 for the probe itself, then back
libc.personality(0)
"""


def test_the_shim_applies_the_restriction_keys_as_systemd_does(installed) -> None:
    """What makes the daemon's run under its unit's RestrictNamespaces=, RestrictSUIDSGID=, RestrictRealtime=,
    ProtectClock=, ProtectHostname= and LockPersonality= mean something: a unit with those keys, run as root by the
    same `systemctl`, gets EPERM for a new namespace, a set-user-ID bit, a real-time policy, the clock's adjtimex,
    sethostname and another personality; the same unit without them does each."""
    require_systemd_analyze()  # ProtectClock's @clock group is expanded by it
    booted, name, _ = installed
    ctl = booted.vm(name)
    ctl.run(["mkdir", "-p", "/run/fb-rprobe"], check=True)
    _install_probe(ctl, "/usr/local/bin/fb-restrict-probe", RESTRICTION_PROBE)
    keys = ["RestrictNamespaces=yes", "RestrictSUIDSGID=yes", "RestrictRealtime=yes", "ProtectClock=yes",
            "ProtectHostname=yes", "LockPersonality=yes"]  # fmt: skip
    calls = ["unshare", "chmod", "sched_setscheduler", "adjtimex", "sethostname", "personality"]
    for restricted in (True, False):
        unit = f"fb-restrict-{'on' if restricted else 'off'}"
        out = f"/run/fb-rprobe/{unit}.out"
        text = _run_probe_unit(ctl, unit, f'/bin/sh -c "/usr/local/bin/fb-restrict-probe > {out} 2>&1"',
                               keys if restricted else [], out, lambda t: "personality" in t)  # fmt: skip
        said = dict(line.split(" ", 1) for line in text.splitlines())
        assert said == {call: "errno 1" if restricted else "ok" for call in calls}, (unit, said)


def restore_runbook() -> list[str]:
    """The commands docs/stacks.md's restore runbook runs on the controller (between its "on the controller" comment
    and the detach), as written there but for `sudo` (the test runs them as root)."""
    text = (REPO / "docs/stacks.md").read_text()
    block = text[text.index("*Restoring from a snapshot*") :].split("```sh\n", 1)[1].split("```", 1)[0]
    lines = block.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("# on the controller"))
    end = next(i for i, line in enumerate(lines) if "detach-disk" in line)
    return [line.replace("sudo ", "") for line in lines[start + 1 : end]]


def test_the_state_disk_restores_from_a_snapshot_by_the_documented_runbook(installed, tmp_path: Path) -> None:
    """docs/stacks.md's restore, its on-controller commands run as written: a copy of the live state disk taken after
    one held job and one accounting change (a snapshot: nothing stopped, the page cache flushed), then a second job
    and change, then the copy attached as `state-restore` and the runbook run.  The controller comes back with the
    queue, the accounts and the autoscaler's store of the snapshot: the first job and account, not the second,
    the next job ID the snapshot's counter, and the daemon running again."""
    booted, name, _ = installed
    ctl = booted.vm(name)
    steps = restore_runbook()
    assert steps[0].startswith("systemctl stop gpu-fleet-autoscaler") and "rsync" in "\n".join(steps)

    def saved_at() -> str:
        return ctl.run(["stat", "-c", "%y", "/var/spool/slurmctld/job_state"]).stdout  # "": not saved yet

    state = saved_at()
    kept = held_job(ctl)
    ctl.run(["sacctmgr", "-i", "add", "account", "before-snapshot", f"cluster={CLUSTER}"], check=True)
    assert poll_until(lambda: saved_at() != state, 30, 0.5), "slurmctld did not save the job state"
    ctl.run(["sync"], check=True)
    disk = booted.cloud.persistent_disk(booted.declared.vms[name].disks[STATE_DISK_DEVICE])
    snapshot = tmp_path / "snapshot.img"
    subprocess.run(["cp", "--sparse=always", str(disk), str(snapshot)], check=True)
    lost = held_job(ctl)
    ctl.run(["sacctmgr", "-i", "add", "account", "after-snapshot", f"cluster={CLUSTER}"], check=True)

    ctl.attach_live("state-restore", snapshot)
    run = ctl.sh("set -e\n" + "\n".join(steps), timeout=300)
    ctl.detach_live("state-restore")
    assert run.returncode == 0, f"{run.stdout}{run.stderr}\n{booted.explain(name)}"

    assert poll_until(lambda: "is UP" in ctl.run(["scontrol", "ping"]).stdout, 60, 1), booted.explain(name)
    queue = ctl.run(["squeue", "-h", "-o", "%i"], check=True).stdout.split()
    assert str(kept) in queue and str(lost) not in queue, queue
    accounts = ctl.run(["sacctmgr", "-n", "-P", "show", "account", "format=account"], check=True).stdout.split()
    assert "before-snapshot" in accounts and "after-snapshot" not in accounts, accounts
    assert held_job(ctl) == lost  # the counter of the snapshot: the ID the lost job had, which nothing remembers
    assert ctl.run(["systemctl", "is-active", "gpu-fleet-autoscaler"]).returncode == 0, booted.explain(name)
    status = ["runuser", "-u", "slurm", "--", f"{VENV}/fleet", "autoscaler", "status", "--config", CONFIG]
    assert isinstance(json.loads(ctl.run(status, check=True).stdout), dict)
