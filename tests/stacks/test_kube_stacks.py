"""The Kueue examples under mocks: every Kueue / Cluster API object valid against the upstream CRDs in
../shared/data/schemas, node pools with no autoscaling of their own, the inventory the daemon reads, the
in-cluster daemon's Deployment, and the kubeconfig kept secret."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from autoscaler.replay.kueue_gate import queues_from_output
from fleet.inventory import KubernetesSection, parse_inventory
from fleet.schemas import load_crds, validate
from fleet.spec.load import SpecError
from fleet.synth.run import Synthesis, synth_file
from tests.stacks.conftest import REPO, synthesized

SHARED_SCHEMAS = REPO.parent / "shared" / "data" / "schemas"
KUBE_EXAMPLES = ("gke-a3ultra-kueue", "gke-a3mega-kueue", "k8s-neocloud-kueue")
FLEET = Path(sys.executable).with_name("fleet")


@pytest.fixture(scope="module")
def upstream() -> Any:
    """The CRDs as upstream ships them (not the project's copies): proves the copies validate the same."""
    files = sorted(SHARED_SCHEMAS.glob("*/*.yaml"))
    assert files, f"no CRDs under {SHARED_SCHEMAS}"
    return load_crds(f.read_text() for f in files if "workloads" not in f.name)


@pytest.fixture(params=KUBE_EXAMPLES)
def kube_example(request: pytest.FixtureRequest) -> Synthesis:
    return synthesized(request.param)


@pytest.fixture
def gke() -> Synthesis:
    return synthesized("gke-a3ultra-kueue")


@pytest.fixture
def neo() -> Synthesis:
    return synthesized("k8s-neocloud-kueue")


def manifests(syn: Synthesis, group: str = "") -> list[dict[str, Any]]:
    """The Kubernetes objects of a synthesis whose apiVersion starts with `group` (all when empty)."""
    out = []
    for r in syn.result.resources:
        api = r.inputs.get("apiVersion")
        if r.type.startswith("kubernetes:") and isinstance(api, str) and api.startswith(group):
            out.append(r.inputs)
    return out


def of_kind(syn: Synthesis, kind: str) -> list[dict[str, Any]]:
    return [m for m in manifests(syn) if m["kind"] == kind]


def kueue_release(syn: Synthesis) -> Any:
    (release,) = [
        r for r in syn.result.by_type("kubernetes:helm.sh/v3:Release") if r.inputs["chart"].endswith("charts/kueue")
    ]
    return release


def gpu_pools(syn: Synthesis) -> list[Any]:
    return [r for r in syn.result.by_type("gcp:container/nodePool:NodePool") if r.inputs["name"] != "system"]


def test_every_kueue_and_cluster_api_object_is_valid_against_the_upstream_crds(kube_example, upstream):
    objs = manifests(kube_example, "kueue.x-k8s.io") + manifests(kube_example, "cluster.x-k8s.io")
    assert len(objs) >= 10
    problems = {f"{o['kind']}/{o['metadata']['name']}": validate(o, upstream) for o in objs}
    assert not {k: v for k, v in problems.items() if v}, problems


def test_the_upstream_crds_refuse_a_broken_object(gke, upstream):
    cq = copy.deepcopy(of_kind(gke, "ClusterQueue")[0])
    cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"].pop()  # fewer resources than coveredResources
    cq["spec"]["queueingStrategy"] = "Random"
    problems = validate(cq, upstream)
    assert any(p == "spec.queueingStrategy" for p, _ in problems), problems
    cq["spec"]["queueingStrategy"] = "BestEffortFIFO"
    problems = validate(cq, upstream)  # schema-valid now: the CEL rule catches the resource count
    assert problems and problems[0][0] == "spec.resourceGroups[0]", problems


def test_each_pool_has_a_flavor_and_each_team_a_queue(kube_example):
    pools = kube_example.result.outputs["autoscaler_inventory"]
    flavors = {f["metadata"]["name"]: f for f in of_kind(kube_example, "ResourceFlavor")}
    assert set(flavors) == {p["kueue_flavor"] for p in pools}
    for pool in pools:
        # Kueue puts the flavor's nodeLabels on its pods: each pool's nodes carry them
        assert flavors[pool["kueue_flavor"]]["spec"]["nodeLabels"].items() <= pool["node_labels"].items()
    cqs = of_kind(kube_example, "ClusterQueue")
    lqs = of_kind(kube_example, "LocalQueue")
    assert len(cqs) == len(lqs) == 2
    assert {lq["spec"]["clusterQueue"] for lq in lqs} == {cq["metadata"]["name"] for cq in cqs}
    (cohort,) = of_kind(kube_example, "Cohort")
    for cq in cqs:
        spec = cq["spec"]
        assert spec["preemption"]["reclaimWithinCohort"] == "Any"
        assert spec["preemption"]["withinClusterQueue"] == "LowerPriority"
        assert "weight" in spec["fairSharing"]
        # classical preemption only: Kueue ignores it under fair sharing (the ClusterQueue API)
        assert "borrowWithinCohort" not in spec["preemption"]
        assert spec["cohort"] == cohort["metadata"]["name"]
        assert spec["admissionChecksStrategy"]["admissionChecks"][0]["name"].endswith("-provisioning")
    (prc,) = of_kind(kube_example, "ProvisioningRequestConfig")
    assert prc["spec"]["provisioningClassName"] == "best-effort-atomic-scale-up.gpu-fleet.dev"
    # the pods Kueue admits get the label naming the pool the daemon booked (its provisioningClassDetails)
    (update,) = prc["spec"]["podSetUpdates"]["nodeSelector"]
    assert update["key"] == update["valueFromProvisioningClassDetail"]
    assert all(pool["node_labels"][update["key"]] == pool["name"] for pool in pools)
    assert {p["metadata"]["name"] for p in of_kind(kube_example, "WorkloadPriorityClass")} == {"low", "normal", "high"}
    release = kueue_release(kube_example)
    assert release.inputs["version"] == "0.14.8" and release.inputs["chart"].startswith("oci://registry.k8s.io/kueue")
    config = yaml.safe_load(release.inputs["values"]["managerConfig"]["controllerManagerConfigYaml"])
    assert config["fairSharing"]["enable"] is True


def test_nominal_quotas_add_up_to_at_most_the_pools_at_max_size(kube_example):
    """The teams' nominal GPUs of each flavor never exceed the pool's GPUs at max_nodes (shares sum to <= 1)."""
    gpus: dict[str, int] = {}
    for cq in of_kind(kube_example, "ClusterQueue"):
        for fl in cq["spec"]["resourceGroups"][0]["flavors"]:
            gpu = next(r for r in fl["resources"] if r["name"] == "nvidia.com/gpu")
            gpus[fl["name"]] = gpus.get(fl["name"], 0) + int(gpu["nominalQuota"])
    for pool in kube_example.result.outputs["autoscaler_inventory"]:
        assert 0 < gpus[pool["kueue_flavor"]] <= pool["max_nodes"] * pool["gpus_per_node"]


def test_queue_summary_output_matches_the_cluster_queues(kube_example):
    """`clusters.<name>.kueue_queues` (what a Kueue replay reads) says what the ClusterQueues say."""
    (name,) = kube_example.result.outputs["clusters"]
    summary = kube_example.result.outputs["clusters"][name]["kueue_queues"]
    cqs = {cq["metadata"]["name"]: cq["spec"] for cq in of_kind(kube_example, "ClusterQueue")}
    assert {s["cluster_queue"] for s in summary} == set(cqs)
    for s in summary:
        spec = cqs[s["cluster_queue"]]
        assert s["cohort"] == spec.get("cohort")
        flavors = spec["resourceGroups"][0]["flavors"]
        assert list(s["flavors"]) == [f["name"] for f in flavors]
        for f in flavors:
            gpu = next(r for r in f["resources"] if r["name"] == "nvidia.com/gpu")
            assert s["flavors"][f["name"]]["nominal_gpus"] == int(gpu["nominalQuota"])


def test_gke_example_two_teams_share_both_pools_through_a_cohort(gke):
    cqs = {cq["metadata"]["name"]: cq["spec"] for cq in of_kind(gke, "ClusterQueue")}
    assert set(cqs) == {"a3u-research", "a3u-product"}
    research = cqs["a3u-research"]["resourceGroups"][0]["flavors"]
    assert [f["name"] for f in research] == ["a3u-resv", "a3u-spot"]  # reservation first
    gpu = {r["name"]: r for r in research[0]["resources"]}["nvidia.com/gpu"]
    # half of 16 nodes x 8 GPUs; may borrow 100 % of that, lends at most half
    assert gpu == {"name": "nvidia.com/gpu", "nominalQuota": "64", "borrowingLimit": "64", "lendingLimit": "32"}
    spot = next(f for f in of_kind(gke, "ResourceFlavor") if f["metadata"]["name"] == "a3u-spot")
    assert spot["spec"]["nodeTaints"] == [{"key": "cloud.google.com/gke-spot", "value": "true", "effect": "NoSchedule"}]
    (topo,) = of_kind(gke, "Topology")
    assert [lv["nodeLabel"] for lv in topo["spec"]["levels"]] == [
        "cloud.google.com/gce-topology-block",
        "cloud.google.com/gce-topology-subblock",
        "kubernetes.io/hostname",
    ]
    assert all(f["spec"]["topologyName"] == topo["metadata"]["name"] for f in of_kind(gke, "ResourceFlavor"))


def test_no_ssh_reaches_a_gke_node(gke):
    """Every node pool (the system one too) blocks project-wide SSH keys, and no firewall rule of the stack admits
    SSH to the VPC's VMs at large: the IAP rules name a Slurm cluster's VMs by account (none in a GKE-only stack)."""
    pools = gke.result.by_type("gcp:container/nodePool:NodePool")
    assert {r.inputs["name"] for r in pools} >= {"system", "resv", "spot"}
    for r in pools:
        assert r.inputs["nodeConfig"]["metadata"]["block-project-ssh-keys"] == "true", r.inputs["name"]
    for rule in gke.result.by_type("gcp:compute/firewall:Firewall"):
        if any("22" in a.get("ports", []) for a in rule.inputs.get("allows", [])):
            assert rule.inputs.get("targetServiceAccounts"), rule.inputs["name"]


def test_gke_gpu_node_pools_have_no_autoscaling_of_their_own(gke):
    pools = gpu_pools(gke)
    assert {r.inputs["name"] for r in pools} == {"resv", "spot"}
    for r in pools:
        assert "autoscaling" not in r.inputs and "queuedProvisioning" not in r.inputs
        assert r.inputs["initialNodeCount"] == 0
        assert set(r.ignore_changes) >= {"initialNodeCount", "nodeCount"}
        accel = r.inputs["nodeConfig"]["guestAccelerators"][0]
        assert accel["gpuDriverInstallationConfig"] == {"gpuDriverVersion": "LATEST"}
        assert (accel["type"], accel["count"]) == ("nvidia-h200-141gb", 8)
        assert r.inputs["nodeConfig"]["workloadMetadataConfig"] == {"mode": "GKE_METADATA"}
        assert r.inputs["networkConfig"]["enablePrivateNodes"] is True
    by_name = {r.inputs["name"]: r.inputs for r in pools}
    assert by_name["resv"]["nodeConfig"]["reservationAffinity"] == {
        "consumeReservationType": "SPECIFIC_RESERVATION",
        "key": "compute.googleapis.com/reservation-name",
        "values": ["a3u-resv"],
    }
    # compact_placement: true, but a specific reservation brings its own placement and refuses GKE's
    assert "placementPolicy" not in by_name["resv"]
    assert by_name["spot"]["nodeConfig"]["spot"] is True
    assert by_name["spot"]["nodeConfig"]["reservationAffinity"] == {"consumeReservationType": "NO_RESERVATION"}
    assert by_name["spot"]["nodeConfig"]["taints"] == [
        {"key": "cloud.google.com/gke-spot", "value": "true", "effect": "NO_SCHEDULE"}
    ]


def test_gke_a3_ultra_gets_gpudirect_node_networks_on_the_fabric_vpcs(gke):
    for r in gpu_pools(gke):
        nets = r.inputs["networkConfig"]["additionalNodeNetworkConfigs"]
        assert len(nets) == 9  # 1 more gVNIC + 8 RDMA: 10 NICs with the system one
        assert [n["network"] for n in nets] == ["a3u-net-1"] + ["a3u-rdma"] * 8
        assert len({n["subnetwork"] for n in nets}) == 9
        assert r.inputs["nodeConfig"]["gpudirectStrategy"] == "RDMA"
    params = of_kind(gke, "GKENetworkParamSet")
    assert sorted(p["spec"]["deviceMode"] for p in params) == ["NetDevice"] + ["RDMA"] * 8
    refs = {n["spec"]["parametersRef"]["name"] for n in of_kind(gke, "Network")}
    assert refs == {p["metadata"]["name"] for p in params}
    cluster = gke.result.by_type("gcp:container/cluster:Cluster")[0].inputs
    assert cluster["enableMultiNetworking"] is True and cluster["datapathProvider"] == "ADVANCED_DATAPATH"


def test_gke_cluster_is_private_with_workload_identity_and_held_upgrades(gke):
    c = gke.result.by_type("gcp:container/cluster:Cluster")[0].inputs
    assert c["privateClusterConfig"]["enablePrivateNodes"] is True
    assert c["workloadIdentityConfig"] == {"workloadPool": "my-gpu-project.svc.id.goog"}
    assert c["releaseChannel"] == {"channel": "REGULAR"}
    (excl,) = c["maintenancePolicy"]["maintenanceExclusions"]
    assert excl["exclusionOptions"] == {"scope": "NO_MINOR_OR_NODE_UPGRADES", "endTimeBehavior": "UNTIL_END_OF_SUPPORT"}
    assert excl["startTime"] == "2026-12-01T00:00:00Z"
    assert c["removeDefaultNodePool"] is True
    assert c["masterAuthorizedNetworksConfig"]["cidrBlocks"] == [
        {"cidrBlock": "10.20.0.0/20", "displayName": "allowed-0"}
    ]


def test_cluster_api_pools_are_machine_deployments_sized_by_the_daemon_alone(neo):
    res = neo.result.by_type("kubernetes:cluster.x-k8s.io/v1beta2:MachineDeployment")
    assert len(res) == 2
    gpu_taint = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule", "propagation": "Always"}
    for r in res:
        md = r.inputs
        assert r.ignore_changes == ["spec.replicas"]
        ann = md["metadata"].get("annotations") or {}
        # what opts a MachineDeployment into a Cluster Autoscaler's clusterapi provider: not set, so a Cluster
        # Autoscaler running for the cluster's other node groups leaves the GPU pools to the daemon
        assert not [k for k in ann if "cluster-api-autoscaler-node-group" in k], ann
        assert md["spec"]["replicas"] == 0
        assert md["metadata"]["namespace"] == "capi-neo" and md["spec"]["clusterName"] == "neo-gpu"
        tmpl = md["spec"]["template"]["spec"]
        assert tmpl["infrastructureRef"]["kind"] == "Metal3MachineTemplate"
        assert tmpl["bootstrap"]["configRef"]["kind"] == "KubeadmConfigTemplate"
        assert gpu_taint in tmpl["taints"]
        assert md["spec"]["rollout"]["strategy"]["rollingUpdate"] == {"maxSurge": 0, "maxUnavailable": 1}
    assert not [r for r in neo.result.resources if r.type.startswith("gcp:")]  # nothing on GCP


def test_inventory_is_readable_and_matches_what_the_daemon_is_given(kube_example):
    """`parse_inventory` reads the synth JSON; the ConfigMap mounted into the daemon holds the same pools."""
    pools = parse_inventory(kube_example.to_json())
    assert pools and all(p.scheduler == "kueue" for p in pools)
    (cm,) = of_kind(kube_example, "ConfigMap")
    exported = json.loads(json.dumps(kube_example.result.outputs["autoscaler_inventory"]))
    assert json.loads(cm["data"]["inventory.json"]) == exported
    config = yaml.safe_load(cm["data"]["autoscaler.yaml"])
    section = KubernetesSection.model_validate(config["kubernetes"])
    assert section.lease.name == "gpu-fleet-autoscaler"
    assert config["inventory"] == "/etc/gpu-fleet/inventory.json"
    for p in pools:
        assert p.price_per_hour and p.price_per_hour > 0
        if p.platform == "gke":
            assert p.pool_kind == "gce-mig" and p.gke_node_pool == p.name
            assert set(p.instance_groups) == set(p.zones)
            assert all(
                url.rsplit("/", 1)[1] == p.instance_groups[z]
                for z, url in zip(p.zones, p.instance_group_urls, strict=True)
            )
        else:
            assert p.pool_kind == "capi-machinedeployment" and p.capi_namespace == "capi-neo"
            assert p.capi_machine_deployment == f"neo-{p.name}" and p.price_source == "spec"
            assert p.zones == [] and p.failure_domain == "dc-east-1"


def test_autoscaler_deployment_two_replicas_lease_and_least_privilege(kube_example):
    (dep,) = of_kind(kube_example, "Deployment")
    assert dep["spec"]["replicas"] == 2
    (ctr,) = dep["spec"]["template"]["spec"]["containers"]
    assert "@sha256:" in ctr["image"]
    assert ctr["readinessProbe"]["httpGet"]["path"] == "/healthz"
    assert ctr["securityContext"]["readOnlyRootFilesystem"] is True
    (role,) = of_kind(kube_example, "ClusterRole")
    verbs = {
        (g, res): set(rule["verbs"]) for rule in role["rules"] for g in rule["apiGroups"] for res in rule["resources"]
    }
    assert all("*" not in v and not {"delete", "deletecollection"} & v for v in verbs.values())
    assert ("", "secrets") not in verbs and ("", "pods/eviction") in verbs
    assert verbs[("autoscaling.x-k8s.io", "provisioningrequests/status")] == {"patch"}
    assert verbs[("", "podtemplates")] == {"get"}  # the deployed daemon reads the templates requests name
    assert ("cluster.x-k8s.io", "machines") not in verbs  # Cluster API: a Role in the pools' namespace only
    roles = {r["metadata"]["name"]: r for r in of_kind(kube_example, "Role")}
    capi = roles.get("gpu-fleet-autoscaler-capi")
    assert (capi is not None) == (kube_example.stack == "k8s-neocloud-kueue")
    if capi is not None:
        assert capi["metadata"]["namespace"] == "capi-neo"
    lease_role = roles["gpu-fleet-autoscaler-lease"]
    named = [r for r in lease_role["rules"] if "resourceNames" in r]
    assert named == [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "update"],
                      "resourceNames": ["gpu-fleet-autoscaler"]}]  # fmt: skip


