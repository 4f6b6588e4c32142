"""Typed, read-only view of the GPU machine catalog (machines, zones, per-region prices)."""

from __future__ import annotations

import csv
import difflib
import enum
from collections import defaultdict
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import Literal

import yaml

Fabric = Literal["none", "gpudirect-tcpx", "gpudirect-tcpxo", "rdma"]
FabricSetup = Literal["none", "tcpxo", "gib"]  # what a node's startup script sets up for its fabric
GkeFabricSetup = Literal["none", "tcpx", "tcpxo", "gib"]  # what the GKE stack sets up (stacks/gke_fabric.py)


class CapacityType(enum.StrEnum):
    """How a node's capacity is bought.  Values are the spec / inventory spelling."""

    RESERVATION = "reservation"
    SPOT = "spot"
    FLEX_START = "flex-start"
    ON_DEMAND = "on-demand"


def machine_family(machine_type: str) -> str:
    """`a3-highgpu-8g` -> `a3-highgpu`: the family whose machine types differ in size only."""
    return machine_type.rsplit("-", 1)[0]


class UnknownMachineType(KeyError):
    """A machine type the catalog does not know; the message suggests the closest names."""

    def __init__(self, name: str, known: list[str]) -> None:
        close = difflib.get_close_matches(name, known, n=3)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        super().__init__(f"unknown machine type {name!r}{hint}")
        self.name = name

    def __str__(self) -> str:  # KeyError quotes its message; keep it readable
        return str(self.args[0])


@dataclass(frozen=True)
class GpuSpec:
    """One GPU model as GCE names it (the accelerator type)."""

    accelerator_type: str  # e.g. nvidia-h100-mega-80gb
    short: str  # e.g. h100-mega
    memory_gib: int
    bf16_dense_tflops: float
    quota_metric: str  # regional Compute quota metric of on-demand GPUs, e.g. NVIDIA_H100_MEGA_GPUS


@dataclass(frozen=True)
class NicLayout:
    """The NICs one VM of a machine type needs, and the GPU fabric they form."""

    gvnic: int = 1  # host NICs, one VPC each (the first is the system VPC)
    gpu_nics: int = 0  # GPUDirect-TCPX/TCPXO NICs, one VPC each
    rdma_nics: int = 0  # RDMA NICs, one subnet each of one RoCE VPC
    fabric: Fabric = "none"
    gpu_nic_mtu: int | None = None
    #: the GPU NICs' MTU on GKE where Google's GKE blueprint sets another than its VM one (None: `gpu_nic_mtu`)
    gke_gpu_nic_mtu: int | None = None
    system_mtu: int = 1460

    @property
    def total(self) -> int:
        return self.gvnic + self.gpu_nics + self.rdma_nics


@dataclass(frozen=True)
class GpuSoftware:
    """How a node of a machine type gets its GPU stack: the boot image (NVIDIA driver included), whether
    that driver is signed for Secure Boot, and which fabric set-up its startup script runs."""

    image: str  # projects/P/global/images/family/F (or an image)
    secure_boot: bool
    fabric: FabricSetup = "none"


@dataclass(frozen=True)
class FabricSoftware:
    """Pinned versions and names of one fabric's software (catalog `fabric_software.<kind>`)."""

    kind: GkeFabricSetup
    devices: int  # GPU NICs of the machine (the Slurm path: what the node must show before slurmd starts)
    apt_repo: str = ""  # the Slurm path's apt source ("" for a fabric only GKE sets up)
    packages: tuple[str, ...] = ()
    kernel_module: str | None = None
    rxdm_image: str | None = None
    nccl_plugin_image: str | None = None
    aperture_pci: tuple[str, str] | None = None  # (vendor, device) of the TCPXO aperture PCI functions
    nccl_package: str | None = None
    nccl_version: str | None = None
    env_script: str | None = None
    lib_dir: str | None = None
    #: GKE: the image of the DaemonSet that installs the NCCL plugin on the nodes (GKE's COS nodes have no apt);
    #: None: `nccl_plugin_image` (TCPXO's plugin image is its own installer)
    gke_installer_image: str | None = None
    #: GKE: the NRI plugin that injects the GPU devices a pod's annotation names into one of its containers (TCPXO:
    #: the RxDM sidecar, which asks no `nvidia.com/gpu` of its own)
    gke_device_injector_image: str | None = None
    #: GKE: the NCCL environment the fabric's release qualifies, set in a workload's trainer (TCPX)
    nccl_env: tuple[tuple[str, str], ...] = ()


#: the `Price.source` of rows taken from the public list price table, committed-use prices included
LIST_SOURCE = "list"


