"""The GPUDirect software a GKE cluster does not install by itself, and what a workload adds to use it (pure).

GKE gives A3 High, A3 Mega, A3 Ultra and A4 node pools their GPU NICs (the additional node networks and the `Network`
objects pods name; `gpudirect_strategy: RDMA` on the RDMA machines) but not the software that drives them.  Without it
a multi-node NCCL job runs over the gVNIC at a fraction of the fabric's bandwidth, and nothing fails loudly.  Google's
GKE instructions and cluster-toolkit's GKE blueprints apply manifests from GoogleCloudPlatform/container-engine-
accelerators; the stack declares its own versions of them, on exactly the pools that need them (by
`cloud.google.com/gke-nodepool`), tolerating every taint, in kube-system (a `system-node-critical` pod is only admitted
there), from images the catalog pins (the Slurm path's, where it sets the same fabric up), then a pause container
pinned by digest.  Which fabric a machine gets is `MachineType.gke_fabric`.

- **gIB (A3 Ultra, A4)**: `gpu-fleet-nccl-gib-installer` (upstream `gpudirect-rdma/nccl-rdma-installer.yaml`): the
  `nccl-plugin-gib` image copies the plugin and its NCCL to /home/kubernetes/bin/gib and /home/kubernetes/bin/nvidia
  /lib64.  Upstream's extra init container, which only silences the kernel's martian-packet log on the RDMA
  interfaces, runs an unpinned `alpine:latest` and is left out.
- **GPUDirect-TCPXO (A3 Mega)**: `gpu-fleet-nccl-tcpxo-installer` (upstream `gpudirect-tcpxo/nccl-tcpxo-installer
  .yaml`).  Its first init container enters the node's namespaces (`nsenter` into PID 1, as upstream does) and runs
  `aperture_script`: loads the dmabuf import helper and bind-mounts each aperture PCI function's sysfs directory
  under /dev/aperture_devices, world-readable with writable `resource*` files, as the Slurm path's udev rule does; it
  fails the pod (Init:Error, visible in `kubectl get pods -n kube-system`) when the node shows fewer aperture devices
  than the machine has GPU NICs, where upstream's loop would find none and go on.  Upstream runs it from an unpinned
  `ubuntu` image; here it is the pinned plugin image (Ubuntu-based: `nsenter` is in util-linux, an essential
  package).  Upstream also inserts `iptables -I INPUT -p tcp -j ACCEPT` on the node, which opens every TCP port of
  the host; it is left out: the GPU NICs are moved into the pods' network namespaces (`deviceMode: NetDevice`), so
  the node's INPUT chain never sees their traffic, and pods' own traffic is not the node's INPUT either.  Hence: run
  TCPX(O) workloads without `hostNetwork`, as upstream's `nccl-test-unprivileged-without-hostnetwork.yaml` does.  The
  second init container runs the plugin image's own installer and copies NCCL and the plugin next to the driver's
  libraries in /home/kubernetes/bin/nvidia/lib64.
- **GPUDirect-TCPX (A3 High 8g)**: `gpu-fleet-nccl-tcpx-installer` (upstream `gpudirect-tcpx/nccl-tcpx-installer
  .yaml`): the same copy from its own plugin image.  GKE's node image supports TCPX, which the Slurm path's cannot
  (`MachineType.fabric_not_set_up`); the versions are the pair Google's TCPX release notes qualify, with their NCCL
  settings (`fabric_software.tcpx` in the catalog).
- **Both**: `gpu-fleet-nri-device-injector` (upstream `nri_device_injector/nri-device-injector.yaml`, its image
  pinned by upstream's digest), which hands the RxDM sidecar the GPUs a pod's annotation names.

Every TCPX(O) workload pod also needs the receive-datapath manager (RxDM) as a sidecar, its GPU devices handed to it
by the injector through an annotation, the GPU networks as interfaces, and TCPXO's aperture devices or TCPX's socket
directory mounted: `workload_pod` gives those pieces for a pool (`fleet render gpudirect-pod`; docs/kubernetes.md).
The sidecar is a native sidecar (an init container with `restartPolicy: Always`, Kubernetes 1.29+), so a Job's pod
ends when its trainer does.  A TCPX(O) pod takes its node whole: the GPU NICs move into that one pod."""