def test_autoscaler_pods_admit_only_the_scrapers_named_on_the_metrics_port(kube_example, tmp_path):
    """The one port the daemon listens on is closed to the cluster unless the spec names who scrapes it: the
    NetworkPolicy selects exactly the Deployment's pods (a selector that missed them would leave them open), admits
    TCP to the container's metrics port from the named namespaces only, and is a valid networking/v1 object."""
    from kubernetes import client

    def pods_and_policy(syn: Synthesis) -> tuple[dict, dict]:
        (dep,) = of_kind(syn, "Deployment")
        (policy,) = of_kind(syn, "NetworkPolicy")
        assert policy["metadata"]["namespace"] == dep["metadata"]["namespace"]
        return dep["spec"]["template"], policy

    template, closed = pods_and_policy(kube_example)
    labels = template["metadata"]["labels"]
    assert closed["spec"]["podSelector"]["matchLabels"].items() <= labels.items()
    assert closed["spec"]["policyTypes"] == ["Ingress"] and closed["spec"]["ingress"] == []  # default: no scraper

    def scraped(config: dict) -> None:
        config["gpu-fleet:fleet"]["clusters"][0]["kueue"]["autoscaler"]["metrics_from_namespaces"] = [
            "gmp-system", "monitoring"]  # fmt: skip

    template, policy = pods_and_policy(synth_file(gke_file(tmp_path, scraped)))
    (rule,) = policy["spec"]["ingress"]
    (source,) = rule["from"]
    assert source == {"namespaceSelector": {"matchExpressions": [
        {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["gmp-system", "monitoring"]}]}}  # fmt: skip
    (port,) = rule["ports"]
    (container,) = template["spec"]["containers"]
    assert port["protocol"] == "TCP" and port["port"] in {p["name"] for p in container["ports"]}
    api = client.ApiClient()
    model = api.deserialize(json.dumps(policy), "V1NetworkPolicy", "application/json")
    assert api.sanitize_for_serialization(model) == policy


