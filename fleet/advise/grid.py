"""The advisor's grid: reservation sizes x committed-use terms, and the hourly price of each term.

A term is what a reserved node costs per hour: `none` (a reservation without a commitment bills at the
on-demand rate), `1y` or `3y` (the committed-use rates).  Rates come from the catalog (the reserved
machine type in the region) or from a `--price-file` of negotiated rates.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

TERMS = ("none", "1y", "3y")
#: how long a term binds: a commitment is billed for every hour of it and cannot be cancelled (`none`: nothing)
TERM_DAYS = {"none": 0, "1y": 365, "3y": 1095}

MAX_POINTS = 2000  # sizes in one grid: beyond this a sweep is a mistake, not a plan


class GridError(ValueError):
    """A bad grid or price option; the message names the option."""


def parse_sizes(text: str) -> tuple[int, ...]:
    """`0:200:10` (start:stop:step, stop included) or `0,8,16` -> sorted distinct reservation sizes."""
    text = text.strip()
    try:
        if ":" in text:
            parts = [int(p) for p in text.split(":")]
            if len(parts) != 3:
                raise GridError("--sizes: give START:STOP:STEP (e.g. 0:200:10) or a comma-separated list")
            start, stop, step = parts
            if step <= 0 or start < 0 or stop < start:
                raise GridError("--sizes: need 0 <= START <= STOP and STEP > 0")
            if (stop - start) // step + 1 > MAX_POINTS:
                raise GridError(f"--sizes: more than {MAX_POINTS} points")
            sizes = list(range(start, stop + 1, step))
        else:
            sizes = [int(p) for p in text.split(",") if p.strip()]
    except ValueError as exc:
        if isinstance(exc, GridError):
            raise
        raise GridError(f"--sizes: not whole numbers: {text!r}") from None
    if not sizes:
        raise GridError("--sizes: no size given")
    if any(s < 0 for s in sizes):
        raise GridError("--sizes: sizes are node counts, 0 or more")
    if len(sizes) > MAX_POINTS:
        raise GridError(f"--sizes: more than {MAX_POINTS} points")
    return tuple(sorted(set(sizes)))


def parse_terms(text: str) -> tuple[str, ...]:
    terms = tuple(dict.fromkeys(t.strip().lower() for t in text.split(",") if t.strip()))
    bad = [t for t in terms if t not in TERMS]
    if bad or not terms:
        raise GridError(f"--terms: unknown {', '.join(bad) or '(none given)'} (choose from {', '.join(TERMS)})")
    return terms


@dataclass(frozen=True)
class TermPrices:
    """$/h of one reserved node under each term, the flat discount on overflow usage, and where they come from."""

    machine_type: str
    region: str
    hourly: dict[str, float]  # term -> $/h per node
    overflow_discount: float = 0.0  # negotiated discount on on-demand and spot usage, 0..1
    source: str = ""
    caveats: tuple[str, ...] = ()  # what the reader must know about these rates (e.g. estimated, not list)

    def rate(self, term: str) -> float:
        return self.hourly[term]

    def commitment_total(self, term: str, nodes: int) -> float:
        """What `nodes` reserved nodes on `term` bind the team to: nodes x the term's $/h x every hour of the term
        (billed whether used or not, and not cancellable); 0 for `none`, which commits to nothing."""
        return nodes * self.rate(term) * TERM_DAYS[term] * 24.0 if nodes else 0.0


def catalog_prices(machine_type: str, region: str, terms: tuple[str, ...]) -> TermPrices:
    """The catalog's $/h per node for `terms`.  Where the catalog's committed-use rates are estimated
    (`Price.commit_estimated`: a row not from the list), the source says so and a caveat names the machine type."""
    from fleet.catalog import load_catalog
    from fleet.catalog.model import LIST_SOURCE

    m = load_catalog().machine(machine_type)
    p = m.price(region)
    if p is None:
        raise GridError(f"--region: {machine_type} has no price in {region}")
    table = {"none": p.on_demand, "1y": p.commit_1y, "3y": p.commit_3y}
    missing = [t for t in terms if table[t] is None]
    if missing:
        raise GridError(f"--terms: the catalog has no {', '.join(missing)} rate for {machine_type} in {region}")
    hourly = {t: float(table[t]) for t in terms}  # type: ignore[arg-type]
    estimated = [t for t in terms if t != "none"] if p.commit_estimated else []
    where = f"for {machine_type} in {region}"
    if not estimated:
        label = "catalog list prices" if p.source == LIST_SOURCE else f"catalog prices ({p.source})"
        return TermPrices(machine_type, region, hourly, source=f"{label} {where}")
    ratios = ", ".join(f"{t} {hourly[t] / p.on_demand:.4f}" for t in estimated)
    caveat = (
        f"the {'/'.join(estimated)} rates of {machine_type} in {region} are estimated, not list prices: the catalog "
        f"has no committed-use price for it there (its prices come from {p.source}) and applies the median discount "
        f"of the list's 8-GPU H100 rows (x on-demand: {ratios}); give the team's negotiated or published rates with "
        f"--price-file to replace them"
    )
    return TermPrices(
        machine_type,
        region,
        hourly,
        source=f"catalog prices ({p.source}; {'/'.join(estimated)} estimated) {where}",
        caveats=(caveat,),
    )


def load_price_file(path: Path, machine_type: str, region: str, terms: tuple[str, ...]) -> TermPrices:
    """A YAML file of negotiated rates:

    reservation: {none: 88.49, 1y: 60.0, 3y: 38.0}   # $/h per reserved node
    overflow_discount: 0.1                            # optional, on on-demand and spot usage
    source: "contract 2026-09"                         # optional, shown in the report
    """
    from fleet.input import InputError, load_yaml
    from fleet.input.limits import MAX_PRICE_FILE_BYTES

    where = f"--price-file: {path}"
    try:  # the input gate: a regular file within its size limit, UTF-8, no duplicate key, bounded YAML
        doc = load_yaml(path, what="price file", max_bytes=MAX_PRICE_FILE_BYTES)
    except InputError as exc:
        raise GridError("; ".join(f"--price-file: {line}" for line in exc.lines())) from None
    if not isinstance(doc, dict) or set(doc) - {"reservation", "overflow_discount", "source"}:
        raise GridError(f"{where}: expected the keys reservation, overflow_discount, source")
    res = doc.get("reservation")
    if not isinstance(res, dict):
        raise GridError(f"{where}: reservation: a mapping of term -> $/h per node")
    hourly: dict[str, float] = {}
    for term in terms:
        v = res.get(term)
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v < 0:
            raise GridError(f"{where}: reservation.{term}: a finite $/h >= 0 is required for every --terms entry")
        hourly[term] = float(v)
    extra = set(res) - set(TERMS)
    if extra:
        raise GridError(f"{where}: reservation: unknown term {', '.join(sorted(map(str, extra)))}")
    disc = doc.get("overflow_discount", 0.0)
    if isinstance(disc, bool) or not isinstance(disc, int | float) or not (0.0 <= disc < 1.0):
        raise GridError(f"{where}: overflow_discount: a fraction in [0, 1)")
    src = doc.get("source", str(path))
    return TermPrices(machine_type, region, hourly, float(disc), f"price file {path}: {src}")