@dataclass(frozen=True)
class Price:
    """List prices of one machine type in one region, $/hour for one VM (GPUs included)."""

    on_demand: float
    spot: float | None
    commit_1y: float | None
    commit_3y: float | None
    source: str  # "list", "zone_offerings" or "zone_offerings_corrected" (see derive_catalog.py)

    @property
    def commit_estimated(self) -> bool:
        """Whether `commit_1y` / `commit_3y` are estimates rather than list prices: only rows of the list
        (source `list`) carry committed-use prices; scripts/derive_catalog.py gives the zone-derived rows (every
        other source) the median 1y/3y discount of the list's 8-GPU H100 rows."""
        return self.source != LIST_SOURCE

    def hourly(self, capacity: CapacityType) -> float | None:
        """$/h for a capacity type.  Flex-start (DWS) bills at the on-demand rate or less: we use
        the on-demand rate; a reservation bills at the on-demand rate unless a commitment covers
        it, which the caller knows and we do not."""
        if capacity is CapacityType.SPOT:
            return self.spot
        return self.on_demand


#: Seconds from a launch request to the node registered and ready for jobs (VM boot, GPU driver, fabric set-up,
#: slurmd registration).  One figure for every machine type until measured per family: 360 s, the boot-to-ready
#: time issue 8 states for a3-highgpu.  The replay's default boot time (`Scenario.boot_seconds`) and the rendered
#: SuspendTime floor (`fleet.slurm.conf`, via the settings rule's break-even idle time) both read it.
DEFAULT_READY_S = 360.0


@dataclass(frozen=True)
class MachineType:
    name: str
    gpu: GpuSpec
    gpu_count: int
    vcpus: int
    memory_gib: int
    local_ssd_gib: int
    nics: NicLayout
    compact_placement_max_vms: int  # 0: compact placement not supported
    flex_start_compact: bool
    sockets: int = 1
    threads_per_core: int = 2
    software: GpuSoftware | None = None
    zones: dict[str, tuple[str, ...]] = field(default_factory=dict)  # region -> zones
    prices: dict[str, Price] = field(default_factory=dict)  # region -> price

    def __post_init__(self) -> None:
        if self.vcpus % (self.sockets * self.threads_per_core):
            raise ValueError(f"{self.name}: {self.vcpus} vCPUs do not split into {self.sockets} sockets x "
                             f"{self.threads_per_core} threads")  # fmt: skip

    @property
    def ready_s(self) -> float:
        """Launch request to ready for jobs, seconds (`DEFAULT_READY_S`)."""
        return DEFAULT_READY_S

    @property
    def fabric_not_set_up(self) -> bool:
        """Its NICs form a GPU fabric (`nics.fabric`) for which its startup script sets up no software
        (`software.fabric` none): A3 High's GPUDirect-TCPX, whose kernel the stack cannot install (docs/stacks.md
        "Known limits").  NCCL then runs across nodes over its sockets transport, not GPUDirect."""
        return self.nics.fabric != "none" and (self.software is None or self.software.fabric == "none")

    @property
    def gke_fabric(self) -> GkeFabricSetup:
        """What the GKE stack sets up for its GPU fabric (stacks/gke_fabric.py): the startup script's set-up where
        there is one (TCPXO, gIB), and GPUDirect-TCPX (A3 High), which GKE's own node image supports and the Slurm
        path's cannot (`fabric_not_set_up`)."""
        if self.software is not None and self.software.fabric != "none":
            return self.software.fabric
        return "tcpx" if self.nics.fabric == "gpudirect-tcpx" else "none"

    @property
    def cores_per_socket(self) -> int:
        return self.vcpus // (self.sockets * self.threads_per_core)

    @property
    def family(self) -> str:
        """`a3-highgpu-8g` -> `a3-highgpu` (`machine_family`)."""
        return machine_family(self.name)

    @property
    def series(self) -> str:
        """`a3-highgpu-8g` -> `a3`."""
        return self.name.split("-", 1)[0]

    def zones_in(self, region: str) -> tuple[str, ...]:
        return self.zones.get(region, ())

    def offered_in(self, zone: str) -> bool:
        return zone in self.zones.get(zone.rsplit("-", 1)[0], ())

    def price(self, region: str) -> Price | None:
        return self.prices.get(region)


class Catalog:
    """All machine types of one provider, queried by name, GPU, family or region."""

    def __init__(
        self,
        provider: str,
        machines: dict[str, MachineType],
        fabric_software: dict[str, FabricSoftware] | None = None,
        host_image: str = "",
    ) -> None:
        self.provider = provider
        self._machines = machines
        self._fabric_software = dict(fabric_software or {})
        self.host_image = host_image  # controller / login VMs
        self._gpus = {m.gpu.accelerator_type: m.gpu for m in machines.values()}

    def __contains__(self, name: object) -> bool:
        return name in self._machines

    def machine(self, name: str) -> MachineType:
        try:
            return self._machines[name]
        except KeyError:
            raise UnknownMachineType(name, sorted(self._machines)) from None

    def gpu(self, accelerator_type: str) -> GpuSpec | None:
        """The GPU model named by its accelerator type (e.g. nvidia-h100-80gb), None when unknown."""
        return self._gpus.get(accelerator_type)

    def fabric_software(self, kind: GkeFabricSetup) -> FabricSoftware | None:
        """Pinned software of a fabric set-up (None for `none`)."""
        return self._fabric_software.get(kind)

    def machines(self) -> list[MachineType]:
        return list(self._machines.values())

    def names(self) -> list[str]:
        return sorted(self._machines)

    def family(self, family: str) -> list[MachineType]:
        """Machine types of one family (e.g. `a3-highgpu`), smallest first."""
        return sorted((m for m in self._machines.values() if m.family == family), key=lambda m: m.gpu_count)

    def by_gpu(self, short: str) -> list[MachineType]:
        """Machine types carrying a GPU (`h100`, `h200`, `l4` ...), smallest first."""
        return sorted((m for m in self._machines.values() if m.gpu.short == short), key=lambda m: m.gpu_count)

    def regions_offering(self, name: str) -> list[str]:
        return sorted(self.machine(name).zones)


