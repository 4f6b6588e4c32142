"""`fleet render gpudirect-pod`: the pod template a workload uses a GKE pool's GPU fabric with.

What a platform team relies on: the template names the networks the stack declares, in the pool's NIC order; it
mounts what the stack's installers leave on the node, from the same host paths; TCPXO's RxDM sidecar is the one the
device injector's annotation names, from the catalog's pinned image, and a native sidecar (a Job's pod ends with its
trainer); the Kubernetes client's own model reads the pod back whole.  Bad arguments exit 2 naming the option."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from fleet.catalog import load_catalog
from fleet.cli.main import app
from fleet.synth.run import synth_file
from stacks.gke_fabric import APERTURE_DIR, DEVICE_INJECTOR, RXDM_SIDECAR, TCPXO_INSTALLER
from tests.stacks.test_kube_stacks import gke_file, gpu_pools, high_file, mega_file, of_kind

IMAGE = "registry.example/train@sha256:" + "1" * 64


def render(*args: str) -> Any:
    return CliRunner().invoke(app, ["render", "gpudirect-pod", *args])


def template(config: Path, pool: str, *extra: str) -> dict[str, Any]:
    done = render("--config", str(config), "--pool", pool, "--image", IMAGE, *extra)
    assert done.exit_code == 0, done.output
    return yaml.safe_load(done.stdout)


def as_pod(tpl: dict[str, Any]) -> Any:
    """The template as a Pod, read by the Kubernetes client's model (a field it does not know is dropped, so the
    round trip is compared whole)."""
    from kubernetes.client import ApiClient

    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "w", **tpl["metadata"]}, "spec": tpl["spec"]}
    client = ApiClient()
    model = client.deserialize(json.dumps(pod), "V1Pod", "application/json")
    assert client.sanitize_for_serialization(model) == pod
    return model


@pytest.fixture(scope="module")
def mega(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return mega_file(tmp_path_factory.mktemp("mega"))


@pytest.fixture(scope="module")
def synthesized_mega(mega: Path) -> Any:
    return synth_file(mega)


def _node_networks(syn: Any, pool: str) -> list[str]:
    """The Network objects pods name for `pool`'s additional node networks, in the node pool's NIC order."""
    (node_pool,) = [r for r in gpu_pools(syn) if r.inputs["name"] == pool]
    by_subnet = {
        p["spec"]["vpcSubnet"]: p["metadata"]["name"] for p in of_kind(syn, "GKENetworkParamSet")
    }  # each subnet's param set is named as its Network
    subnets = [n["subnetwork"] for n in node_pool.inputs["networkConfig"]["additionalNodeNetworkConfigs"]]
    declared = {n["metadata"]["name"] for n in of_kind(syn, "Network")}
    names = [by_subnet[s] for s in subnets]
    assert set(names) <= declared
    return names


def test_a_tcpxo_pod_names_the_pool_s_eight_networks_and_runs_rxdm_as_the_injector_s_native_sidecar(
    mega: Path, synthesized_mega: Any
) -> None:
    tpl = template(mega, "spot")
    pod = as_pod(tpl)
    annotations = tpl["metadata"]["annotations"]
    interfaces = json.loads(annotations["networking.gke.io/interfaces"])
    assert interfaces[0] == {"interfaceName": "eth0", "network": "default"}
    assert [i["network"] for i in interfaces[1:]] == _node_networks(synthesized_mega, "spot")
    assert [i["interfaceName"] for i in interfaces] == [f"eth{i}" for i in range(9)]
    tcpxo = load_catalog().fabric_software("tcpxo")
    (sidecar,) = pod.spec.init_containers
    assert (
        sidecar.name == RXDM_SIDECAR["tcpxo"]
        and sidecar.restart_policy == "Always"
        and sidecar.image == tcpxo.rxdm_image
    )
    assert set(sidecar.security_context.capabilities.add) == {"NET_ADMIN", "NET_BIND_SERVICE"}
    assert not sidecar.resources  # its GPUs come from the injector, not from a second nvidia.com/gpu request
    devices = [d["path"] for d in yaml.safe_load(annotations[f"devices.gke.io/container.{RXDM_SIDECAR['tcpxo']}"])]
    assert devices[:8] == [f"/dev/nvidia{i}" for i in range(8)] and "/dev/dmabuf_import_helper" in devices
    (trainer,) = pod.spec.containers
    assert trainer.image == IMAGE and trainer.resources.limits == {"nvidia.com/gpu": "8"}
    env = {e.name: e.value for e in trainer.env}
    assert env["NCCL_FASTRAK_LLCM_DEVICE_DIRECTORY"] == APERTURE_DIR
    host = {v.name: v.host_path.path for v in pod.spec.volumes if v.host_path}
    mounts = {m.mount_path: host.get(m.name) for m in trainer.volume_mounts}
    assert mounts[APERTURE_DIR] == APERTURE_DIR  # where the installer's first init container bind-mounts them
    lib = mounts[env["LD_LIBRARY_PATH"]]
    # where the installer copies NCCL and the plugin: its mount of the node's /home/kubernetes/bin at /usr/local
    (installer,) = [d for d in of_kind(synthesized_mega, "DaemonSet") if d["metadata"]["name"] == TCPXO_INSTALLER]
    spec = installer["spec"]["template"]["spec"]
    nodes = {v["name"]: v["hostPath"]["path"] for v in spec["volumes"]}
    (copy,) = [c for c in spec["initContainers"] if "cp -r" in c["args"][0]]
    (at,) = [nodes[m["name"]] for m in copy["volumeMounts"] if m["mountPath"] == "/usr/local"]
    assert "cp -r /var/lib/tcpxo/lib64/. /usr/local/nvidia/lib64" in copy["args"][0]
    assert lib == f"{at}/nvidia/lib64"
    assert DEVICE_INJECTOR in {d["metadata"]["name"] for d in of_kind(synthesized_mega, "DaemonSet")}
    # the plugin's nccl-env-profile.sh (copied there with the rest) needs NCCL_LIB_DIR, and the printed template
    # says to source it before NCCL starts: upstream calls those NCCL settings required
    assert env["NCCL_LIB_DIR"] == env["LD_LIBRARY_PATH"]
    printed = render("--config", str(mega), "--pool", "spot", "--image", IMAGE).stdout
    assert "the trainer sources ${NCCL_LIB_DIR}/nccl-env-profile.sh" in printed


def test_a_gib_pod_mounts_what_the_gib_installer_leaves_and_names_the_rdma_networks(
    mega: Path, synthesized_mega: Any
) -> None:
    tpl = template(mega, "resv", "--gpus", "4")
    pod = as_pod(tpl)
    interfaces = json.loads(tpl["metadata"]["annotations"]["networking.gke.io/interfaces"])
    assert [i["network"] for i in interfaces[1:]] == _node_networks(synthesized_mega, "resv")
    assert not pod.spec.init_containers  # gIB needs no sidecar
    (trainer,) = pod.spec.containers
    assert trainer.resources.limits == {"nvidia.com/gpu": "4"}
    (installer,) = [
        d for d in of_kind(synthesized_mega, "DaemonSet") if d["metadata"]["name"].endswith("gib-installer")
    ]
    installed = {v["hostPath"]["path"] for v in installer["spec"]["template"]["spec"]["volumes"]}
    host = {v.name: v.host_path.path for v in pod.spec.volumes if v.host_path}
    assert {host[m.name] for m in trainer.volume_mounts if m.name in host} == installed
    paths = {m.mount_path for m in trainer.volume_mounts}
    env = {e.name: e.value for e in trainer.env}
    for path in env["LD_LIBRARY_PATH"].split(":"):  # every library directory is on a mount of what was installed
        assert any(path == p or path.startswith(p + "/") for p in paths), path
    printed = render("--config", str(mega), "--pool", "resv", "--image", IMAGE).stdout
    # gIB: the plugin's environment, and none of TCPX(O)'s advice
    assert "set_nccl_env.sh" in printed and "hostNetwork" not in printed
    assert "Leave hostNetwork off" in render("--config", str(mega), "--pool", "spot", "--image", IMAGE).stdout


@pytest.fixture(scope="module")
def high(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return high_file(tmp_path_factory.mktemp("high"))


def test_a_tcpx_pod_talks_to_its_rxdm_over_the_socket_directory_and_sets_the_qualified_nccl_environment(
    high: Path,
) -> None:
    """A3 High: the four GPU networks in NIC order; the `tcpx-daemon` sidecar the injector's annotation names (GPUs,
    no dmabuf helper: that is TCPXO's), serving on the socket directory the trainer mounts from the same host path
    and names in NCCL_GPUDIRECTTCPX_UNIX_CLIENT_PREFIX; the NCCL settings of the release the catalog pins, whose
    GPU interfaces are the pod's."""
    tpl = template(high, "spot")
    pod = as_pod(tpl)
    annotations = tpl["metadata"]["annotations"]
    interfaces = json.loads(annotations["networking.gke.io/interfaces"])
    assert [i["network"] for i in interfaces[1:]] == _node_networks(synth_file(high), "spot")
    devices = [d["path"] for d in yaml.safe_load(annotations[f"devices.gke.io/container.{RXDM_SIDECAR['tcpx']}"])]
    assert devices == [*(f"/dev/nvidia{i}" for i in range(8)), "/dev/nvidiactl", "/dev/nvidia-uvm"]
    (sidecar,) = pod.spec.init_containers
    tcpx = load_catalog().fabric_software("tcpx")
    assert sidecar.name == RXDM_SIDECAR["tcpx"] and sidecar.restart_policy == "Always"
    assert sidecar.image == tcpx.rxdm_image
    uds = sidecar.command[sidecar.command.index("--uds_path") + 1]
    host = {v.name: v.host_path.path for v in pod.spec.volumes if v.host_path}
    (trainer,) = pod.spec.containers
    env = {e.name: e.value for e in trainer.env}
    assert env["NCCL_GPUDIRECTTCPX_UNIX_CLIENT_PREFIX"] == uds
    served = {host[m.name] for m in sidecar.volume_mounts if m.mount_path == uds}
    used = {host[m.name] for m in trainer.volume_mounts if m.mount_path == uds}
    assert served == used and len(used) == 1  # one host directory, seen at the same path by both
    assert {k: env[k] for k, _ in tcpx.nccl_env} == dict(tcpx.nccl_env)
    gpu_interfaces = [i["interfaceName"] for i in interfaces[1:]]
    assert env["NCCL_GPUDIRECTTCPX_SOCKET_IFNAME"].split(",") == gpu_interfaces
    assert env["NCCL_SOCKET_IFNAME"] == env["NCCL_GPUDIRECTTCPX_CTRL_DEV"] == "eth0"


