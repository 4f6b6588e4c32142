"""The Kubernetes / Kueue rules of the fleet spec (fleet/spec/kube_rules.py): each mutation of a valid GKE or
Cluster API spec is refused with its field path and reason; valid variations pass."""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from fleet.spec import SpecError, load_spec
from fleet.spec.kube import node_shape, quota_amounts
from fleet.spec.rules import RULES

Spec = dict[str, Any]
DIGEST = "sha256:" + "0" * 63 + "1"
IMAGE = f"us-docker.pkg.dev/my-gpu-project/gpu-fleet/autoscaler@{DIGEST}"

GKE: Spec = {
    "project": "my-gpu-project",
    "region": "us-central1",
    "zones": ["us-central1-b"],
    "clusters": [
        {
            "name": "a3u",
            "scheduler": "kueue",
            "platform": "gke",
            "gke": {"upgrade_exclusion_start": "2026-12-01T00:00:00Z"},
            "pools": [
                {"name": "resv", "machine_type": "a3-ultragpu-8g", "capacity": "reservation", "reservation": "r1",
                 "zones": ["us-central1-b"], "compact_placement": True, "max_nodes": 4},
                {"name": "spot", "machine_type": "a3-ultragpu-8g", "capacity": "spot", "zones": ["us-central1-b"],
                 "max_nodes": 4},
            ],
            "kueue": {
                "teams": [
                    {"name": "research", "quotas": {"resv": 0.5, "spot": 0.5}, "cohort": "gpu",
                     "borrowing_limit": 1.0, "lending_limit": 0.5},
                    {"name": "product", "quotas": {"resv": 0.5, "spot": 0.5}, "cohort": "gpu"},
                ],
                "autoscaler": {"image": IMAGE},
            },
        }
    ],
}  # fmt: skip

CAPI: Spec = {
    "project": "my-gpu-project",
    "region": "us-central1",
    "zones": ["us-central1-a"],
    "clusters": [
        {
            "name": "neo",
            "scheduler": "kueue",
            "platform": "kubernetes",
            "storage": {"home": None, "checkpoints": None},
            "kubernetes": {
                "cluster_name": "neo-gpu", "namespace": "capi-neo", "version": "v1.31.4",
                "bootstrap_template": {"api_group": "bootstrap.cluster.x-k8s.io", "kind": "KubeadmConfigTemplate",
                                       "name": "neo-gpu-workers"},
            },
            "pools": [
                {"name": "h100", "machine_type": "gpu-h100-sxm-8x", "max_nodes": 4, "price_per_hour": 23.92,
                 "cluster_api": {
                     "infrastructure_template": {"api_group": "infrastructure.cluster.x-k8s.io",
                                                 "kind": "Metal3MachineTemplate", "name": "neo-h100"},
                     "gpu_type": "nvidia-h100-80gb", "gpus_per_node": 8, "vcpus": 128, "memory_gib": 1600}},
            ],
            "kueue": {"teams": [{"name": "ml", "quotas": {"h100": 1.0}}], "autoscaler": {"image": IMAGE}},
        }
    ],
}  # fmt: skip


def cl(d: Spec) -> dict[str, Any]:
    return d["clusters"][0]


def pool(d: Spec, i: int) -> dict[str, Any]:
    return cl(d)["pools"][i]


def team(d: Spec, i: int) -> dict[str, Any]:
    return cl(d)["kueue"]["teams"][i]


@dataclass(frozen=True)
class Case:
    rule: str
    base: str  # "gke" | "capi"
    mutate: Callable[[Spec], object]
    path: str
    reason: str

    def __str__(self) -> str:
        return f"{self.rule}:{self.path}"


def _spot_twin_sharing_the_template(d: dict) -> None:
    """A spot copy of the h100 pool, both through the cluster's one bootstrap template, taints set by it."""
    cl(d)["kubernetes"]["taint_propagation"] = "bootstrap"
    cl(d)["pools"].append({**copy.deepcopy(pool(d, 0)), "name": "spot", "capacity": "spot"})
    cl(d)["kueue"]["teams"][0]["quotas"]["spot"] = 1.0


