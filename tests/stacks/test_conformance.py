"""Every shipped example stack (synthesized under mocks) against the reference facts of Google's blueprints."""

from __future__ import annotations

import copy
import re

import pytest

from fleet.conformance import check_stack, load_reference
from tests.stacks.conftest import synthesized


def test_every_example_conforms(example) -> None:
    assert check_stack(example.to_json()) == []


GKE_EXAMPLES = ("gke-a3ultra-kueue", "gke-a3mega-kueue")


@pytest.mark.parametrize("stack", GKE_EXAMPLES)
def test_every_gke_example_conforms(stack: str) -> None:
    """Their GPU node pools get what Google's GPUDirect manifests install (the `gke_fabric` facts)."""
    assert check_stack(synthesized(stack).to_json()) == []


def test_every_reference_fact_names_its_source() -> None:
    ref = load_reference().raw
    for group in ("machines", "fabric_software"):
        for name, facts in ref[group].items():
            assert facts["source"] in ref["sources"], (group, name)
    for name, facts in [*ref["gke_fabric"]["installers"].items(), *ref["gke_fabric"]["gpu_vpc_mtu"].items()]:
        assert facts["source"] in ref["sources"], ("gke_fabric", name)
    assert ref["gke_fabric"]["device_injector"]["source"] in ref["sources"]
    for group in ("roce_firewall", "slurm_conf", "controller", "lustre_firewall", "accounting"):
        assert ref[group]["source"] in ref["sources"], group


def _mutated(stack: str, change) -> list[str]:
    doc = copy.deepcopy(synthesized(stack).to_json())
    change(doc)
    return check_stack(doc)


def _of(doc, suffix):
    return [r for r in doc["resources"] if r["type"].endswith(suffix)]


def _set_conf(doc, fn):
    for r in _of(doc, "compute/instance:Instance") + _of(doc, "InstanceTemplate"):
        md = r["inputs"].get("metadata", {})
        if "slurm-conf" in md:
            md["slurm-conf"] = fn(md["slurm-conf"])


def _roce_rule_on_the_subnets(d):
    rule = "gcp:compute/regionNetworkFirewallPolicyRule:RegionNetworkFirewallPolicyRule"
    d["resources"].append(
        {"type": rule, "name": "allow-internal", "inputs": {"match": {"srcIpRanges": ["10.140.0.0/24"]}}}
    )


def _image_without_driver(d):
    image = "projects/ubuntu-os-accelerator-images/global/images/family/ubuntu-2404-lts"
    for t in _of(d, "InstanceTemplate"):
        t["inputs"]["disks"][0]["sourceImage"] = image


def _secure_boot_off(d):
    for t in _of(d, "InstanceTemplate"):
        t["inputs"]["shieldedInstanceConfig"]["enableSecureBoot"] = False


def _secure_boot_on(d):
    for t in _of(d, "InstanceTemplate"):
        t["inputs"]["shieldedInstanceConfig"]["enableSecureBoot"] = True


def _own_placement(d):
    for t in _of(d, "InstanceTemplate"):
        t["inputs"]["resourcePolicies"] = "projects/p/regions/r/resourcePolicies/x"


def _script(old, new):
    def change(d):
        for t in _of(d, "InstanceTemplate"):
            t["inputs"]["metadata"]["startup-script"] = t["inputs"]["metadata"]["startup-script"].replace(old, new)

    return change


def _conf(fn):
    return lambda d: _set_conf(d, fn)


def _gpu_mtu(d):
    for n in _of(d, "network:Network"):
        if n["inputs"]["name"].endswith("gpunet-3"):
            n["inputs"]["mtu"] = 1460


def _controller_state_on_the_boot_disk(d):
    for vm in _of(d, "compute/instance:Instance"):
        vm["inputs"].pop("attachedDisks", None)


def _no_lustre_firewall(d):
    d["resources"] = [r for r in d["resources"] if not r["name"].endswith("-allow-lustre")]


