"""Regenerate the shipped price and zone tables in fleet/catalog/data/ from ../shared/data.

Run from the repository root:  python scripts/derive_catalog.py [--shared ../shared/data]

Inputs (see ../shared/data/README.md for their provenance):
- prices/gcp/list_prices_by_region.csv: Cyclenerd/google-cloud-pricing-cost-calculator
  pricing.yml @ fd66b26ff84fee5cdd94f341ea89206e76c06b99 (Apache-2.0), generated 2026-07-30.
- prices/gcp/zone_offerings.csv: anycloud-sh/catalog @ 62ff0a987e0c257a89235415d2877812fb1aaf29
  (SkyPilot catalog format, 2026-05-20), used for which zones offer a type and, only where the
  list lacks a (type, region), for its price (rows then carry source=zone_offerings).

Outputs: gcp_prices.csv (machine_type, region, on_demand, spot, commit_1y, commit_3y $/h, source)
and gcp_zones.csv (machine_type, region, zone).  Committed-use monthly prices become hourly by
dividing by 730 h.  zone_offerings under-reports the accelerator price in some regions (its
H100 totals are about half the list price there); a zone-derived on-demand total below 75% of the
type's highest regional total is replaced by that highest total (source=zone_offerings_corrected),
so H200/B200 are never priced below the list H100.  Zone-derived rows have no committed-use
figure in the data: they take the median 1y/3y discount ratio of the list's 8-GPU H100 rows
(a3-megagpu-8g / a3-highgpu-8g).
"""

from __future__ import annotations

import argparse
import csv
import statistics
from pathlib import Path

import yaml

HOURS_PER_MONTH = 730.0
UNDER_REPORT = 0.75  # a zone-derived total below 75% of the type's top regional total is suspect
DATA = Path(__file__).resolve().parent.parent / "fleet" / "catalog" / "data"


def _hourly(value: str, per: float = 1.0) -> float | None:
    """A CSV price cell as $/h, or None where the source has no figure."""
    return float(value) / per if value else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shared", type=Path, default=Path("../shared/data"))
    args = parser.parse_args()
    machines = set(yaml.safe_load((DATA / "gcp_machines.yaml").read_text())["machines"])
    prices_dir = args.shared / "prices" / "gcp"

    prices: dict[tuple[str, str], dict[str, object]] = {}
    ratios_1y: list[float] = []
    ratios_3y: list[float] = []
    with open(prices_dir / "list_prices_by_region.csv", newline="") as fh:
        for row in csv.DictReader(fh):
            if row["machine_type"] not in machines:
                continue
            month = float(row["month"])
            prices[(row["machine_type"], row["region"])] = {
                "on_demand": float(row["hour"]),
                "spot": _hourly(row["hour_spot"]),
                "commit_1y": _hourly(row["month_1y"], HOURS_PER_MONTH),
                "commit_3y": _hourly(row["month_3y"], HOURS_PER_MONTH),
                "source": "list",
            }
            if row["machine_type"] in ("a3-megagpu-8g", "a3-highgpu-8g") and row["month_1y"] and row["month_3y"]:
                ratios_1y.append(float(row["month_1y"]) / month)
                ratios_3y.append(float(row["month_3y"]) / month)
    r1, r3 = statistics.median(ratios_1y), statistics.median(ratios_3y)

    zones: set[tuple[str, str, str]] = set()
    with open(prices_dir / "zone_offerings.csv", newline="") as fh:
        zone_rows = list(csv.DictReader(fh))
    top_total: dict[str, float] = {}
    for row in zone_rows:
        if row["total_price"] and not row["note"]:
            mt = row["machine_type"]
            top_total[mt] = max(top_total.get(mt, 0.0), float(row["total_price"]))
    for row in zone_rows:
        mt = row["machine_type"]
        if mt not in machines:
            continue
        zones.add((mt, row["region"], row["zone"]))
        key = (mt, row["region"])
        if key in prices or not row["total_price"]:
            continue
        if row["note"]:  # host-only totals (no accelerator row): not a usable price
            continue
        on_demand = float(row["total_price"])
        source = "zone_offerings"
        if on_demand < UNDER_REPORT * top_total[mt]:
            # The known fault of this table: some regions carry an accelerator price about
            # half the list price.  Take the type's highest regional total instead.
            on_demand, source = top_total[mt], "zone_offerings_corrected"
        spot = float(row["total_spot"]) if row["total_spot"] else None
        prices[key] = {
            "on_demand": on_demand,
            "spot": spot,
            "commit_1y": on_demand * r1,
            "commit_3y": on_demand * r3,
            "source": source,
        }

    with open(DATA / "gcp_prices.csv", "w", newline="") as fh:
        fh.write("# Derived by scripts/derive_catalog.py; see its docstring for sources. $/hour.\n")
        w = csv.writer(fh)
        w.writerow(
            [
                "machine_type",
                "region",
                "on_demand",
                "spot",
                "commit_1y",
                "commit_3y",
                "source",
            ]
        )
        for (mt, region), p in sorted(prices.items()):
            w.writerow(
                [mt, region]
                + ["" if p[k] is None else f"{p[k]:.4f}" for k in ("on_demand", "spot", "commit_1y", "commit_3y")]
                + [p["source"]]
            )
    with open(DATA / "gcp_zones.csv", "w", newline="") as fh:
        fh.write("# Derived by scripts/derive_catalog.py from zone_offerings.csv (anycloud-sh/catalog @ 62ff0a98).\n")
        w = csv.writer(fh)
        w.writerow(["machine_type", "region", "zone"])
        for z in sorted(zones):
            w.writerow(z)
    print(f"{len(prices)} prices, {len(zones)} zones; zone-derived commit ratios 1y={r1:.3f} 3y={r3:.3f}")


if __name__ == "__main__":
    main()