def _l40s_beside_h100(d: dict, *, shared: bool) -> None:
    """A 4 x L40S pool next to the 8 x H100 one, quota'd by the one team; in one shared flavor if `shared`."""
    l40s = copy.deepcopy(pool(d, 0))
    l40s.update(name="l40s", machine_type="gpu-l40s-4x", price_per_hour=5.16)
    l40s["cluster_api"].update(gpu_type="nvidia-l40s", gpus_per_node=4, vcpus=64, memory_gib=512)
    cl(d)["pools"].append(l40s)
    team(d, 0)["quotas"]["l40s"] = 1.0
    if shared:
        cl(d)["kueue"]["flavors"] = {"gpu": ["h100", "l40s"]}


CASES = [
    Case("cluster_zone_in_fleet", "capi", lambda d: cl(d).update(zone="us-central1-a"), "clusters[0].zone",
         "no controller or storage on GCP"),
    Case("platform_settings", "capi", lambda d: cl(d).pop("kubernetes"), "clusters[0].kubernetes",
         "required with platform: kubernetes"),
    Case("platform_settings", "gke", lambda d: cl(d).update(kubernetes=copy.deepcopy(cl(CAPI)["kubernetes"])),
         "clusters[0].kubernetes", "only with platform: kubernetes"),
    Case("platform_settings", "capi", lambda d: cl(d).update(gke={}), "clusters[0].gke", "only with platform: gke"),
    Case("cluster_api_pools", "capi", lambda d: pool(d, 0).pop("cluster_api"), "clusters[0].pools[0].cluster_api",
         "required on platform: kubernetes"),
    Case("cluster_api_pools", "capi", lambda d: pool(d, 0).update(zones=["us-central1-a"]),
         "clusters[0].pools[0].zones", "set cluster_api.failure_domain"),
    Case("cluster_api_pools", "capi", lambda d: pool(d, 0).update(capacity="flex-start"),
         "clusters[0].pools[0].capacity", "use on-demand or spot"),
    Case("cluster_api_pools", "capi", lambda d: pool(d, 0).update(compact_placement=True),
         "clusters[0].pools[0].compact_placement", "not available on platform: kubernetes"),
    Case("cluster_api_pools", "capi", lambda d: cl(d)["kubernetes"].pop("bootstrap_template"),
         "clusters[0].pools[0].cluster_api.bootstrap_template", "required"),
    Case("cluster_api_pools", "capi", lambda d: pool(d, 0).update(labels={"tier": "a b"}),
         "clusters[0].pools[0].labels.tier", "not a Kubernetes label value"),
    Case("cluster_api_pools", "capi", lambda d: pool(d, 0).update(labels={"gpu-class": "inference"}),
         "clusters[0].pools[0].labels.gpu-class", "would stay on the Machines"),
    Case("cluster_api_pools", "capi", lambda d: pool(d, 0).update(labels={"example.com/rack": "r1"}),
         "clusters[0].pools[0].labels.example.com/rack", "node.cluster.x-k8s.io/rack"),
    Case("cluster_api_pools", "gke", lambda d: pool(d, 1).update(cluster_api=pool(CAPI, 0)["cluster_api"]),
         "clusters[0].pools[1].cluster_api", "only on platform: kubernetes"),
    Case("bootstrap_taints_per_template", "capi", lambda d: _spot_twin_sharing_the_template(d),
         "clusters[0].pools[1].cluster_api.bootstrap_template", "h100 and spot share bootstrap template"),
    Case("kubernetes_storage", "capi", lambda d: cl(d).pop("storage"), "clusters[0].storage.home",
         "GCP storage cannot serve platform: kubernetes"),
    Case("pool_price_known", "capi", lambda d: pool(d, 0).pop("price_per_hour"), "clusters[0].pools[0].price_per_hour",
         "the catalog has no on-demand price for gpu-h100-sxm-8x"),
    Case("pool_price_known", "capi", lambda d: pool(d, 0).update(price_per_hour=0.2),
         "clusters[0].pools[0].price_per_hour", "$0.025 per GPU-hour"),
    Case("pool_price_known", "capi", lambda d: pool(d, 0).update(price_per_hour=999),
         "clusters[0].pools[0].price_per_hour", "not per month"),
    Case("gke_cidrs", "gke", lambda d: cl(d)["gke"].update(pods_cidr="10.0.0.0/14"), "clusters[0].gke.pods_cidr",
         "overlaps network.system_cidr"),
    Case("gke_cidrs", "gke", lambda d: cl(d)["gke"].update(master_cidr="172.16.0.0/24"),
         "clusters[0].gke.master_cidr", "must be a /28"),
    Case("gke_cidrs", "gke", lambda d: cl(d)["gke"].update(services_cidr="10.64.0.0/20"),
         "clusters[0].gke.services_cidr", "overlaps clusters[0].gke.pods_cidr"),
    Case("gke_cidrs", "gke", lambda d: cl(d)["gke"].update(services_cidr="100.64.0.0/20"),
         "clusters[0].gke.services_cidr", "not a private RFC 1918 range"),
    Case("gke_upgrade_exclusion", "gke", lambda d: cl(d).pop("gke"), "clusters[0].gke.upgrade_exclusion_start",
         "required on platform: gke"),
    Case("gke_system_pool", "gke", lambda d: cl(d)["gke"].update(system_pool={"machine_type": "g2-standard-8"}),
         "clusters[0].gke.system_pool.machine_type", "is a GPU machine type"),
    Case("kueue_version_supported", "gke", lambda d: cl(d)["kueue"].update(version="0.12.2"),
         "clusters[0].kueue.version", "does not serve v1beta1 Topology / Cohort"),
    Case("kueue_teams_unique", "gke", lambda d: team(d, 1).update(name="research"),
         "clusters[0].kueue.teams[1].name", "duplicate team name 'research'"),
    Case("kueue_teams_unique", "gke", lambda d: team(d, 1).update(namespace="research"),
         "clusters[0].kueue.teams[1].namespace", "already belongs to another team"),
    Case("kueue_teams_unique", "gke", lambda d: team(d, 1).update(namespace="kube-system"),
         "clusters[0].kueue.teams[1].namespace", "is a system namespace"),
    Case("kueue_quota_pools", "gke", lambda d: team(d, 1)["quotas"].update(l4=0.1),
         "clusters[0].kueue.teams[1].quotas.l4", "no pool 'l4' in this cluster (pools: resv, spot)"),
    Case("kueue_quota_shares", "gke", lambda d: team(d, 1)["quotas"].update(resv=0.6),
         "clusters[0].kueue.teams[1].quotas.resv", "add up to 1.1 (> 1)"),
    Case("kueue_quota_shares", "gke", lambda d: team(d, 1)["quotas"].update(resv=1.5),
         "clusters[0].kueue.teams[1].quotas.resv", "must be in (0, 1]"),
    Case("kueue_quota_shares", "gke", lambda d: team(d, 1)["quotas"].update(resv=0.01),
         "clusters[0].kueue.teams[1].quotas.resv", "rounds down to 0 GPUs"),
    Case("kueue_shared_flavors", "gke", lambda d: cl(d)["kueue"].update(flavors={"H200": ["resv", "spot"]}),
         "clusters[0].kueue.flavors.H200", "must be a DNS-1123 label"),
    Case("kueue_shared_flavors", "gke", lambda d: cl(d)["kueue"].update(flavors={"spot": ["resv"]}),
         "clusters[0].kueue.flavors.spot", "names pool 'spot''s own flavor (a3u-spot)"),
    Case("kueue_shared_flavors", "gke", lambda d: cl(d)["kueue"].update(flavors={"h200": []}),
         "clusters[0].kueue.flavors.h200", "lists no pool"),
    Case("kueue_shared_flavors", "gke", lambda d: cl(d)["kueue"].update(flavors={"h200": ["resv", "l4"]}),
         "clusters[0].kueue.flavors.h200[1]", "no pool 'l4' in this cluster (pools: resv, spot)"),
    Case("kueue_shared_flavors", "gke", lambda d: cl(d)["kueue"].update(flavors={"a": ["resv"], "b": ["spot", "resv"]}),
         "clusters[0].kueue.flavors.b[1]", "pool 'resv' is already in flavor 'a'"),
    Case("kueue_shared_flavors", "gke", lambda d: cl(d)["kueue"].update(flavors={"h200": ["resv", "spot", "resv"]}),
         "clusters[0].kueue.flavors.h200[2]", "pool 'resv' is listed twice"),
    Case("kueue_shared_flavors", "capi", lambda d: _l40s_beside_h100(d, shared=True), "clusters[0].kueue.flavors.gpu",
         "pools of different GPU models (h100 (nvidia-h100-80gb), l40s (nvidia-l40s))"),
    Case("kueue_shared_flavors", "gke",
         lambda d: (cl(d)["kueue"].update(flavors={"h200": ["resv", "spot"]}), team(d, 1)["quotas"].pop("spot")),
         "clusters[0].kueue.teams[1].quotas", "quotas part of flavor 'h200' (not spot)"),
    Case("kueue_shared_flavors", "gke",
         lambda d: cl(d)["kueue"].update(flavors={"h200": ["resv", "spot"]}, provisioning=False),
         "clusters[0].kueue.flavors", "needs provisioning: true"),
    Case("kueue_pools_queued", "gke", lambda d: [team(d, i)["quotas"].pop("spot") for i in (0, 1)],
         "clusters[0].pools[1].name", "pool 'spot' is in no team's kueue quotas"),
    Case("kueue_cohort_limits", "gke", lambda d: team(d, 0).pop("cohort"),
         "clusters[0].kueue.teams[0].borrowing_limit", "needs a cohort"),
    Case("kueue_priority_classes", "gke",
         lambda d: cl(d)["kueue"].update(priority_classes=[{"name": "hi", "value": 1}, {"name": "hi", "value": 2}]),
         "clusters[0].kueue.priority_classes[1].name", "duplicate priority class 'hi'"),
    Case("kueue_autoscaler_image", "gke", lambda d: cl(d)["kueue"]["autoscaler"].update(image="gpu-fleet:latest"),
         "clusters[0].kueue.autoscaler.image", "must be pinned by digest"),
    Case("kueue_autoscaler_policy", "gke", lambda d: cl(d)["kueue"]["autoscaler"].update(policy={"nope": 1}),
         "clusters[0].kueue.autoscaler.policy.nope", ""),
    Case("kueue_autoscaler_policy", "gke",
         lambda d: cl(d)["kueue"]["autoscaler"].update(policy={"share_nodes": True}),
         "clusters[0].kueue.autoscaler.policy.share_nodes", "the Slurm daemon's"),
    Case("kueue_autoscaler_policy", "gke",
         lambda d: cl(d)["kueue"]["autoscaler"].update(policy={"pool_max_nodes": {"nosuchpool": 2}}),
         "clusters[0].kueue.autoscaler.policy.pool_max_nodes", "'nosuchpool' is not a pool of this cluster"),
]  # fmt: skip


