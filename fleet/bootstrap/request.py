"""What the user asked `fleet bootstrap-region` for, parsed and checked (clear errors naming the flag).

`BootstrapRequest` is the input of `plan.plan_region`; `check_request` rejects what no plan can fix
(a malformed project id, an unknown region, a bad CIDR) before any decision is made.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from ipaddress import IPv4Network

from fleet.bootstrap.errors import BadArgument
from fleet.bootstrap.regions import UnknownRegion, check_region
from fleet.catalog import CapacityType, Catalog

PROJECT_RE = re.compile(r"^[a-z][-a-z0-9]{4,28}[a-z0-9]$")
NAME_RE = re.compile(r"^[a-z]([-a-z0-9]{0,18}[a-z0-9])?$")
STACK_RE = re.compile(r"^[A-Za-z0-9_.-]{1,100}$")
RESERVATION_RE = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")


@dataclass(frozen=True)
class Capacity:
    type: CapacityType
    reservation: str | None = None

    def __str__(self) -> str:
        return f"reservation:{self.reservation}" if self.reservation else str(self.type)


def parse_capacity(text: str) -> Capacity:
    """`reservation:NAME`, `spot`, `flex-start` or `on-demand`."""
    kind, _, name = text.partition(":")
    try:
        ctype = CapacityType(kind)
    except ValueError:
        raise BadArgument(
            "--capacity", f"{text!r} is not one of reservation:NAME, spot, flex-start, on-demand"
        ) from None
    if ctype is CapacityType.RESERVATION:
        if not name:
            raise BadArgument("--capacity", "reservation needs its name: reservation:NAME")
        if not RESERVATION_RE.match(name):
            raise BadArgument("--capacity", f"reservation name {name!r} is not a valid GCE resource name")
        return Capacity(ctype, name)
    if name:
        raise BadArgument("--capacity", f"only reservation takes a name (got {text!r})")
    return Capacity(ctype)


def region_abbrev(region: str) -> str:
    """us-central1 -> usc1, europe-west4 -> euw4, asia-southeast1 -> asse1 (for short names)."""
    geo, _, rest = region.partition("-")
    m = re.fullmatch(r"([a-z]+?)(\d+)", rest)
    area, num = (m.group(1), m.group(2)) if m else (rest, "")
    directions = {"north": "n", "south": "s", "east": "e", "west": "w", "central": "c"}
    short = "".join(directions.get(part, part[:1]) for part in re.findall(r"north|south|east|west|central|.+", area))
    return f"{geo[:2]}{short}{num}"


@dataclass(frozen=True)
class BootstrapRequest:
    project: str
    region: str
    gpu: str
    gpus: int
    scheduler: str = "slurm"
    capacity: Capacity = field(default_factory=lambda: Capacity(CapacityType.ON_DEMAND))
    stack: str | None = None
    cluster: str | None = None
    machine_type: str | None = None
    zones: tuple[str, ...] | None = None
    reserved_cidrs: tuple[str, ...] = ()  # ranges used elsewhere (peered VPCs, on-prem) to keep clear of

    @property
    def stack_name(self) -> str:
        return self.stack or f"gcp-{self.region}-{self.gpu.lower()}"

    @property
    def cluster_name(self) -> str:
        return self.cluster or f"{self.gpu.lower().replace('-', '')}-{region_abbrev(self.region)}"[:20].rstrip("-")


def check_request(req: BootstrapRequest, catalog: Catalog) -> None:
    if not PROJECT_RE.match(req.project):
        raise BadArgument("--project", f"{req.project!r} is not a GCP project id (6-30 chars, a-z 0-9 -)")
    try:
        check_region(req.region, catalog)
    except UnknownRegion as exc:
        raise BadArgument("--region", str(exc)) from None
    if req.scheduler != "slurm":
        raise BadArgument("--scheduler", f"{req.scheduler!r}: only slurm is supported by the stack program today")
    if not STACK_RE.match(req.stack_name):
        raise BadArgument("--name", f"{req.stack_name!r}: stack names use letters, digits, '-', '_', '.'")
    for cidr in req.reserved_cidrs:
        try:
            IPv4Network(cidr)
        except ValueError as exc:
            raise BadArgument("--reserve", f"{cidr!r} is not an IPv4 CIDR ({exc})") from None
    if not NAME_RE.match(req.cluster_name):
        raise BadArgument("--cluster", f"{req.cluster_name!r} is not a lower-case RFC 1035 name of <= 20 chars")
