"""Cross-field rules of the fleet spec: what GCE, Slurm or the catalog would reject half way into a deploy.

Each rule is a small generator `rule(spec, catalog) -> (field path, reason)...` listed in `RULES`;
`check` runs them all and returns every problem, in rule order.  Paths are index-based, as in
`fleet.spec.load` (`clusters[0].pools[1].zones[0]`).  docs/spec.md names every rule.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from ipaddress import IPv4Address, IPv4Network
from typing import TYPE_CHECKING

from fleet.catalog import CapacityType, Catalog, load_catalog
from fleet.spec.derive import (
    GCE_RESERVED_PER_SUBNET,
    checkpoint_bucket_name,
    fabric_networks,
    node_name_prefix,
    on_gcp,
    pool_zones,
)
from fleet.spec.locations import BUCKET_DUAL_REGIONS, BUCKET_MULTI_REGIONS
from fleet.spec.model import ClusterSpec, FleetSpec, NodePoolSpec

if TYPE_CHECKING:
    from autoscaler.model.policy import Policy

Issue = tuple[str, str]
Rule = Callable[[FleetSpec, Catalog], Iterator[Issue]]

RFC1918 = (IPv4Network("10.0.0.0/8"), IPv4Network("172.16.0.0/12"), IPv4Network("192.168.0.0/16"))
GCE_NAME_MAX = 63
# Filestore capacity limits per tier, GiB (Filestore "service tiers" page).
FILESTORE_CAPACITY_GIB = {
    "BASIC_HDD": (1024, 65434),
    "BASIC_SSD": (2560, 65434),
    "ZONAL": (1024, 102400),
    "REGIONAL": (1024, 102400),
    "ENTERPRISE": (1024, 10240),
}
SLURM_TIME = re.compile(r"^(INFINITE|UNLIMITED|\d+(:\d{1,2}){0,2}|\d+-\d{1,2}(:\d{1,2}){0,2})$")
FLEX_START_MAX_MINUTES = 7 * 24 * 60  # a flex-start (DWS) VM runs at most 7 days
LABEL_KEY = re.compile(r"^[a-z][a-z0-9_-]{0,62}$")
#: label keys the stacks set on resources themselves (stacks/fleet.py, stacks/kube.py, components/gcp): a spec or
#: pool label with one of these keys would be overridden on some resources and override it on others
GENERATED_LABELS = ("managed-by", "gpu-fleet-cluster", "gpu-fleet-pool")
LABEL_VALUE = re.compile(r"^[a-z0-9_-]{0,63}$")
BUCKET_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{1,61}[a-z0-9]$")
MOUNT_POINT = re.compile(r"^(/[A-Za-z0-9._-]+)+$")
SYSTEM_DIRS = {"/bin", "/boot", "/dev", "/etc", "/lib", "/lib64", "/proc", "/root", "/run", "/sbin", "/sys", "/tmp",
               "/usr", "/var"}  # fmt: skip
HOME_MOUNT = "/home"
SLURM_KEY = re.compile(r"^[A-Za-z][A-Za-z0-9]*$")
# what a slurm.conf value may hold unquoted: no white space (a newline starts a new line), '#' (a comment), quotes
SLURM_VALUE = re.compile(r"^[A-Za-z0-9_.,:/=+@%*()\[\]-]+$")  # [ ]: hostlists (SuspendExcNodes=login-[0-1])
SLURM_VALUE_CHARS = "letters, digits and _ . , : / = + @ % * ( ) [ ] - (no white space, '#', quotes or '$')"
# slurm.conf keys the generator owns (nodes, partitions, hosts, hooks) or that break this deployment.
SLURM_MANAGED_KEYS = {
    "nodename": "nodes are generated from the pools",
    "nodeset": "nodesets are generated from the pools",
    "partitionname": "partitions come from slurm.partitions",
    "include": "the generated slurm.conf is self-contained",
    "clustername": "the cluster name is clusters[].name",
    "slurmctldhost": "the controller host is set by the stack",
    "resumeprogram": "power saving is the autoscaler's hook",
    "suspendprogram": "power saving is the autoscaler's hook",
    "resumefailprogram": "power saving is the autoscaler's hook",
    "suspendtime": "use slurm.suspend_time",
    "resumetimeout": "use slurm.resume_timeout",
}

RULES: list[Rule] = []


def rule(fn: Rule) -> Rule:
    RULES.append(fn)
    return fn


def check(spec: FleetSpec, catalog: Catalog | None = None) -> list[Issue]:
    """Every cross-field problem of a schema-valid spec; empty when it may be deployed."""
    cat = catalog or load_catalog(spec.provider)
    return [issue for r in RULES for issue in r(spec, cat)]


def _pools(spec: FleetSpec) -> Iterator[tuple[str, ClusterSpec, NodePoolSpec]]:
    """Pools whose nodes are GCE VMs (the GCE/catalog rules); `platform: kubernetes` pools: `_all_pools`."""
    for path, cluster, pool in _all_pools(spec):
        if on_gcp(cluster):
            yield path, cluster, pool


def _all_pools(spec: FleetSpec) -> Iterator[tuple[str, ClusterSpec, NodePoolSpec]]:
    for ci, cluster in enumerate(spec.clusters):
        for pi, pool in enumerate(cluster.pools):
            yield f"clusters[{ci}].pools[{pi}]", cluster, pool


def _duplicates(names: list[str]) -> Iterator[tuple[int, str]]:
    seen: set[str] = set()
    for i, name in enumerate(names):
        if name in seen:
            yield i, name
        seen.add(name)


# ---------------------------------------------------------------- names


@rule
def unique_cluster_names(spec: FleetSpec, cat: Catalog) -> Iterator[Issue]:
    for i, name in _duplicates([c.name for c in spec.clusters]):
        yield f"clusters[{i}].name", f"duplicate cluster name {name!r}"


@rule
def unique_pool_names(spec: FleetSpec, cat: Catalog) -> Iterator[Issue]:
    for ci, cluster in enumerate(spec.clusters):
        for i, name in _duplicates([p.name for p in cluster.pools]):
            yield f"clusters[{ci}].pools[{i}].name", f"duplicate pool name {name!r} in cluster {cluster.name!r}"


@rule
def unique_node_name_prefixes(spec: FleetSpec, cat: Catalog) -> Iterator[Issue]:
    """cluster `a` + pool `b-c` and cluster `a-b` + pool `c` would both name their nodes `a-b-c-<i>`."""
    owners: dict[str, str] = {}
    for path, cluster, pool in _pools(spec):
        prefix = node_name_prefix(cluster.name, pool.name)
        other = owners.setdefault(prefix, f"{cluster.name}/{pool.name}")
        if other != f"{cluster.name}/{pool.name}":
            yield f"{path}.name", f"node names {prefix}-<i> collide with pool {other}"


@rule
def gce_name_lengths(spec: FleetSpec, cat: Catalog) -> Iterator[Issue]:
    """Instance names `<cluster>-<pool>-<i>` and per-zone names `<cluster>-<pool>-<zone>` fit 63 chars."""
    for path, cluster, pool in _pools(spec):
        prefix = node_name_prefix(cluster.name, pool.name)
        longest = f"{prefix}-{max(pool.max_nodes - 1, 0)}"
        for zone in pool_zones(spec, pool, cat):
            longest = max(longest, f"{prefix}-{zone}", key=len)
        if len(longest) > GCE_NAME_MAX:
            yield f"{path}.name", f"derived GCE name {longest!r} is {len(longest)} chars (> {GCE_NAME_MAX}): shorten"


# ---------------------------------------------------------------- zones and machine types


@rule
def fleet_zones_in_region(spec: FleetSpec, cat: Catalog) -> Iterator[Issue]:
    for i, zone in enumerate(spec.zones):
        region, _, letter = zone.rpartition("-")
        if region != spec.region or not re.fullmatch(r"[a-z]", letter):
            yield f"zones[{i}]", f"zone {zone!r} is not a zone of region {spec.region!r}"
    for i, zone in _duplicates(spec.zones):
        yield f"zones[{i}]", f"duplicate zone {zone!r}"


@rule
def known_machine_type(spec: FleetSpec, cat: Catalog) -> Iterator[Issue]:
    for path, _, pool in _pools(spec):
        if pool.machine_type not in cat:
            try:
                cat.machine(pool.machine_type)
            except KeyError as exc:
                yield f"{path}.machine_type", str(exc)


@rule
def pool_zones_in_fleet(spec: FleetSpec, cat: Catalog) -> Iterator[Issue]:
    for path, _, pool in _pools(spec):
        for i, zone in enumerate(pool.zones or []):
            if zone not in spec.zones:
                yield f"{path}.zones[{i}]", f"zone {zone!r} is not one of the fleet zones {spec.zones}"
        if pool.zones is not None and not pool.zones:
            yield f"{path}.zones", "empty list: omit `zones` to use every fleet zone offering the type"
        for i, zone in _duplicates(pool.zones or []):
            yield f"{path}.zones[{i}]", f"duplicate zone {zone!r}"


@rule
def cluster_zone_in_fleet(spec: FleetSpec, cat: Catalog) -> Iterator[Issue]:
    """A cluster's own zone (controller, login VMs, zonal storage) is a fleet zone; a cluster with nothing of its
    own on GCP (platform: kubernetes) has none."""
    for ci, cluster in enumerate(spec.clusters):
        if cluster.zone is None:
            continue
        if cluster.platform == "kubernetes":
            yield f"clusters[{ci}].zone", "a platform: kubernetes cluster has no controller or storage on GCP: omit it"
        elif cluster.zone not in spec.zones:
            yield f"clusters[{ci}].zone", f"zone {cluster.zone!r} is not one of the fleet zones {spec.zones}"


@rule
def machine_offered_in_zones(spec: FleetSpec, cat: Catalog) -> Iterator[Issue]:
    for path, _, pool in _pools(spec):
        if pool.machine_type not in cat:
            continue
        machine = cat.machine(pool.machine_type)
        offered = machine.zones_in(spec.region)
        if pool.zones is not None:
            for i, zone in enumerate(pool.zones):
                if zone in spec.zones and not machine.offered_in(zone):
                    where = f"offered in {', '.join(offered)}" if offered else f"not offered in {spec.region}"
                    yield f"{path}.zones[{i}]", f"{pool.machine_type} is not offered in {zone} ({where})"
        elif not pool_zones(spec, pool, cat):
            where = f"it is offered in {', '.join(offered)}" if offered else f"no zone of {spec.region} offers it"
            yield f"{path}.machine_type", f"{pool.machine_type} is offered in none of the fleet zones ({where})"


# ---------------------------------------------------------------- sizes and capacity


@rule
def max_nodes_positive(spec: FleetSpec, cat: Catalog) -> Iterator[Issue]:
    for path, _, pool in _all_pools(spec):
        if pool.max_nodes < 1:
            yield f"{path}.max_nodes", "must be at least 1 (remove the pool instead)"


@rule
def min_not_above_max(spec: FleetSpec, cat: Catalog) -> Iterator[Issue]:
    for path, _, pool in _all_pools(spec):
        if pool.min_nodes > pool.max_nodes:
            yield f"{path}.min_nodes", f"min_nodes {pool.min_nodes} is greater than max_nodes {pool.max_nodes}"


@rule
def reservation_name(spec: FleetSpec, cat: Catalog) -> Iterator[Issue]:
    """A reservation name iff capacity=reservation; a reservation is never combined with spot/flex-start."""
    for path, _, pool in _pools(spec):
        if pool.capacity is CapacityType.RESERVATION and not pool.reservation:
            yield f"{path}.reservation", "required with capacity: reservation (the GCE reservation to consume)"
        elif pool.capacity is not CapacityType.RESERVATION and pool.reservation:
            yield (
                f"{path}.reservation",
                f"a reservation cannot be combined with capacity: {pool.capacity} (use capacity: reservation)",
            )


@rule
def reservation_single_zone(spec: FleetSpec, cat: Catalog) -> Iterator[Issue]:
    """GCE reservations are zonal: a reservation pool lives in exactly one zone."""
    for path, _, pool in _pools(spec):
        zones = pool_zones(spec, pool, cat)
        if pool.capacity is CapacityType.RESERVATION and len(zones) > 1:
            yield f"{path}.zones", f"a reservation is zonal: name the one zone it is in (pool would use {list(zones)})"


@rule
def compact_placement_supported(spec: FleetSpec, cat: Catalog) -> Iterator[Issue]:
    for path, _, pool in _pools(spec):
        if pool.compact_placement and pool.machine_type in cat:
            limit = cat.machine(pool.machine_type).compact_placement_max_vms
            if limit == 0:
                yield f"{path}.compact_placement", f"{pool.machine_type} does not support compact placement"
            elif pool.max_nodes > limit:
                yield (
                    f"{path}.max_nodes",
                    f"{pool.max_nodes} nodes exceed the {limit} VMs a compact placement policy of "
                    f"{pool.machine_type} may hold (split the pool or drop compact_placement)",
                )


@rule
def compact_placement_single_zone(spec: FleetSpec, cat: Catalog) -> Iterator[Issue]:
    for path, _, pool in _pools(spec):
        zones = pool_zones(spec, pool, cat)
        if pool.compact_placement and len(zones) > 1:
            yield f"{path}.zones", f"compact placement needs exactly one zone (pool would use {list(zones)})"


@rule
def rdma_single_zone(spec: FleetSpec, cat: Catalog) -> Iterator[Issue]:
    """A RoCE (RDMA) VPC is zonal: all pools of an RDMA machine type in a cluster share one zone."""
    for ci, cluster in enumerate(spec.clusters):
        first: dict[str, tuple[str, str]] = {}  # machine type -> (zone, pool) of the first pool
        for pi, pool in enumerate(cluster.pools):
            if pool.machine_type not in cat or not cat.machine(pool.machine_type).nics.rdma_nics:
                continue
            zones = pool_zones(spec, pool, cat)
            path = f"clusters[{ci}].pools[{pi}].zones"
            if len(zones) > 1:
                yield path, f"{pool.machine_type} uses a zonal RoCE network: name one zone (would use {list(zones)})"
                continue
            if not zones:
                continue
            zone, owner = first.setdefault(pool.machine_type, (zones[0], pool.name))
            if zone != zones[0]:
                yield (
                    path,
                    f"pools of {pool.machine_type} in one cluster share one RoCE network: pool {owner!r} is in "
                    f"{zone}, this one in {zones[0]}",
                )


@rule
def flex_start_compact(spec: FleetSpec, cat: Catalog) -> Iterator[Issue]:
    for path, _, pool in _pools(spec):
        flex_compact = pool.capacity is CapacityType.FLEX_START and pool.compact_placement
        if flex_compact and pool.machine_type in cat and not cat.machine(pool.machine_type).flex_start_compact:
            yield (
                f"{path}.compact_placement",
                f"flex-start cannot be combined with compact placement on {pool.machine_type} "
                "(only a3-ultragpu and a4 support it)",
            )


@rule
def labels_valid(spec: FleetSpec, cat: Catalog) -> Iterator[Issue]:
    """GCE label keys/values: lower-case letters, digits, `_` and `-`, at most 63 chars; not a key gpu-fleet sets."""
    sets = [("labels", spec.labels)] + [(f"{path}.labels", pool.labels) for path, _, pool in _pools(spec)]
    for path, labels in sets:
        if len(labels) > 64:
            yield path, f"{len(labels)} labels: GCE allows at most 64"
        for key, value in labels.items():
            if not LABEL_KEY.fullmatch(key):
                yield f"{path}.{key}", "label key must start with a lower-case letter; a-z, 0-9, _ and -; <= 63 chars"
            elif key in GENERATED_LABELS:
                owned = ", ".join(GENERATED_LABELS)
                yield f"{path}.{key}", f"gpu-fleet sets this label itself ({owned}): choose another key"
            elif not LABEL_VALUE.fullmatch(str(value)):
                yield f"{path}.{key}", f"label value {value!r} must be a-z, 0-9, _ and -, <= 63 chars"


# ---------------------------------------------------------------- network


def _named_cidrs(spec: FleetSpec) -> list[tuple[str, IPv4Network]]:
    net = spec.network
    return [("network.system_cidr", net.system_cidr), ("network.gpu_cidr", net.gpu_cidr)]


@rule
def cidrs_private(spec: FleetSpec, cat: Catalog) -> Iterator[Issue]:
    """GPU nodes get no public IPs: their subnets must be RFC 1918 ranges."""
    for path, cidr in _named_cidrs(spec):
        if not any(cidr.subnet_of(block) for block in RFC1918):
            yield path, f"{cidr} is not a private RFC 1918 range (10/8, 172.16/12, 192.168/16)"


@rule
def cidrs_disjoint(spec: FleetSpec, cat: Catalog) -> Iterator[Issue]:
    net = spec.network
    if net.system_cidr.overlaps(net.gpu_cidr):
        yield "network.gpu_cidr", f"{net.gpu_cidr} overlaps network.system_cidr {net.system_cidr}"
    for i, reserved in enumerate(net.reserved_cidrs):
        for path, cidr in _named_cidrs(spec):
            if cidr.overlaps(reserved):
                yield f"network.reserved_cidrs[{i}]", f"{reserved} overlaps {path} {cidr}"


@rule
def system_cidr_capacity(spec: FleetSpec, cat: Catalog) -> Iterator[Issue]:
    """The system subnet holds every node at max size, plus controllers and login nodes."""
    nodes = sum(pool.max_nodes for _, _, pool in _pools(spec))
    nodes += sum(1 + c.slurm.login_nodes for c in spec.clusters if c.slurm is not None)
    cidr = spec.network.system_cidr
    usable = cidr.num_addresses - GCE_RESERVED_PER_SUBNET
    if nodes > usable:
        yield "network.system_cidr", f"{cidr} has {usable} usable addresses but the fleet may run {nodes} VMs"


@rule
def gpu_cidr_fits_fabric(spec: FleetSpec, cat: Catalog) -> Iterator[Issue]:
    """The GPU fabric subnets (see fleet.spec.derive.fabric_networks) must fit in network.gpu_cidr."""
    nets = fabric_networks(spec, cat)
    need = sum(n.addresses for n in nets)
    cidr = spec.network.gpu_cidr
    if need > cidr.num_addresses:
        detail = "; ".join(f"{n.cluster}/{n.machine_type}: {n.count} x /{n.prefixlen}" for n in nets)
        yield "network.gpu_cidr", f"{cidr} holds {cidr.num_addresses} addresses but the fabric needs {need} ({detail})"


# ---------------------------------------------------------------- storage


@rule
def filestore_capacity(spec: FleetSpec, cat: Catalog) -> Iterator[Issue]:
    for ci, cluster in enumerate(spec.clusters):
        home = cluster.storage.home
        if home is None:
            continue
        low, high = FILESTORE_CAPACITY_GIB[home.tier]
        if not low <= home.capacity_gb <= high:
            yield (
                f"clusters[{ci}].storage.home.capacity_gb",
                f"Filestore {home.tier} takes {low}..{high} GiB, got {home.capacity_gb}",
            )


@rule
def bucket_name_valid(spec: FleetSpec, cat: Catalog) -> Iterator[Issue]:
    """GCS bucket naming rules, for the explicit name and the default `<project>-<cluster>-checkpoints`."""
    for ci, cluster in enumerate(spec.clusters):
        name = checkpoint_bucket_name(spec, cluster)
        if name is None:
            continue
        explicit = cluster.storage.checkpoints.name is not None
        path = f"clusters[{ci}].storage.checkpoints.name"
        what = f"bucket name {name!r}" + ("" if explicit else " (the default; set one explicitly)")
        if not BUCKET_NAME.fullmatch(name) or ".." in name:
            yield path, f"{what} must be 3-63 chars of a-z, 0-9, '-', '_', '.', starting and ending alphanumeric"
        elif name.startswith("goog") or "google" in name or "g00gle" in name:
            yield path, f"{what} must not start with 'goog' or contain 'google'"
        else:
            try:
                IPv4Address(name)
            except ValueError:
                continue
            yield path, f"{what} must not be an IP address"


@rule
def bucket_location_near(spec: FleetSpec, cat: Catalog) -> Iterator[Issue]:
    """Checkpoints stay in the fleet's region or the multi-region around it (cross-region = egress + slow)."""
    for ci, cluster in enumerate(spec.clusters):
        bucket = cluster.storage.checkpoints
        if bucket is None or bucket.location is None:
            continue
        loc = bucket.location
        covered = BUCKET_MULTI_REGIONS.get(loc.upper())
        if loc.lower() == spec.region or (covered and spec.region.startswith(covered)):
            continue
        if spec.region in BUCKET_DUAL_REGIONS.get(loc.upper(), ()):
            continue
        yield (
            f"clusters[{ci}].storage.checkpoints.location",
            f"{loc!r} is neither the fleet region {spec.region!r} nor a multi- or dual-region containing it",
        )


