"""A tiny "GCE" for the first-boot test: declared VMs booted as namespaces, with their metadata and secrets.

    with FirstBootCloud(declared, root, workdir, stubs) as cloud:
        ctl = cloud.create("fb-controller")          # boot the VM, nothing run yet
        cloud.startup("fb-controller")               # its startup script, as the guest agent runs it
        cloud.recreate("fb-controller")              # the VM replaced: a new boot disk, its persistent disks kept

What it does as GCE would:
- each VM gets the metadata, service account and zone the stack declares, the reserved address when
  the stack declares one, otherwise the next free address of the system subnet (GCE's DHCP);
- the metadata server (169.254.169.254, `metadata.google.internal`) answers each VM about itself,
  with the attributes the stack declares plus the one GCE adds on A3/A4 VMs (`physical_host`);
- Secret Manager (`secretmanager.googleapis.com`, HTTPS) holds one fresh random value per declared
  secret and lets only the declared accessors read it, with tokens from the metadata server;
- VMs reach each other on the subnet; no DNS entry for any VM is provided (the config must carry the
  controller's address), and nothing routes off this machine;
- a persistent disk the stack attaches (`attachedDisks`) is a file of its own (64 MiB, whatever its declared
  size) that outlives the VM, attached as /dev/disk/by-id/google-<device name>; a re-created VM gets a new
  boot disk (a fresh overlay) and the same persistent disks.

What it does not: images (all VMs boot the same baked root: Ubuntu 24.04, or Debian 12, os_image.py), GPUs,
extra NICs, real IAM/OAuth, zonal DNS, systemd (see shim/systemctl).
"""

from __future__ import annotations

import base64
import hashlib
import ipaddress
import os
import secrets
import shutil
from pathlib import Path

from components.gcp.metadata import PHYSICAL_HOST
from components.gcp.startup import LOCAL_SSD_GIB
from fleet.catalog import load_catalog
from tests.fakes.metadata import FakeMetadata, VmMetadata
from tests.fakes.metadata_secrets import HOST as SECRET_MANAGER_HOST
from tests.fakes.metadata_secrets import FakeSecretManager, make_tls
from tests.firstboot.declared import Declared
from tests.firstboot.mirror import Mirror
from tests.firstboot.netns import METADATA_IP, Fabric, sweep, sweep_stale
from tests.firstboot.vm import PD_PREFIX, Vm, detach_stale_disks


def physical_host(zone: str, index: int) -> str:
    """A stable `/CLUSTER/BLOCK/HOST` for the index-th VM of a zone (two hosts per block)."""
    digest = hashlib.sha1(zone.encode()).hexdigest()
    return f"/{digest[:8]}/{digest[8:14]}{index // 2}/{digest[14:20]}{index}"


