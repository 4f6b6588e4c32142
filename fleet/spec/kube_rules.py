"""Cross-field rules of the Kubernetes parts of a fleet spec: platforms (gke, kubernetes), Kueue queues, prices.

Registered into `fleet.spec.rules.RULES` (imported at the end of that module), so `check` runs them after
the GCE rules, in the order written here.  docs/spec.md names each one.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from ipaddress import IPv4Network

from fleet.catalog import CapacityType, Catalog
from fleet.spec.kube import capi_synced, node_shape, node_taints, pool_price, quota_gpus, team_namespace
from fleet.spec.model import ClusterSpec, FleetSpec
from fleet.spec.rules import RFC1918, Issue, _duplicates, rule, unknown_pool_caps

# Namespaces a team must not own: Kubernetes' own and the ones the stack installs into.
RESERVED_NAMESPACES = {
    "kube-system", "kube-public", "kube-node-lease", "default", "kueue-system", "gke-managed-system", "gpu-operator",
}  # fmt: skip
IMAGE_DIGEST = re.compile(r"^[a-z0-9][-a-z0-9._/:]*@sha256:[0-9a-f]{64}$")
_DNS_PREFIX = r"([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
K8S_LABEL_KEY = re.compile(_DNS_PREFIX + r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
K8S_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?$")
# A GPU-hour below 5 cents or above $100 is a unit mistake ($/month, $/GPU vs $/node), not a price.
GPU_HOUR_USD = (0.05, 100.0)
K8S_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


def _clusters(spec: FleetSpec, platform: str | None = None) -> Iterator[tuple[str, ClusterSpec]]:
    for ci, cluster in enumerate(spec.clusters):
        if platform is None or cluster.platform == platform:
            yield f"clusters[{ci}]", cluster


def _kueue(spec: FleetSpec) -> Iterator[tuple[str, ClusterSpec]]:
    for path, cluster in _clusters(spec):
        if cluster.scheduler == "kueue" and cluster.kueue is not None:
            yield f"{path}.kueue", cluster


# ---------------------------------------------------------------- platforms


@rule
def platform_settings(spec: FleetSpec, cat: Catalog) -> Iterator[Issue]:
    """`kubernetes` needs its block (the CAPI cluster); `gke` / `kubernetes` blocks only on their platform."""
    for path, cluster in _clusters(spec):
        if cluster.platform == "kubernetes" and cluster.kubernetes is None:
            yield f"{path}.kubernetes", "required with platform: kubernetes (cluster_name, version, kubeconfig)"
        if cluster.platform != "kubernetes" and cluster.kubernetes is not None:
            yield f"{path}.kubernetes", f"only with platform: kubernetes (this cluster is {cluster.platform})"
        if cluster.platform != "gke" and cluster.gke is not None:
            yield f"{path}.gke", f"only with platform: gke (this cluster is {cluster.platform})"


@rule
def cluster_api_pools(spec: FleetSpec, cat: Catalog) -> Iterator[Issue]:
    """Pools of an existing cluster are MachineDeployments: `cluster_api` templates, no GCE-only settings."""
    for path, cluster in _clusters(spec):
        for pi, pool in enumerate(cluster.pools):
            where = f"{path}.pools[{pi}]"
            if cluster.platform != "kubernetes":
                if pool.cluster_api is not None:
                    yield f"{where}.cluster_api", "only on platform: kubernetes"
                continue
            if pool.cluster_api is None:
                yield f"{where}.cluster_api", "required on platform: kubernetes (infrastructure template, GPUs)"
            if pool.zones is not None:
                yield f"{where}.zones", "not used on platform: kubernetes (set cluster_api.failure_domain)"
            if pool.capacity not in (CapacityType.ON_DEMAND, CapacityType.SPOT):
                yield f"{where}.capacity", f"{pool.capacity} is a GCE capacity type: use on-demand or spot here"
            if pool.compact_placement:
                yield f"{where}.compact_placement", "a GCE placement policy: not available on platform: kubernetes"
            no_bootstrap = pool.cluster_api is not None and pool.cluster_api.bootstrap_template is None
            if no_bootstrap and cluster.kubernetes is not None and cluster.kubernetes.bootstrap_template is None:
                yield (
                    f"{where}.cluster_api.bootstrap_template",
                    "required (or set kubernetes.bootstrap_template for every pool)",
                )
            synced_too = cluster.kubernetes.additional_sync_machine_labels if cluster.kubernetes else []
            for key, value in pool.labels.items():
                if not K8S_LABEL_KEY.fullmatch(key) or len(key) > 317:
                    yield f"{where}.labels.{key}", "not a Kubernetes label key ([dns-prefix/]name, name <= 63 chars)"
                elif not K8S_LABEL_VALUE.fullmatch(value):
                    yield f"{where}.labels.{key}", f"{value!r} is not a Kubernetes label value (<= 63 chars)"
                elif not capi_synced(key, synced_too):
                    yield (
                        f"{where}.labels.{key}",
                        "Cluster API copies a Machine's labels to its Node only in the node-role.kubernetes.io, "
                        "node-restriction.kubernetes.io and node.cluster.x-k8s.io domains: this one would stay on "
                        "the Machines and a pod selecting it would never be scheduled; name it e.g. "
                        f"node.cluster.x-k8s.io/{key.rsplit('/', 1)[-1]}, or list a regex matching it in "
                        "kubernetes.additional_sync_machine_labels if the management cluster's "
                        "--additional-sync-machine-labels does",
                    )


@rule
def bootstrap_taints_per_template(spec: FleetSpec, cat: Catalog) -> Iterator[Issue]:
    """With `kubernetes.taint_propagation: bootstrap` a node gets the taints its bootstrap template registers it with,
    so pools whose taints differ (spot and not) need templates of their own."""
    for path, cluster in _clusters(spec, "kubernetes"):
        k8s = cluster.kubernetes
        if k8s is None or k8s.taint_propagation != "bootstrap":
            continue
        users: dict[tuple[str, str, str], tuple[str, list[dict[str, str]]]] = {}  # template -> first pool, taints
        for pi, pool in enumerate(cluster.pools):
            ref = (pool.cluster_api.bootstrap_template if pool.cluster_api else None) or k8s.bootstrap_template
            if ref is None:
                continue  # cluster_api_pools names it
            key = (ref.api_group, ref.kind, ref.name)
            taints = node_taints(cluster, pool)
            if key in users and users[key][1] != taints:
                first = users[key][0]
                yield (
                    f"{path}.pools[{pi}].cluster_api.bootstrap_template",
                    f"pools {first} and {pool.name} share bootstrap template {ref.kind}/{ref.name} but need different "
                    "taints (taint_propagation: bootstrap registers a node with its template's): give this pool "
                    "its own",
                )
            users.setdefault(key, (pool.name, taints))


@rule
def kubernetes_storage(spec: FleetSpec, cat: Catalog) -> Iterator[Issue]:
    """Filestore, GCS and Lustre live in the fleet's GCP project: not for a cluster on another provider."""
    for path, cluster in _clusters(spec, "kubernetes"):
        for field in ("home", "checkpoints", "scratch"):
            if getattr(cluster.storage, field) is not None:
                yield (
                    f"{path}.storage.{field}",
                    f"GCP storage cannot serve platform: kubernetes: set {field}: null (use the provider's storage)",
                )