def _mount_point_issue(mount_point: str, home: bool) -> str | None:
    """Why a shared-storage mount point cannot be used (None: it can): not absolute, a system directory, or under
    the Filestore home mount when there is one."""
    mount = mount_point.rstrip("/") or "/"
    if not MOUNT_POINT.fullmatch(mount):
        return f"{mount_point!r} must be an absolute path"
    if mount in SYSTEM_DIRS or mount == "/":
        return f"{mount} is a system directory"
    if home and (mount == HOME_MOUNT or mount.startswith(HOME_MOUNT + "/")):
        return f"{mount} is under the Filestore home mount {HOME_MOUNT}"
    return None


@rule
def scratch_mount_point(spec: FleetSpec, cat: Catalog) -> Iterator[Issue]:
    for ci, cluster in enumerate(spec.clusters):
        scratch = cluster.storage.scratch
        if scratch is not None and (why := _mount_point_issue(scratch.mount_point, cluster.storage.home is not None)):
            yield f"clusters[{ci}].storage.scratch.mount_point", why


@rule
def checkpoint_mount_point(spec: FleetSpec, cat: Catalog) -> Iterator[Issue]:
    """The checkpoint bucket's mount on GPU nodes: a usable directory, and not the scratch mount or inside it (or it
    inside the bucket's): one file system would hide the other."""
    for ci, cluster in enumerate(spec.clusters):
        bucket = cluster.storage.checkpoints
        if bucket is None or bucket.mount_point is None:
            continue
        path = f"clusters[{ci}].storage.checkpoints.mount_point"
        if why := _mount_point_issue(bucket.mount_point, cluster.storage.home is not None):
            yield path, why
            continue
        scratch = cluster.storage.scratch
        if scratch is not None:
            a, b = bucket.mount_point.rstrip("/"), scratch.mount_point.rstrip("/")
            if a == b or a.startswith(b + "/") or b.startswith(a + "/"):
                yield path, f"{bucket.mount_point} overlaps the scratch mount {scratch.mount_point}"


