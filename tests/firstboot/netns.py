"""The simulated VPC: one network namespace per VM, joined by a bridge in a "fabric" namespace with no uplink.

    fabric = Fabric("fb1234", subnet=ipaddress.ip_network("10.20.0.0/22"))
    fabric.create()
    ns = fabric.attach("ctl", ipaddress.ip_address("10.20.0.2"))      # netns fb1234-ctl, eth0 10.20.0.2/22
    sock = fabric.bind(("169.254.169.254", 80))                     # a socket living in the fabric netns
    fabric.destroy()

The fabric namespace holds the subnet's gateway (its first address, as in a GCE subnet) and the
metadata server's 169.254.169.254; every VM's default route points at that gateway, and the fabric has
no interface but the bridge, so nothing a VM sends can leave this machine.  Namespaces are named with
the session prefix, so `destroy()` (and `sweep(prefix)` after a crash) remove exactly what was made.
"""

from __future__ import annotations

import contextlib
import ctypes
import ipaddress
import os
import re
import signal
import socket
import subprocess
import threading
from pathlib import Path

CLONE_NEWNET = 0x40000000
METADATA_IP = "169.254.169.254"
NETNS_DIR = Path("/run/netns")


def ip(*args: str, netns: str | None = None) -> None:
    cmd = ["ip", *(["-n", netns] if netns else []), *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {proc.stderr.strip()}")


def delete(netns: str) -> None:
    """Kill whatever still runs in `netns` (a VM left by a killed run), then delete it."""
    pids = subprocess.run(["ip", "netns", "pids", netns], capture_output=True, text=True, timeout=30).stdout.split()
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(pid), signal.SIGKILL)
    subprocess.run(["ip", "netns", "del", netns], capture_output=True, timeout=30)


def sweep(prefix: str) -> None:
    """Delete every namespace whose name starts with `prefix-` (leftovers of a killed run)."""
    if NETNS_DIR.is_dir():
        for path in NETNS_DIR.iterdir():
            if path.name.startswith(f"{prefix}-"):
                delete(path.name)


_OURS = re.compile(r"^fb[a-z]*?(\d+)-")


def sweep_stale() -> None:
    """Namespaces of first-boot runs whose pytest process is gone (killed before its clean-up ran)."""
    if not NETNS_DIR.is_dir():
        return
    for path in NETNS_DIR.iterdir():
        m = _OURS.match(path.name)
        if m and not Path(f"/proc/{m.group(1)}").exists():
            delete(path.name)


class Fabric:
    def __init__(self, prefix: str, subnet: ipaddress.IPv4Network) -> None:
        self.prefix = prefix
        self.subnet = subnet
        self.gateway = next(subnet.hosts())
        self.name = f"{prefix}-fabric"
        self.members: dict[str, str] = {}  # vm -> netns
        self._created = False

    def create(self) -> None:
        ip("netns", "add", self.name)
        self._created = True
        ip("link", "set", "lo", "up", netns=self.name)
        ip("link", "add", "br0", "type", "bridge", netns=self.name)
        ip("addr", "add", f"{self.gateway}/{self.subnet.prefixlen}", "dev", "br0", netns=self.name)
        ip("addr", "add", f"{METADATA_IP}/32", "dev", "br0", netns=self.name)
        ip("link", "set", "br0", "up", netns=self.name)

    def attach(self, vm: str, address: ipaddress.IPv4Address) -> str:
        """A new netns for `vm` with eth0 = `address` on the subnet, default route via the gateway."""
        if address not in self.subnet or address == self.gateway:
            raise ValueError(f"{vm}: {address} is not a host address of {self.subnet} (gateway {self.gateway})")
        netns = f"{self.prefix}-{len(self.members)}"
        ip("netns", "add", netns)
        self.members[vm] = netns
        peer = f"v{len(self.members)}"
        ip("link", "add", peer, "type", "veth", "peer", "name", "eth0", "netns", netns, netns=self.name)
        ip("link", "set", peer, "master", "br0", netns=self.name)
        ip("link", "set", peer, "up", netns=self.name)
        ip("link", "set", "lo", "up", netns=netns)
        ip("addr", "add", f"{address}/{self.subnet.prefixlen}", "dev", "eth0", netns=netns)
        ip("link", "set", "eth0", "up", netns=netns)
        ip("route", "add", "default", "via", str(self.gateway), netns=netns)
        return netns

    def bind(self, address: tuple[str, int]) -> socket.socket:
        """A TCP socket bound to `address` inside the fabric namespace (the socket keeps its namespace)."""
        result: list[socket.socket | BaseException] = []

        def in_netns() -> None:
            try:
                libc = ctypes.CDLL(None, use_errno=True)
                fd = os.open(NETNS_DIR / self.name, os.O_RDONLY)
                try:
                    if libc.setns(fd, CLONE_NEWNET) != 0:
                        raise OSError(ctypes.get_errno(), f"setns({self.name})")
                finally:
                    os.close(fd)
                sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                sock.bind(address)
                result.append(sock)
            except BaseException as exc:  # handed to the caller
                result.append(exc)

        # A throwaway thread: setns changes only the calling thread, which then ends.
        thread = threading.Thread(target=in_netns)
        thread.start()
        thread.join()
        if isinstance(result[0], BaseException):
            raise result[0]
        return result[0]

    def destroy(self) -> None:
        for netns in self.members.values():
            delete(netns)
        self.members.clear()
        if self._created:
            delete(self.name)
            self._created = False
