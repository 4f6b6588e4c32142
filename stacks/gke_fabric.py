"""The GPUDirect software a GKE cluster does not install by itself, and what a workload adds to use it (pure).

GKE gives A3 Mega, A3 Ultra and A4 node pools their GPU NICs (the additional node networks and the `Network` objects
pods name; `gpudirect_strategy: RDMA` on the RDMA machines) but not the software that drives them.  Without it a
multi-node NCCL job runs over the gVNIC at a fraction of the fabric's bandwidth, and nothing fails loudly.  Google's
GKE instructions and cluster-toolkit's GKE blueprints apply manifests from GoogleCloudPlatform/container-engine-
accelerators; the stack declares its own versions of them, on exactly the pools that need them (by
`cloud.google.com/gke-nodepool`), tolerating every taint, in kube-system (a `system-node-critical` pod is only admitted
there), from the images the catalog pins for the Slurm path too, then a pause container pinned by digest:

- **gIB (A3 Ultra, A4)**: `gpu-fleet-nccl-gib-installer` (upstream `gpudirect-rdma/nccl-rdma-installer.yaml`): the
  `nccl-plugin-gib` image copies the plugin and its NCCL to /home/kubernetes/bin/gib and /home/kubernetes/bin/nvidia
  /lib64.  Upstream's extra init container, which only silences the kernel's martian-packet log on the RDMA
  interfaces, runs an unpinned `alpine:latest` and is left out.
- **GPUDirect-TCPXO (A3 Mega)**: `gpu-fleet-nccl-tcpxo-installer` (upstream `gpudirect-tcpxo/nccl-tcpxo-installer
  .yaml`) and `gpu-fleet-nri-device-injector` (upstream `nri_device_injector/nri-device-injector.yaml`, its image
  pinned by upstream's digest).  The installer's first init container enters the node's namespaces (`nsenter` into
  PID 1, as upstream does) and runs `APERTURE_SCRIPT`: loads the dmabuf import helper and bind-mounts each aperture
  PCI function's sysfs directory under /dev/aperture_devices, world-readable with writable `resource*` files, as the
  Slurm path's udev rule does; it fails the pod (Init:Error, visible in `kubectl get pods -n kube-system`) when the
  node shows fewer aperture devices than the machine has GPU NICs, where upstream's loop would find none and go on.
  Upstream runs it from an unpinned `ubuntu` image; here it is the pinned plugin image (Ubuntu-based: `nsenter` is in
  util-linux, an essential package).  Upstream also inserts `iptables -I INPUT -p tcp -j ACCEPT` on the node, which
  opens every TCP port of the host; it is left out: the GPU NICs are moved into the pods' network namespaces
  (`deviceMode: NetDevice`), so the node's INPUT chain never sees their traffic, and pods' own traffic is not the
  node's INPUT either.  Hence: run TCPXO workloads without `hostNetwork`, as upstream's
  `nccl-test-unprivileged-without-hostnetwork.yaml` does.  The second init container runs the plugin image's own
  installer and copies NCCL and the plugin next to the driver's libraries in /home/kubernetes/bin/nvidia/lib64.

Every TCPXO workload pod also needs the receive-datapath manager (RxDM) as a sidecar, its GPU devices handed to it by
the injector through an annotation, the GPU networks as interfaces and the aperture devices mounted: `workload_pod`
gives those pieces for a pool (`fleet render gpudirect-pod`; docs/kubernetes.md).  The sidecar is a native sidecar
(an init container with `restartPolicy: Always`, Kubernetes 1.29+), so a Job's pod ends when its trainer does.

Pools of GPUDirect-TCPX machines (A3 High 8g) would need GKE's TCPX installer and its RxDM sidecar; the stack sets
neither up, so their multi-node NCCL runs over the gVNIC.  `tcpx_pools` names them and the stack says so at `pulumi
up` (a warning: single-node work on them is unaffected)."""

from __future__ import annotations

import json
from typing import Any