# ---------------------------------------------------------------- scheduler


@rule
def scheduler_settings(spec: FleetSpec, cat: Catalog) -> Iterator[Issue]:
    """slurm runs on GCE VMs with a `slurm` block; kueue runs on gke or kubernetes with a `kueue` block."""
    for ci, cluster in enumerate(spec.clusters):
        path = f"clusters[{ci}]"
        if cluster.scheduler == "slurm":
            if cluster.slurm is None:
                yield f"{path}.slurm", "required with scheduler: slurm (partitions -> pools)"
            if cluster.platform != "gce":
                yield f"{path}.platform", f"scheduler: slurm runs on platform: gce, not {cluster.platform}"
            if cluster.kueue is not None:
                yield f"{path}.kueue", "only with scheduler: kueue"
        else:
            if cluster.kueue is None:
                yield f"{path}.kueue", "required with scheduler: kueue (teams -> pool quotas, autoscaler)"
            if cluster.platform == "gce":
                yield f"{path}.platform", "scheduler: kueue needs platform: gke or kubernetes"
            if cluster.slurm is not None:
                yield f"{path}.slurm", "only with scheduler: slurm"


def _slurm_clusters(spec: FleetSpec) -> Iterator[tuple[str, ClusterSpec]]:
    for ci, cluster in enumerate(spec.clusters):
        if cluster.scheduler == "slurm" and cluster.slurm is not None:
            yield f"clusters[{ci}].slurm", cluster