def _controller_md(d, key, old, new):
    for vm in _of(d, "compute/instance:Instance"):
        md = vm["inputs"].get("metadata", {})
        if vm["inputs"].get("name", "").endswith("-controller") and key in md:
            md[key] = md[key].replace(old, new)


def _no_slurmdbd(d):
    _controller_md(d, "slurm-conf", "accounting_storage/slurmdbd", "accounting_storage/none")


def _slurmctld_before_slurmdbd(d):
    _controller_md(d, "startup-script", "systemctl restart slurmdbd\n", "")
    _controller_md(
        d,
        "startup-script",
        "systemctl restart slurmrestd\n",
        "systemctl restart slurmrestd\nsystemctl restart slurmdbd\n",
    )


def _script_forcing_replacement(d):
    for vm in _of(d, "compute/instance:Instance"):
        vm["inputs"]["metadataStartupScript"] = vm["inputs"]["metadata"].pop("startup-script")


FINDINGS = [
    # the findings of issue 9, re-introduced one at a time: each must be caught
    ("gcp-a3ultra-slurm", _roce_rule_on_the_subnets, "GCP accepts only"),
    ("gcp-a3mega-slurm", _image_without_driver, "NVIDIA driver"),
    ("gcp-l4-dev", _secure_boot_off, "Secure Boot"),
    ("gcp-a3mega-slurm", _secure_boot_on, "built on the node"),
    ("gcp-a3mega-slurm", _own_placement, "own placement policy"),
    ("gcp-a3mega-slurm", _conf(lambda c: re.sub(r"SlurmctldHost=(\S+)\(\S+\)", r"SlurmctldHost=\1", c)), "no address"),
    ("gcp-a3mega-slurm", _conf(lambda c: c.replace(" CoresPerSocket=52", "")), "CoresPerSocket"),
    ("gcp-a3ultra-slurm", _conf(lambda c: c.replace("TopologyPlugin=topology/tree\n", "")), "TopologyPlugin"),
    ("gcp-a3ultra-slurm", _conf(lambda c: c.replace(" OverSubscribe=EXCLUSIVE", "")), "OverSubscribe"),
    ("gcp-a3mega-slurm", _gpu_mtu, "GPU VPC MTUs"),
    ("gcp-a3mega-slurm", _script("tcpgpudmarxd-dev:v1.0.23", "tcpgpudmarxd-dev:latest"), "v1.0.23"),
    ("gcp-a3ultra-slurm", _script("ibverbs-utils", ""), "ibverbs-utils"),
    ("gcp-a3mega-slurm", _conf(lambda c: c.replace("BatchStartTimeout=600\n", "")), "BatchStartTimeout"),
    # found by the audit against the Toolkit's controller module
    ("gcp-a3ultra-slurm", _controller_state_on_the_boot_disk, "no state disk"),
    ("gcp-l4-dev", _script_forcing_replacement, "replaces the VM"),
    ("gcp-a3ultra-slurm", _no_lustre_firewall, "Managed Lustre: no firewall rule"),
    # found by the audit against slurm-gcp's controller set-up (scripts/setup.py): no slurmdbd, no sacct
    ("gcp-a3mega-slurm", _no_slurmdbd, "AccountingStorageType='accounting_storage/none'"),
    ("gcp-l4-dev", _slurmctld_before_slurmdbd, "in that order"),
    (
        "gcp-l4-dev",
        lambda d: _controller_md(d, "slurmdbd-conf", "StorageType=accounting_storage/mysql", ""),
        "StorageType",
    ),
    # found by comparing the GPU nodes with the Toolkit's A3 Mega gcsfuse blueprint: a bucket jobs could not reach
    ("gcp-a3mega-slurm", lambda d: _node_script(d, "gcsfuse --config-file", "true"), "not mounted for jobs"),
    ("gcp-a3mega-slurm", lambda d: _node_script(d, "fuse-options: allow_other", ""), "lacks fuse-options"),
    ("gcp-a3ultra-slurm", lambda d: _node_script(d, "Before=slurmd.service", ""), "before slurmd starts"),
    ("gcp-a3mega-slurm", lambda d: _node_script(d, "temp-dir: /mnt/localssd/gcsfuse", ""), "local SSD"),
]