class FirstBootCloud:
    def __init__(
        self,
        declared: Declared,
        root: Path,
        workdir: Path,
        stubs: dict[str, str] | None = None,
        units: dict[str, str] | None = None,
        prefix: str = "fb",
        packages: dict[str, str] | None = None,
        mirror: Mirror | None = None,
    ) -> None:
        self.declared = declared
        self.root = root
        self.workdir = workdir
        self.stubs = stubs or {}
        self.units = units or {}
        self.packages = packages or {}  # name -> version every VM's dpkg lists (stubs.stub_packages)
        self.mirror = mirror  # the repository and wheels a controller fetches (mirror.py), on the gateway
        self.prefix = f"{prefix}{os.getpid()}"  # namespace names: unique per run and per cloud (netns.sweep_stale)
        self.fabric = Fabric(self.prefix, declared.subnet)
        self.metadata = FakeMetadata(declared.project)
        self.secret_manager = FakeSecretManager(self.metadata, declared.project, self.metadata.project_number)
        self.secret_values: dict[str, bytes] = {}
        self.vms: dict[str, Vm] = {}
        self._servers: list = []
        reserved = {vm.network_ip for vm in declared.vms.values() if vm.network_ip}
        # GCE keeps the first two and the last two addresses of a subnet (network, gateway, ..., broadcast)
        # and hands out the rest from the bottom.
        hosts = list(declared.subnet.hosts())[1:-1]
        self._free = [a for a in hosts if str(a) not in reserved]

    def __enter__(self) -> FirstBootCloud:
        sweep_stale()
        detach_stale_disks()
        sweep(self.prefix)
        try:
            self.fabric.create()
            self._servers.append(self.metadata.serve_socket(self.fabric.bind((METADATA_IP, 80))))
            ca, tls = make_tls(self.workdir / "tls")
            self.ca_pem = ca
            sm_sock = self.fabric.bind((str(self.fabric.gateway), 443))
            self._servers.append(self.secret_manager.serve_socket(sm_sock, tls))
            if self.mirror:
                self.mirror.start(self.fabric)
            for secret_id, members in self.declared.secrets.items():
                # What the stack stores: the base64 text of random bytes (pulumi-random RandomBytes.base64).
                value = base64.b64encode(secrets.token_bytes(1024 if "munge" in secret_id else 32))
                self.secret_values[secret_id] = value
                self.secret_manager.add_secret(secret_id, value, members)
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for vm in self.vms.values():
            vm.kill()
        if self.mirror:
            self.mirror.stop()
        for server in self._servers:
            server.shutdown()
            server.server_close()
        self._servers.clear()
        self.fabric.destroy()
        sweep(self.prefix)

    def address_of(self, name: str) -> str:
        return self.metadata.vm_named(name).ip

    def create(self, name: str, metadata_override: dict[str, str] | None = None) -> Vm:
        """Boot the declared VM `name` (its startup script is not run yet)."""
        decl = self.declared.vms[name]
        address = ipaddress.ip_address(decl.network_ip) if decl.network_ip else self._free.pop(0)
        attributes = {**decl.metadata, **(metadata_override or {})}
        machine = load_catalog("gcp").machine(decl.machine_type) if decl.pool else None
        if machine and machine.nics.fabric != "none":
            # set by GCE itself (not the stack) on A3/A4 VMs: where the VM was placed, /CLUSTER/BLOCK/HOST
            attributes[PHYSICAL_HOST] = physical_host(decl.zone, len(self.vms))
        self.metadata.add_instance(
            VmMetadata(name, decl.zone, str(address), decl.service_account, attributes, decl.machine_type)
        )
        netns = self.fabric.attach(name, address)
        return self._boot(name, netns, self.workdir / name)

    def set_metadata(self, name: str, attributes: dict[str, str]) -> None:
        """What `pulumi up` does to a running instance whose declared metadata changed (instances.setMetadata): the
        declared attributes replace the old ones; what GCE itself sets (the physical host) stays."""
        vm = self.metadata.vm_named(name)
        kept = {k: v for k, v in vm.attributes.items() if k == PHYSICAL_HOST}
        vm.attributes.clear()
        vm.attributes.update({**attributes, **kept})

    def recreate(self, name: str) -> Vm:
        """Delete the VM `name` and create it again from its declaration, as a replaced instance is: the same
        name, address and metadata, a new boot disk, the same persistent disks."""
        old = self.vms.pop(name)
        old.kill()
        generation = sum(1 for p in self.workdir.glob(f"{name}.*")) + 2
        return self._boot(name, old.netns, self.workdir / f"{name}.{generation}")

    def _boot(self, name: str, netns: str, workdir: Path) -> Vm:
        decl = self.declared.vms[name]
        machine = load_catalog("gcp").machine(decl.machine_type) if decl.pool else None
        vm = Vm(name, self.root, workdir, netns)
        if vm.workdir.exists():
            shutil.rmtree(vm.workdir)
        vm.prepare(
            {f"{SECRET_MANAGER_HOST}": str(self.fabric.gateway), **(self.mirror.hosts() if self.mirror else {})},
            ca_pem=self.ca_pem,
            stubs=self.stubs,
            units=self.units,
            packages=self.packages,
            files=self.mirror.files() if self.mirror else None,
        )
        self.vms[name] = vm
        vm.attach_disk((machine.local_ssd_gib // LOCAL_SSD_GIB) if machine else 0)
        for device, disk in decl.disks.items():
            vm.attach_persistent(device, self.persistent_disk(disk))
        vm.boot()
        return vm

    def persistent_disk(self, disk: str, size_mib: int = 1024) -> Path:
        """The file behind the persistent disk `disk`: blank (all zeros, as a new GCE disk reads) when first made;
        sparse, so only what the VM writes takes space (the accounting database's InnoDB log alone is 64 MiB)."""
        image = self.workdir / "disks" / f"{PD_PREFIX}{os.getpid()}-{disk}.img"
        if not image.exists():
            image.parent.mkdir(parents=True, exist_ok=True)
            with open(image, "wb") as f:
                f.truncate(size_mib << 20)
        return image