@rule
def pool_price_known(spec: FleetSpec, cat: Catalog) -> Iterator[Issue]:
    """Every Kueue pool has a $/h (the catalog's, else `price_per_hour`), and it is a plausible GPU-hour price."""
    low, high = GPU_HOUR_USD
    for path, cluster in _clusters(spec):
        for pi, pool in enumerate(cluster.pools):
            where = f"{path}.pools[{pi}]"
            unit, _ = pool_price(spec, pool, cat)
            shape = node_shape(pool, cat)
            if unit is None and cluster.scheduler == "kueue":
                yield (
                    f"{where}.price_per_hour",
                    f"the catalog has no {pool.capacity} price for {pool.machine_type} in {spec.region}: "
                    "set price_per_hour ($/h per node)",
                )
            elif pool.price_per_hour is not None and shape is not None:
                per_gpu = pool.price_per_hour / shape.gpus
                if not low <= per_gpu <= high:
                    yield (
                        f"{where}.price_per_hour",
                        f"${pool.price_per_hour}/h per node is ${per_gpu:.3f} per GPU-hour, outside "
                        f"${low}..${high}: give $/h for one node (not per month, not per GPU)",
                    )


# ---------------------------------------------------------------- GKE


def _gke_cidrs(cluster: ClusterSpec) -> list[tuple[str, IPv4Network]]:
    gke = cluster.gke
    if gke is None:
        return []
    return [
        ("gke.master_cidr", gke.master_cidr),
        ("gke.pods_cidr", gke.pods_cidr),
        ("gke.services_cidr", gke.services_cidr),
    ]


