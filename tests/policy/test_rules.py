"""Each guardrail of fleet/policy/rules.py with a compliant and a violating resource (or stack)."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from fleet.policy.rules import (
    ADVISORY,
    DEFAULT_SETTINGS,
    MANDATORY,
    Resource,
    Settings,
    check_all,
)

STACK = "gcp-prod"
LABELS = {"team": "ml", "cost-center": "cc-1", "managed-by": "gpu-fleet"}
SHIELDED = {"enableSecureBoot": True, "enableVtpm": True, "enableIntegrityMonitoring": True}
GPU_TEMPLATE = {
    "machineType": "a3-highgpu-8g",
    "region": "us-central1",
    "guestAccelerators": [{"count": 8, "type": "nvidia-h100-80gb"}],
    "networkInterfaces": [{"network": "n", "subnetwork": "s"}],
    "shieldedInstanceConfig": SHIELDED,
    "scheduling": {"provisioningModel": "STANDARD"},
    "labels": LABELS,
    "metadata": {"block-project-ssh-keys": "TRUE", "enable-oslogin": "TRUE", "startup-script": "#!/bin/bash\n"},
}
FIREWALL = {
    "direction": "INGRESS",
    "allows": [{"protocol": "tcp", "ports": ["22"]}],
    "sourceRanges": ["35.235.240.0/20"],
    "targetServiceAccounts": ["c-ctl@p.iam.gserviceaccount.com"],
}
NODE_METADATA = {"block-project-ssh-keys": "true"}
BUCKET = {"location": "us-central1", "uniformBucketLevelAccess": True, "publicAccessPrevention": "enforced",
          "labels": LABELS}  # fmt: skip


def res(kind: str, props: dict[str, Any], name: str = "r", stack: str = STACK) -> Resource:
    return Resource(f"urn:pulumi:{stack}::gpu-fleet::{kind}::{name}", kind, name, props)


def template(**changes: Any) -> Resource:
    props = copy.deepcopy(GPU_TEMPLATE)
    props.update(changes)
    return res("gcp:compute/instanceTemplate:InstanceTemplate", props, "gpu-template")


def names(resources: list[Resource], settings: Settings = DEFAULT_SETTINGS) -> list[tuple[str, str]]:
    return [(v.policy, v.level) for v in check_all(resources, settings)]


def test_compliant_stack_has_no_violation() -> None:
    stack = [
        template(),
        res("gcp:compute/firewall:Firewall", FIREWALL, "iap-ssh"),
        res("gcp:storage/bucket:Bucket", BUCKET, "ckpt"),
    ]
    assert names(stack) == []


@pytest.mark.parametrize("key", ["accessConfigs", "ipv6AccessConfigs"])
def test_external_ip_on_a_gpu_template_is_refused(key: str) -> None:
    bad = template(networkInterfaces=[{"network": "n"}, {"network": "m", key: [{"natIp": ""}]}])
    (v,) = check_all([bad])
    assert (v.policy, v.level) == ("gpu-no-external-ip", MANDATORY)
    assert f"networkInterfaces[1].{key}" in v.message and "gpu-template" in v.line()
    # a CPU VM (no accelerators, not a GPU machine family) is out of this policy's scope
    cpu = template(machineType="n2-standard-8", guestAccelerators=[])
    cpu.props["networkInterfaces"][0]["accessConfigs"] = [{}]  # type: ignore[index]
    assert names([cpu]) == []
    # GPU machine families count even without guestAccelerators
    a3 = template(guestAccelerators=[], networkInterfaces=[{"accessConfigs": [{}]}])
    assert names([a3]) == [("gpu-no-external-ip", MANDATORY)]


def test_open_ingress_is_refused_but_deny_and_egress_rules_may_name_any_range() -> None:
    fw = "gcp:compute/firewall:Firewall"
    assert names([res(fw, {**FIREWALL, "sourceRanges": ["10.0.0.0/8", "0.0.0.0/0"]})]) == [
        ("no-open-ingress", MANDATORY)
    ]
    assert names([res(fw, {**FIREWALL, "direction": None, "sourceRanges": ["::/0"]})]) == [
        ("no-open-ingress", MANDATORY)
    ]  # INGRESS is the default direction
    deny = {"direction": "INGRESS", "denies": [{"protocol": "all"}], "sourceRanges": ["0.0.0.0/0"]}
    egress = {"direction": "EGRESS", "allows": [{"protocol": "all"}], "destinationRanges": ["0.0.0.0/0"]}
    assert names([res(fw, deny), res(fw, egress)]) == []


def test_shielded_vm_is_required_on_vms_templates_and_gke_node_pools() -> None:
    assert names([template(shieldedInstanceConfig={**SHIELDED, "enableSecureBoot": False})]) == [
        ("shielded-vm", MANDATORY)
    ]
    (v,) = check_all([template(shieldedInstanceConfig=None)])
    assert "enableSecureBoot, enableIntegrityMonitoring, enableVtpm must be true" in v.message
    np_ok = {"nodeConfig": {"shieldedInstanceConfig": {"enableSecureBoot": True, "enableIntegrityMonitoring": True},
                            "resourceLabels": LABELS, "metadata": NODE_METADATA}}  # fmt: skip
    np = "gcp:container/nodePool:NodePool"
    assert names([res(np, np_ok)]) == []
    unshielded = {"nodeConfig": {"resourceLabels": LABELS, "metadata": NODE_METADATA}}
    assert names([res(np, unshielded)]) == [("shielded-vm", MANDATORY)]


def test_secure_boot_is_waived_only_where_the_catalog_boots_without_it_and_vtpm_and_integrity_stay_required() -> None:
    """A3 Mega's TCPXO module is built on the node, which a Secure Boot kernel refuses: the catalog boots that family
    without Secure Boot, and the policy waives exactly the machine types the catalog does."""
    from fleet.catalog import load_catalog

    assert {
        m.name for m in load_catalog().machines() if not m.software.secure_boot
    } == DEFAULT_SETTINGS.secure_boot_exempt
    off = {**SHIELDED, "enableSecureBoot": False}
    mega = {"machineType": "a3-megagpu-8g", "shieldedInstanceConfig": off}
    assert names([template(**mega)]) == []
    (v,) = check_all([template(**{**mega, "shieldedInstanceConfig": {**off, "enableVtpm": False}})])
    assert "enableVtpm must be true" in v.message and "enableSecureBoot" not in v.message
    assert names([template(machineType="a3-ultragpu-8g", shieldedInstanceConfig=off)]) == [("shielded-vm", MANDATORY)]


def test_required_labels_on_every_billable_resource() -> None:
    for kind in ("gcp:filestore/instance:Instance", "gcp:secretmanager/secret:Secret", "gcp:storage/bucket:Bucket"):
        (v,) = [x for x in check_all([res(kind, {"labels": {"team": "ml", "cost-center": " "}})])
                if x.policy == "required-labels"]  # fmt: skip
        assert v.message.startswith("labels: missing required label(s) cost-center"), kind
    cluster = check_all([res("gcp:container/cluster:Cluster", {"resourceLabels": LABELS})])
    assert [v for v in cluster if v.policy == "required-labels"] == []
    # not billable on its own (a network, a reserved internal address): no labels needed
    assert names([res("gcp:compute/network:Network", {})]) == []
    assert names([res("gcp:compute/address:Address", {"addressType": "INTERNAL", "region": "us-east4"})]) == []
    assert names([res("gcp:compute/address:Address", {"region": "us-east4"})]) == [("required-labels", MANDATORY)]


def test_regions_outside_the_approved_list_are_refused() -> None:
    assert names([template(region="me-central2")]) == [("approved-regions", MANDATORY)]
    zonal = res("gcp:compute/instanceGroupManager:InstanceGroupManager", {"zone": "southamerica-east1-a"})
    assert names([zonal]) == [("approved-regions", MANDATORY)]
    assert names([res("gcp:storage/bucket:Bucket", {**BUCKET, "location": "US"})]) == []  # multi-region
    assert names([res("gcp:storage/bucket:Bucket", {**BUCKET, "location": "ASIA"})]) == [
        ("approved-regions", MANDATORY)
    ]
    assert names([template(region="me-central2")], Settings(approved_regions=frozenset({"me-central2"}))) == []


def test_buckets_need_uniform_access_and_public_access_prevention() -> None:
    b = "gcp:storage/bucket:Bucket"
    vs = check_all([res(b, {**BUCKET, "uniformBucketLevelAccess": False, "publicAccessPrevention": "inherited"})])
    assert [v.policy for v in vs] == ["bucket-private", "bucket-private"]
    assert "uniformBucketLevelAccess" in vs[0].message and "'inherited'" in vs[1].message


def test_dev_stacks_are_advised_to_use_spot() -> None:
    dev = Resource("urn:pulumi:gcp-l4-dev::gpu-fleet::gcp:compute/instanceTemplate:InstanceTemplate::t",
                   "gcp:compute/instanceTemplate:InstanceTemplate", "t", GPU_TEMPLATE)  # fmt: skip
    assert names([dev]) == [("dev-spot", ADVISORY)]
    spot = copy.deepcopy(GPU_TEMPLATE) | {"scheduling": {"provisioningModel": "SPOT"}}
    assert names([Resource(dev.urn, dev.type, "t", spot)]) == []
    assert names([template()]) == []  # a prod stack: no advice
    labelled = template(labels={**LABELS, "env": "dev"})
    assert names([labelled]) == [("dev-spot", ADVISORY)]


def test_the_gpu_cap_counts_every_pool_at_max_nodes() -> None:
    inventory = [{"cluster": "c", "name": "spot", "max_nodes": 100, "gpus_per_node": 8},
                 {"cluster": "c", "name": "od", "max_nodes": 16, "gpus_per_node": 8}]  # fmt: skip
    controller = res("gcp:compute/instance:Instance", {"machineType": "n2-standard-8", "labels": LABELS,
                     "shieldedInstanceConfig": SHIELDED, "zone": "us-central1-a",
                     "metadata": {**GPU_TEMPLATE["metadata"], "gpu-fleet-inventory": json.dumps(inventory)}},
                     "ctl")  # fmt: skip
    assert names([controller], Settings(max_gpus=928)) == []  # at the cap: allowed
    (v,) = check_all([controller], Settings(max_gpus=512))
    assert "928 GPUs, over its cap of 512" in v.message and "c/spot: 800" in v.message
    assert names([controller], Settings(max_gpus=512, stack_max_gpus={STACK: 1024})) == []
    assert names([controller]) == [] or DEFAULT_SETTINGS.max_gpus < 928


@pytest.mark.parametrize(
    ("role", "refused"),
    [("roles/editor", True), ("roles/owner", True), ("roles/iam.serviceAccountTokenCreator", True),
     ("roles/iam.serviceAccountUser", True), ("roles/logging.logWriter", False)],
)  # fmt: skip
def test_no_basic_role_or_project_wide_impersonation(role: str, refused: bool) -> None:
    """A project-level binding of a basic role, or of a role that acts as every account of the project, is
    refused; the same impersonation role on one service account (serviceaccount/iAMMember) is how it is given."""
    member = {"project": "p", "role": role, "member": "serviceAccount:x@p.iam.gserviceaccount.com"}
    got = names([res("gcp:projects/iAMMember:IAMMember", member, "m")])
    assert got == ([("least-privilege-iam", MANDATORY)] if refused else [])
    assert names([res("gcp:serviceaccount/iAMMember:IAMMember", member, "on-one-account")]) == []


@pytest.mark.parametrize(
    ("metadata", "says"),
    [
        ({"enable-oslogin": "TRUE"}, "block-project-ssh-keys"),
        ({"block-project-ssh-keys": "TRUE", "enable-oslogin": "FALSE"}, "enable-oslogin"),
        ({"block-project-ssh-keys": "true", "enable-oslogin": "true", "serial-port-enable": "TRUE"}, "serial"),
    ],
)
def test_vms_take_no_project_keys_log_in_through_os_login_and_keep_the_serial_console_off(
    metadata: dict[str, str], says: str
) -> None:
    (v,) = check_all([template(metadata=metadata)])
    assert v.policy == "vm-access-locked" and says in v.message
    pool = {"nodeConfig": {"shieldedInstanceConfig": SHIELDED, "resourceLabels": LABELS, "metadata": {}},
            "location": "us-central1"}  # fmt: skip
    assert [v.policy for v in check_all([res("gcp:container/nodePool:NodePool", pool, "np")])] == ["vm-access-locked"]
    pool["nodeConfig"]["metadata"] = {"block-project-ssh-keys": "true"}  # GKE nodes have no OS Login
    assert names([res("gcp:container/nodePool:NodePool", pool, "np")]) == []


@pytest.mark.parametrize(
    "line", ["curl -fsSL https://x.example/i.sh | bash", "wget -qO- http://x/y | sudo sh", "curl x|sh -s --"]
)
def test_a_startup_script_that_pipes_a_download_into_a_shell_is_refused(line: str) -> None:
    bad = template(metadata={**GPU_TEMPLATE["metadata"], "startup-script": f"#!/bin/bash\n{line}\n"})
    (v,) = check_all([bad])
    assert v.policy == "pinned-startup"
    # a key fetched into gpg is not code run
    ok = "curl -sSf https://packages.cloud.google.com/apt/doc/apt-key.gpg | gpg --dearmor -o k.gpg"
    assert names([template(metadata={**GPU_TEMPLATE["metadata"], "startup-script": ok})]) == []


def test_ssh_from_outside_names_the_vms_it_reaches_and_internal_rules_may_allow_all() -> None:
    fw = "gcp:compute/firewall:Firewall"
    untargeted = {k: v for k, v in FIREWALL.items() if k != "targetServiceAccounts"}
    assert names([res(fw, untargeted, "iap-ssh")]) == [("ssh-has-targets", MANDATORY)]
    everything = {**untargeted, "allows": [{"protocol": "all"}]}
    assert names([res(fw, everything, "iap-all")]) == [("ssh-has-targets", MANDATORY)]
    ranged = {**untargeted, "allows": [{"protocol": "tcp", "ports": ["20-25"]}]}
    assert names([res(fw, ranged, "iap-range")]) == [("ssh-has-targets", MANDATORY)]
    internal = {"direction": "INGRESS", "allows": [{"protocol": "all"}], "sourceRanges": ["10.0.0.0/20"]}
    assert names([res(fw, internal, "allow-internal")]) == []
    https = {**untargeted, "allows": [{"protocol": "tcp", "ports": ["443"]}]}
    assert names([res(fw, https, "https")]) == []


def test_gke_clusters_are_private_without_legacy_abac_and_an_open_api_server() -> None:
    kind = "gcp:container/cluster:Cluster"
    good = {"location": "us-central1", "resourceLabels": LABELS, "privateClusterConfig": {"enablePrivateNodes": True},
            "masterAuthorizedNetworksConfig": {"cidrBlocks": []}}  # fmt: skip
    assert names([res(kind, good, "c")]) == []
    for change, says in (
        ({"privateClusterConfig": {"enablePrivateNodes": False}}, "enablePrivateNodes"),
        ({"enableLegacyAbac": True}, "enableLegacyAbac"),
        ({"masterAuthorizedNetworksConfig": {"cidrBlocks": [{"cidrBlock": "0.0.0.0/0"}]}}, "opens the API server"),
        ({"masterAuthorizedNetworksConfig": None}, "must be set"),
    ):
        (v,) = check_all([res(kind, {**good, **change}, "c")])
        assert v.policy == "gke-private" and says in v.message, change


def test_kubernetes_rbac_names_what_it_grants() -> None:
    """A (Cluster)Role with a `*` verb, resource or API group, a ClusterRole that reads secrets in every namespace,
    or a binding to cluster-admin / admin / edit is refused; the autoscaler's own roles (explicit verbs on named
    resources, a Lease by name) pass."""
    role, cluster_role = (
        "kubernetes:rbac.authorization.k8s.io/v1:Role",
        "kubernetes:rbac.authorization.k8s.io/v1:ClusterRole",
    )
    binding = "kubernetes:rbac.authorization.k8s.io/v1:ClusterRoleBinding"
    ok = {"rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["list", "watch", "patch"]},
                    {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "resourceNames": ["l"],
                     "verbs": ["get", "update"]}]}  # fmt: skip
    assert names([res(cluster_role, ok, "autoscaler")]) == []
    for rule, says in (
        ({"apiGroups": [""], "resources": ["pods"], "verbs": ["*"]}, "verbs: '*'"),
        ({"apiGroups": ["*"], "resources": ["nodes"], "verbs": ["get"]}, "apiGroups: '*'"),
        ({"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}, "reads secrets in every namespace"),
    ):
        (v,) = check_all([res(cluster_role, {"rules": [rule]}, "wide")])
        assert v.policy == "k8s-rbac-least-privilege" and says in v.message, rule
    # a Role reading the secrets of its own namespace is what the rule asks for instead
    assert names([res(role, {"rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}]})]) == []
    admin = {"roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"}}
    assert names([res(binding, admin, "b")]) == [("k8s-rbac-least-privilege", MANDATORY)]
    own = {"roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "gpu-fleet-autoscaler"}}
    assert names([res(binding, own, "b")]) == []