@rule
def partitions_unique(spec: FleetSpec, cat: Catalog) -> Iterator[Issue]:
    for path, cluster in _slurm_clusters(spec):
        for i, name in _duplicates([p.name for p in cluster.slurm.partitions]):
            yield f"{path}.partitions[{i}].name", f"duplicate partition name {name!r}"


@rule
def slurm_reserved_names(spec: FleetSpec, cat: Catalog) -> Iterator[Issue]:
    """`PartitionName=DEFAULT` / `NodeName=DEFAULT` set defaults and `Nodes=ALL` means every node:
    a partition or pool (nodeset) with such a name would silently mean something else."""
    reserved = {"default": "DEFAULT sets defaults for the lines after it", "all": "ALL means every node"}
    for path, cluster in _slurm_clusters(spec):
        ci = path.split(".")[0]
        for i, pool in enumerate(cluster.pools):
            if pool.name in reserved:
                yield f"{ci}.pools[{i}].name", f"{pool.name!r} is reserved in slurm.conf ({reserved[pool.name]})"
        for i, part in enumerate(cluster.slurm.partitions):
            if part.name in reserved:
                yield f"{path}.partitions[{i}].name", f"{part.name!r} is reserved in slurm.conf ({reserved[part.name]})"


@rule
def partition_pools_known(spec: FleetSpec, cat: Catalog) -> Iterator[Issue]:
    for path, cluster in _slurm_clusters(spec):
        names = [p.name for p in cluster.pools]
        for i, part in enumerate(cluster.slurm.partitions):
            for j, pool in enumerate(part.pools):
                if pool not in names:
                    yield f"{path}.partitions[{i}].pools[{j}]", f"unknown pool {pool!r} (pools: {', '.join(names)})"
            for j, pool in _duplicates(part.pools):
                yield f"{path}.partitions[{i}].pools[{j}]", f"pool {pool!r} listed twice"