@rule
def gke_cidrs(spec: FleetSpec, cat: Catalog) -> Iterator[Issue]:
    """GKE ranges are private, the control plane a /28, and none overlaps another or the fleet's ranges."""
    net = spec.network
    taken = [("network.system_cidr", net.system_cidr), ("network.gpu_cidr", net.gpu_cidr)]
    taken += [(f"network.reserved_cidrs[{i}]", c) for i, c in enumerate(net.reserved_cidrs)]
    for path, cluster in _clusters(spec, "gke"):
        for field, cidr in _gke_cidrs(cluster):
            where = f"{path}.{field}"
            if not any(cidr.subnet_of(block) for block in RFC1918):
                yield where, f"{cidr} is not a private RFC 1918 range"
            if field == "gke.master_cidr" and cidr.prefixlen != 28:
                yield where, f"the GKE control plane range must be a /28, got /{cidr.prefixlen}"
            for other, used in taken:
                if cidr.overlaps(used):
                    yield where, f"{cidr} overlaps {other} {used}"
            taken.append((where, cidr))


@rule
def gke_upgrade_exclusion(spec: FleetSpec, cat: Catalog) -> Iterator[Issue]:
    """A GKE cluster names when its no-minor-or-node-upgrades exclusion starts (GPU pools never surprise-upgrade)."""
    for path, cluster in _clusters(spec, "gke"):
        if cluster.gke is None or cluster.gke.upgrade_exclusion_start is None:
            yield (
                f"{path}.gke.upgrade_exclusion_start",
                "required on platform: gke (RFC 3339 UTC, e.g. 2026-12-01T00:00:00Z): node upgrades wait for you",
            )


@rule
def gke_system_pool(spec: FleetSpec, cat: Catalog) -> Iterator[Issue]:
    """The system node pool runs Kueue and the autoscaler, not jobs: a GPU machine there is a mistake."""
    for path, cluster in _clusters(spec, "gke"):
        machine = (cluster.gke.system_pool.machine_type) if cluster.gke else "e2-standard-8"
        if machine in cat:
            yield (
                f"{path}.gke.system_pool.machine_type",
                f"{machine} is a GPU machine type; the system pool runs no jobs",
            )


# ---------------------------------------------------------------- Kueue


# The objects are kueue.x-k8s.io/v1beta1; Cohort is v1beta1 from 0.13, Topology from 0.14 (TAS beta).
KUEUE_MIN_VERSION = (0, 14, 0)


@rule
def kueue_version_supported(spec: FleetSpec, cat: Catalog) -> Iterator[Issue]:
    """The pinned Kueue release must serve every object the stack declares (v1beta1 Cohort and Topology)."""
    for path, cluster in _kueue(spec):
        version = tuple(int(p) for p in cluster.kueue.version.split("."))
        if version < KUEUE_MIN_VERSION:
            low = ".".join(map(str, KUEUE_MIN_VERSION))
            yield (
                f"{path}.version",
                f"Kueue {cluster.kueue.version} does not serve v1beta1 Topology / Cohort: use >= {low}",
            )