from __future__ import annotations

import json
from typing import Any

from components.gcp.startup import rxdm_flags
from fleet.catalog import Catalog, FabricSoftware
from fleet.catalog.model import GkeFabricSetup
from fleet.spec.kube import GKE_NODEPOOL_LABEL
from fleet.spec.model import ClusterSpec, NodePoolSpec

NAMESPACE = "kube-system"
NAME = "gpu-fleet-nccl-gib-installer"
TCPX_INSTALLER = "gpu-fleet-nccl-tcpx-installer"
TCPXO_INSTALLER = "gpu-fleet-nccl-tcpxo-installer"
DEVICE_INJECTOR = "gpu-fleet-nri-device-injector"
#: where the installers leave the plugins on the host, and where workloads mount them from
HOST_BIN = "/home/kubernetes/bin"
HOST_GIB = f"{HOST_BIN}/gib"
HOST_NVIDIA_LIB = f"{HOST_BIN}/nvidia/lib64"
#: where the trainer finds the driver's libraries and what the TCPX(O) installers copy beside them
TRAINER_NVIDIA_LIB = "/usr/local/nvidia/lib64"
#: what the trainer sources before NCCL starts, per fabric: the NCCL settings upstream calls required (gIB's
#: set_nccl_env.sh; the TCPXO plugin's nccl-env-profile.sh, which the installer copies next to the driver's
#: libraries and which stops a shell without NCCL_LIB_DIR: container-engine-accelerators gpudirect-tcpxo/README.md,
#: "NCCL configs").  TCPX's settings are the pod's env itself (`FabricSoftware.nccl_env`).
NCCL_ENV_SCRIPT = {"gib": "/usr/local/gib/scripts/set_nccl_env.sh", "tcpxo": "${NCCL_LIB_DIR}/nccl-env-profile.sh"}
#: where the TCPXO plugin finds the aperture devices (its `NCCL_FASTRAK_LLCM_DEVICE_DIRECTORY`), node and pod alike
APERTURE_DIR = "/dev/aperture_devices"
#: the RxDM sidecar's name per fabric: the NRI device injector's annotation names the container it hands the GPUs to
RXDM_SIDECAR = {"tcpx": "tcpx-daemon", "tcpxo": "tcpxo-daemon"}
#: TCPX: the RxDM binary and its flags (Google's GKE TCPX instructions and upstream's
#: gpudirect-tcpx/nccl-test-unprivileged-without-hostnetwork.yaml; the last argument carries its quotes as written
#: there), and the directory of the Unix sockets it serves NCCL on, shared with the trainer
TCPX_SOCKET_DIR = "/run/tcpx"
TCPX_RXDM = "/tcpgpudmarxd/build/app/tcpgpudmarxd"
TCPX_RXDM_FLAGS = ("--gpu_nic_preset", "a3vm", "--gpu_shmem_type", "fd", "--uds_path", TCPX_SOCKET_DIR,
                   "--setup_param", '\\"--verbose 128 2 0 \\"')  # fmt: skip
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