@rule
def pools_in_a_partition(spec: FleetSpec, cat: Catalog) -> Iterator[Issue]:
    """A pool no partition names can never get a job: its nodes would only cost money."""
    for ci, cluster in enumerate(spec.clusters):
        if cluster.scheduler != "slurm" or cluster.slurm is None:
            continue
        used = {p for part in cluster.slurm.partitions for p in part.pools}
        for pi, pool in enumerate(cluster.pools):
            if pool.name not in used:
                yield f"clusters[{ci}].pools[{pi}].name", f"pool {pool.name!r} is in no Slurm partition"


@rule
def one_default_partition(spec: FleetSpec, cat: Catalog) -> Iterator[Issue]:
    """At most one `default: true`; with none, the first partition is the default."""
    for path, cluster in _slurm_clusters(spec):
        defaults = [i for i, p in enumerate(cluster.slurm.partitions) if p.default]
        for i in defaults[1:]:
            first = cluster.slurm.partitions[defaults[0]].name
            yield f"{path}.partitions[{i}].default", f"partition {first!r} is already the default"


@rule
def spot_pools_in_tolerant_partitions(spec: FleetSpec, cat: Catalog) -> Iterator[Issue]:
    """Spot nodes are preempted: only partitions marked spot_tolerant may use spot pools."""
    for path, cluster in _slurm_clusters(spec):
        spot = {p.name for p in cluster.pools if p.capacity is CapacityType.SPOT}
        for i, part in enumerate(cluster.slurm.partitions):
            for j, pool in enumerate(part.pools):
                if pool in spot and not part.spot_tolerant:
                    yield (
                        f"{path}.partitions[{i}].pools[{j}]",
                        f"pool {pool!r} is spot capacity but partition {part.name!r} is not spot_tolerant "
                        "(set spot_tolerant: true, or use another pool)",
                    )