@rule
def kueue_teams_unique(spec: FleetSpec, cat: Catalog) -> Iterator[Issue]:
    """Team names and namespaces are unique; a team does not own a system namespace."""
    for path, cluster in _kueue(spec):
        teams = cluster.kueue.teams
        for i, name in _duplicates([t.name for t in teams]):
            yield f"{path}.teams[{i}].name", f"duplicate team name {name!r}"
        for i, ns in _duplicates([team_namespace(t) for t in teams]):
            yield f"{path}.teams[{i}].namespace", f"namespace {ns!r} already belongs to another team"
        reserved = RESERVED_NAMESPACES | {cluster.kueue.autoscaler.namespace}
        for i, team in enumerate(teams):
            if team_namespace(team) in reserved:
                yield f"{path}.teams[{i}].namespace", f"{team_namespace(team)!r} is a system namespace"


@rule
def kueue_quota_pools(spec: FleetSpec, cat: Catalog) -> Iterator[Issue]:
    """Each quota names a pool of the cluster: a ResourceFlavor with no pool would never admit anything."""
    for path, cluster in _kueue(spec):
        names = [p.name for p in cluster.pools]
        for i, team in enumerate(cluster.kueue.teams):
            for pool in team.quotas:
                if pool not in names:
                    known = ", ".join(names)
                    yield f"{path}.teams[{i}].quotas.{pool}", f"no pool {pool!r} in this cluster (pools: {known})"


@rule
def kueue_quota_shares(spec: FleetSpec, cat: Catalog) -> Iterator[Issue]:
    """Shares are in (0, 1], give at least one GPU, and the teams' shares of one pool add up to at most 1."""
    for path, cluster in _kueue(spec):
        pools = {p.name: p for p in cluster.pools}
        total: dict[str, float] = {}
        for i, team in enumerate(cluster.kueue.teams):
            for name, share in team.quotas.items():
                where = f"{path}.teams[{i}].quotas.{name}"
                if name not in pools:
                    continue
                if not 0 < share <= 1:
                    yield where, f"share {share} must be in (0, 1]: the fraction of the pool's GPUs at max_nodes"
                    continue
                pool = pools[name]
                shape = node_shape(pool, cat)
                if shape is not None and quota_gpus(team, pool, shape) < 1:
                    yield where, f"share {share} of {pool.max_nodes} x {shape.gpus} GPUs rounds down to 0 GPUs"
                total[name] = total.get(name, 0.0) + share
                if total[name] > 1 + 1e-9:
                    yield (
                        where,
                        f"the teams' shares of pool {name!r} add up to {total[name]:g} (> 1): nominal quotas "
                        "would promise more GPUs than the pool has at max_nodes (use borrowing instead)",
                    )


@rule
def kueue_shared_flavors(spec: FleetSpec, cat: Catalog) -> Iterator[Issue]:
    """A `kueue.flavors` entry spans existing pools of one GPU model (its quota counts GPUs as one kind), each
    pool in one flavor at most, under a name no other flavor has; a team quotas all of a shared flavor's pools
    or none (the flavor's node selector lets its workloads run on any of them); the admission check is on (its
    Provisioned answer is what keeps the pods in the pool booked for them)."""
    for path, cluster in _kueue(spec):
        pools = {p.name: p for p in cluster.pools}
        seen: dict[str, str] = {}
        if cluster.kueue.flavors and not cluster.kueue.provisioning:
            yield (
                f"{path}.flavors",
                "needs provisioning: true: only the admission check's answer pins a workload's pods to the pool "
                "the autoscaler chose; without it kube-scheduler may put a 1-GPU pod on an idle 8-GPU node",
            )
        for fname, members in cluster.kueue.flavors.items():
            where = f"{path}.flavors.{fname}"
            if not K8S_NAME.fullmatch(fname):
                yield where, f"flavor name {fname!r} must be a DNS-1123 label"
            if fname in pools and fname not in members:
                yield where, f"names pool {fname!r}'s own flavor ({cluster.name}-{fname}): pick another name"
            if not members:
                yield where, "lists no pool"
            for j, name in enumerate(members):
                if name not in pools:
                    yield f"{where}[{j}]", f"no pool {name!r} in this cluster (pools: {', '.join(pools)})"
                elif name in seen:
                    again = "listed twice" if seen[name] == fname else f"already in flavor {seen[name]!r}"
                    yield f"{where}[{j}]", f"pool {name!r} is {again}"
                else:
                    seen[name] = fname
            known = [pools[n] for n in dict.fromkeys(members) if n in pools]
            models = {p.name: shape.gpu_type for p in known if (shape := node_shape(p, cat)) is not None}
            if len(set(models.values())) > 1:
                listed = ", ".join(f"{n} ({m})" for n, m in models.items())
                yield where, f"pools of different GPU models ({listed}): one nvidia.com/gpu quota would count both"
        for i, team in enumerate(cluster.kueue.teams):
            for fname, members in cluster.kueue.flavors.items():
                listed = [n for n in members if n in team.quotas]
                if listed and len(listed) < len(members):
                    missing = ", ".join(n for n in members if n not in team.quotas)
                    yield (
                        f"{path}.teams[{i}].quotas",
                        f"quotas part of flavor {fname!r} (not {missing}): its workloads may run on every pool of "
                        "the flavor, so give the team a share of each or of none",
                    )


