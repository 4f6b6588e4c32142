"""Errors of the bootstrap decisions, each with the exit code `fleet bootstrap-region` uses.

Exit codes (documented in docs/bootstrap.md): 1 Compute could not be read, or an internal error;
2 bad arguments; 3 no zone of the region offers the machine type; 4 the region's quota (or the
reservation) is too small for the stack.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fleet.bootstrap.quotas import QuotaShortfall
    from fleet.bootstrap.regions import Alternative
    from fleet.catalog import MachineType


class BootstrapError(Exception):
    exit_code = 1

    def to_json(self) -> dict:
        return {"error": type(self).__name__, "message": str(self), "exit_code": self.exit_code}


class BadArgument(BootstrapError):
    """An argument is wrong; `argument` names it (e.g. `--gpus`)."""

    exit_code = 2

    def __init__(self, argument: str, reason: str) -> None:
        super().__init__(f"{argument}: {reason}")
        self.argument = argument
        self.reason = reason

    def to_json(self) -> dict:
        return {**super().to_json(), "argument": self.argument, "reason": self.reason}


class ComputeReadError(BootstrapError):
    """Compute Engine could not be read for --check-quota (API error, permission, bad endpoint)."""

    exit_code = 1


class InvalidPlan(BootstrapError):
    """The spec bootstrap generated fails the fleet spec's validation: a bug in bootstrap, reported as such."""

    exit_code = 1

    def __init__(self, errors: list[tuple[str, str]]) -> None:
        lines = "; ".join(f"{path}: {reason}" for path, reason in errors)
        super().__init__(f"internal error, please report: the generated fleet spec fails validation: {lines}")
        self.errors = errors

    def to_json(self) -> dict:
        return {**super().to_json(), "errors": [{"path": p, "reason": r} for p, r in self.errors]}


class NoZoneOffers(BootstrapError):
    """No zone of the region offers the machine type; `alternatives` are the nearest regions that do."""

    exit_code = 3

    def __init__(self, region: str, wanted: str, alternatives: list[tuple[MachineType, Alternative]]) -> None:
        near = "; ".join(
            f"{alt.region} ({alt.distance_km:,.0f} km, {m.name}, {_price_text(alt)})" for m, alt in alternatives
        )
        super().__init__(
            f"no zone in {region} offers {wanted} per the catalog"
            + (f"; nearest regions that do: {near}" if near else "; no region offers it")
        )
        self.region = region
        self.wanted = wanted
        self.alternatives = alternatives

    def to_json(self) -> dict:
        return {
            **super().to_json(),
            "region": self.region,
            "wanted": self.wanted,
            "nearest_regions": [
                {
                    "region": alt.region,
                    "city": alt.city,
                    "distance_km": round(alt.distance_km),
                    "machine_type": m.name,
                    "zones": list(alt.zones),
                    "on_demand_usd_per_node_hour": alt.price.on_demand if alt.price else None,
                    "spot_usd_per_node_hour": alt.price.spot if alt.price else None,
                }
                for m, alt in self.alternatives
            ],
        }


class QuotaTooSmall(BootstrapError):
    """The region's free quota is smaller than what the stack needs at its maximum size."""

    exit_code = 4

    def __init__(self, region: str, shortfalls: list[QuotaShortfall]) -> None:
        lines = ", ".join(
            f"{s.metric}: needs {s.needed:g}, available {s.available:g} (limit {s.limit:g}, in use {s.usage:g})"
            for s in shortfalls
        )
        super().__init__(f"quota too small in {region}: {lines}")
        self.region = region
        self.shortfalls = shortfalls

    def to_json(self) -> dict:
        return {
            **super().to_json(),
            "region": self.region,
            "shortfalls": [
                {"metric": s.metric, "needed": s.needed, "available": s.available, "limit": s.limit, "usage": s.usage}
                for s in self.shortfalls
            ],
        }


def _price_text(alt: Alternative) -> str:
    if alt.price is None:
        return "no list price"
    spot = f", spot ${alt.price.spot:,.2f}/h" if alt.price.spot is not None else ""
    return f"${alt.price.on_demand:,.2f}/h on-demand{spot} per node"