@rule
def partition_max_time(spec: FleetSpec, cat: Catalog) -> Iterator[Issue]:
    for path, cluster in _slurm_clusters(spec):
        for i, part in enumerate(cluster.slurm.partitions):
            if not SLURM_TIME.fullmatch(part.max_time):
                yield (
                    f"{path}.partitions[{i}].max_time",
                    f"{part.max_time!r} is not a Slurm time (INFINITE, minutes, [D-]HH:MM[:SS])",
                )


def slurm_time_minutes(value: str) -> float | None:
    """Minutes of a Slurm time string (`90`, `1:30:00`, `2-12`, `2-12:00:00`); None for INFINITE."""
    if value in ("INFINITE", "UNLIMITED"):
        return None
    days, sep, rest = value.partition("-")
    if not sep:
        days, rest = "0", value
    parts = [int(p) for p in rest.split(":")]
    if sep:  # D-HH, D-HH:MM, D-HH:MM:SS
        hours, minutes, seconds = [*parts, 0, 0][:3]
    elif len(parts) == 1:  # MM
        hours, minutes, seconds = 0, parts[0], 0
    elif len(parts) == 2:  # MM:SS
        hours, minutes, seconds = 0, parts[0], parts[1]
    else:  # HH:MM:SS
        hours, minutes, seconds = parts
    return int(days) * 1440 + hours * 60 + minutes + seconds / 60