def _read_csv(name: str) -> list[dict[str, str]]:
    text = resources.files("fleet.catalog").joinpath("data", name).read_text()
    return list(csv.DictReader(line for line in text.splitlines() if not line.startswith("#")))


def _opt(value: str) -> float | None:
    return float(value) if value else None


@cache
def load_catalog(provider: str = "gcp") -> Catalog:
    """The catalog shipped with gpu-fleet for a provider (only `gcp` today)."""
    if provider != "gcp":
        raise ValueError(f"no machine catalog for provider {provider!r} (known: gcp)")
    raw = yaml.safe_load(resources.files("fleet.catalog").joinpath("data", "gcp_machines.yaml").read_text())
    gpus = {
        name: GpuSpec(name, g["short"], int(g["memory_gib"]), float(g["bf16_dense_tflops"]), g["quota_metric"])
        for name, g in raw["gpus"].items()
    }
    zones: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for row in _read_csv("gcp_zones.csv"):
        zones[row["machine_type"]][row["region"]].append(row["zone"])
    prices: dict[str, dict[str, Price]] = defaultdict(dict)
    for row in _read_csv("gcp_prices.csv"):
        prices[row["machine_type"]][row["region"]] = Price(
            on_demand=float(row["on_demand"]),
            spot=_opt(row["spot"]),
            commit_1y=_opt(row["commit_1y"]),
            commit_3y=_opt(row["commit_3y"]),
            source=row["source"],
        )
    sw = raw["gpu_software"]
    fabric_sw = {
        kind: FabricSoftware(
            kind=kind,
            apt_repo=f.get("apt_repo", ""),
            packages=tuple(f.get("packages", ())),
            devices=int(f["devices"]),
            kernel_module=f.get("kernel_module"),
            rxdm_image=f.get("rxdm_image"),
            nccl_plugin_image=f.get("nccl_plugin_image"),
            aperture_pci=(f["aperture_pci"]["vendor"], f["aperture_pci"]["device"]) if "aperture_pci" in f else None,
            nccl_package=f.get("nccl_package"),
            nccl_version=f.get("nccl_version"),
            env_script=f.get("env_script"),
            lib_dir=f.get("lib_dir"),
            gke_installer_image=f.get("gke_installer_image"),
            gke_device_injector_image=f.get("gke_device_injector_image"),
            nccl_env=tuple((str(k), str(v)) for k, v in f.get("nccl_env", {}).items()),
        )
        for kind, f in raw["fabric_software"].items()
    }
    machines: dict[str, MachineType] = {}
    for name, m in raw["machines"].items():
        soft = {**sw["default"], **sw["families"].get(name.rsplit("-", 1)[0], {})}
        machines[name] = MachineType(
            name=name,
            gpu=gpus[m["gpu"]],
            gpu_count=int(m["gpu_count"]),
            vcpus=int(m["vcpus"]),
            memory_gib=int(m["memory_gib"]),
            local_ssd_gib=int(m.get("local_ssd_gib", 0)),
            nics=NicLayout(
                gvnic=int(m.get("gvnic", 1)),
                gpu_nics=int(m.get("gpu_nics", 0)),
                rdma_nics=int(m.get("rdma_nics", 0)),
                fabric=m.get("fabric", "none"),
                gpu_nic_mtu=m.get("gpu_nic_mtu"),
                gke_gpu_nic_mtu=m.get("gke_gpu_nic_mtu"),
                system_mtu=int(m.get("system_mtu", 1460)),
            ),
            compact_placement_max_vms=int(m.get("compact_placement_max_vms", 0)),
            flex_start_compact=bool(m.get("flex_start_compact", False)),
            sockets=int(m.get("sockets", 1)),
            threads_per_core=int(m.get("threads_per_core", 2)),
            software=GpuSoftware(soft["image"], bool(soft["secure_boot"]), soft["fabric"]),
            zones={r: tuple(sorted(z)) for r, z in sorted(zones[name].items())},
            prices=dict(sorted(prices[name].items())),
        )
    return Catalog("gcp", machines, fabric_sw, raw["host_image"])