from components.gcp.startup import rxdm_flags
from fleet.catalog import Catalog, FabricSoftware
from fleet.spec.model import ClusterSpec, NodePoolSpec

NAMESPACE = "kube-system"
NAME = "gpu-fleet-nccl-gib-installer"
TCPXO_INSTALLER = "gpu-fleet-nccl-tcpxo-installer"
DEVICE_INJECTOR = "gpu-fleet-nri-device-injector"
#: where the installers leave the plugins on the host, and where workloads mount them from
HOST_BIN = "/home/kubernetes/bin"
HOST_GIB = f"{HOST_BIN}/gib"
HOST_NVIDIA_LIB = f"{HOST_BIN}/nvidia/lib64"
#: where the TCPXO plugin finds the aperture devices (its `NCCL_FASTRAK_LLCM_DEVICE_DIRECTORY`), node and pod alike
APERTURE_DIR = "/dev/aperture_devices"
#: the RxDM sidecar's name: the NRI device injector's annotation names the container it hands the GPUs to
RXDM_SIDECAR = "tcpxo-daemon"
#: the RxDM image's entry script (upstream's workload examples)
RXDM_ENTRY = "/fts/entrypoint_rxdm_container.sh"
#: the pause image GKE's own installers run after their init containers, pinned by digest as upstream pins it
PAUSE_IMAGE = "gke.gcr.io/pause:3.8@sha256:880e63f94b145e46f1b1082bb71b85e21f16b99b180b9996407d61240ceb9830"
#: the installer's steps (upstream's manifest): its entry script installs the plugin and NCCL under /var/lib/gib in
#: the container, copied then to the host paths mounted under /usr/local
INSTALL = (
    "set -ex\n"
    "/scripts/container_entry.sh install --install-nccl\n"
    "cp -r /var/lib/gib/lib64/. /usr/local/home/kubernetes/bin/nvidia/lib64\n"
    "cp -r /var/lib/gib/. /usr/local/home/kubernetes/bin/gib\n"
)
#: the TCPXO plugin image's installer (upstream's manifest): NCCL and the plugin under /var/lib/tcpxo/lib64 (the
#: node's /var/lib), copied next to the driver's libraries (the node's /home/kubernetes/bin at /usr/local)
TCPXO_INSTALL = (
    "set -ex\n"
    "chmod 755 /scripts/container_entry.sh\n"
    "/scripts/container_entry.sh install --install-nccl\n"
    "mkdir -p /usr/local/nvidia/lib64\n"
    "cp -r /var/lib/tcpxo/lib64/. /usr/local/nvidia/lib64\n"
)


def aperture_script(fab: FabricSoftware) -> str:
    """What the TCPXO installer's first init container runs in the node's namespaces (module doc): POSIX sh, every
    step safe to run again (a restarted pod finds its own mounts and replaces them)."""
    vendor, device = fab.aperture_pci or ("", "")
    pci_id = f"[{vendor.removeprefix('0x')}:{device.removeprefix('0x')}]"  # how `lspci -nn` shows vendor:device
    return f"""set -eu
modprobe {fab.kernel_module}
mkdir -p {APERTURE_DIR}
found=0
for bdf in $(lspci -nn -D | grep -F '{pci_id}' | cut -d' ' -f1); do
  target={APERTURE_DIR}/$bdf
  mkdir -p "$target"
  umount -R "$target" 2>/dev/null || :
  mount --bind "$(readlink -f /sys/bus/pci/devices/$bdf)" "$target"
  found=$((found + 1))
done
if [ "$found" -lt {fab.devices} ]; then
  echo "gpu-fleet: $found TCPXO aperture devices {pci_id} on this node, want {fab.devices}" >&2
  exit 1
fi
chmod -R a+r {APERTURE_DIR}
chmod a+rw {APERTURE_DIR}/*/resource*
"""