def test_gke_daemon_uses_workload_identity_bound_to_its_service_account(gke):
    (sa,) = [s for s in of_kind(gke, "ServiceAccount") if s["metadata"]["name"] == "gpu-fleet-autoscaler"]
    gsa = gke.result.outputs["clusters"]["a3u"]["autoscaler_service_account"]
    assert sa["metadata"]["annotations"] == {"iam.gke.io/gcp-service-account": gsa}
    members = [
        r.inputs["member"]
        for r in gke.result.by_type("gcp:serviceaccount/iAMMember:IAMMember")
        if r.inputs["role"] == "roles/iam.workloadIdentityUser" and r.name.startswith("a3u-autoscaler")
    ]
    assert members == ["serviceAccount:my-gpu-project.svc.id.goog[gpu-fleet-system/gpu-fleet-autoscaler]"]
    # no right to act as the nodes' account: the MIG's service agent creates the VMs (createInstances checks
    # compute.instanceGroupManagers.update on the MIG alone)
    acts_as = [r.inputs["member"] for r in gke.result.by_type("gcp:serviceaccount/iAMMember:IAMMember")
               if r.inputs["role"] == "roles/iam.serviceAccountUser"]  # fmt: skip
    assert f"serviceAccount:{gsa}" not in acts_as
    (role,) = gke.result.by_type("gcp:projects/iAMCustomRole:IAMCustomRole")
    assert "compute.instanceGroupManagers.update" in role.inputs["permissions"]
    assert not any(p.startswith(("container.", "iam.")) for p in role.inputs["permissions"])


def test_kubeconfigs_stay_secret(kube_example):
    text = json.dumps(kube_example.to_json())
    assert "gke-gcloud-auth-plugin" not in text and "REPLACE-WITH" not in text
    providers = kube_example.result.by_type("pulumi:providers:kubernetes")
    assert providers and all(p.inputs["kubeconfig"] == "[secret]" for p in providers)


def _stack_file(tmp_path: Path, stack: str, mutate) -> Path:
    """A copy of a shipped stack file with `mutate` applied to its config."""
    doc = yaml.safe_load((REPO / f"Pulumi.{stack}.yaml").read_text())
    mutate(doc["config"])
    path = tmp_path / f"Pulumi.{stack}-test.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def neo_file(tmp_path: Path, mutate) -> Path:
    return _stack_file(tmp_path, "k8s-neocloud-kueue", mutate)