def _base(name: str) -> Spec:
    return copy.deepcopy(GKE if name == "gke" else CAPI)


@pytest.mark.parametrize("name", ["gke", "capi"])
def test_base_specs_are_valid(name: str) -> None:
    load_spec(_base(name))


@pytest.mark.parametrize("case", CASES, ids=str)
def test_rule_reports_field_path_and_reason(case: Case) -> None:
    spec = _base(case.base)
    case.mutate(spec)
    with pytest.raises(SpecError) as info:
        load_spec(spec)
    errors = info.value.errors
    assert any(path == case.path and case.reason in reason for path, reason in errors), errors


def test_every_kube_rule_has_a_test() -> None:
    tested = {c.rule for c in CASES}
    assert {r.__name__ for r in RULES if r.__module__ == "fleet.spec.kube_rules"} <= tested


def test_slurm_pools_are_not_checked_against_cluster_api_rules() -> None:
    """The GCE catalog rules skip an existing cluster's pools: a provider's machine name is not a GCE type."""
    spec = load_spec(_base("capi"))
    assert spec.clusters[0].pools[0].machine_type == "gpu-h100-sxm-8x"


def test_schema_refuses_unknown_platform_and_fields() -> None:
    spec = _base("gke")
    cl(spec)["platform"] = "eks"
    team(spec, 0)["quota"] = {}
    with pytest.raises(SpecError) as info:
        load_spec(spec)
    paths = [p for p, _ in info.value.errors]
    assert "clusters[0].platform" in paths and "clusters[0].kueue.teams[0].quota" in paths