@rule
def flex_start_max_time(spec: FleetSpec, cat: Catalog) -> Iterator[Issue]:
    """A flex-start VM is reclaimed after 7 days: partitions using flex-start pools must limit jobs to that."""
    for path, cluster in _slurm_clusters(spec):
        flex = {p.name for p in cluster.pools if p.capacity is CapacityType.FLEX_START}
        for i, part in enumerate(cluster.slurm.partitions):
            if not flex.intersection(part.pools) or not SLURM_TIME.fullmatch(part.max_time):
                continue
            minutes = slurm_time_minutes(part.max_time)
            if minutes is None or minutes > FLEX_START_MAX_MINUTES:
                yield (
                    f"{path}.partitions[{i}].max_time",
                    f"{part.max_time} is longer than the 7 days a flex-start node lives "
                    f"(pools {sorted(flex.intersection(part.pools))}): set max_time <= 7-00:00:00",
                )


@rule
def slurm_extra_config(spec: FleetSpec, cat: Catalog) -> Iterator[Issue]:
    """Site slurm.conf keys must be plain keys the generator does not own."""
    for path, cluster in _slurm_clusters(spec):
        for key, value in cluster.slurm.extra_config.items():
            where = f"{path}.extra_config.{key}"
            if not SLURM_KEY.fullmatch(key):
                yield where, "not a slurm.conf key (letters and digits only)"
            elif key.lower() in SLURM_MANAGED_KEYS:
                yield where, f"cannot be set here: {SLURM_MANAGED_KEYS[key.lower()]}"
            elif not SLURM_VALUE.fullmatch(value):
                yield where, f"value must be one non-empty line of {SLURM_VALUE_CHARS}, got {value!r}"


@rule
def slurm_accounting_tres_needs_slurmdbd(spec: FleetSpec, cat: Catalog) -> Iterator[Issue]:
    """`AccountingStorageTRES` makes slurmctld exit at start without a slurmdbd (22.05): allowed where the cluster
    runs one (`slurm.accounting: slurmdbd`, the default) or the site's own `AccountingStorageType` names one (an
    external slurmdbd shared by clusters)."""
    for path, cluster in _slurm_clusters(spec):
        site = {k.lower(): (k, v) for k, v in cluster.slurm.extra_config.items()}
        storage = site.get("accountingstoragetype", ("", ""))[1]
        has_dbd = cluster.slurm.accounting == "slurmdbd" or storage == "accounting_storage/slurmdbd"
        if "accountingstoragetres" in site and not has_dbd:
            key = site["accountingstoragetres"][0]
            yield (f"{path}.extra_config.{key}", "fatal without slurmdbd: set slurm.accounting: slurmdbd (or "
                   "AccountingStorageType=accounting_storage/slurmdbd for a slurmdbd of your own)")  # fmt: skip


def _stack_owned_keys(
    spec: FleetSpec, owns: Callable[[ClusterSpec], bool], keys: tuple[str, ...], reason: str
) -> Iterator[Issue]:
    """`slurm.extra_config` keys (any of `keys`, lower-case) on the clusters where the render `owns` them."""
    for path, cluster in _slurm_clusters(spec):
        if owns(cluster):
            for key in cluster.slurm.extra_config:
                if key.lower() in keys:
                    yield f"{path}.extra_config.{key}", reason