def test_a_plain_text_kubeconfig_is_refused(tmp_path):
    path = neo_file(tmp_path, lambda c: c.update({"gpu-fleet:kubeconfig": "apiVersion: v1\nkind: Config\n"}))
    with pytest.raises(SpecError) as info:
        synth_file(path)
    assert info.value.errors[0][0] == "gpu-fleet:kubeconfig" and "must be a Pulumi secret" in info.value.errors[0][1]


def test_a_missing_kubeconfig_is_refused(tmp_path):
    path = neo_file(tmp_path, lambda c: c.pop("gpu-fleet:kubeconfig"))
    with pytest.raises(SpecError) as info:
        synth_file(path)
    assert "pulumi config set --secret gpu-fleet:kubeconfig" in info.value.errors[0][1]


def _cli(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(FLEET), "synth", *args], cwd=cwd, capture_output=True, text=True, timeout=180)


def test_cli_bad_quota_exits_2_with_the_field_path(tmp_path):
    def overbook(c: dict[str, Any]) -> None:
        c["gpu-fleet:fleet"]["clusters"][0]["kueue"]["teams"][1]["quotas"]["h100"] = 0.5

    proc = _cli("--config", str(neo_file(tmp_path, overbook)), "--json")
    assert proc.returncode == 2, proc.stderr
    assert "clusters[0].kueue.teams[1].quotas.h100" in proc.stderr and "Traceback" not in proc.stderr
    assert proc.stdout == ""


