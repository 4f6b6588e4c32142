"""Price-performance across machine types, regions and capacity types: $/GPU-hour and $/PFLOP-hour.

Pure: takes the catalog (and optionally offerings priced outside it, e.g. a neocloud pool whose $/h the
fleet spec gives) and returns rows sorted cheapest per PFLOP-hour first.  A PFLOP-hour is one PFLOP/s of
dense BF16 tensor throughput (the catalog's `GpuSpec.bf16_dense_tflops`, NVIDIA's datasheet figure without
sparsity) for one hour, so it compares a slow cheap GPU with a fast dear one on the work it can do.
A machine type counts in a region only where the catalog lists a zone for it there (a price alone does not
mean the type is offered).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass

from fleet.catalog.model import Catalog, GpuSpec, MachineType, Price

#: the capacity types `compare` knows, in the spelling of the CLI
CAPACITIES = ("on-demand", "spot", "1y", "3y")

#: where the figures come from (the catalog's data files cite the same; scripts/derive_catalog.py)
SOURCES = {
    "prices": (
        "GCP list prices: Cyclenerd/google-cloud-pricing-cost-calculator pricing.yml @ fd66b26f (2026-07-30); "
        "H200/B200, absent from that list: anycloud-sh/catalog @ 62ff0a98 (2026-05-20, SkyPilot format), "
        "corrected where known to under-report (price_source zone_offerings_corrected)"
    ),
    "committed_use": "1y / 3y: the list's committed-use monthly price / 730 h (zone-derived rows: the median "
    "discount of the 8-GPU H100 list rows)",
    "bf16_dense_tflops": "NVIDIA datasheets, dense BF16 tensor TFLOPS per GPU (no sparsity): A100 312, "
    "H100/H200 SXM 989, B200 2250, L4 121",
}


class CompareError(ValueError):
    """A bad filter: names the option and what it accepts."""


@dataclass(frozen=True)
class ExtraOffering:
    """A pool priced outside the catalog (a provider the catalog lacks): its $/h per node from the spec."""

    provider: str
    name: str  # the pool or machine name the user knows it by
    region: str
    gpu: GpuSpec
    gpu_count: int
    capacity: str
    hourly_usd: float


@dataclass(frozen=True)
class CompareRow:
    provider: str
    machine_type: str
    gpu: str  # short name, e.g. h100-mega
    gpus: int
    region: str
    zones: int
    capacity: str
    usd_per_hour: float  # one node
    usd_per_gpu_hour: float
    usd_per_pflop_hour: float
    bf16_dense_tflops_per_gpu: float
    price_source: str

    def to_json(self) -> dict[str, object]:
        return asdict(self)


def _hourly(price: Price, capacity: str) -> float | None:
    return {"on-demand": price.on_demand, "spot": price.spot, "1y": price.commit_1y, "3y": price.commit_3y}[capacity]


def gpu_matches(spec: GpuSpec, wanted: Sequence[str]) -> bool:
    """`h100` selects every H100 (h100 and h100-mega), `a100` both A100s; an exact short name selects itself."""
    if not wanted:
        return True
    return any(spec.short == w or spec.short.startswith(f"{w}-") for w in wanted)


def parse_list(value: str | None, option: str, allowed: Iterable[str] | None = None) -> tuple[str, ...]:
    """A comma-separated option value; unknown members are a `CompareError` naming the option."""
    if value is None:
        return ()
    items = tuple(v.strip().lower() for v in value.split(",") if v.strip())
    if not items:
        raise CompareError(f"{option}: give at least one value")
    if allowed is not None:
        allowed = tuple(allowed)
        bad = [v for v in items if v not in allowed]
        if bad:
            raise CompareError(f"{option}: unknown {', '.join(bad)} (choose from {', '.join(allowed)})")
    return items


def known_gpus(catalog: Catalog) -> tuple[str, ...]:
    """GPU names `--gpu` accepts: every short name and every family prefix (h100 for h100-mega)."""
    shorts = {m.gpu.short for m in catalog.machines()}
    return tuple(sorted(shorts | {s.split("-", 1)[0] for s in shorts}))


def compare(
    catalog: Catalog,
    *,
    gpus: Sequence[str] = (),
    regions: Sequence[str] = (),
    capacities: Sequence[str] = CAPACITIES,
    extra: Sequence[ExtraOffering] = (),
) -> list[CompareRow]:
    """Every (machine type, offered region, capacity type) with a price, cheapest $/PFLOP-hour first."""
    rows: list[CompareRow] = []
    for m in catalog.machines():
        if not gpu_matches(m.gpu, gpus):
            continue
        for region, zones in m.zones.items():
            if regions and region not in regions:
                continue
            price = m.price(region)
            if price is None or not zones:
                continue
            for cap in capacities:
                usd = _hourly(price, cap)
                if usd is not None:
                    rows.append(_row(catalog.provider, m, region, len(zones), cap, usd, price.source))
    for x in extra:
        if gpu_matches(x.gpu, gpus) and (not regions or x.region in regions) and x.capacity in capacities:
            rows.append(
                _make(x.provider, x.name, x.gpu, x.gpu_count, x.region, 0, x.capacity, x.hourly_usd, "fleet spec")
            )
    rows.sort(key=lambda r: (r.usd_per_pflop_hour, r.usd_per_gpu_hour, r.machine_type, r.region, r.capacity))
    return rows


def _row(provider: str, m: MachineType, region: str, zones: int, cap: str, usd: float, source: str) -> CompareRow:
    return _make(provider, m.name, m.gpu, m.gpu_count, region, zones, cap, usd, source)


def _make(
    provider: str,
    name: str,
    gpu: GpuSpec,
    count: int,
    region: str,
    zones: int,
    cap: str,
    usd: float,
    source: str,
) -> CompareRow:
    per_gpu = usd / count
    return CompareRow(
        provider=provider,
        machine_type=name,
        gpu=gpu.short,
        gpus=count,
        region=region,
        zones=zones,
        capacity=cap,
        usd_per_hour=round(usd, 4),
        usd_per_gpu_hour=round(per_gpu, 4),
        usd_per_pflop_hour=round(per_gpu / (gpu.bf16_dense_tflops / 1000.0), 4),
        bf16_dense_tflops_per_gpu=gpu.bf16_dense_tflops,
        price_source=source,
    )


def unpriced(catalog: Catalog, *, gpus: Sequence[str] = (), regions: Sequence[str] = ()) -> list[tuple[str, str]]:
    """(machine type, region) pairs the catalog lists zones for but has no price for: not comparable."""
    return sorted(
        (m.name, r)
        for m in catalog.machines()
        if gpu_matches(m.gpu, gpus)
        for r, zones in m.zones.items()
        if zones and m.price(r) is None and (not regions or r in regions)
    )