def gib_pools(cluster: ClusterSpec, catalog: Catalog) -> list[str]:
    """The cluster's node pools whose machines use the gIB NCCL plugin (A3 Ultra, A4), in spec order."""
    return [p.name for p in cluster.pools if catalog.machine(p.machine_type).software.fabric == "gib"]


def tcpxo_pools(cluster: ClusterSpec, catalog: Catalog) -> list[str]:
    """The cluster's node pools whose machines use GPUDirect-TCPXO (A3 Mega), in spec order."""
    return [p.name for p in cluster.pools if catalog.machine(p.machine_type).software.fabric == "tcpxo"]


def tcpx_pools(cluster: ClusterSpec, catalog: Catalog) -> list[str]:
    """The cluster's node pools of GPUDirect-TCPX machines (their fabric software is not set up on GKE), where
    they can hold a multi-node job: [] when those pools hold one node in all (nothing to warn about)."""
    pools = [p for p in cluster.pools if catalog.machine(p.machine_type).fabric_not_set_up_on_gke]
    return [p.name for p in pools] if sum(p.max_nodes for p in pools) > 1 else []


def fabric_software(cluster: ClusterSpec, catalog: Catalog) -> list[dict[str, Any]]:
    """Every DaemonSet the cluster's GPU fabrics need ([] off GKE, or with no gIB or TCPXO pool)."""
    if cluster.platform != "gke":
        return []
    return gib_installer(cluster, catalog) + tcpxo_software(cluster, catalog)


def _daemonset(
    name: str, pools: list[str], init: list[dict[str, Any]], main: dict[str, Any], volumes: list[dict[str, Any]]
) -> dict[str, Any]:
    """A node-critical DaemonSet in kube-system on exactly `pools`, on the node's network and PID namespace."""
    labels = {"app.kubernetes.io/name": name, "app.kubernetes.io/managed-by": "gpu-fleet"}
    term = {"matchExpressions": [{"key": "cloud.google.com/gke-nodepool", "operator": "In", "values": pools}]}
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": labels},
        "spec": {
            "selector": {"matchLabels": {"app.kubernetes.io/name": name}},
            "updateStrategy": {"type": "RollingUpdate"},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "priorityClassName": "system-node-critical",
                    "affinity": {
                        "nodeAffinity": {
                            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}
                        }
                    },
                    "tolerations": [{"operator": "Exists"}],
                    "hostNetwork": True,
                    "hostPID": True,
                    "volumes": volumes,
                    **({"initContainers": init} if init else {}),
                    "containers": [main],
                },
            },
        },
    }


def _host_path(name: str, path: str, kind: str = "DirectoryOrCreate") -> dict[str, Any]:
    return {"name": name, "hostPath": {"path": path, "type": kind}}


def _pause() -> dict[str, Any]:
    return {"name": "pause", "image": PAUSE_IMAGE, "resources": {"requests": {"cpu": "1m", "memory": "8Mi"}}}


def gib_installer(cluster: ClusterSpec, catalog: Catalog) -> list[dict[str, Any]]:
    """The installer DaemonSet for the gIB pools of a GKE cluster ([] when it has none, or is not on GKE)."""
    pools = gib_pools(cluster, catalog) if cluster.platform == "gke" else []
    if not pools:
        return []
    image = catalog.fabric_software("gib").gke_installer_image
    if not image:
        raise ValueError("catalog fabric_software.gib.gke_installer_image: required for gIB pools on GKE")
    install = {
        "name": "install",
        "image": image,
        "command": ["/bin/sh", "-c"],
        "args": [INSTALL],
        "resources": {"requests": {"cpu": "150m"}},
        "securityContext": {"privileged": True},
        "volumeMounts": [
            {"name": "nvidia-lib", "mountPath": "/usr/local" + HOST_NVIDIA_LIB},
            {"name": "gib", "mountPath": "/usr/local" + HOST_GIB},
        ],
    }
    volumes = [_host_path("nvidia-lib", HOST_NVIDIA_LIB), _host_path("gib", HOST_GIB)]
    return [_daemonset(NAME, pools, [install], _pause(), volumes)]