@pytest.mark.parametrize("stack", KUBE_EXAMPLES)
def test_cli_json_synthesizes_the_example_offline(stack, tmp_path):
    proc = _cli("--stack", stack, "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["stack"] == stack and parse_inventory(out)


def test_a_fleet_with_a_slurm_and_a_gke_cluster_shares_one_network(tmp_path):
    """Slurm on GCE and Kueue on GKE in one fleet: one fabric, both inventories, one daemon config each."""
    slurm = yaml.safe_load((REPO / "Pulumi.gcp-l4-dev.yaml").read_text())
    gke = yaml.safe_load((REPO / "Pulumi.gke-a3ultra-kueue.yaml").read_text())
    fleet = slurm["config"]["gpu-fleet:fleet"]
    fleet["network"]["gpu_cidr"] = "10.150.0.0/16"
    fleet["clusters"].append(gke["config"]["gpu-fleet:fleet"]["clusters"][0])
    path = tmp_path / "Pulumi.mixed.yaml"
    path.write_text(yaml.safe_dump(slurm))
    syn = synth_file(path)
    pools = parse_inventory(syn.to_json())
    assert {p.scheduler for p in pools} == {"slurm", "kueue"}
    systems = [r for r in syn.result.by_type("gcp:compute/network:Network") if r.inputs["name"].endswith("-net")]
    assert len(systems) == 1  # one system VPC for both clusters
    assert syn.result.by_type("gcp:container/cluster:Cluster") and syn.result.by_type("gcp:compute/instance:Instance")


def test_urns_unique_children_parented_and_no_open_firewall(kube_example):
    out = kube_example.to_json()
    urns = [r["urn"] for r in out["resources"]]
    assert len(urns) == len(set(urns))
    components = {r["urn"] for r in out["resources"] if r["type"].startswith("gpufleet:")}
    for r in out["resources"]:
        if not r["type"].startswith("gpufleet:"):
            assert r["parent"] in components, r["urn"]  # no stray top-level resources
        if r["type"] == "gcp:compute/firewall:Firewall" and r["inputs"].get("allows"):
            assert "0.0.0.0/0" not in r["inputs"]["sourceRanges"], r["name"]


def test_gke_a3_mega_gets_eight_gpudirect_tcpxo_node_networks(tmp_path):
    doc = yaml.safe_load((REPO / "Pulumi.gcp-a3mega-slurm.yaml").read_text())
    fleet = doc["config"]["gpu-fleet:fleet"]
    gke = yaml.safe_load((REPO / "Pulumi.gke-a3ultra-kueue.yaml").read_text())["config"]["gpu-fleet:fleet"]
    cluster = gke["clusters"][0]
    zone = fleet["zones"][0]
    for pool in cluster["pools"]:
        pool.update(machine_type="a3-megagpu-8g", zones=[zone])
    cluster["gke"]["master_authorized_networks"] = []
    fleet["clusters"] = [cluster]
    path = tmp_path / "Pulumi.a3mega-gke.yaml"
    path.write_text(yaml.safe_dump(doc))
    syn = synth_file(path)
    for r in gpu_pools(syn):
        nets = r.inputs["networkConfig"]["additionalNodeNetworkConfigs"]
        assert len(nets) == 8 and len({n["network"] for n in nets}) == 8  # one VPC per GPU NIC
        assert "gpudirectStrategy" not in r.inputs["nodeConfig"]
    assert [p["spec"]["deviceMode"] for p in of_kind(syn, "GKENetworkParamSet")] == ["NetDevice"] * 8
    assert of_kind(syn, "Topology")  # A3 Mega nodes carry the GKE topology labels too


PR_CRD = "provisioningrequests.autoscaling.x-k8s.io"


def _crds(syn: Synthesis) -> list[Any]:
    return syn.result.by_type("kubernetes:apiextensions.k8s.io/v1:CustomResourceDefinition")


def test_an_existing_cluster_gets_the_provisioning_request_api_before_kueue_starts(neo):
    """Kueue's manager looks for the ProvisioningRequest API once, at start, and without it the stack's admission
    check (and every ClusterQueue using it) never becomes active: the stack declares upstream's CRD, unchanged,
    before the Kueue release, and keeps it if the stack goes (deleting a CRD deletes every request)."""
    (crd,) = _crds(neo)
    upstream = yaml.safe_load(
        (SHARED_SCHEMAS / "autoscaling" / "autoscaling.x-k8s.io_provisioningrequests.yaml").read_text()
    )
    assert crd.inputs == json.loads(json.dumps(upstream)) and crd.inputs["metadata"]["name"] == PR_CRD
    assert crd.retain_on_delete
    release = kueue_release(neo)
    assert crd.urn in release.dependencies
    # the API the daemon and Kueue use is the one it serves
    served = [v["name"] for v in crd.inputs["spec"]["versions"] if v["served"]]
    assert "v1" in served


def test_gke_serves_the_provisioning_request_api_itself_so_the_stack_declares_none(gke):
    assert _crds(gke) == []


def test_a_cluster_that_already_serves_the_api_keeps_its_own_crd(tmp_path):
    def present(config: dict) -> None:
        config["gpu-fleet:fleet"]["clusters"][0]["kubernetes"]["provisioning_request_crd"] = "present"

    syn = synth_file(neo_file(tmp_path, present))
    assert _crds(syn) == []
    assert syn.result.by_type("kubernetes:helm.sh/v3:Release")


def gke_file(tmp_path: Path, mutate) -> Path:
    return _stack_file(tmp_path, "gke-a3ultra-kueue", mutate)


def test_gke_rdma_pools_get_the_nccl_gib_plugin_gke_does_not_install(gke):
    """A3 Ultra nodes come up with their RDMA NICs but without the NCCL plugin that drives them: the stack runs
    Google's installer on exactly its RDMA node pools, whatever their taints, from pinned images."""
    from kubernetes.client import ApiClient

    from fleet.catalog import load_catalog

    (ds,) = of_kind(gke, "DaemonSet")
    assert ds["metadata"]["namespace"] == "kube-system"  # where a system-node-critical pod is admitted
    spec = ds["spec"]["template"]["spec"]
    assert spec["priorityClassName"] == "system-node-critical"
    (term,) = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    (expr,) = term["matchExpressions"]
    assert expr["key"] == "cloud.google.com/gke-nodepool" and expr["operator"] == "In"
    assert sorted(expr["values"]) == sorted(r.inputs["name"] for r in gpu_pools(gke))  # both pools are A3 Ultra
    assert {"operator": "Exists"} in spec["tolerations"]  # no key: every taint of those pools (GPU, spot) tolerated
    (install,) = spec["initContainers"]
    assert install["image"] == load_catalog().fabric_software("gib").gke_installer_image
    assert "container_entry.sh install --install-nccl" in install["args"][0]
    host = {v["name"]: v["hostPath"]["path"] for v in spec["volumes"]}
    mounts = install["volumeMounts"]
    assert all(m["mountPath"] == "/usr/local" + host[m["name"]] for m in mounts) and len(mounts) == len(host)
    assert set(host.values()) == {"/home/kubernetes/bin/gib", "/home/kubernetes/bin/nvidia/lib64"}
    for c in [*spec["initContainers"], *spec["containers"]]:  # pinned: a version tag or a digest, never latest
        image = c["image"]
        assert "@sha256:" in image or (":" in image.rsplit("/", 1)[-1] and not image.endswith(":latest")), image

    # the Kubernetes client's own model of the kind reads it back whole
    model = ApiClient().deserialize(json.dumps(ds), "V1DaemonSet", "application/json")
    assert model.spec.template.spec.init_containers[0].security_context.privileged is True


def high_file(tmp_path: Path) -> Path:
    """gke-a3ultra-kueue with its spot pool of A3 High: one gIB pool and one TCPX pool."""

    def high(config: dict) -> None:
        config["gpu-fleet:fleet"]["clusters"][0]["pools"][1]["machine_type"] = "a3-highgpu-8g"

    return gke_file(tmp_path, high)


def test_gke_tcpx_pools_get_their_plugin_installer_and_the_device_injector(tmp_path):
    """A3 High's GPUDirect-TCPX, which the Slurm path cannot set up, GKE's node image supports: its pools get the
    TCPX plugin's installer (the release Google's notes qualify) and the device injector, with no warning."""
    from fleet.catalog import load_catalog
    from stacks.gke_fabric import DEVICE_INJECTOR, NAME, TCPX_INSTALLER

    syn = synth_file(high_file(tmp_path))
    assert syn.result.warnings == []
    sets = {ds["metadata"]["name"]: ds for ds in of_kind(syn, "DaemonSet")}
    assert set(sets) == {NAME, TCPX_INSTALLER, DEVICE_INJECTOR}
    assert _pools_of(sets[NAME]) == ["resv"] and _pools_of(sets[TCPX_INSTALLER]) == ["spot"]
    assert _pools_of(sets[DEVICE_INJECTOR]) == ["spot"]
    (install,) = sets[TCPX_INSTALLER]["spec"]["template"]["spec"]["initContainers"]  # no aperture devices on TCPX
    tcpx = load_catalog().fabric_software("tcpx")
    assert install["image"] == tcpx.nccl_plugin_image and install["image"].endswith(":v3.1.12")
    assert "cp -r /var/lib/tcpx/lib64/. /usr/local/nvidia/lib64" in install["args"][0]


def test_one_device_injector_serves_tcpx_and_tcpxo_pools_alike(tmp_path):
    def both(config: dict) -> None:
        pools = config["gpu-fleet:fleet"]["clusters"][0]["pools"]
        pools[0]["machine_type"] = "a3-megagpu-8g"
        pools[1]["machine_type"] = "a3-highgpu-8g"
        pools[0]["reservation"] = "a3m-resv"

    from stacks.gke_fabric import DEVICE_INJECTOR, TCPX_INSTALLER, TCPXO_INSTALLER

    syn = synth_file(gke_file(tmp_path, both))
    sets = {ds["metadata"]["name"]: ds for ds in of_kind(syn, "DaemonSet")}
    assert set(sets) == {TCPX_INSTALLER, TCPXO_INSTALLER, DEVICE_INJECTOR}
    assert sorted(_pools_of(sets[DEVICE_INJECTOR])) == ["resv", "spot"]


def _pools_of(ds: dict[str, Any]) -> list[str]:
    """The node pools a fabric DaemonSet runs on (its one node-affinity term)."""
    (term,) = ds["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    (expr,) = term["matchExpressions"]
    assert expr["key"] == "cloud.google.com/gke-nodepool" and expr["operator"] == "In"
    return expr["values"]


def mega_file(tmp_path: Path) -> Path:
    """gke-a3ultra-kueue with its spot pool of A3 Mega: one gIB pool and one TCPXO pool."""

    def mega(config: dict) -> None:
        config["gpu-fleet:fleet"]["clusters"][0]["pools"][1]["machine_type"] = "a3-megagpu-8g"

    return gke_file(tmp_path, mega)


def test_gke_tcpxo_pools_get_the_plugin_installer_and_the_nri_device_injector(tmp_path):
    """A3 Mega nodes come up with their eight GPU NICs but not the TCPXO plugin, the aperture devices or the NRI
    plugin that hands the RxDM sidecar its GPUs: the stack runs both on exactly the TCPXO pools, from the catalog's
    pins (the plugin image the Slurm path runs, the injector by digest), with no warning; the gIB pool keeps its own
    installer."""
    from kubernetes.client import ApiClient

    from fleet.catalog import load_catalog
    from stacks.gke_fabric import DEVICE_INJECTOR, NAME, TCPXO_INSTALLER

    syn = synth_file(mega_file(tmp_path))
    assert syn.result.warnings == []
    sets = {ds["metadata"]["name"]: ds for ds in of_kind(syn, "DaemonSet")}
    assert set(sets) == {NAME, TCPXO_INSTALLER, DEVICE_INJECTOR}
    assert _pools_of(sets[NAME]) == ["resv"]
    tcpxo = load_catalog().fabric_software("tcpxo")
    for name in (TCPXO_INSTALLER, DEVICE_INJECTOR):
        ds = sets[name]
        assert ds["metadata"]["namespace"] == "kube-system" and _pools_of(ds) == ["spot"]
        spec = ds["spec"]["template"]["spec"]
        assert spec["priorityClassName"] == "system-node-critical" and {"operator": "Exists"} in spec["tolerations"]
        model = ApiClient().deserialize(json.dumps(ds), "V1DaemonSet", "application/json")
        assert model.spec.template.spec.host_pid is True
    installer = sets[TCPXO_INSTALLER]["spec"]["template"]["spec"]
    apertures, install = installer["initContainers"]  # the aperture devices before the plugin, as upstream
    assert apertures["image"] == install["image"] == tcpxo.nccl_plugin_image
    assert apertures["command"][:4] == ["nsenter", "--all", "--target", "1"]  # the node's namespaces: its /dev
    assert "modprobe import-helper" in apertures["args"][0] and "[1ae0:0084]" in apertures["args"][0]
    assert "iptables" not in apertures["args"][0]  # upstream opens every TCP port of the node; not here
    host = {v["name"]: v["hostPath"]["path"] for v in installer["volumes"]}
    assert {host[m["name"]]: m["mountPath"] for m in install["volumeMounts"]} == {
        "/var/lib": "/var/lib",
        "/home/kubernetes/bin": "/usr/local",
    }
    (injector,) = sets[DEVICE_INJECTOR]["spec"]["template"]["spec"]["containers"]
    assert injector["image"] == tcpxo.gke_device_injector_image and "@sha256:" in injector["image"]
    for ds in sets.values():  # pinned: a version tag or a digest, never latest
        spec = ds["spec"]["template"]["spec"]
        for c in [*spec.get("initContainers", []), *spec["containers"]]:
            image = c["image"]
            assert "@sha256:" in image or (":" in image.rsplit("/", 1)[-1] and not image.endswith(":latest")), image


def test_the_synth_cli_prints_the_program_s_warnings(tmp_path):
    def high(config: dict) -> None:  # A3 High on the Slurm path: its TCPX is not set up, which `pulumi up` says
        for pool in config["gpu-fleet:fleet"]["clusters"][0]["pools"]:
            pool["machine_type"] = "a3-highgpu-8g"

    res = _cli("--config", str(_stack_file(tmp_path, "gcp-a3mega-slurm", high)), "--json")
    assert res.returncode == 0, res.stderr
    assert "warning: clusters[0] (a3mega): pools resv, spot are a3-highgpu-8g" in res.stderr
    assert json.loads(res.stdout)["warnings"] == [res.stderr.split("warning: ", 1)[1].strip()]


def test_taints_through_the_bootstrap_template_leave_the_machine_deployments_without_any(tmp_path):
    """Cluster API propagates a MachineDeployment's taints only with its alpha MachineTaintPropagation gate on (its
    webhook refuses them otherwise); `taint_propagation: bootstrap` leaves them to the pools' bootstrap templates."""

    def bootstrap(config: dict) -> None:
        config["gpu-fleet:fleet"]["clusters"][0]["kubernetes"]["taint_propagation"] = "bootstrap"

    syn = synth_file(neo_file(tmp_path, bootstrap))
    mds = of_kind(syn, "MachineDeployment")
    assert mds and all("taints" not in md["spec"]["template"]["spec"] for md in mds)
    inventory = parse_inventory(syn.result.outputs)
    assert all(p.node_taints for p in inventory)  # the daemon still knows which taints the nodes must carry


def test_pools_needing_different_taints_cannot_share_a_bootstrap_template_that_registers_them(tmp_path):
    def bootstrap_with_spot(config: dict) -> None:
        cluster = config["gpu-fleet:fleet"]["clusters"][0]
        cluster["kubernetes"]["taint_propagation"] = "bootstrap"
        cluster["pools"][1]["capacity"] = "spot"  # l40s: spot-tainted nodes, from the same template as h100

    with pytest.raises(SpecError) as info:
        synth_file(neo_file(tmp_path, bootstrap_with_spot))
    (path, reason) = info.value.errors[0]
    assert path == "clusters[0].pools[1].cluster_api.bootstrap_template"
    assert "h100 and l40s share bootstrap template KubeadmConfigTemplate/neo-gpu-workers" in reason


def test_jobset_is_installed_before_kueue_so_kueue_queues_jobsets(kube_example):
    """Multi-node training is submitted as JobSets and the Kueue configuration queues them: JobSet's chart, pinned,
    goes in, before Kueue (older Kueue releases set an integration up only if its API was there at start)."""
    (jobset,) = [
        r for r in kube_example.result.by_type("kubernetes:helm.sh/v3:Release") if r.inputs["chart"].endswith("/jobset")
    ]
    assert jobset.inputs["chart"] == "oci://registry.k8s.io/jobset/charts/jobset"
    assert jobset.inputs["version"] == "0.10.0" and jobset.inputs["namespace"] == "jobset-system"
    assert jobset.urn in kueue_release(kube_example).dependencies
    assert "jobset.x-k8s.io/jobset" in yaml.safe_dump(kueue_release(kube_example).inputs["values"])


def test_a_team_s_own_jobset_leaves_the_stack_installing_none(tmp_path):
    def own(config: dict) -> None:
        config["gpu-fleet:fleet"]["clusters"][0]["kueue"]["jobset_version"] = None

    syn = synth_file(neo_file(tmp_path, own))
    charts = [r.inputs["chart"] for r in syn.result.by_type("kubernetes:helm.sh/v3:Release")]
    assert "oci://registry.k8s.io/kueue/charts/kueue" in charts and not [c for c in charts if "jobset" in c]


def _shared(cluster: dict[str, Any], flavor: str, pools: list[str]) -> None:
    cluster["kueue"]["flavors"] = {flavor: pools}


def test_a_shared_flavor_spans_its_pools_on_gke(tmp_path, upstream):
    """`kueue.flavors`: one ResourceFlavor over both pools, selected by a label the node pools set, the teams'
    quotas summed onto it, and the daemon's inventory naming that label among each pool's node labels, so a
    request Kueue admits under the flavor may be served from either pool."""
    path = gke_file(tmp_path, lambda c: _shared(c["gpu-fleet:fleet"]["clusters"][0], "h200", ["resv", "spot"]))
    syn = synth_file(path)
    objs = manifests(syn, "kueue.x-k8s.io")
    problems = {f"{o['kind']}/{o['metadata']['name']}": validate(o, upstream) for o in objs}
    assert not {k: v for k, v in problems.items() if v}, problems
    (flavor,) = of_kind(syn, "ResourceFlavor")
    assert flavor["metadata"]["name"] == "a3u-h200"
    assert flavor["spec"]["nodeLabels"] == {"gpu-fleet/kueue-flavor": "h200"}
    assert "nodeTaints" not in flavor["spec"]  # on-demand and spot together: the pods' tolerations decide
    assert flavor["spec"]["topologyName"]  # both pools are A3 Ultra: topology-aware
    cqs = {cq["metadata"]["name"]: cq["spec"]["resourceGroups"][0]["flavors"] for cq in of_kind(syn, "ClusterQueue")}
    base = {
        cq["metadata"]["name"]: cq["spec"]["resourceGroups"][0]["flavors"]
        for cq in of_kind(synthesized("gke-a3ultra-kueue"), "ClusterQueue")
    }
    for name, flavors in cqs.items():
        (only,) = flavors
        got = {r["name"]: r for r in only["resources"]}["nvidia.com/gpu"]
        per_pool = [{r["name"]: r for r in f["resources"]}["nvidia.com/gpu"] for f in base[name]]
        assert int(got["nominalQuota"]) == sum(int(g["nominalQuota"]) for g in per_pool)
    for pool in gpu_pools(syn):
        assert pool.inputs["nodeConfig"]["labels"]["gpu-fleet/kueue-flavor"] == "h200"
    for entry in syn.result.outputs["autoscaler_inventory"]:
        assert entry["kueue_flavor"] == "a3u-h200"
        assert flavor["spec"]["nodeLabels"].items() <= entry["node_labels"].items()
    # what `fleet simulate --kueue-queues` reads: one flavor per team, the layout the replay scores
    queues = queues_from_output({"outputs": syn.result.outputs}, "synth.json")
    assert [q.flavors for q in queues] == [("a3u-h200",), ("a3u-h200",)]
    assert all(q.nominal_gpus == 64 + 32 for q in queues)  # half of 16 and of 8 nodes x 8 GPUs, summed


def neo_with_a_shared_h100_flavor(config: dict[str, Any]) -> None:
    """k8s-neocloud-kueue plus a 1 x H100 pool, in one shared flavor `h100` with the 8 x H100 pool."""
    cluster = config["gpu-fleet:fleet"]["clusters"][0]
    (h100,) = [p for p in cluster["pools"] if p["name"] == "h100"]
    small = copy.deepcopy(h100)
    small.update(name="h100-1x", machine_type="gpu-h100-sxm-1x", price_per_hour=2.99, max_nodes=8)
    small["cluster_api"].update(gpus_per_node=1, vcpus=16, memory_gib=192)
    cluster["pools"].append(small)
    for team in cluster["kueue"]["teams"]:
        team["quotas"]["h100-1x"] = 0.5
    _shared(cluster, "h100", ["h100", "h100-1x"])


def test_a_shared_flavor_labels_the_cluster_api_nodes_in_the_synced_domain(tmp_path, upstream):
    """On Cluster API the flavor label must reach the Node: only `node.cluster.x-k8s.io/` labels of a Machine are
    copied to its Node, so that is where it goes.  With a shared flavor in the cluster every flavor selects by
    that one label (the L40S pool's own flavor too): Kueue matches a pod's node selector against a flavor only
    on the keys its queue's flavors use, and a shared flavor has no pool label to match a pool selector on."""
    syn = synth_file(neo_file(tmp_path, neo_with_a_shared_h100_flavor))
    objs = manifests(syn, "kueue.x-k8s.io") + manifests(syn, "cluster.x-k8s.io")
    problems = {f"{o['kind']}/{o['metadata']['name']}": validate(o, upstream) for o in objs}
    assert not {k: v for k, v in problems.items() if v}, problems
    flavors = {f["metadata"]["name"]: f["spec"]["nodeLabels"] for f in of_kind(syn, "ResourceFlavor")}
    key = "node.cluster.x-k8s.io/gpu-fleet-kueue-flavor"
    assert flavors == {"neo-h100": {key: "h100"}, "neo-l40s": {key: "l40s"}}
    labels = {
        md["metadata"]["name"]: md["spec"]["template"]["metadata"]["labels"] for md in of_kind(syn, "MachineDeployment")
    }
    by_pool = {lab["node.cluster.x-k8s.io/gpu-fleet-pool"]: lab[key] for lab in labels.values()}
    assert by_pool == {"h100": "h100", "h100-1x": "h100", "l40s": "l40s"}


SYSTEM_PRIORITY_CLASSES = ("system-cluster-critical", "system-node-critical")


def test_every_pod_of_a_system_priority_class_is_admitted_where_it_runs(kube_example):
    """GKE admits pods of the system-* priority classes only in kube-system or a namespace whose ResourceQuota
    scopes that class (Kubernetes docs, "Limit Priority Class consumption by default"; GKE's gcp-critical-pods
    quota in kube-system): otherwise the ReplicaSet or DaemonSet creates no pod ("insufficient quota to match
    these scopes").  The autoscaler's Deployment ran at system-cluster-critical in its own namespace without one,
    so on GKE its pods were never created."""
    objects = manifests(kube_example)
    allowed: dict[str, set[str]] = {"kube-system": set(SYSTEM_PRIORITY_CLASSES)}
    for quota in (o for o in objects if o["kind"] == "ResourceQuota"):
        for e in quota["spec"]["scopeSelector"]["matchExpressions"]:
            if e["scopeName"] == "PriorityClass" and e["operator"] == "In":
                allowed.setdefault(quota["metadata"]["namespace"], set()).update(e["values"])
    checked = 0
    for o in objects:
        spec = ((o.get("spec") or {}).get("template") or {}).get("spec") or {}
        cls = spec.get("priorityClassName")
        if cls in SYSTEM_PRIORITY_CLASSES:
            checked += 1
            ns = o["metadata"]["namespace"]
            assert cls in allowed.get(ns, set()), f"{o['kind']} {ns}/{o['metadata']['name']} runs at {cls}"
    assert checked >= 1  # the autoscaler's Deployment at least


def test_without_fair_sharing_borrowers_of_lower_priority_are_preempted_classically(tmp_path):
    """`kueue.fair_sharing: false`: classical preemption, where `borrowWithinCohort` is what lets a queue borrow by
    preempting lower-priority borrowers; with fair sharing (the examples) the stack leaves it out."""

    def classical(config: dict) -> None:
        config["gpu-fleet:fleet"]["clusters"][0]["kueue"]["fair_sharing"] = False

    syn = synth_file(neo_file(tmp_path, classical))
    for cq in of_kind(syn, "ClusterQueue"):
        assert cq["spec"]["preemption"]["borrowWithinCohort"] == {"policy": "LowerPriority"}
        assert "fairSharing" not in cq["spec"]


def test_the_inventory_names_every_label_the_stack_puts_on_a_pools_nodes(kube_example):
    """The daemon matches a pod's node selector against a pool's `node_labels` (the inventory): each label the stack
    puts on the pool's nodes is there, so a pod selecting one is served by that pool and not answered Failed.  GKE:
    the node pool's labels and its node-pool label; Cluster API: the MachineDeployment's labels that Cluster API
    copies to the Node (the neocloud example's `node.cluster.x-k8s.io/gpu-class`)."""
    from fleet.spec.kube import capi_synced

    inventory = {p["name"]: p["node_labels"] for p in kube_example.result.outputs["autoscaler_inventory"]}
    checked = set()
    for np in (r.inputs for r in kube_example.result.by_type("gcp:container/nodePool:NodePool")):
        if np["name"] in inventory:  # not the system pool
            gke_sets = {"cloud.google.com/gke-nodepool": np["name"]}
            if np["nodeConfig"].get("ephemeralStorageLocalSsdConfig"):
                gke_sets["cloud.google.com/gke-ephemeral-storage-local-ssd"] = "true"
            assert inventory[np["name"]] == {**np["nodeConfig"]["labels"], **gke_sets}
            checked.add(np["name"])
    for md in of_kind(kube_example, "MachineDeployment"):
        labels = md["spec"]["template"]["metadata"]["labels"]
        pool = labels["node.cluster.x-k8s.io/gpu-fleet-pool"]
        assert inventory[pool] == {k: v for k, v in labels.items() if capi_synced(k)}
        checked.add(pool)
    assert checked == set(inventory)
    if "l40s" in inventory:
        assert inventory["l40s"]["node.cluster.x-k8s.io/gpu-class"] == "inference"


# ---------------------------------------------------------------- NVIDIA's GPU Operator on an existing cluster

NGC = "https://helm.ngc.nvidia.com/nvidia"


def gpu_operator_releases(syn: Synthesis) -> list[Any]:
    return [r for r in syn.result.by_type("kubernetes:helm.sh/v3:Release") if r.inputs["chart"] == "gpu-operator"]


def set_gpu_operator(value: Any):
    def mutate(config: dict) -> None:
        config["gpu-fleet:fleet"]["clusters"][0]["kubernetes"]["gpu_operator"] = value

    return mutate


def tolerates(tolerations: list[dict[str, str]], taint: dict[str, str]) -> bool:
    """Kubernetes' rule: a toleration matches a taint by key (empty key + Exists: any), effect (empty: any) and
    value (Exists: any)."""
    for t in tolerations:
        key_ok = t.get("key", "") == taint["key"] or (not t.get("key") and t.get("operator") == "Exists")
        effect_ok = not t.get("effect") or t["effect"] == taint["effect"]
        value_ok = t.get("operator") == "Exists" or t.get("value", "") == taint.get("value", "")
        if key_ok and effect_ok and value_ok:
            return True
    return False


def test_an_existing_cluster_gets_nvidia_s_gpu_operator_at_its_pinned_version(neo):
    """Nothing else puts the driver, container toolkit and device plugin on a new node of an existing cluster, and
    without the device plugin no node shows nvidia.com/gpu, the daemon counts none and Kueue admits nothing: the
    stack installs NVIDIA's official chart, pinned, with every operand, in a namespace Pod Security lets run them."""
    (release,) = gpu_operator_releases(neo)
    assert release.inputs["repositoryOpts"] == {"repo": NGC}
    assert release.inputs["version"] == "v26.7.0" and release.inputs["namespace"] == "gpu-operator"
    values = release.inputs["values"]
    assert values["driver"] == {"enabled": True} and values["toolkit"] == {"enabled": True}
    assert values["nfd"] == {"enabled": True}  # labels NVIDIA nodes pci-10de, which the operands are deployed by
    (ns,) = [
        r for r in neo.result.by_type("kubernetes:core/v1:Namespace") if r.inputs["metadata"]["name"] == "gpu-operator"
    ]
    assert ns.inputs["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"
    assert ns.urn in release.dependencies
    assert release.urn not in kueue_release(neo).dependencies  # Kueue and the daemon do not wait for it
    assert neo.result.outputs["clusters"]["neo"]["gpu_operator"] == "v26.7.0"


def test_the_gpu_operator_runs_on_every_pool_s_nodes_spot_ones_included(tmp_path):
    """The chart's operands and its NFD worker tolerate nvidia.com/gpu only: a spot pool's nodes, also tainted
    gpu-fleet/spot, would get no device plugin and never show a GPU.  Every taint the inventory says a pool's nodes
    carry is tolerated by both, with either way of tainting them."""
    for propagation in ("cluster-api", "bootstrap"):

        def spot_l40s(config: dict, propagation: str = propagation) -> None:
            cluster = config["gpu-fleet:fleet"]["clusters"][0]
            cluster["pools"][1]["capacity"] = "spot"
            cluster["kubernetes"]["taint_propagation"] = propagation
            spot_template = {"api_group": "bootstrap.cluster.x-k8s.io", "kind": "KubeadmConfigTemplate", "name": "spot"}
            cluster["pools"][1]["cluster_api"]["bootstrap_template"] = spot_template  # taints differ from h100's

        syn = synth_file(neo_file(tmp_path, spot_l40s))
        (release,) = gpu_operator_releases(syn)
        operands = release.inputs["values"]["daemonsets"]["tolerations"]
        nfd_worker = release.inputs["values"]["node-feature-discovery"]["worker"]["tolerations"]
        taints = [t for pool in parse_inventory(syn.to_json()) for t in pool.node_taints]
        assert {t["key"] for t in taints} == {"nvidia.com/gpu", "gpu-fleet/spot"}
        for taint in taints:
            assert tolerates(operands, taint) and tolerates(nfd_worker, taint), (propagation, taint)


def test_nodes_whose_image_has_the_driver_can_keep_it(tmp_path):
    syn = synth_file(neo_file(tmp_path, set_gpu_operator({"driver": False})))
    (release,) = gpu_operator_releases(syn)
    values = release.inputs["values"]
    assert values["driver"] == {"enabled": False}
    assert values["toolkit"] == {"enabled": True} and release.inputs["version"] == "v26.7.0"


def test_a_cluster_with_its_own_nvidia_stack_gets_no_gpu_operator(tmp_path):
    syn = synth_file(neo_file(tmp_path, set_gpu_operator(None)))
    assert gpu_operator_releases(syn) == []
    assert not [r for r in syn.result.resources if "gpu-operator" in r.name]
    assert syn.result.outputs["clusters"]["neo"]["gpu_operator"] is None
    assert kueue_release(syn)  # the rest of the stack is unchanged


def test_gke_installs_no_gpu_operator(gke):
    """GKE installs the driver (gpu_driver_installation_config) and runs its own device plugin."""
    assert gpu_operator_releases(gke) == []
    assert not [r for r in gke.result.resources if "gpu-operator" in r.name]


def test_gke_nodes_keep_images_and_scratch_on_the_machines_local_ssds(gke):
    """A3 Ultra comes with 32 local SSDs (12,000 GiB): GKE makes them the node's ephemeral storage, as Cluster
    Toolkit's gke-node-pool does for a3-ultragpu-8g (disk_definitions.tf, local_ssd_count_ephemeral_storage 32);
    before, images and emptyDirs sat on the boot disk.  A pod selecting the label GKE then sets is served."""
    inventory = {p["name"]: p for p in gke.result.outputs["autoscaler_inventory"]}
    for np in (r.inputs for r in gke.result.by_type("gcp:container/nodePool:NodePool")):
        if np["name"] not in inventory:
            assert "ephemeralStorageLocalSsdConfig" not in np["nodeConfig"]  # the system pool's machine has none
            continue
        assert np["nodeConfig"]["machineType"] == "a3-ultragpu-8g"
        assert np["nodeConfig"]["ephemeralStorageLocalSsdConfig"] == {"localSsdCount": 32}
        assert inventory[np["name"]]["node_labels"]["cloud.google.com/gke-ephemeral-storage-local-ssd"] == "true"


def test_gke_pods_reach_the_checkpoint_bucket_through_a_claim_in_their_team_namespace(gke):
    """The bucket the stack creates is reachable from pods: per team namespace a service account that alone may act
    as the bucket's Google account (Workload Identity), which holds `storage.objectUser` on that bucket only, and a
    Cloud Storage FUSE volume bound to the claim `checkpoints` (a pod runs as that account to mount it)."""
    out = gke.result.outputs["clusters"]["a3u"]
    bucket = out["checkpoint_bucket"]
    teams = {t["team"]: t["namespace"] for t in out["kueue_queues"]}
    assert out["checkpoint_claims"] == {team: f"{ns}/checkpoints" for team, ns in teams.items()}
    (account,) = [r for r in gke.result.by_type("gcp:serviceaccount/account:Account") if r.name == "a3u-checkpoints"]
    email = f"{account.inputs['accountId']}@my-gpu-project.iam.gserviceaccount.com"
    (binding,) = [r for r in gke.result.by_type("gcp:storage/bucketIAMMember:BucketIAMMember")
                  if r.inputs["member"] == f"serviceAccount:{email}"]  # fmt: skip
    assert (binding.inputs["bucket"], binding.inputs["role"]) == (bucket, "roles/storage.objectUser")
    members = sorted(
        r.inputs["member"]
        for r in gke.result.by_type("gcp:serviceaccount/iAMMember:IAMMember")
        if r.name.startswith("a3u-checkpoints-wi")
    )
    assert members == sorted(
        f"serviceAccount:my-gpu-project.svc.id.goog[{ns}/gpu-fleet-checkpoints]" for ns in teams.values()
    )
    accounts = {s["metadata"]["namespace"]: s for s in of_kind(gke, "ServiceAccount")
                if s["metadata"]["name"] == "gpu-fleet-checkpoints"}  # fmt: skip
    volumes = {v["spec"]["claimRef"]["namespace"]: v for v in of_kind(gke, "PersistentVolume")}
    claims = {c["metadata"]["namespace"]: c for c in of_kind(gke, "PersistentVolumeClaim")}
    assert set(accounts) == set(volumes) == set(claims) == set(teams.values())
    for ns in teams.values():
        assert accounts[ns]["metadata"]["annotations"] == {"iam.gke.io/gcp-service-account": email}
        pv, pvc = volumes[ns], claims[ns]
        assert pv["spec"]["csi"] == {"driver": "gcsfuse.csi.storage.gke.io", "volumeHandle": bucket}
        assert pv["spec"]["persistentVolumeReclaimPolicy"] == "Retain"  # deleting it never touches the bucket
        assert pv["spec"]["claimRef"] == {"namespace": ns, "name": pvc["metadata"]["name"]}
        assert pvc["spec"]["volumeName"] == pv["metadata"]["name"]
        assert pv["spec"]["storageClassName"] == pvc["spec"]["storageClassName"] == ""  # no dynamic provisioning
    # each object round-trips through the Kubernetes client's own v1 models unchanged: every field is one the API
    # knows, and the required ones (the CSI source's driver and volumeHandle) are there
    from kubernetes import client

    api = client.ApiClient()
    for obj in [*accounts.values(), *volumes.values(), *claims.values()]:
        model = api.deserialize(json.dumps(obj), f"V1{obj['kind']}", "application/json")
        assert api.sanitize_for_serialization(model) == obj, obj["kind"]


def test_gke_network_object_names_stay_within_gke_s_41_characters(tmp_path):
    """GKE refuses a Device-type Network whose name is longer than 41 characters (the name goes into a Unix socket
    path, which Linux caps): the longest cluster name the spec allows, with two GPUDirect machine types (whose
    planes then carry the machine's short name too), stays within it."""

    def longest(config: dict) -> None:
        cluster = config["gpu-fleet:fleet"]["clusters"][0]
        cluster["name"] = "a" * 20
        cluster["pools"][1]["machine_type"] = "a3-megagpu-8g"

    syn = synth_file(gke_file(tmp_path, longest))
    names = [n["metadata"]["name"] for n in of_kind(syn, "Network")]
    assert len(names) == 17 and max(len(n) for n in names) <= 41, sorted(names, key=len)[-1]  # 8 + 1 gVNIC + 8
