"""Hourly list price of a fleet from the machine catalog (pure: spec + catalog in, numbers out).

Per pool: nodes x the pool's `price_per_hour` when the spec gives one (a provider the catalog lacks, a
negotiated rate), else the catalog's $/h for the pool's capacity type in the fleet's region (spot price
for spot; the on-demand rate for on-demand and flex-start, an upper bound for flex-start, which
bills at most that).  A reservation is billed whether it is used or not, and the spec does not
say how large it is: we assume it is sized to the pool's `max_nodes` and count the pool at
max_nodes in *both* totals.  Excluded (and listed in `excluded`): the clusters' system machines (Slurm's controller
and login VMs, GKE's fee and system pool: not in the GPU price catalog), disks, Filestore, GCS, Lustre, NAT and
egress.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from fleet.catalog import CapacityType, Catalog, load_catalog
from fleet.spec.kube import pool_price
from fleet.spec.model import FleetSpec

#: what the totals leave out, by what the fleet runs: its clusters' system machines, then what every fleet has
EXCLUDED_BY_PLATFORM = {
    "gce": "Slurm controller and login VMs (not in the GPU price catalog)",
    "gke": "GKE's cluster management fee and its system node pool (not in the GPU price catalog)",
    "kubernetes": "the existing cluster's control plane and system nodes (not deployed by the stack)",
}
EXCLUDED = (
    "boot disks, Filestore, GCS, Managed Lustre, Cloud NAT and network egress",
    "committed-use and negotiated discounts",
)


def excluded(spec: FleetSpec) -> list[str]:
    """What `fleet_cost` leaves out of the spec's totals."""
    platforms = dict.fromkeys(c.platform for c in spec.clusters)
    return [*(EXCLUDED_BY_PLATFORM[p] for p in platforms), *EXCLUDED]


@dataclass(frozen=True)
class PoolCost:
    pool: str
    cluster: str
    machine_type: str
    capacity_type: str
    min_nodes: int
    max_nodes: int
    billed_nodes_at_min: int
    billed_nodes_at_max: int
    unit_usd_per_hour: float | None  # None: no catalog price for this type/capacity in the region
    hourly_usd_at_min: float
    hourly_usd_at_max: float
    price_source: str


@dataclass(frozen=True)
class FleetCost:
    region: str
    hourly_usd_at_min: float
    hourly_usd_at_max: float
    by_pool: list[PoolCost]
    excluded: list[str]  # `excluded(spec)`: what the totals leave out depends on the platforms
    unpriced_pools: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, object]:
        return asdict(self)


def fleet_cost(spec: FleetSpec, catalog: Catalog | None = None) -> FleetCost:
    cat = catalog or load_catalog(spec.provider)
    pools: list[PoolCost] = []
    unpriced: list[str] = []
    for cluster in spec.clusters:
        for pool in cluster.pools:
            unit, source = pool_price(spec, pool, cat)  # the spec's price_per_hour, else the catalog's
            reserved = pool.capacity is CapacityType.RESERVATION
            at_min = pool.max_nodes if reserved else pool.min_nodes
            if unit is None:
                unpriced.append(f"{cluster.name}/{pool.name}")
            pools.append(
                PoolCost(
                    pool=pool.name,
                    cluster=cluster.name,
                    machine_type=pool.machine_type,
                    capacity_type=str(pool.capacity),
                    min_nodes=pool.min_nodes,
                    max_nodes=pool.max_nodes,
                    billed_nodes_at_min=at_min,
                    billed_nodes_at_max=pool.max_nodes,
                    unit_usd_per_hour=unit,
                    hourly_usd_at_min=round((unit or 0.0) * at_min, 2),
                    hourly_usd_at_max=round((unit or 0.0) * pool.max_nodes, 2),
                    price_source=source,
                )
            )
    return FleetCost(
        region=spec.region,
        hourly_usd_at_min=round(sum(p.hourly_usd_at_min for p in pools), 2),
        hourly_usd_at_max=round(sum(p.hourly_usd_at_max for p in pools), 2),
        by_pool=pools,
        excluded=excluded(spec),
        unpriced_pools=unpriced,
    )
