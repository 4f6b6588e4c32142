"""One simulated VM: an overlay of the baked root, its own network, mount, UTS, IPC and PID namespaces.

    vm = Vm("c-controller", root=baked, workdir=tmp / "ctl", netns="fb1-0")
    vm.boot()                         # PID 1 of a new PID namespace, chrooted into the overlay
    vm.run(["hostname"])              # nsenter into all its namespaces and its root
    vm.startup()                      # what the guest agent does: fetch startup-script from metadata, run it
    vm.kill()                         # PID 1 dies -> the kernel kills every process of the VM

The overlay (lower: the cached root, upper: `workdir/upper`) and /proc, /dev, /run are mounted inside the
VM's own mount namespace, so they vanish with it: nothing stays mounted on this machine whatever the test
did.  `upper` stays readable from the host after the VM is gone (what the VM wrote to its disk).

What makes it a GCE guest for the scripts (written into `upper` before boot, as an image would carry):
- /etc/hosts: `metadata.google.internal` -> 169.254.169.254 (GCE images have this line), plus the
  `dns` entries the test passes (GCE's internal DNS for the other VMs); no resolver otherwise.
- the Google API hostnames the fakes answer for, and the fakes' test CA appended to the CA bundle;
- /usr/local/bin/systemctl: the documented shim in shim/systemctl (no systemd in here);
- optional stubs (GPU tools) in /usr/local/bin, which is first on the default PATH.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import shlex
import shutil
import signal
import subprocess
import time
from pathlib import Path

SHIM = Path(__file__).with_name("shim")
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
GUEST_AGENT = (
    "curl -sf -H 'Metadata-Flavor: Google' "
    "http://metadata.google.internal/computeMetadata/v1/instance/attributes/startup-script -o /run/startup-script"
    " && exec bash /run/startup-script"
)

_INIT = r"""
set -e
R={merged}
mount -t overlay overlay -o lowerdir={lower},upperdir={upper},workdir={work} $R
mount -t proc proc $R/proc
mount -t sysfs sysfs $R/sys
# cgroup v1 controllers as a VM's kernel mounts them (slurmd looks for them even without cgroup plugins)
mount -t tmpfs -o mode=0755,size=1m cgroup $R/sys/fs/cgroup
for c in cpuset memory devices freezer none,name=systemd; do
  d=${{c#none,name=}}; mkdir $R/sys/fs/cgroup/$d; mount -t cgroup -o $c,ro cgroup $R/sys/fs/cgroup/$d
done
mount -t tmpfs -o mode=0755,size=8m dev $R/dev
for d in null:1:3 zero:1:5 full:1:7 random:1:8 urandom:1:9 tty:5:0; do
  IFS=: read -r n a b <<< "$d"; mknod -m 0666 $R/dev/$n c $a $b
done
mkdir -p $R/dev/pts $R/dev/shm; mount -t devpts -o newinstance,ptmxmode=0666 devpts $R/dev/pts
ln -s pts/ptmx $R/dev/ptmx; ln -s /proc/self/fd $R/dev/fd
{disks}
mount -t tmpfs -o mode=0755 run $R/run
# systemd-tmpfiles-setup at boot: the `d` directories the packages declare under /run (Debian's MariaDB finds its
# /run/mysqld there; Ubuntu's unit makes it itself)
cat $R/usr/lib/tmpfiles.d/*.conf $R/etc/tmpfiles.d/*.conf 2>/dev/null | while read -r t p m u g rest; do
  case "$t:$p" in d:/run/*) ;; *) continue ;; esac
  case "$p$m$u$g" in *%*) continue ;; esac
  [ "$m" != - ] || m=0755; [ "$u" != - ] || u=root; [ "$g" != - ] || g=root
  chroot $R install -d -m "$m" -o "$u" -g "$g" "$p" 2>/dev/null || true
done
mount -t tmpfs -o mode=1777 shm $R/dev/shm
hostname {hostname}
exec chroot $R /bin/bash -c 'trap "exit 0" TERM; echo up > /run/fb-booted; while :; do sleep 1 & wait $!; done'
"""


PR_SET_PDEATHSIG = 1
DISK_PREFIX = "fb-localssd-"  # + the pytest PID: detach_stale_disks() frees those of runs that were killed
PD_PREFIX = "fb-pd-"  # persistent disks: fb-pd-<pytest PID>-<disk name>.img


def detach_stale_disks() -> None:
    """Detach loop devices left by first-boot runs whose process is gone."""
    out = subprocess.run(["losetup", "-n", "-O", "NAME,BACK-FILE", "-l"], capture_output=True, text=True, timeout=30)
    for line in out.stdout.splitlines():
        parts = line.split(None, 1)
        m = re.search(rf"/(?:{DISK_PREFIX}(\d+)\.img|{PD_PREFIX}(\d+)-)", parts[1]) if len(parts) == 2 else None
        if m and not Path(f"/proc/{m.group(1) or m.group(2)}").exists():
            subprocess.run(["losetup", "-d", parts[0]], capture_output=True, timeout=30)


def _die_with_parent() -> None:
    """In the child before exec: SIGKILL when the test process dies, so a killed run leaves no VM running
    (unshare --kill-child then takes the VM's PID 1, and with it every process of the VM)."""
    ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def _alive(pid: int) -> bool:
    """A process that is neither gone nor a zombie (this machine's PID 1 may be slow to reap)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


class Vm:
    def __init__(self, name: str, root: Path, workdir: Path, netns: str) -> None:
        self.name = name
        self.root = root
        self.workdir = workdir
        self.netns = netns
        self.upper = workdir / "upper"
        self.proc: subprocess.Popen[bytes] | None = None
        self.pid1: int | None = None  # host PID of the VM's PID 1
        self.loop: str | None = None  # host loop device behind the emulated local SSDs
        self.local_ssds = 0
        self.persistent: dict[str, str] = {}  # device name -> host loop device of an attached persistent disk

    # --- the image ---

    def prepare(
        self,
        hosts: dict[str, str],
        ca_pem: Path | None = None,
        stubs: dict[str, str] | None = None,
        units: dict[str, str] | None = None,
        packages: dict[str, str] | None = None,
        files: dict[str, str] | None = None,
    ) -> None:
        """Write the guest's image customisations into its upper layer (before boot); `packages` (name -> version)
        join its dpkg database as installed, as a baked image would list them; `files` (path under / -> text) are
        written as they are."""
        for d in ("upper", "work", "merged"):
            (self.workdir / d).mkdir(parents=True, exist_ok=True)
        etc = self.upper / "etc"
        etc.mkdir(exist_ok=True)
        lines = ["127.0.0.1 localhost", "::1 localhost ip6-localhost", "169.254.169.254 metadata.google.internal"]
        lines += [f"{address} {names}" for names, address in hosts.items()]
        (etc / "hosts").write_text("\n".join(lines) + "\n")
        (etc / "resolv.conf").write_text("# no DNS server in the test network: names come from /etc/hosts\n")
        if ca_pem:
            bundle = self.upper / "etc/ssl/certs/ca-certificates.crt"
            bundle.parent.mkdir(parents=True, exist_ok=True)
            base = (self.root / "etc/ssl/certs/ca-certificates.crt").read_text()
            bundle.write_text(base + ca_pem.read_text())
        bin_dir = self.upper / "usr/local/bin"
        bin_dir.mkdir(parents=True, exist_ok=True)
        shutil.copy(SHIM / "systemctl", bin_dir / "systemctl")
        for name, text in (stubs or {}).items():
            (bin_dir / name).write_text(text)
            (bin_dir / name).chmod(0o755)
        if packages:
            status = self.upper / "var/lib/dpkg/status"
            status.parent.mkdir(parents=True, exist_ok=True)
            stanzas = "".join(
                f"Package: {name}\nStatus: install ok installed\nPriority: optional\nSection: misc\n"
                f"Maintainer: first-boot test <root@localhost>\nArchitecture: amd64\nVersion: {version}\n"
                f"Description: first-boot stand-in for {name} (tests/firstboot/stubs.py)\n\n"
                for name, version in packages.items()
            )
            status.write_text((self.root / "var/lib/dpkg/status").read_text().rstrip("\n") + "\n\n" + stanzas)
        for path, text in (files or {}).items():
            (self.upper / path).parent.mkdir(parents=True, exist_ok=True)
            (self.upper / path).write_text(text)
        unit_dir = self.upper / "usr/lib/systemd/system"
        unit_dir.mkdir(parents=True, exist_ok=True)
        for name, text in (units or {}).items():
            (unit_dir / name).write_text(text)

    def attach_disk(self, local_ssds: int, size_mib: int = 64) -> None:
        """Emulate the machine type's local NVMe SSDs: /dev/disk/by-id/google-local-nvme-ssd-0..N-1 as GCE names
        them, all links to one loop device (/dev/fb-localssd) on a sparse file, so the script's mkfs and mount
        are real (the RAID0 of them is mdadm's stub: this kernel has no md driver)."""
        if local_ssds <= 0:
            return
        image = self.workdir / f"{DISK_PREFIX}{os.getpid()}.img"
        with open(image, "wb") as f:
            f.truncate(size_mib << 20)
        proc = subprocess.run(["losetup", "-f", "--show", str(image)], capture_output=True, text=True, timeout=30)
        if proc.returncode != 0:
            raise RuntimeError(f"{self.name}: losetup: {proc.stderr.strip()}")
        self.loop = proc.stdout.strip()
        self.local_ssds = local_ssds

    def attach_persistent(self, device_name: str, image: Path) -> None:
        """Attach a persistent disk (`image`, a file that outlives the VM) as /dev/disk/by-id/google-<device_name>,
        as GCE names an attached disk by its device name."""
        proc = subprocess.run(["losetup", "-f", "--show", str(image)], capture_output=True, text=True, timeout=30)
        if proc.returncode != 0:
            raise RuntimeError(f"{self.name}: losetup {image}: {proc.stderr.strip()}")
        self.persistent[device_name] = proc.stdout.strip()

    def attach_live(self, device_name: str, image: Path) -> None:
        """`gcloud compute instances attach-disk --device-name`: `image` appears in the running VM as
        /dev/disk/by-id/google-<device_name> (its loop device is detached with the VM's)."""
        self.attach_persistent(device_name, image)
        rdev = os.stat(self.persistent[device_name]).st_rdev
        node = f"/dev/fb-{device_name}"
        self.run(["sh", "-c", f"mknod -m 0660 {node} b {os.major(rdev)} {os.minor(rdev)} && mkdir -p /dev/disk/by-id"
                  f" && ln -s ../../fb-{device_name} /dev/disk/by-id/google-{device_name}"], check=True)  # fmt: skip

    def detach_live(self, device_name: str) -> None:
        """`gcloud compute instances detach-disk`: the device leaves the running VM (unmounted first by the caller)."""
        self.run(["rm", "-f", f"/dev/disk/by-id/google-{device_name}", f"/dev/fb-{device_name}"], check=True)
        loop = self.persistent.pop(device_name)
        subprocess.run(["losetup", "-d", loop], capture_output=True, timeout=30)

    # --- lifecycle ---

    def boot(self, timeout: float = 20) -> None:
        init = _INIT.format(
            merged=shlex.quote(str(self.workdir / "merged")),
            lower=shlex.quote(str(self.root)),
            upper=shlex.quote(str(self.upper)),
            work=shlex.quote(str(self.workdir / "work")),
            hostname=shlex.quote(self.name),
            disks=self._disk_lines(),
        )
        cmd = ["ip", "netns", "exec", self.netns, "unshare", "--mount", "--uts", "--ipc", "--pid", "--fork",
               "--kill-child", "--propagation", "private", "/bin/bash", "-c", init]  # fmt: skip
        log = open(self.workdir / "init.log", "wb")  # noqa: SIM115 (lives as long as the VM)
        self.proc = subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True, preexec_fn=_die_with_parent
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name}: init exited {self.proc.returncode}: {self.init_log()}")
            children = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children")
            try:
                kids = children.read_text().split()
            except OSError:
                kids = []
            if kids:
                self.pid1 = int(kids[0])
                if Path(f"/proc/{self.pid1}/root/run/fb-booted").exists():
                    return
            time.sleep(0.05)
        raise RuntimeError(f"{self.name}: not up after {timeout}s: {self.init_log()}")

    def _disk_lines(self) -> str:
        lines = []
        if self.loop:
            rdev = os.stat(self.loop).st_rdev
            links = " ".join(f"google-local-nvme-ssd-{i}" for i in range(self.local_ssds))
            lines += [
                f"mknod -m 0660 $R/dev/fb-localssd b {os.major(rdev)} {os.minor(rdev)}",
                f"mkdir -p $R/dev/disk/by-id; for l in {links}; do ln -s ../../fb-localssd $R/dev/disk/by-id/$l; done",
            ]
        for i, (device, loop) in enumerate(sorted(self.persistent.items())):
            rdev = os.stat(loop).st_rdev
            lines += [
                f"mknod -m 0660 $R/dev/fb-pd{i} b {os.major(rdev)} {os.minor(rdev)}",
                f"mkdir -p $R/dev/disk/by-id; ln -s ../../fb-pd{i} $R/dev/disk/by-id/google-{device}",
            ]
        return "\n".join(lines)

    def init_log(self) -> str:
        try:
            return (self.workdir / "init.log").read_text()[-2000:]
        except OSError:
            return ""

    def kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)
        self.proc = None
        if self.pid1:
            # PID 1 of the namespace is gone with `--kill-child`; wait until the kernel reaped the rest.
            deadline = time.monotonic() + 10
            while _alive(self.pid1) and time.monotonic() < deadline:
                time.sleep(0.05)
            self.pid1 = None
        if self.loop:
            subprocess.run(["losetup", "-d", self.loop], capture_output=True, timeout=30)
            self.loop = None
        for loop in self.persistent.values():
            subprocess.run(["losetup", "-d", loop], capture_output=True, timeout=30)
        self.persistent.clear()

    # --- inside the VM ---

    def command(self, argv: list[str], user: str | None = None) -> list[str]:
        assert self.pid1, f"{self.name}: not booted"
        enter = ["nsenter", "-t", str(self.pid1), "-m", "-u", "-i", "-n", "-p", "-r", "-w"]
        env = ["env", "-i", f"PATH={PATH}", "HOME=/root", "LANG=C.UTF-8", "TERM=dumb"]
        if user:
            env = ["runuser", "-u", user, "--", *env]
            env[env.index("HOME=/root")] = "HOME=/tmp"
        return [*enter, *env, *argv]

    def run(
        self, argv: list[str], user: str | None = None, timeout: float = 60, check: bool = False
    ) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            self.command(argv, user), capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
        )
        if check and proc.returncode != 0:
            raise RuntimeError(f"{self.name}: {argv} exited {proc.returncode}: {proc.stderr[-2000:]}")
        return proc

    def sh(self, script: str, **kw) -> subprocess.CompletedProcess[str]:
        return self.run(["/bin/bash", "-c", script], **kw)

    def startup(self, timeout: float = 180) -> subprocess.CompletedProcess[str]:
        """Run the startup script the way GCE's guest agent does: fetched from the metadata server, as root."""
        proc = self.sh(GUEST_AGENT, timeout=timeout)
        log = f"exit {proc.returncode}\n--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}"
        (self.workdir / "startup.log").write_text(log)
        return proc

    def read(self, path: str) -> str:
        """A file as the VM sees it (through its root), read from the host."""
        assert self.pid1, f"{self.name}: not booted"
        return self.path(path).read_text()

    def read_bytes(self, path: str) -> bytes:
        return self.path(path).read_bytes()

    def path(self, path: str) -> Path:
        assert self.pid1, f"{self.name}: not booted"
        return Path(f"/proc/{self.pid1}/root/{path.lstrip('/')}")