def _daemonsets(d):
    return {r["inputs"]["metadata"]["name"]: r["inputs"] for r in _of(d, "apps/v1:DaemonSet")}


def _drop_daemonset(name):
    return lambda d: d.update(
        resources=[
            r
            for r in d["resources"]
            if not (r["type"].endswith("apps/v1:DaemonSet") and r["inputs"]["metadata"]["name"] == name)
        ]
    )


def _installer_script(name, old, new):
    def change(d):
        for c in _daemonsets(d)[name]["spec"]["template"]["spec"]["initContainers"]:
            c["args"] = [a.replace(old, new) for a in c.get("args", [])]

    return change


def _injector_image(d):
    (c,) = _daemonsets(d)["gpu-fleet-nri-device-injector"]["spec"]["template"]["spec"]["containers"]
    c["image"] = "gcr.io/gke-release/nri-device-injector:latest"


def _gib_mount(d):
    spec = _daemonsets(d)["gpu-fleet-nccl-gib-installer"]["spec"]["template"]["spec"]
    spec["initContainers"][0]["volumeMounts"][0]["mountPath"] = "/usr/local/nvidia/lib64"


def _gpu_vpc_mtu_8896(d):
    for n in _of(d, "network:Network"):
        if "-gpunet-" in n["inputs"]["name"]:
            n["inputs"]["mtu"] = 8896


GKE_FINDINGS = [
    # a GPUDirect node pool without its fabric's software (the state of A3 Mega pools before the forty-sixth round)
    ("gke-a3mega-kueue", _drop_daemonset("gpu-fleet-nccl-tcpxo-installer"), "no gpu-fleet-nccl-tcpxo-installer on it"),
    ("gke-a3mega-kueue", _drop_daemonset("gpu-fleet-nri-device-injector"), "no gpu-fleet-nri-device-injector on it"),
    ("gke-a3ultra-kueue", _drop_daemonset("gpu-fleet-nccl-gib-installer"), "no gpu-fleet-nccl-gib-installer on it"),
    # the classic `cp -r DIR DST` that nests lib64/lib64 where NCCL does not look
    (
        "gke-a3mega-kueue",
        _installer_script(
            "gpu-fleet-nccl-tcpxo-installer", "/var/lib/tcpxo/lib64/. /usr/local", "/var/lib/tcpxo/lib64 /usr/local"
        ),
        "does not run",
    ),
    (
        "gke-a3mega-kueue",
        _installer_script("gpu-fleet-nccl-tcpxo-installer", "modprobe import-helper", "true"),
        "first init container lacks",
    ),
    ("gke-a3mega-kueue", _injector_image, "pins gcr.io/gke-release/nri-device-injector@sha256"),
    ("gke-a3ultra-kueue", _gib_mount, "mounts"),
    # the VM blueprint's 8896 on GKE, where Google's GKE A3 Mega blueprint sets 8244 (the stack's until round 46)
    ("gke-a3mega-kueue", _gpu_vpc_mtu_8896, "sets 8244"),
]


@pytest.mark.parametrize(("stack", "change", "finding"), GKE_FINDINGS)
def test_a_gke_fabric_departure_is_reported(stack, change, finding) -> None:
    errors = _mutated(stack, change)
    assert any(finding in e for e in errors), errors


def _node_script(d, old, new):
    for tpl in _of(d, "InstanceTemplate"):
        md = tpl["inputs"].get("metadata", {})
        if "startup-script" in md:
            md["startup-script"] = md["startup-script"].replace(old, new)


@pytest.mark.parametrize(("stack", "change", "finding"), FINDINGS)
def test_a_reintroduced_finding_is_reported(stack, change, finding) -> None:
    errors = _mutated(stack, change)
    assert any(finding in e for e in errors), errors
