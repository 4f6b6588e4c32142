"""What the user asked `fleet bootstrap-region` for, parsed and checked (clear errors naming the flag).

`BootstrapRequest` is the input of `plan.plan_region`; `check_request` rejects what no plan can fix
(a malformed project id, an unknown region, a bad CIDR) before any decision is made.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from ipaddress import IPv4Network

from fleet.bootstrap.errors import BadArgument
from fleet.bootstrap.labels import check_labels
from fleet.bootstrap.regions import UnknownRegion, check_region
from fleet.catalog import CapacityType, Catalog
from fleet.spec.kube_rules import IMAGE_DIGEST, RESERVED_NAMESPACES
from fleet.spec.model import DNS1123_LABEL, KueueAutoscalerSpec, rfc3339_utc

PROJECT_RE = re.compile(r"^[a-z][-a-z0-9]{4,28}[a-z0-9]$")
NAME_RE = re.compile(r"^[a-z]([-a-z0-9]{0,18}[a-z0-9])?$")
STACK_RE = re.compile(r"[A-Za-z0-9_.-]{1,100}")  # fullmatch: '$' would let a trailing newline through
RESERVATION_RE = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")
TEAM_RE = re.compile(DNS1123_LABEL)  # a team names its namespace
SCHEDULERS = ("slurm", "kueue")
#: the flags that shape a Kueue (GKE) cluster, and only such a cluster
KUEUE_FLAGS = ("--team", "--authorized-network", "--autoscaler-image", "--upgrade-exclusion-start")


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
    labels: tuple[tuple[str, str], ...] = ()  # the fleet's labels (team, cost-center: the policy pack requires them)
    # --scheduler kueue (a GKE cluster) only:
    teams: tuple[str, ...] = ()  # Kueue teams (namespace + queues); () -> one team, fleet.bootstrap.kube.DEFAULT_TEAM
    authorized_networks: tuple[str, ...] = ()  # CIDRs that may reach the API server besides the system range
    autoscaler_image: str | None = None  # the autoscaler Deployment's image, pinned by digest
    upgrade_exclusion_start: str | None = None  # RFC 3339 UTC; the CLI passes the instant the file is written

    @property
    def stack_name(self) -> str:
        return self.stack or f"{'gke' if self.scheduler == 'kueue' else 'gcp'}-{self.region}-{self.gpu.lower()}"

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
    if req.scheduler not in SCHEDULERS:
        raise BadArgument("--scheduler", f"{req.scheduler!r}: one of {', '.join(SCHEDULERS)}")
    if req.scheduler == "kueue":
        check_kueue_request(req)
    else:
        given = [flag for flag, value in zip(KUEUE_FLAGS, _kueue_values(req), strict=True) if value]
        if given:
            raise BadArgument(given[0], "shapes a Kueue (GKE) cluster: only with --scheduler kueue")
    check_stack_name(req.stack_name)
    check_cidrs("--reserve", req.reserved_cidrs)
    check_labels(req.labels)
    if not NAME_RE.match(req.cluster_name):
        raise BadArgument("--cluster", f"{req.cluster_name!r} is not a lower-case RFC 1035 name of <= 20 chars")


def check_stack_name(stack: str) -> None:
    """`stack` is a Pulumi stack name (letters, digits, '-', '_', '.'; at most 100): also the `Pulumi.<stack>.yaml`
    file name, so no '/' can take the file out of the stacks directory."""
    if not STACK_RE.fullmatch(stack) or stack in (".", ".."):
        raise BadArgument("--name", f"{stack!r}: a Pulumi stack name has 1-100 letters, digits, '-', '_', '.'")


def check_cidrs(flag: str, cidrs: tuple[str, ...]) -> None:
    """Each of `cidrs` (the values of `flag`) is an IPv4 CIDR."""
    for cidr in cidrs:
        try:
            IPv4Network(cidr)
        except ValueError as exc:
            raise BadArgument(flag, f"{cidr!r} is not an IPv4 CIDR ({exc})") from None


def _kueue_values(req: BootstrapRequest) -> tuple[object, ...]:
    return req.teams, req.authorized_networks, req.autoscaler_image, req.upgrade_exclusion_start


def check_kueue_request(req: BootstrapRequest) -> None:
    """The flags of a Kueue cluster: a digest-pinned autoscaler image, team names a namespace can take (once each),
    authorized networks that are CIDRs, an RFC 3339 UTC instant."""
    if not req.autoscaler_image:
        raise BadArgument(
            "--autoscaler-image",
            "required with --scheduler kueue: the autoscaler's image pushed to your registry, by digest "
            "(<repository>@sha256:<64 hex>; build it with deploy/autoscaler.Dockerfile, docs/kubernetes.md)",
        )
    if not IMAGE_DIGEST.match(req.autoscaler_image):
        raise BadArgument(
            "--autoscaler-image",
            f"{req.autoscaler_image!r} is not pinned by digest: <repository>@sha256:<64 hex> (a tag can move)",
        )
    for team in req.teams:
        if not TEAM_RE.match(team):
            raise BadArgument("--team", f"{team!r} names a namespace: a DNS-1123 label (a-z 0-9 -, <= 63 chars)")
        if team in RESERVED_NAMESPACES | {KueueAutoscalerSpec.model_fields["namespace"].default}:
            raise BadArgument("--team", f"{team!r} is a namespace Kubernetes or the stack owns; choose another name")
    if len(set(req.teams)) != len(req.teams):
        raise BadArgument("--team", f"each team once: {', '.join(req.teams)}")
    check_cidrs("--authorized-network", req.authorized_networks)
    start = req.upgrade_exclusion_start
    if start is None:  # the CLI passes the instant the file is written
        raise BadArgument("--upgrade-exclusion-start", "required with --scheduler kueue")
    try:
        rfc3339_utc(start)
    except ValueError as exc:
        raise BadArgument("--upgrade-exclusion-start", str(exc)) from None