def test_a_tcpx_or_tcpxo_pod_takes_its_node_whole(mega: Path, high: Path) -> None:
    """Its GPU NICs move into one pod's network namespace: a pod asking part of the node is refused, naming why."""
    for config, machine in ((mega, "a3-megagpu-8g"), (high, "a3-highgpu-8g")):
        done = render("--config", str(config), "--pool", "spot", "--image", IMAGE, "--gpus", "4")
        assert done.exit_code == 2 and "--gpus: a GPUDirect-TCPX" in done.output and machine in done.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--pool", "nope"], "--pool: 'nope' is not a pool of the GKE clusters (a3u/resv, a3u/spot)"),
        (["--pool", "spot", "--gpus", "9"], "--gpus: a3-megagpu-8g has 8 GPUs per node, got 9"),
        (["--pool", "resv", "--gpus", "0"], "--gpus: a3-ultragpu-8g has 8 GPUs per node, got 0"),
        (["--pool", "spot", "--cluster", "other"], "--cluster: no GKE cluster 'other' in the spec (GKE clusters: a3u)"),
    ],
)
def test_bad_arguments_exit_2_naming_the_option(mega: Path, args: list[str], message: str) -> None:
    done = render("--config", str(mega), "--image", IMAGE, *args)
    assert done.exit_code == 2 and f"error: {message}" in done.output and "Traceback" not in done.output


def test_a_slurm_stack_or_a_pool_without_a_fabric_is_refused(tmp_path: Path) -> None:
    slurm = render("--stack", "gcp-a3mega-slurm", "--pool", "a3mega", "--image", IMAGE)
    assert slurm.exit_code == 2 and "the spec has no GKE cluster" in slurm.output
    neocloud = render("--stack", "k8s-neocloud-kueue", "--pool", "x", "--image", IMAGE)
    assert neocloud.exit_code == 2 and "no GKE cluster" in neocloud.output

    def l4(config: dict) -> None:  # a GKE pool of single-NIC machines: nothing to attach
        config["gpu-fleet:fleet"]["clusters"][0]["pools"][1]["machine_type"] = "g2-standard-48"

    plain = render("--config", str(gke_file(tmp_path, l4)), "--pool", "spot", "--image", IMAGE)
    assert plain.exit_code == 2 and "--pool: spot (g2-standard-48) has no GPU fabric" in plain.output