def tcpx_install(kind: str) -> str:
    """The TCPX(O) plugin image's installer (upstream's manifests): NCCL and the plugin under /var/lib/<kind>/lib64
    (the node's /var/lib), copied next to the driver's libraries (the node's /home/kubernetes/bin at /usr/local)."""
    return (
        "set -ex\n"
        "chmod 755 /scripts/container_entry.sh\n"
        "/scripts/container_entry.sh install --install-nccl\n"
        "mkdir -p /usr/local/nvidia/lib64\n"
        f"cp -r /var/lib/{kind}/lib64/. /usr/local/nvidia/lib64\n"
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


def fabric_pools(cluster: ClusterSpec, catalog: Catalog, kind: GkeFabricSetup) -> list[str]:
    """The cluster's node pools whose machines' GPU fabric the GKE stack sets up as `kind`
    (`MachineType.gke_fabric`), in spec order."""
    return [p.name for p in cluster.pools if catalog.machine(p.machine_type).gke_fabric == kind]


def fabric_software(cluster: ClusterSpec, catalog: Catalog) -> list[dict[str, Any]]:
    """Every DaemonSet the cluster's GPU fabrics need ([] off GKE, or with no GPUDirect pool)."""
    if cluster.platform != "gke":
        return []
    return gib_installer(cluster, catalog) + tcpx_software(cluster, catalog)


def _daemonset(
    name: str, pools: list[str], init: list[dict[str, Any]], main: dict[str, Any], volumes: list[dict[str, Any]]
) -> dict[str, Any]:
    """A node-critical DaemonSet in kube-system on exactly `pools`, on the node's network and PID namespace."""
    labels = {"app.kubernetes.io/name": name, "app.kubernetes.io/managed-by": "gpu-fleet"}
    term = {"matchExpressions": [{"key": GKE_NODEPOOL_LABEL, "operator": "In", "values": pools}]}
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
    """A hostPath volume: `DirectoryOrCreate` where the pod writes first, `Directory` where the node must have it."""
    return {"name": name, "hostPath": {"path": path, "type": kind}}


def _pause() -> dict[str, Any]:
    return {"name": "pause", "image": PAUSE_IMAGE, "resources": {"requests": {"cpu": "1m", "memory": "8Mi"}}}


def gib_installer(cluster: ClusterSpec, catalog: Catalog) -> list[dict[str, Any]]:
    """The installer DaemonSet for the gIB pools of a GKE cluster ([] when it has none, or is not on GKE)."""
    pools = fabric_pools(cluster, catalog, "gib") if cluster.platform == "gke" else []
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


def _tcpx(catalog: Catalog, kind: GkeFabricSetup) -> FabricSoftware:
    fab = catalog.fabric_software(kind)
    needs = ["nccl_plugin_image", "rxdm_image", "gke_device_injector_image"] + (
        ["aperture_pci"] if kind == "tcpxo" else []
    )
    if fab is None or not all(getattr(fab, field) for field in needs):
        raise ValueError(f"catalog fabric_software.{kind}: {', '.join(needs)} are required for {kind} pools on GKE")
    return fab


def tcpx_software(cluster: ClusterSpec, catalog: Catalog) -> list[dict[str, Any]]:
    """The plugin installers of the TCPX and TCPXO pools of a GKE cluster, and the NRI device injector on all of
    them ([] when it has none, or is not on GKE)."""
    if cluster.platform != "gke":
        return []
    out: list[dict[str, Any]] = []
    injected: dict[str, list[str]] = {}  # injector image -> the pools it runs on
    for kind, name in (("tcpx", TCPX_INSTALLER), ("tcpxo", TCPXO_INSTALLER)):
        pools = fabric_pools(cluster, catalog, kind)
        if not pools:
            continue
        fab = _tcpx(catalog, kind)
        image = fab.gke_installer_image or fab.nccl_plugin_image
        init = []
        if kind == "tcpxo":
            init.append(
                {
                    "name": "aperture-devices",
                    "image": image,
                    "command": ["nsenter", "--all", "--target", "1", "--", "sh", "-c"],
                    "args": [aperture_script(fab)],
                    "securityContext": {"privileged": True},
                }
            )
        init.append(
            {
                "name": "install",
                "image": image,
                "command": ["/bin/sh", "-c"],
                "args": [tcpx_install(kind)],
                "resources": {"requests": {"cpu": "150m"}},
                "securityContext": {"privileged": True},
                "volumeMounts": [
                    {"name": "var-lib", "mountPath": "/var/lib"},
                    {"name": "host-bin", "mountPath": "/usr/local"},
                ],
            }
        )
        volumes = [_host_path("var-lib", "/var/lib", "Directory"), _host_path("host-bin", HOST_BIN)]
        out.append(_daemonset(name, pools, init, _pause(), volumes))
        injected.setdefault(str(fab.gke_device_injector_image), []).extend(pools)
    if len(injected) > 1:
        raise ValueError(
            "catalog fabric_software.tcpx and .tcpxo: one NRI device injector runs on both, pin the same "
            f"gke_device_injector_image (got {', '.join(sorted(injected))})"
        )
    for image, pools in injected.items():
        injector = {
            "name": "device-injector",
            "image": image,
            "resources": {"requests": {"cpu": "150m"}},
            "securityContext": {"privileged": True},
            "volumeMounts": [{"name": "dev", "mountPath": "/dev"}, {"name": "nri", "mountPath": "/var/run/nri"}],
        }
        volumes = [_host_path("dev", "/dev", "Directory"), _host_path("nri", "/var/run/nri", "Directory")]
        out.append(_daemonset(DEVICE_INJECTOR, pools, [], injector, volumes))
    return out


def _rxdm_devices(machine_gpus: int, kind: str) -> str:
    """The injector's annotation value: the devices the RxDM sidecar gets (the GPUs and their control devices, and
    TCPXO's dmabuf import helper), one `- path:` line each, as upstream's examples write it."""
    paths = [f"/dev/nvidia{i}" for i in range(machine_gpus)] + ["/dev/nvidiactl", "/dev/nvidia-uvm"]
    paths += ["/dev/dmabuf_import_helper"] if kind == "tcpxo" else []
    return "".join(f"- path: {p}\n" for p in paths)


def _nvidia_mount() -> dict[str, Any]:
    """The driver's libraries and the plugin the installers put next to them, read-only."""
    return {"name": "nvidia-lib", "mountPath": TRAINER_NVIDIA_LIB, "readOnly": True}


def _shm_mount() -> dict[str, Any]:
    return {"name": "shm", "mountPath": "/dev/shm"}


def _gib_pieces(catalog: Catalog) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """gIB: (trainer env, trainer mounts, volumes): the plugin where the installer leaves it."""
    lib = catalog.fabric_software("gib").lib_dir or "/usr/local/gib/lib64"
    env = [{"name": "LD_LIBRARY_PATH", "value": f"/usr/local/nvidia/lib64:{lib}"}]
    mounts = [{"name": "gib", "mountPath": "/usr/local/gib", "readOnly": True}, _nvidia_mount(), _shm_mount()]
    return env, mounts, [_host_path("gib", HOST_GIB, "Directory")]


def _rxdm_sidecar(fab: FabricSoftware) -> dict[str, Any]:
    """The receive-datapath manager as a native sidecar (module doc), as upstream's examples run it per fabric."""
    rxdm = str(fab.rxdm_image)
    mounts = [
        _nvidia_mount(),
        {"name": "sys", "mountPath": "/hostsysfs"},
        {"name": "proc-sys", "mountPath": "/hostprocsysfs"},
    ]
    sidecar: dict[str, Any] = {"name": RXDM_SIDECAR[fab.kind], "image": rxdm, "restartPolicy": "Always"}
    if fab.kind == "tcpxo":
        sidecar["command"] = ["/bin/sh", "-c"]
        sidecar["args"] = [f"chmod 755 {RXDM_ENTRY} && exec {RXDM_ENTRY} {rxdm_flags(rxdm)}"]
        caps = ["NET_ADMIN", "NET_BIND_SERVICE"]
    else:  # TCPX: the daemon itself, its flags as Google's GKE TCPX instructions give them (the quotes included)
        sidecar["command"] = [TCPX_RXDM, *TCPX_RXDM_FLAGS]
        caps = ["NET_ADMIN"]
        mounts.append({"name": "tcpx-socket", "mountPath": TCPX_SOCKET_DIR})
    sidecar["securityContext"] = {"capabilities": {"add": caps}}
    sidecar["env"] = [{"name": "LD_LIBRARY_PATH", "value": TRAINER_NVIDIA_LIB}]
    sidecar["volumeMounts"] = mounts
    return sidecar


class PodTemplateError(ValueError):
    """A pod template `workload_pod` cannot make: `argument` names what is wrong (`pool`, `gpus`), `reason` why."""

    def __init__(self, argument: str, reason: str) -> None:
        super().__init__(f"{argument}: {reason}")
        self.argument, self.reason = argument, reason


def workload_pod(
    pool: NodePoolSpec, catalog: Catalog, networks: list[str], image: str, gpus: int | None = None
) -> dict[str, Any]:
    """A pod template (`PodTemplateSpec`) whose container `trainer` (`image`, `gpus` of the node's GPUs, default all)
    uses the pool's GPU fabric: the node networks `networks` (in NIC order, as `stacks.kube_plan.gke_networks` names
    them) as interfaces after eth0, and per fabric the plugin's mounts and environment (gIB), or the RxDM native
    sidecar with its devices and mounts, the NCCL environment and TCPXO's aperture devices or TCPX's socket directory
    (TCPX, TCPXO).  No node selector or tolerations: Kueue's ResourceFlavor of the pool adds them when it admits the
    workload.  PodTemplateError for a pool with no fabric set up, or a TCPX(O) pod asking part of a node."""
    machine = catalog.machine(pool.machine_type)
    kind = machine.gke_fabric
    if kind == "none" or not networks:
        raise PodTemplateError("pool", f"{pool.name} ({pool.machine_type}) has no GPU fabric the GKE stack sets up")
    want = machine.gpu_count if gpus is None else gpus
    if not 1 <= want <= machine.gpu_count:
        raise PodTemplateError("gpus", f"{pool.machine_type} has {machine.gpu_count} GPUs per node, got {want}")
    if kind != "gib" and want != machine.gpu_count:
        raise PodTemplateError(
            "gpus",
            f"a GPUDirect-{kind.upper()} pod takes the whole {pool.machine_type} node (its GPU NICs move into that one "
            f"pod, and its RxDM sidecar drives all {machine.gpu_count} GPUs), got {want}",
        )
    interfaces = [{"interfaceName": "eth0", "network": "default"}] + [
        {"interfaceName": f"eth{i}", "network": name} for i, name in enumerate(networks, start=1)
    ]
    annotations = {
        "networking.gke.io/default-interface": "eth0",
        "networking.gke.io/interfaces": json.dumps(interfaces),
    }
    shm = {"name": "shm", "emptyDir": {"medium": "Memory"}}  # NCCL's shared memory between local ranks
    nvidia = _host_path("nvidia-lib", HOST_NVIDIA_LIB, "Directory")
    spec: dict[str, Any] = {}
    if kind == "gib":
        env, mounts, volumes = _gib_pieces(catalog)
    else:
        fab = _tcpx(catalog, kind)
        annotations[f"devices.gke.io/container.{RXDM_SIDECAR[kind]}"] = _rxdm_devices(machine.gpu_count, kind)
        spec["initContainers"] = [_rxdm_sidecar(fab)]
        env = [{"name": "LD_LIBRARY_PATH", "value": TRAINER_NVIDIA_LIB}]
        volumes = [_host_path("sys", "/sys", "Directory"), _host_path("proc-sys", "/proc/sys", "Directory")]
        if kind == "tcpxo":
            env.append({"name": "NCCL_FASTRAK_LLCM_DEVICE_DIRECTORY", "value": APERTURE_DIR})
            env.append({"name": "NCCL_LIB_DIR", "value": TRAINER_NVIDIA_LIB})  # what NCCL_ENV_SCRIPT needs
            mounts = [_nvidia_mount(), {"name": "aperture-devices", "mountPath": APERTURE_DIR}, _shm_mount()]
            volumes.append(_host_path("aperture-devices", APERTURE_DIR, "Directory"))
        else:
            env.append({"name": "NCCL_GPUDIRECTTCPX_UNIX_CLIENT_PREFIX", "value": TCPX_SOCKET_DIR})
            env += [{"name": k, "value": v} for k, v in fab.nccl_env]
            mounts = [_nvidia_mount(), {"name": "tcpx-socket", "mountPath": TCPX_SOCKET_DIR}, _shm_mount()]
            volumes.append(_host_path("tcpx-socket", TCPX_SOCKET_DIR))
    trainer = {
        "name": "trainer",
        "image": image,
        "resources": {"limits": {"nvidia.com/gpu": str(want)}},
        "env": env,
        "volumeMounts": mounts,
    }
    spec["volumes"] = [*volumes, nvidia, shm]
    return {"metadata": {"annotations": annotations}, "spec": {**spec, "containers": [trainer]}}