@rule
def kueue_pools_queued(spec: FleetSpec, cat: Catalog) -> Iterator[Issue]:
    """A pool no team has a quota on can never admit a workload: its nodes would only cost money."""
    for path, cluster in _kueue(spec):
        used = {p for t in cluster.kueue.teams for p in t.quotas}
        ci = path.rsplit(".", 1)[0]
        for pi, pool in enumerate(cluster.pools):
            if pool.name not in used:
                yield f"{ci}.pools[{pi}].name", f"pool {pool.name!r} is in no team's kueue quotas"


@rule
def kueue_cohort_limits(spec: FleetSpec, cat: Catalog) -> Iterator[Issue]:
    """Borrowing and lending happen inside a cohort (Kueue refuses a borrowingLimit without one)."""
    for path, cluster in _kueue(spec):
        for i, team in enumerate(cluster.kueue.teams):
            for field in ("borrowing_limit", "lending_limit"):
                if getattr(team, field) is not None and team.cohort is None:
                    yield f"{path}.teams[{i}].{field}", "needs a cohort (teams borrow from and lend to their cohort)"


@rule
def kueue_priority_classes(spec: FleetSpec, cat: Catalog) -> Iterator[Issue]:
    for path, cluster in _kueue(spec):
        for i, name in _duplicates([p.name for p in cluster.kueue.priority_classes]):
            yield f"{path}.priority_classes[{i}].name", f"duplicate priority class {name!r}"


@rule
def kueue_autoscaler_image(spec: FleetSpec, cat: Catalog) -> Iterator[Issue]:
    """The autoscaler runs pinned code: its image is named by digest, never by a movable tag."""
    for path, cluster in _kueue(spec):
        image = cluster.kueue.autoscaler.image
        if not IMAGE_DIGEST.fullmatch(image):
            yield f"{path}.autoscaler.image", f"{image!r} must be pinned by digest: <repository>@sha256:<64 hex>"


@rule
def kueue_autoscaler_policy(spec: FleetSpec, cat: Catalog) -> Iterator[Issue]:
    """The in-cluster daemon would refuse a bad policy at start: catch it at synth."""
    from autoscaler.model.policy import SHARE_NODES_ON_KUBERNETES, PolicyError, policy_from_mapping  # pure

    for path, cluster in _kueue(spec):
        try:
            policy = policy_from_mapping(cluster.kueue.autoscaler.policy)
        except PolicyError as exc:
            for name, reason in exc.errors:
                yield f"{path}.autoscaler.policy.{name}", reason
            continue
        if policy.share_nodes:
            yield f"{path}.autoscaler.policy.share_nodes", SHARE_NODES_ON_KUBERNETES
        yield from unknown_pool_caps(f"{path}.autoscaler.policy", policy, cluster)
