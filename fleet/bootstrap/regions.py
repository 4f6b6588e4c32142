"""Where Google Cloud regions are, and which regions nearest to one offer a machine type.

"Nearest" is the great-circle (haversine) distance between the cities the regions sit in
(`data/regions.csv`, sources in its header).  It ranks alternatives for a region that lacks a
machine type; it says nothing about network latency between the regions.
"""

from __future__ import annotations

import csv
import difflib
import math
from dataclasses import dataclass
from functools import cache
from importlib import resources

from fleet.catalog import Catalog, MachineType, Price

EARTH_RADIUS_KM = 6371.0


@dataclass(frozen=True)
class RegionLocation:
    region: str
    city: str
    latitude: float
    longitude: float


@dataclass(frozen=True)
class Alternative:
    """A region that offers the machine type, with its distance and list price."""

    region: str
    city: str
    distance_km: float
    zones: tuple[str, ...]
    price: Price | None


class UnknownRegion(ValueError):
    """A region name that is neither in the region table nor in the machine catalog."""

    def __init__(self, region: str, known: list[str]) -> None:
        close = difflib.get_close_matches(region, known, n=3)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        super().__init__(f"unknown region {region!r}{hint}")
        self.region = region


@cache
def region_locations() -> dict[str, RegionLocation]:
    """The shipped region table, keyed by region name."""
    text = resources.files("fleet.bootstrap").joinpath("data", "regions.csv").read_text()
    rows = csv.DictReader(line for line in text.splitlines() if not line.startswith("#"))
    return {
        r["region"]: RegionLocation(r["region"], r["city"], float(r["latitude"]), float(r["longitude"])) for r in rows
    }


def great_circle_km(a: RegionLocation, b: RegionLocation) -> float:
    """Haversine distance between two locations, in km."""
    lat1, lon1, lat2, lon2 = map(math.radians, (a.latitude, a.longitude, b.latitude, b.longitude))
    h = math.sin((lat2 - lat1) / 2) ** 2 + math.cos(lat1) * math.cos(lat2) * math.sin((lon2 - lon1) / 2) ** 2
    return 2 * EARTH_RADIUS_KM * math.asin(math.sqrt(h))


def known_regions(catalog: Catalog) -> list[str]:
    """Every region named by the region table or the catalog (zones or prices)."""
    names = set(region_locations())
    for m in catalog.machines():
        names |= set(m.zones) | set(m.prices)
    return sorted(names)


def check_region(region: str, catalog: Catalog) -> None:
    """Raise UnknownRegion unless the region is one we know of."""
    known = known_regions(catalog)
    if region not in known:
        raise UnknownRegion(region, known)


def nearest_offering(
    region: str, machines: list[MachineType], limit: int = 3, locations: dict[str, RegionLocation] | None = None
) -> list[tuple[MachineType, Alternative]]:
    """The `limit` regions nearest `region` where one of `machines` is offered in some zone.

    Each region appears once, with the first of `machines` (in the order given: the caller's
    preference) offered there.  Regions missing from the location table are ranked last."""
    locations = locations if locations is not None else region_locations()
    here = locations.get(region)
    best: dict[str, tuple[MachineType, Alternative]] = {}
    for m in machines:
        for other, zones in m.zones.items():
            if other == region or other in best or not zones:
                continue
            there = locations.get(other)
            distance = great_circle_km(here, there) if here and there else math.inf
            best[other] = (m, Alternative(other, there.city if there else "?", distance, zones, m.price(other)))
    ranked = sorted(best.values(), key=lambda ma: (ma[1].distance_km, ma[1].region))
    return ranked[:limit]