def _tcpxo(catalog: Catalog) -> FabricSoftware:
    fab = catalog.fabric_software("tcpxo")
    if not (fab and fab.nccl_plugin_image and fab.rxdm_image and fab.gke_device_injector_image and fab.aperture_pci):
        raise ValueError(
            "catalog fabric_software.tcpxo: nccl_plugin_image, rxdm_image, gke_device_injector_image and aperture_pci "
            "are required for TCPXO pools on GKE"
        )
    return fab


def tcpxo_software(cluster: ClusterSpec, catalog: Catalog) -> list[dict[str, Any]]:
    """The TCPXO installer and NRI device injector DaemonSets for the TCPXO pools of a GKE cluster ([] when it has
    none, or is not on GKE)."""
    pools = tcpxo_pools(cluster, catalog) if cluster.platform == "gke" else []
    if not pools:
        return []
    fab = _tcpxo(catalog)
    image = fab.gke_installer_image or fab.nccl_plugin_image
    apertures = {
        "name": "aperture-devices",
        "image": image,
        "command": ["nsenter", "--all", "--target", "1", "--", "sh", "-c"],
        "args": [aperture_script(fab)],
        "securityContext": {"privileged": True},
    }
    install = {
        "name": "install",
        "image": image,
        "command": ["/bin/sh", "-c"],
        "args": [TCPXO_INSTALL],
        "resources": {"requests": {"cpu": "150m"}},
        "securityContext": {"privileged": True},
        "volumeMounts": [{"name": "var-lib", "mountPath": "/var/lib"}, {"name": "host-bin", "mountPath": "/usr/local"}],
    }
    installer_volumes = [_host_path("var-lib", "/var/lib", "Directory"), _host_path("host-bin", HOST_BIN)]
    injector = {
        "name": "device-injector",
        "image": fab.gke_device_injector_image,
        "resources": {"requests": {"cpu": "150m"}},
        "securityContext": {"privileged": True},
        "volumeMounts": [{"name": "dev", "mountPath": "/dev"}, {"name": "nri", "mountPath": "/var/run/nri"}],
    }
    injector_volumes = [_host_path("dev", "/dev", "Directory"), _host_path("nri", "/var/run/nri", "Directory")]
    return [
        _daemonset(TCPXO_INSTALLER, pools, [apertures, install], _pause(), installer_volumes),
        _daemonset(DEVICE_INJECTOR, pools, [], injector, injector_volumes),
    ]


def _rxdm_devices(machine_gpus: int) -> str:
    """The injector's annotation value: the devices the RxDM sidecar gets (the GPUs, their control devices, the
    dmabuf import helper), one `- path:` line each, as upstream's examples write it."""
    paths = [f"/dev/nvidia{i}" for i in range(machine_gpus)] + ["/dev/nvidiactl", "/dev/nvidia-uvm"]
    return "".join(f"- path: {p}\n" for p in [*paths, "/dev/dmabuf_import_helper"])


