"""Settings of one simulated cloud: what it offers, how fast it boots, how often it says no.

Validated with pydantic so a bad setting fails with the field's name and the reason.  All times
are seconds of simulated time; all rates are per hour."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from fleet.catalog import CapacityType, UnknownMachineType, load_catalog


class BootProfile(BaseModel):
    """How long a node takes from the launch request to being usable.

    `boot_s`: launch request -> VM RUNNING (the cloud's view); `register_s`: RUNNING -> registered
    with the scheduler (Slurm node up, Kubernetes allocatable GPUs).  Capacity counts only once
    registered (DESIGN.md, "a GPU node is not ready when the VM is up")."""

    model_config = ConfigDict(frozen=True)

    boot_s: float = Field(330.0, ge=0)
    register_s: float = Field(30.0, ge=0)

    @property
    def ready_s(self) -> float:
        return self.boot_s + self.register_s

    @classmethod
    def total(cls, ready_s: float, register_s: float = 30.0) -> BootProfile:
        """A profile whose launch-to-ready time is exactly `ready_s` (registration capped at it)."""
        if ready_s < 0:
            raise ValueError(f"boot-to-ready seconds must be >= 0, got {ready_s}")
        reg = min(register_s, ready_s)
        return cls(boot_s=ready_s - reg, register_s=reg)


class StockoutWindow(BaseModel):
    """A scheduled stockout: launches in this zone (and machine type / capacity type when given)
    fail with ZONE_RESOURCE_POOL_EXHAUSTED from `start` (inclusive) to `end` (exclusive)."""

    model_config = ConfigDict(frozen=True)

    zone: str
    start: float
    end: float
    machine_type: str | None = None  # None: every machine type in the zone
    capacity_type: CapacityType | None = None  # None: spot and on-demand alike

    @model_validator(mode="after")
    def _ordered(self) -> StockoutWindow:
        if self.end <= self.start:
            raise ValueError(f"stockout window end ({self.end}) must be after start ({self.start})")
        return self


class SimReservation(BaseModel):
    """A specific reservation of `nodes` VMs of one machine type in one zone.

    Billed for the whole simulated span whether used or not, at `hourly_usd` per node; VMs that
    consume it add nothing to the bill."""

    model_config = ConfigDict(frozen=True)

    name: str = Field(min_length=1)
    zone: str
    machine_type: str
    nodes: int = Field(gt=0)
    hourly_usd: float = Field(ge=0)


class SimConfig(BaseModel):
    """Everything that makes one simulated cloud behave the way it does, seed included."""

    model_config = ConfigDict(frozen=True)

    provider: str = "sim"
    region: str = "us-central1"
    zones: tuple[str, ...] = ()  # empty: every zone of the region offering the machine types
    machine_types: tuple[str, ...] = ("a3-highgpu-1g", "a3-highgpu-2g", "a3-highgpu-4g", "a3-highgpu-8g")
    capacity_types: tuple[CapacityType, ...] = (CapacityType.ON_DEMAND,)
    boot: dict[str, BootProfile] = Field(default_factory=dict)  # per machine type
    default_boot: BootProfile = BootProfile()
    stockout_rate: float = Field(0.0, ge=0.0, le=1.0)  # probability a launch in an offering stocks out
    stockout_window_s: float = Field(1800.0, gt=0)  # how long a stocked-out offering stays out (mean)
    # "timeline": each offering alternates between in stock and out (exponential out windows of mean
    # stockout_window_s, out a stockout_rate share of the time), the same weather whoever asks and how
    # often; "per-attempt": each launch attempt fails with probability stockout_rate and a failure keeps
    # the offering out for stockout_window_s (so asking more often opens more windows)
    stockout_mode: Literal["timeline", "per-attempt"] = "timeline"
    stockout_windows: tuple[StockoutWindow, ...] = ()
    preemption_rate_per_hour: float = Field(0.0, ge=0.0)  # per running spot node
    gpu_quota: dict[CapacityType, int] = Field(default_factory=dict)  # region GPUs per capacity type
    reservations: tuple[SimReservation, ...] = ()
    gone_retention_s: float = Field(600.0, ge=0)  # how long deleted/preempted nodes stay listed
    seed: int = 0

    @field_validator("capacity_types")
    @classmethod
    def _no_reservation_type(cls, v: tuple[CapacityType, ...]) -> tuple[CapacityType, ...]:
        if CapacityType.RESERVATION in v:
            raise ValueError("reservations are offered through `reservations`, not `capacity_types`")
        return v

    @model_validator(mode="after")
    def _known(self) -> SimConfig:
        cat = load_catalog()
        for i, name in enumerate(self.machine_types):
            try:
                m = cat.machine(name)
            except UnknownMachineType as exc:
                raise ValueError(f"machine_types[{i}]: {exc}") from None
            if not m.zones_in(self.region):
                raise ValueError(f"machine_types[{i}]: {name} is not offered in region {self.region}")
            if m.price(self.region) is None:
                raise ValueError(f"machine_types[{i}]: the catalog has no {self.region} price for {name}")
        for i, zone in enumerate(self.zones):
            if not zone.startswith(self.region + "-"):
                raise ValueError(f"zones[{i}]: {zone} is not in region {self.region}")
        for i, r in enumerate(self.reservations):
            if r.machine_type not in self.machine_types:
                raise ValueError(f"reservations[{i}].machine_type: {r.machine_type} is not one of machine_types")
            if r.zone not in self.offered_zones(r.machine_type):
                raise ValueError(f"reservations[{i}].zone: {r.machine_type} is not offered in {r.zone}")
        return self

    def boot_profile(self, machine_type: str) -> BootProfile:
        return self.boot.get(machine_type, self.default_boot)

    def offered_zones(self, machine_type: str) -> tuple[str, ...]:
        offered = load_catalog().machine(machine_type).zones_in(self.region)
        return tuple(z for z in offered if not self.zones or z in self.zones)
