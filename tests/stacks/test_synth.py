"""The stack program on the shipped examples, under mocks: shapes, inventory contract, secrets, bad specs."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from fleet.catalog import load_catalog
from fleet.inventory import parse_inventory
from fleet.spec.load import SpecError
from fleet.synth.run import synth_file
from tests.stacks.conftest import EXAMPLES, REPO, synthesized

FLEET = Path(sys.executable).with_name("fleet")
COMPUTE = "https://www.googleapis.com/compute/v1"


def _run_cli(*args: str, cwd: Path = REPO, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(FLEET), "synth", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def test_cli_json_a3mega_matches_the_reference_shape(tmp_path):
    # a subprocess with no cloud credentials and no Pulumi state; --stack falls back to the repo root
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GOOGLE_", "CLOUDSDK_", "PULUMI_"))}
    env["HOME"] = str(tmp_path)
    proc = _run_cli("--stack", "gcp-a3mega-slurm", "--json", cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["stack"] == "gcp-a3mega-slurm"
    nets = [r for r in out["resources"] if r["type"] == "gcp:compute/network:Network"]
    assert len(nets) >= 9
    assert sum(1 for n in nets if n["inputs"]["mtu"] == 8896) == 8
    assert [n["inputs"]["mtu"] for n in nets if n["inputs"]["mtu"] != 8896] == [8244]
    templates = [r for r in out["resources"] if r["type"] == "gcp:compute/instanceTemplate:InstanceTemplate"]
    assert templates
    for tpl in templates:
        nics = tpl["inputs"]["networkInterfaces"]
        assert len(nics) == 9
        assert not any("accessConfigs" in n for n in nics)
        assert len({n["network"] for n in nics}) == 9  # one NIC per VPC
        assert tpl["inputs"]["guestAccelerators"] == [{"type": "nvidia-h100-mega-80gb", "count": 8}]
    assert out["cost"]["hourly_usd_at_max"] > 0
    assert out["cost"]["hourly_usd_at_min"] > 0  # the reservation bills even when idle
    assert {p["pool"] for p in out["cost"]["by_pool"]} == {"resv", "spot"}
    for r in out["resources"]:
        assert set(r) >= {"urn", "type", "name", "parent", "inputs"}
    inventory = parse_inventory(out)
    assert {p.name for p in inventory} == {"resv", "spot"}


def test_cli_human_output_has_tree_and_price_table():
    from typer.testing import CliRunner

    from fleet.cli.main import app

    result = CliRunner().invoke(app, ["synth", "--config", str(REPO / "Pulumi.gcp-l4-dev.yaml")])
    assert result.exit_code == 0, result.output
    assert "gpufleet:gcp:GpuNodePool" in result.output
    assert "$/h at max" in result.output


def test_cli_needs_exactly_one_of_stack_and_config():
    from typer.testing import CliRunner

    from fleet.cli.main import app

    result = CliRunner().invoke(app, ["synth"])
    assert result.exit_code == 2


def test_inventory_matches_the_daemon_contract(example):
    out = example.to_json()
    pools = parse_inventory(out)
    raw = yaml.safe_load((REPO / f"Pulumi.{example.stack}.yaml").read_text())["config"]["gpu-fleet:fleet"]
    spec_pools = {(c["name"], p["name"]): p for c in raw["clusters"] for p in c["pools"]}
    assert {(p.cluster, p.name) for p in pools} == set(spec_pools)
    migs = {
        r["inputs"]["name"]: r["inputs"]["zone"]
        for r in out["resources"]
        if r["type"] == "gcp:compute/instanceGroupManager:InstanceGroupManager"
    }
    cat = load_catalog()
    for pool in pools:
        spec_pool = spec_pools[(pool.cluster, pool.name)]
        assert (pool.min_nodes, pool.max_nodes) == (spec_pool.get("min_nodes", 0), spec_pool["max_nodes"])
        assert pool.capacity_type == spec_pool.get("capacity", "on-demand")
        machine = cat.machine(pool.machine_type)
        assert (pool.gpu_type, pool.gpus_per_node) == (machine.gpu.accelerator_type, machine.gpu_count)
        assert set(pool.instance_groups) == set(pool.zones)
        for zone, mig in pool.instance_groups.items():
            assert migs[mig] == zone  # every MIG the inventory names exists, in its zone
        assert pool.node_name_prefix == f"{pool.cluster}-{pool.name}"
        assert pool.slurm_nodeset == pool.name and pool.slurm_partitions
        assert pool.instance_template and pool.instance_template.startswith(f"{pool.cluster}-{pool.name}-")


def test_every_pool_template_carries_its_machine_types_nics(example):
    out = example.to_json()
    cat = load_catalog()
    templates = {r["inputs"]["machineType"]: r for r in out["resources"] if r["type"].endswith("InstanceTemplate")}
    for machine_type, tpl in templates.items():
        nics = tpl["inputs"]["networkInterfaces"]
        assert len(nics) == cat.machine(machine_type).nics.total
        assert not any("accessConfigs" in n for n in nics)
    vms = [r for r in out["resources"] if r["type"] == "gcp:compute/instance:Instance"]
    assert vms and not any("accessConfigs" in n for vm in vms for n in vm["inputs"]["networkInterfaces"])


def test_the_controllers_files_reach_the_controller_alone(example):
    """slurmdbd.conf (its database user), the autoscaler's config and inventory are metadata of the controller only:
    a login VM's or a GPU node's metadata is readable by every process on it (the metadata server has no per-user
    check), so none of `CONTROLLER_ONLY` may be there."""
    from components.gcp.metadata import CONTROLLER_ONLY

    out = example.to_json()
    carriers = [
        r
        for r in out["resources"]
        if r["type"] in ("gcp:compute/instance:Instance", "gcp:compute/instanceTemplate:InstanceTemplate")
        and "metadata" in r["inputs"]
    ]
    controllers = [r for r in carriers if r["name"].endswith("controller")]
    slurm = [r for r in carriers if "slurm-conf" in r["inputs"]["metadata"]]
    if not slurm:
        pytest.skip("no Slurm cluster in this example")
    assert controllers and all(set(CONTROLLER_ONLY) & set(c["inputs"]["metadata"]) for c in controllers)
    for r in carriers:
        if r not in controllers:
            assert not set(CONTROLLER_ONLY) & set(r["inputs"]["metadata"]), r["name"]


def test_urns_unique_and_children_parented(example):
    out = example.to_json()
    urns = [r["urn"] for r in out["resources"]]
    assert len(urns) == len(set(urns))
    components = {r["urn"] for r in out["resources"] if r["type"].startswith("gpufleet:")}
    for r in out["resources"]:
        if not r["type"].startswith("gpufleet:"):
            assert r["parent"] in components, r["urn"]  # no stray top-level resources


def test_no_allow_rule_open_to_the_internet(example):
    for r in example.to_json()["resources"]:
        if r["type"] == "gcp:compute/firewall:Firewall" and r["inputs"].get("allows"):
            assert "0.0.0.0/0" not in r["inputs"]["sourceRanges"], r["name"]


def test_secrets_are_redacted(example):
    out = example.to_json()
    versions = [r for r in out["resources"] if r["type"] == "gcp:secretmanager/secretVersion:SecretVersion"]
    assert versions and all(v["inputs"]["secretData"] == "[secret]" for v in versions)


def test_a3ultra_has_two_gvnic_and_eight_mrdma_nics_on_a_roce_vpc(a3ultra):
    out = a3ultra.to_json()
    (rdma,) = [r for r in out["resources"] if r["type"].endswith("network:Network") and "networkProfile" in r["inputs"]]
    assert rdma["inputs"]["networkProfile"] == "projects/my-gpu-project/global/networkProfiles/us-central1-b-vpc-roce"
    assert rdma["inputs"]["mtu"] == 8896
    templates = [r for r in out["resources"] if r["type"].endswith("InstanceTemplate")]
    assert len(templates) == 2  # the reservation and the flex-start pool share one fabric
    for tpl in templates:
        nics = tpl["inputs"]["networkInterfaces"]
        assert [n["nicType"] for n in nics] == ["GVNIC", "GVNIC"] + ["MRDMA"] * 8
        assert {n["network"] for n in nics[2:]} == {f"{COMPUTE}/projects/my-gpu-project/global/networks/a3ultra-rdma"}
        assert len({n["subnetwork"] for n in nics[2:]}) == 8
        assert len({n["network"] for n in nics[:2]}) == 2
        assert tpl["inputs"]["guestAccelerators"] == [{"type": "nvidia-h200-141gb", "count": 8}]


def test_outputs_name_the_cluster_endpoints(a3mega):
    cluster = a3mega.result.outputs["clusters"]["a3mega"]
    assert cluster["controller"] == "a3mega-controller"
    assert cluster["logins"] == ["a3mega-login-0"]
    assert cluster["filestore_ip"] and cluster["checkpoint_bucket"] == "my-gpu-project-a3mega-checkpoints"
    assert cluster["checkpoint_mount"] == "/checkpoints"
    nets = a3mega.result.outputs["networks"]
    assert nets["system"].endswith("/global/networks/gcp-a3mega-slurm-net")
    assert len(nets["planes"]) == 8


def _bad_stack(tmp_path: Path) -> Path:
    doc = yaml.safe_load((REPO / "Pulumi.gcp-l4-dev.yaml").read_text())
    doc["config"]["gpu-fleet:fleet"]["clusters"][0]["pools"][0]["min_nodes"] = 5
    doc["config"]["gpu-fleet:fleet"]["clusters"][0]["pools"][0]["max_nodes"] = 2
    path = tmp_path / "Pulumi.bad.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_bad_spec_exits_2_with_the_field_path(tmp_path):
    proc = _run_cli("--config", str(_bad_stack(tmp_path)), "--json")
    assert proc.returncode == 2
    assert "clusters[0].pools[0]" in proc.stderr
    assert proc.stdout == ""


def test_bad_spec_declares_no_resource(tmp_path):
    from pulumi.runtime import settings

    from fleet.synth.engine import run_program
    from stacks.program import main

    doc = yaml.safe_load(_bad_stack(tmp_path).read_text())
    with pytest.raises(SpecError) as exc:
        run_program(main, stack="bad", config=doc["config"])
    assert any(path.startswith("clusters[0].pools[0]") for path, _ in exc.value.errors)
    assert settings.get_monitor().records == []
    with pytest.raises(SpecError):
        synth_file(_bad_stack(tmp_path))


def test_rdma_pool_across_zones_is_refused_before_any_resource():
    from pulumi.runtime import settings

    from fleet.synth.engine import run_program
    from stacks.program import main

    # a4-highgpu-8g is offered in two zones of us-west3; its RoCE VPC can serve only one
    fleet = {
        "project": "my-gpu-project",
        "region": "us-west3",
        "zones": ["us-west3-b", "us-west3-c"],
        "clusters": [
            {
                "name": "a4",
                "pools": [{"name": "od", "machine_type": "a4-highgpu-8g", "max_nodes": 4}],
                "slurm": {"partitions": [{"name": "a4", "pools": ["od"]}]},
            }
        ],
    }
    with pytest.raises(SpecError) as exc:
        run_program(main, stack="bad", config={"gpu-fleet:fleet": fleet})
    assert any(path.startswith("clusters[0].pools") for path, _ in exc.value.errors), exc.value.errors
    assert "RoCE" in str(exc.value) or "zone" in str(exc.value)
    assert settings.get_monitor().records == []


def test_project_bootstrap_kind_is_dispatched(monkeypatch):
    import types

    from fleet.synth.engine import run_program
    from stacks.program import main

    seen = []
    fake = types.ModuleType("stacks.project_bootstrap")
    fake.build = seen.append  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "stacks.project_bootstrap", fake)
    raw = {"kind": "project-bootstrap", "project": "my-gpu-project"}
    result = run_program(main, stack="boot", config={"gpu-fleet:fleet": raw})
    assert seen == [raw]
    assert result.resources == []


def test_generated_slurm_config_reaches_controller_and_nodes(a3mega):
    out = a3mega.to_json()
    (ctl,) = [
        r for r in out["resources"] if r["type"].endswith("instance:Instance") and r["name"].endswith("controller")
    ]
    conf = ctl["inputs"]["metadata"]["slurm-conf"]
    for nodeset in ("NodeSet=resv", "NodeSet=spot"):
        assert nodeset in conf
    assert "State=CLOUD" in conf and "Gres=gpu:8" in conf
    assert "SlurmctldHost=a3mega-controller(10.0.15.253)" in conf
    assert "AuthAltTypes=auth/jwt" in conf and "jwt_key=/var/spool/slurmctld/jwt_hs256.key" in conf
    assert ctl["inputs"]["metadata"]["gres-conf"]
    on_controller = parse_inventory(json.loads(ctl["inputs"]["metadata"]["gpu-fleet-inventory"]))
    exported = parse_inventory(out)
    assert [p.model_dump(exclude={"instance_template"}) for p in on_controller] == [
        p.model_dump(exclude={"instance_template"}) for p in exported
    ]
    for tpl in [r for r in out["resources"] if r["type"].endswith("InstanceTemplate")]:
        md = tpl["inputs"]["metadata"]
        assert md["slurm-conf"] == conf
        assert "slurmd" in md["startup-script"] and "munge.key" in md["startup-script"]


def test_controller_installs_the_autoscaler_that_slurm_calls(a3mega):
    from autoscaler.daemon.build import build_policy
    from autoscaler.daemon.config import parse_config

    out = a3mega.to_json()
    (ctl,) = [
        r for r in out["resources"] if r["type"].endswith("instance:Instance") and r["name"].endswith("controller")
    ]
    md = ctl["inputs"]["metadata"]
    cfg = parse_config(yaml.safe_load(md["gpu-fleet-autoscaler-config"]))
    assert str(cfg.inventory) == "/etc/gpu-fleet/inventory.json" and cfg.provider.kind == "gce"
    assert build_policy(cfg.policy).spot_queues == frozenset({"a3mega-spot"})
    script = ctl["inputs"]["metadata"]["startup-script"]
    sha = "8c0eeb8229cfef2fdf8412660f68b6092404c7c7"  # the example's pinned commit
    assert "git clone --quiet --no-checkout -- https://github.com/your-org/gpu-fleet.git /opt/gpu-fleet" in script
    assert f"fetch --quiet --depth 1 origin -- {sha}" in script and f"checkout --quiet --force --detach {sha}" in script
    assert f'[ "$(git -C /opt/gpu-fleet rev-parse HEAD)" = {sha} ] || die' in script  # checked on install
    assert "origin main" not in script and "--require-hashes --no-deps -r" in script
    assert "/usr/local/sbin/gpu-fleet-install-venv /opt/gpu-fleet || die" in script
    assert "install -d -o slurm -g slurm -m 0750 /var/lib/gpu-fleet" in script
    assert "systemctl restart gpu-fleet-autoscaler" in script
    # every file the controller takes from /opt/gpu-fleet is in this repository
    for path in re.findall(r"/opt/gpu-fleet/(deploy/\S+)", md["slurm-conf"] + script):
        assert (REPO / path).is_file(), path


def test_fleet_render_writes_the_files_the_stack_delivers(a3mega, tmp_path):
    from typer.testing import CliRunner

    from fleet.cli.main import app

    result = CliRunner().invoke(app, ["render", "slurm-conf", "--stack", "gcp-a3mega-slurm", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    (ctl,) = [
        r
        for r in a3mega.to_json()["resources"]
        if r["type"].endswith("instance:Instance") and r["name"].endswith("controller")
    ]
    md = ctl["inputs"]["metadata"]
    assert (tmp_path / "slurm.conf").read_text() == md["slurm-conf"]
    assert (tmp_path / "gres.conf").read_text() == md["gres-conf"]
    assert (tmp_path / "cgroup.conf").read_text() == md["cgroup-conf"]
    assert (tmp_path / "topology.conf").read_text() == md["topology-conf"]
    assert (tmp_path / "job_submit.lua").read_text() == md["job-submit-lua"]  # the submit wake-up (held pools)


def test_a_controller_whose_slurm_conf_names_the_lua_plugin_gets_the_lua(example):
    """slurmctld refuses to start with `JobSubmitPlugins=lua` and no /etc/slurm/job_submit.lua: the controller's
    metadata carries the file exactly when its slurm.conf names the plugin, in every example stack."""
    for ctl in [
        r
        for r in example.to_json()["resources"]
        if r["type"].endswith("instance:Instance") and r["name"].endswith("controller")
    ]:
        md = ctl["inputs"]["metadata"]
        names_plugin = "JobSubmitPlugins=lua" in md["slurm-conf"].splitlines()
        assert names_plugin == ("job-submit-lua" in md), ctl["name"]
        if names_plugin:
            assert "function slurm_job_submit" in md["job-submit-lua"]


def test_two_clusters_share_the_system_vpc_and_keep_names_apart():
    from fleet.synth.engine import run_program
    from stacks.program import main

    def cluster(name: str, machine: str, capacity: str) -> dict:
        return {
            "name": name,
            "pools": [
                {"name": "p", "machine_type": machine, "capacity": capacity, "max_nodes": 2, "zones": ["us-east4-a"]}
            ],
            "storage": {"home": None, "checkpoints": {}},
            "slurm": {"partitions": [{"name": name, "pools": ["p"], "spot_tolerant": capacity == "spot"}]},
        }

    fleet = {
        "project": "my-gpu-project",
        "region": "us-east4",
        "zones": ["us-east4-a"],
        "clusters": [cluster("train", "a3-megagpu-8g", "on-demand"), cluster("dev", "g2-standard-8", "spot")],
    }
    result = run_program(main, stack="two", config={"gpu-fleet:fleet": fleet})
    urns = [r.urn for r in result.resources]
    assert len(urns) == len(set(urns))
    names = [r.inputs.get("name") for r in result.resources if r.custom and r.inputs.get("name")]
    by_type: dict[str, list[str]] = {}
    for r in result.resources:
        if r.custom and r.inputs.get("name"):
            by_type.setdefault(r.type, []).append(r.inputs["name"])
    assert all(len(v) == len(set(v)) for v in by_type.values()), by_type  # GCE names unique per type
    assert names
    nets = [r for r in result.resources if r.type == "gcp:compute/network:Network"]
    assert len(nets) == 9  # one shared system VPC + the 8 GPU VPCs of the a3-mega cluster only
    templates = {r.inputs["machineType"]: r for r in result.resources if r.type.endswith("InstanceTemplate")}
    assert len(templates["g2-standard-8"].inputs["networkInterfaces"]) == 1
    assert len(templates["a3-megagpu-8g"].inputs["networkInterfaces"]) == 9
    inventory = parse_inventory(result.outputs)
    assert {(p.cluster, p.capacity_type) for p in inventory} == {("train", "on-demand"), ("dev", "spot")}


@pytest.mark.parametrize(
    "machine_type", ["a3-highgpu-8g", "a3-highgpu-1g", "a4-highgpu-8g", "a2-ultragpu-8g", "g2-standard-48"]
)
def test_every_fabric_layout_synthesizes(machine_type):
    from fleet.synth.engine import run_program
    from stacks.program import main

    cat = load_catalog()
    machine = cat.machine(machine_type)
    region = next(r for r, zones in sorted(machine.zones.items()) if zones and machine.price(r))
    zone = machine.zones_in(region)[0]
    fleet = {
        "project": "my-gpu-project",
        "region": region,
        "zones": [zone],
        "clusters": [
            {
                "name": "c",
                "pools": [{"name": "p", "machine_type": machine_type, "max_nodes": 2}],
                "slurm": {"partitions": [{"name": "gpu", "pools": ["p"]}]},
            }
        ],
    }
    result = run_program(main, stack="layout", config={"gpu-fleet:fleet": fleet})
    nics = machine.nics
    nets = [r for r in result.resources if r.type == "gcp:compute/network:Network"]
    assert len(nets) == 1 + (nics.gvnic - 1) + nics.gpu_nics + (1 if nics.rdma_nics else 0)
    (tpl,) = [r for r in result.resources if r.type.endswith("InstanceTemplate")]
    assert len(tpl.inputs["networkInterfaces"]) == nics.total
    assert tpl.inputs["guestAccelerators"] == [{"type": machine.gpu.accelerator_type, "count": machine.gpu_count}]
    if nics.gpu_nic_mtu:
        assert {n.inputs["mtu"] for n in nets if n.inputs["name"] != "layout-net"} == {nics.gpu_nic_mtu}
    (pool,) = parse_inventory(result.outputs)
    assert pool.instance_groups == {zone: f"c-p-{zone}"}


def test_issue_9_must_show_on_every_example(example):
    """GPU templates boot an image with a signed NVIDIA driver and Secure Boot (but A3 Mega, whose TCPXO module is
    built on the node and would be refused), the RoCE VPC has no firewall rule
    GCP would refuse, no reservation pool brings its own placement policy, SlurmctldHost carries an address, node
    lines carry sockets/cores/threads, TopologyPlugin is set."""
    out = example.to_json()
    accel = "projects/ubuntu-os-accelerator-images/global/images/family/ubuntu-accelerator-2404-amd64-with-nvidia-580"
    for tpl in [r for r in out["resources"] if r["type"].endswith("InstanceTemplate")]:
        assert tpl["inputs"]["disks"][0]["sourceImage"] == accel
        mega = tpl["inputs"]["machineType"] == "a3-megagpu-8g"
        assert tpl["inputs"]["shieldedInstanceConfig"]["enableSecureBoot"] is not mega
        if tpl["inputs"]["reservationAffinity"]["type"] == "SPECIFIC_RESERVATION":
            assert "resourcePolicies" not in tpl["inputs"]
        conf = tpl["inputs"]["metadata"]["slurm-conf"]
        assert re.search(r"^SlurmctldHost=[a-z0-9-]+-controller\(10\.\d+\.\d+\.\d+\)$", conf, re.M)
        assert re.search(r"^TopologyPlugin=topology/tree$", conf, re.M)
        for line in [ln for ln in conf.splitlines() if ln.startswith("NodeName=")]:
            assert re.search(r" Sockets=\d+ CoresPerSocket=\d+ ThreadsPerCore=2 RealMemory=\d+ ", line), line
    for rule in [r for r in out["resources"] if r["type"].endswith("RegionNetworkFirewallPolicyRule")]:
        assert rule["inputs"]["match"].get("srcIpRanges") in (None, ["0.0.0.0/0"]), rule["name"]
    roce = {r["inputs"]["name"] for r in out["resources"] if "networkProfile" in r["inputs"]}
    for fw in [r for r in out["resources"] if r["type"] == "gcp:compute/firewall:Firewall"]:
        assert fw["inputs"]["network"].rsplit("/", 1)[-1] not in roce
    (addr,) = [r for r in out["resources"] if r["type"] == "gcp:compute/address:Address"]
    assert addr["inputs"]["addressType"] == "INTERNAL" and addr["inputs"]["address"] in conf


ALL_STACKS = (*EXAMPLES, "gke-a3ultra-kueue", "gke-a3mega-kueue", "k8s-neocloud-kueue", "gcp-project-bootstrap")


@pytest.mark.parametrize("stack", ALL_STACKS)
def test_no_iam_binding_hangs_on_a_resource_name_iam_does_not_evaluate(stack):
    """A condition part on `resource.name` of a resource type IAM gives no name to "is never interpreted as
    granting access" (Google, "IAM Conditions attribute reference"), and the stacks bind roles whose permissions
    are all checked on such types (MIGs, operations, reservations, regions: `fleet.bootstrap.iam.PERMISSION_TYPES`).
    The autoscaler's binding named its cluster's MIGs until the thirty-fifth round and so granted nothing.  A
    binding that ever needs a name condition must name only `COMPUTE_CONDITION_TYPES`, and this test with it."""
    conditioned = [
        r.name
        for r in synthesized(stack).result.resources
        if "resource.name" in str((r.inputs.get("condition") or {}).get("expression", ""))
    ]
    assert conditioned == []


@pytest.mark.parametrize("stack", ALL_STACKS)
def test_every_shipped_stack_synthesizes_without_a_warning(stack):
    """A shipped example is what a team copies: it pins what the stack would otherwise warn about (a cluster's zone)
    and uses no machine whose fabric the stack leaves unset, so `pulumi up` on it says nothing to act on."""
    assert synthesized(stack).result.warnings == []


def test_slurm_vms_boot_after_the_fleet_nat(example):
    """apt-get on first boot goes out through the NAT: no controller or login VM is created before it."""
    result = example.result
    (nat,) = result.by_type("gcp:compute/routerNat:RouterNat")
    vms = result.by_type("gcp:compute/instance:Instance")
    assert vms and all(nat.urn in vm.dependencies for vm in vms), [vm.name for vm in vms]


def _zonal_state(result) -> dict[str, tuple[str, bool]]:
    """Where each stateful or zonal resource of the control plane is, and whether it is protected."""
    kinds = ("filestore/instance:Instance", "compute/disk:Disk", "compute/instance:Instance")
    return {
        r.name: (r.inputs.get("location") or r.inputs.get("zone"), r.protect)
        for r in result.resources
        if r.type.endswith(kinds)
    }


def test_reordering_pools_moves_neither_home_nor_the_controller():
    """A platform team lists another pool first: with the cluster's zone pinned (as every shipped example does)
    /home, the controller, its state disk and the login VMs stay where they are."""
    from fleet.synth.engine import run_program
    from stacks.program import main

    fleet = yaml.safe_load((REPO / "Pulumi.gcp-a3mega-slurm.yaml").read_text())["config"]["gpu-fleet:fleet"]
    assert fleet["clusters"][0]["zone"] == "us-east4-a"
    before = run_program(main, stack="a", config={"gpu-fleet:fleet": fleet})
    fleet["clusters"][0]["pools"].reverse()  # spot (us-east4-b, -c) first
    after = run_program(main, stack="a", config={"gpu-fleet:fleet": fleet})
    assert _zonal_state(after) == _zonal_state(before)
    assert {zone for zone, _ in _zonal_state(after).values()} == {"us-east4-a"}
    assert after.outputs["clusters"]["a3mega"]["zone"] == "us-east4-a" and not after.warnings

    # unpinned, the reorder would move them: the stack says so, and the stateful ones are protected, so
    # `pulumi up` stops at their replacement instead of creating an empty /home
    del fleet["clusters"][0]["zone"]
    moved = run_program(main, stack="a", config={"gpu-fleet:fleet": fleet})
    state = _zonal_state(moved)
    assert state["a3mega-storage-home"] == ("us-east4-b", True)
    assert state["a3mega-slurm-controller-state"] == ("us-east4-b", True)
    (warning,) = moved.warnings
    assert "clusters[0] (a3mega): zone is not set" in warning and "zone: us-east4-b" in warning


def test_every_slurm_controllers_state_disk_is_snapshotted_as_the_stack_says():
    """Each example Slurm stack snapshots its controller's state disk (the default schedule); a stack's
    `slurm.state_snapshots` reaches the schedule, and `null` declares none."""
    from fleet.synth.engine import run_program
    from stacks.program import main

    fleet = yaml.safe_load((REPO / "Pulumi.gcp-l4-dev.yaml").read_text())["config"]["gpu-fleet:fleet"]
    default = run_program(main, stack="d", config={"gpu-fleet:fleet": fleet})
    (policy,) = [r for r in default.resources if r.type.endswith("compute/resourcePolicy:ResourcePolicy")
                 and "snapshotSchedulePolicy" in r.inputs]  # fmt: skip
    (attached,) = [r for r in default.resources if r.type.endswith("DiskResourcePolicyAttachment")]
    assert attached.inputs["disk"] == f"{fleet['clusters'][0]['name']}-controller-state"
    assert policy.inputs["snapshotSchedulePolicy"]["schedule"]["dailySchedule"]["startTime"] == "04:00"
    fleet["clusters"][0]["slurm"]["state_snapshots"] = {"interval_hours": 4, "start_time": "02:00", "keep_days": 7}
    hourly = run_program(main, stack="d", config={"gpu-fleet:fleet": fleet})
    (policy,) = [r for r in hourly.resources if "snapshotSchedulePolicy" in r.inputs]
    assert policy.inputs["snapshotSchedulePolicy"]["schedule"] == {
        "hourlySchedule": {"hoursInCycle": 4, "startTime": "02:00"}
    }
    assert policy.inputs["snapshotSchedulePolicy"]["retentionPolicy"]["maxRetentionDays"] == 7
    fleet["clusters"][0]["slurm"]["state_snapshots"] = None
    none = run_program(main, stack="d", config={"gpu-fleet:fleet": fleet})
    assert not [r for r in none.resources if "snapshotSchedulePolicy" in r.inputs or "Attachment" in r.type]


def test_a_disposable_stack_can_turn_the_protection_off():
    from fleet.synth.engine import run_program
    from stacks.program import main

    fleet = yaml.safe_load((REPO / "Pulumi.gcp-l4-dev.yaml").read_text())["config"]["gpu-fleet:fleet"]
    fleet["clusters"][0]["deletion_protection"] = False
    result = run_program(main, stack="d", config={"gpu-fleet:fleet": fleet})
    assert not any(protect for _, protect in _zonal_state(result).values())


def test_a3_high_pools_are_named_in_a_warning_that_their_tcpx_fabric_is_not_set_up():
    """A3 High's GPUDirect-TCPX needs a kernel the stack cannot install, so its pools deploy with the four GPU NICs
    and no TCPX software: the stack says so at `pulumi up`, naming the pools, instead of letting the first
    multi-node job find NCCL on its sockets transport."""
    from fleet.synth.engine import run_program
    from stacks.program import main

    fleet = yaml.safe_load((REPO / "Pulumi.gcp-a3mega-slurm.yaml").read_text())["config"]["gpu-fleet:fleet"]
    fleet["clusters"][0]["pools"][1]["machine_type"] = "a3-highgpu-8g"  # the spot pool
    result = run_program(main, stack="a", config={"gpu-fleet:fleet": fleet})
    (warning,) = result.warnings
    assert warning.startswith("clusters[0] (a3mega): pools spot are a3-highgpu-8g") and "sockets transport" in warning
    # one A3 High node in all runs no multi-node job: nothing to warn about
    fleet["clusters"][0]["pools"][1]["max_nodes"] = 1
    assert run_program(main, stack="a", config={"gpu-fleet:fleet": fleet}).warnings == []