def workload_pod(
    pool: NodePoolSpec, catalog: Catalog, networks: list[str], image: str, gpus: int | None = None
) -> dict[str, Any]:
    """A pod template (`PodTemplateSpec`) whose container `trainer` (`image`, `gpus` of the node's GPUs, default all)
    uses the pool's GPU fabric: the node networks `networks` (in NIC order, as `stacks.kube_plan.gke_networks` names
    them) as interfaces after eth0, and per fabric the plugin's mounts and environment (gIB) or the RxDM native
    sidecar with its devices, mounts and the aperture devices (TCPXO).  No node selector or tolerations: Kueue's
    ResourceFlavor of the pool adds them when it admits the workload.  ValueError for a pool with no fabric set up."""
    machine = catalog.machine(pool.machine_type)
    kind = machine.software.fabric
    if kind not in ("gib", "tcpxo") or not networks:
        raise ValueError(f"pool {pool.name} ({pool.machine_type}): no GPU fabric the GKE stack sets up")
    want = machine.gpu_count if gpus is None else gpus
    if not 1 <= want <= machine.gpu_count:
        raise ValueError(f"gpus: {pool.machine_type} has {machine.gpu_count} GPUs per node, got {want}")
    interfaces = [{"interfaceName": "eth0", "network": "default"}] + [
        {"interfaceName": f"eth{i}", "network": name} for i, name in enumerate(networks, start=1)
    ]
    annotations = {
        "networking.gke.io/default-interface": "eth0",
        "networking.gke.io/interfaces": json.dumps(interfaces),
    }
    trainer: dict[str, Any] = {
        "name": "trainer",
        "image": image,
        "resources": {"limits": {"nvidia.com/gpu": str(want)}},
    }
    nvidia = {"name": "nvidia-lib", "hostPath": {"path": HOST_NVIDIA_LIB, "type": "Directory"}}
    shm = {"name": "shm", "emptyDir": {"medium": "Memory"}}  # NCCL's shared memory between local ranks
    spec: dict[str, Any] = {}
    if kind == "gib":
        fab = catalog.fabric_software("gib")
        lib = fab.lib_dir or "/usr/local/gib/lib64"
        trainer["env"] = [{"name": "LD_LIBRARY_PATH", "value": f"/usr/local/nvidia/lib64:{lib}"}]
        trainer["volumeMounts"] = [
            {"name": "gib", "mountPath": "/usr/local/gib", "readOnly": True},
            {"name": "nvidia-lib", "mountPath": "/usr/local/nvidia/lib64", "readOnly": True},
            {"name": "shm", "mountPath": "/dev/shm"},
        ]
        spec["volumes"] = [{"name": "gib", "hostPath": {"path": HOST_GIB, "type": "Directory"}}, nvidia, shm]
    else:
        fab = _tcpxo(catalog)
        annotations[f"devices.gke.io/container.{RXDM_SIDECAR}"] = _rxdm_devices(machine.gpu_count)
        rxdm = fab.rxdm_image
        spec["initContainers"] = [
            {
                "name": RXDM_SIDECAR,
                "image": rxdm,
                "restartPolicy": "Always",
                "command": ["/bin/sh", "-c"],
                "args": [f"chmod 755 {RXDM_ENTRY} && exec {RXDM_ENTRY} {rxdm_flags(rxdm)}"],
                "securityContext": {"capabilities": {"add": ["NET_ADMIN", "NET_BIND_SERVICE"]}},
                "env": [{"name": "LD_LIBRARY_PATH", "value": "/usr/local/nvidia/lib64"}],
                "volumeMounts": [
                    {"name": "nvidia-lib", "mountPath": "/usr/local/nvidia/lib64", "readOnly": True},
                    {"name": "sys", "mountPath": "/hostsysfs"},
                    {"name": "proc-sys", "mountPath": "/hostprocsysfs"},
                ],
            }
        ]
        trainer["env"] = [
            {"name": "LD_LIBRARY_PATH", "value": "/usr/local/nvidia/lib64"},
            {"name": "NCCL_FASTRAK_LLCM_DEVICE_DIRECTORY", "value": APERTURE_DIR},
        ]
        trainer["volumeMounts"] = [
            {"name": "nvidia-lib", "mountPath": "/usr/local/nvidia/lib64", "readOnly": True},
            {"name": "aperture-devices", "mountPath": APERTURE_DIR},
            {"name": "shm", "mountPath": "/dev/shm"},
        ]
        spec["volumes"] = [
            nvidia,
            {"name": "sys", "hostPath": {"path": "/sys", "type": "Directory"}},
            {"name": "proc-sys", "hostPath": {"path": "/proc/sys", "type": "Directory"}},
            {"name": "aperture-devices", "hostPath": {"path": APERTURE_DIR, "type": "Directory"}},
            shm,
        ]
    return {"metadata": {"annotations": annotations}, "spec": {**spec, "containers": [trainer]}}