def test_gpu_operator_defaults_give_a_plain_node_image_working_gpus() -> None:
    op = load_spec(_base("capi")).clusters[0].kubernetes.gpu_operator
    assert op is not None and (op.version, op.driver, op.toolkit, op.nfd) == ("v26.7.0", True, True, True)
    spec = _base("capi")
    cl(spec)["kubernetes"]["gpu_operator"] = None  # the team's own image or operator
    assert load_spec(spec).clusters[0].kubernetes.gpu_operator is None


@pytest.mark.parametrize("version", ["26.7.0", "v26.7", "latest", "v26.7.0-rc1", "v26.7.0\n"])
def test_gpu_operator_version_must_be_a_chart_version_nvidia_publishes(version: str) -> None:
    spec = _base("capi")
    cl(spec)["kubernetes"]["gpu_operator"] = {"version": version}
    with pytest.raises(SpecError) as info:
        load_spec(spec)
    ((path, reason),) = info.value.errors
    assert path == "clusters[0].kubernetes.gpu_operator.version"
    assert reason == f"not a GPU Operator chart version: NVIDIA publishes v<YY.MM.PP> (e.g. v26.7.0), got {version!r}"


def test_gpu_operator_is_an_existing_cluster_s_setting_only() -> None:
    """GKE installs the driver and runs its own device plugin: there is no place for the operator in a GKE spec."""
    spec = _base("gke")
    cl(spec)["gke"]["gpu_operator"] = {"version": "v26.7.0"}
    with pytest.raises(SpecError) as info:
        load_spec(spec)
    assert ("clusters[0].gke.gpu_operator", "unknown field (check the spelling; see docs/spec.md)") in info.value.errors


