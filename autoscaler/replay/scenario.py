"""One replay scenario: every setting a `fleet simulate` run used, and what follows from them.

`Scenario` is validated (pydantic): a bad setting fails naming the option and the reason.  It
builds the sim cloud's `SimConfig` (zones, shapes, prices from the catalog, reservation, spot,
stockouts, boot time) so every policy of a run sees the same cloud."""

from __future__ import annotations

from functools import cached_property
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, computed_field, model_validator

from autoscaler.model import Pool
from autoscaler.sim import BootProfile, SimConfig, SimReservation
from fleet.catalog import DEFAULT_READY_S, CapacityType, MachineType, load_catalog

RESERVATION_NAME = "replay-reservation"
#: slurmctld's periodic pass that launches a job bound to a booting node, seconds (measured on 22.05.8:
#: `bench/late_bind_latency.py --bind`; `SlurmSettings.launch_pass_s`)
DEFAULT_SLURM_LAUNCH_PASS_S = 30.0


class Scenario(BaseModel):
    """Settings of a replay.  Defaults are the issue's: a3-highgpu in us-central1, list prices,
    360 s boot-to-ready, no reservation, no spot, no stockouts, seed 0."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)  # no NaN / inf flags (input gate)

    trace: str = ""
    machine_family: str = "a3-highgpu"
    region: str = "us-central1"
    reserved_nodes: int = Field(0, ge=0)
    reservation_rate: Literal["commit-1y", "on-demand"] = "commit-1y"
    spot_fraction: float = Field(0.0, ge=0.0, le=1.0)
    boot_seconds: float = Field(DEFAULT_READY_S, ge=0.0)  # the catalog's boot-to-ready time
    register_seconds: float = Field(30.0, ge=0.0)
    stockout_rate: float = Field(0.0, ge=0.0, le=1.0)
    stockout_window_s: float = Field(1800.0, gt=0.0)
    stockout_mode: Literal["timeline", "per-attempt"] = "timeline"  # see SimConfig.stockout_mode
    preemption_rate_per_hour: float = Field(0.01, ge=0.0)
    # spot-tolerant work checkpoints: a preempted job loses only the run time since its last checkpoint
    checkpoint_interval_s: float = Field(1800.0, ge=0.0)  # 0: a preempted job restarts from scratch
    # slurmctld's periodic pass that launches a job bound to a booting node (0: at its node's registration)
    slurm_launch_pass_s: float = Field(DEFAULT_SLURM_LAUNCH_PASS_S, ge=0.0)
    seed: int = 0

    @model_validator(mode="after")
    def _check(self) -> Scenario:
        cat = load_catalog()
        fam = cat.family(self.machine_family)
        if not fam:
            families = sorted({m.family for m in cat.machines()})
            raise ValueError(f"machine_family: unknown family {self.machine_family!r} (known: {', '.join(families)})")
        offered = [m for m in fam if m.zones_in(self.region) and m.price(self.region)]
        if not offered:
            raise ValueError(f"region: no {self.machine_family} machine type is offered and priced in {self.region}")
        if self.reserved_nodes and self.reservation_machine is None:
            raise ValueError(f"reserved_nodes: {self.machine_family} has no 8-GPU machine type to reserve")
        if self.spot_fraction > 0 and not any(m.price(self.region).spot for m in offered):  # type: ignore[union-attr]
            raise ValueError(f"spot_fraction: {self.machine_family} has no spot price in {self.region}")
        return self

    # ---- derived ----------------------------------------------------------------------------------

    @cached_property
    def machines(self) -> list[MachineType]:
        """The family's machine types offered and priced in the region, smallest first."""
        return [
            m for m in load_catalog().family(self.machine_family) if m.zones_in(self.region) and m.price(self.region)
        ]

    @cached_property
    def reservation_machine(self) -> MachineType | None:
        eight = [m for m in self.machines if m.gpu_count == 8]
        return eight[0] if eight else None

    @computed_field  # type: ignore[prop-decorator]
    @property
    def zones(self) -> list[str]:
        zs: set[str] = set()
        for m in self.machines:
            zs.update(m.zones_in(self.region))
        return sorted(zs)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def machine_types(self) -> list[str]:
        return [m.name for m in self.machines]

    @computed_field  # type: ignore[prop-decorator]
    @property
    def reservation_zone(self) -> str | None:
        m = self.reservation_machine
        return m.zones_in(self.region)[0] if (m and self.reserved_nodes) else None

    @computed_field  # type: ignore[prop-decorator]
    @property
    def reservation_hourly_usd(self) -> float | None:
        """$/h per reserved node: the 1-year commitment rate (the usual pairing with a reservation),
        or the on-demand rate; billed for the whole span whether used or not."""
        m = self.reservation_machine
        if not (m and self.reserved_nodes):
            return None
        price = m.price(self.region)
        assert price is not None
        if self.reservation_rate == "commit-1y" and price.commit_1y:
            return price.commit_1y
        return price.on_demand

    @computed_field  # type: ignore[prop-decorator]
    @property
    def capacity_types(self) -> list[CapacityType]:
        out = [CapacityType.ON_DEMAND]
        if self.spot_fraction > 0:
            out.append(CapacityType.SPOT)
        return out

    @property
    def ready_s(self) -> float:
        return self.boot_seconds

    def sim_config(self) -> SimConfig:
        reservations: tuple[SimReservation, ...] = ()
        if self.reserved_nodes:
            m = self.reservation_machine
            assert m is not None and self.reservation_zone and self.reservation_hourly_usd is not None
            reservations = (
                SimReservation(
                    name=RESERVATION_NAME,
                    zone=self.reservation_zone,
                    machine_type=m.name,
                    nodes=self.reserved_nodes,
                    hourly_usd=self.reservation_hourly_usd,
                ),
            )
        return SimConfig(
            region=self.region,
            machine_types=tuple(self.machine_types),
            capacity_types=tuple(self.capacity_types),
            default_boot=BootProfile.total(self.boot_seconds, self.register_seconds),
            stockout_rate=self.stockout_rate,
            stockout_window_s=self.stockout_window_s,
            stockout_mode=self.stockout_mode,
            preemption_rate_per_hour=self.preemption_rate_per_hour,
            reservations=reservations,
            seed=self.seed,
        )

    def pools(self, machine_types: list[str] | None = None, *, spot: bool | None = None) -> list[Pool]:
        """One pool per (machine type, capacity type) over all zones, plus the reservation's pool.

        Pool names: ``<machine type>-<capacity type>`` (``a3-highgpu-8g-reserved`` for the reservation).
        `spot=False` leaves spot pools out even when the scenario has spot-tolerant work."""
        wanted = set(machine_types) if machine_types else None
        out: list[Pool] = []
        for m in self.machines:
            if wanted is not None and m.name not in wanted:
                continue
            zones = tuple(m.zones_in(self.region))
            for ct in self.capacity_types:
                if ct is CapacityType.SPOT and (spot is False or not m.price(self.region).spot):  # type: ignore[union-attr]
                    continue
                out.append(
                    Pool(
                        name=f"{m.name}-{ct}",
                        machine_type=m.name,
                        gpu_type=m.gpu.accelerator_type,
                        gpus_per_node=m.gpu_count,
                        zones=zones,
                        capacity_type=ct,
                        max_nodes=8192,
                        provider="sim",
                        spot_tolerant=ct is CapacityType.SPOT,
                        compact_placement=m.compact_placement_max_vms > 0,
                        placement_max_vms=m.compact_placement_max_vms or None,
                    )
                )
            if self.reserved_nodes and m is self.reservation_machine and (wanted is None or m.name in wanted):
                out.append(
                    Pool(
                        name=f"{m.name}-reserved",
                        machine_type=m.name,
                        gpu_type=m.gpu.accelerator_type,
                        gpus_per_node=m.gpu_count,
                        zones=(self.reservation_zone,),  # type: ignore[arg-type]
                        capacity_type=CapacityType.RESERVATION,
                        max_nodes=self.reserved_nodes,
                        provider="sim",
                        reservation=RESERVATION_NAME,
                    )
                )
        return out