@rule
def slurm_preemption_owned_by_preempt_spot(spec: FleetSpec, cat: Catalog) -> Iterator[Issue]:
    """Where the render writes partition-priority preemption (fleet/slurm/preempt.py), the daemon holds the on-demand
    overflow for it: a site PreemptType/PreemptMode would leave the hold delaying jobs for a preemption that never
    comes."""
    from fleet.slurm.preempt import preempts_spot  # fleet.slurm imports fleet.spec

    yield from _stack_owned_keys(
        spec,
        preempts_spot,
        ("preempttype", "preemptmode"),
        "the stack renders preemption of spot-tolerant work off the reservation "
        "(PreemptType=preempt/partition_prio, PreemptMode=REQUEUE) because "
        "slurm.autoscaler.policy.preempt_spot is on: set preempt_spot: false to configure it yourself",
    )


@rule
def slurm_prolog_owned_by_tcpxo(spec: FleetSpec, cat: Catalog) -> Iterator[Issue]:
    """On a cluster with GPUDirect-TCPXO nodes the render's Prolog/Epilog start and stop the receive-datapath
    manager (fleet/slurm/conf.py).  slurmd 22.05 runs one Prolog path (a glob; a comma-separated list fails every
    job: "Unable to create list of paths", measured), so a site's Prolog would replace it and GPUDirect jobs would
    run without it."""
    from fleet.slurm.conf import runs_rxdm_prolog  # fleet.slurm imports fleet.spec

    yield from _stack_owned_keys(
        spec,
        lambda cluster: runs_rxdm_prolog(cluster, cat),
        ("prolog", "epilog"),
        "the stack's Prolog/Epilog run the GPUDirect-TCPXO receive-datapath manager on this cluster's "
        "A3 Mega nodes, and slurmd runs only one: a site script here would leave GPUDirect jobs without it",
    )


@rule
def slurm_machine_types_not_gpu(spec: FleetSpec, cat: Catalog) -> Iterator[Issue]:
    """Controller and login nodes run no jobs: a GPU machine there is an expensive mistake."""
    for path, cluster in _slurm_clusters(spec):
        for field in ("controller_machine_type", "login_machine_type"):
            value = getattr(cluster.slurm, field)
            if value in cat:
                yield f"{path}.{field}", f"{value} is a GPU machine type; controller/login nodes run no jobs"


@rule
def slurm_suspend_time(spec: FleetSpec, cat: Catalog) -> Iterator[Issue]:
    """Slurm powers an idle node down after SuspendTime whatever the daemon keeps: a SuspendTime shorter than the
    settings rule's longest idle keep (+ one tick) would cut the keep short (fleet.slurm.suspend)."""
    from fleet.slurm.suspend import suspend_floor  # fleet.slurm imports fleet.spec

    for path, cluster in _slurm_clusters(spec):
        value = cluster.slurm.suspend_time
        if value is None:
            continue
        floor = suspend_floor(spec, cluster, cat)
        if value < floor.seconds:
            yield (
                f"{path}.suspend_time",
                f"{value} s is shorter than the autoscaler's longest idle keep: {floor.explain()}; set at least "
                f"{floor.seconds} or leave it unset (that minimum is the default)",
            )


@rule
def autoscaler_policy(spec: FleetSpec, cat: Catalog) -> Iterator[Issue]:
    """The controller's daemon would refuse to start on a bad policy: catch it at synth, not after boot.
    Partitions named in spot_queues / flex_start_queues, and pools in pool_max_nodes / pool_max_gpus, must exist."""
    from autoscaler.model.policy import PolicyError, policy_from_mapping  # pure; no daemon imports

    for path, cluster in _slurm_clusters(spec):
        where = f"{path}.autoscaler.policy"
        raw = cluster.slurm.autoscaler.policy
        try:
            policy = policy_from_mapping(raw)
        except PolicyError as exc:
            for name, reason in exc.errors:
                yield f"{where}.{name}", reason
            continue
        partitions = {p.name for p in cluster.slurm.partitions}
        for field in ("spot_queues", "flex_start_queues"):
            for queue in sorted(getattr(policy, field) or ()):
                if queue not in partitions:
                    yield f"{where}.{field}", f"{queue!r} is not a partition of this cluster"
        yield from unknown_pool_caps(where, policy, cluster)
        if why := policy.share_nodes_refusal(p.capacity for p in cluster.pools):
            yield f"{where}.share_nodes", why


def unknown_pool_caps(where: str, policy: Policy, cluster: ClusterSpec) -> Iterator[Issue]:
    """Keys of the policy's per-pool caps that name no pool of `cluster`: the cap would never apply."""
    pools = [p.name for p in cluster.pools]
    for field, name in policy.caps_on_unknown_pools(pools):
        yield f"{where}.{field}", f"{name!r} is not a pool of this cluster (its pools: {', '.join(pools)})"


from fleet.spec import kube_rules  # noqa: E402, F401  (registers the Kubernetes / Kueue rules after these)