def test_nominal_quota_is_the_share_of_the_pool_at_max_size() -> None:
    spec = load_spec(_base("gke"))
    from fleet.catalog import load_catalog

    resv = spec.clusters[0].pools[0]
    shape = node_shape(resv, load_catalog())
    assert shape is not None and shape.gpus == 8
    quota = quota_amounts(spec.clusters[0].kueue.teams[0], resv, shape)
    assert quota["nvidia.com/gpu"] == 16  # 0.5 x 4 nodes x 8 GPUs
    assert quota["cpu"] == int(2 * shape.vcpus * 0.9)


@pytest.mark.parametrize(
    ("labels", "sync"),
    [
        ({"node.cluster.x-k8s.io/gpu-class": "inference"}, []),
        ({"team.node.cluster.x-k8s.io/name": "ml"}, []),  # a subdomain
        ({"node-role.kubernetes.io/gpu": ""}, []),
        ({"node-restriction.kubernetes.io/tier": "a"}, []),
        ({"example.com/rack": "r1"}, [r"^example\.com/"]),  # the management cluster syncs it too
    ],
)
def test_pool_labels_cluster_api_copies_to_the_nodes_are_accepted(labels: dict, sync: list) -> None:
    """Cluster API copies a Machine's labels to its Node in its managed domains (util/labels GetManagedLabels) and
    those the core manager's --additional-sync-machine-labels match, which `additional_sync_machine_labels`
    repeats; other labels would stay on the Machines, where no pod selector reaches them."""
    raw = copy.deepcopy(CAPI)
    pool(raw, 0)["labels"] = labels
    cl(raw)["kubernetes"]["additional_sync_machine_labels"] = sync
    spec = load_spec(raw)
    assert spec.clusters[0].pools[0].labels == labels
