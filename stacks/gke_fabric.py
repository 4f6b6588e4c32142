"""The GPUDirect software a GKE cluster does not install by itself: the NCCL gIB plugin on RDMA nodes (pure).

A3 Ultra and A4 node pools get their RDMA NICs from GKE (`gpudirect_strategy: RDMA`, the additional node networks
and the `Network` objects pods name), but not the NCCL plugin that drives them: Google's instructions for
GPUDirect RDMA on GKE, and cluster-toolkit's GKE A3 Ultra / A4 blueprints, apply the `nccl-rdma-installer`
DaemonSet (GoogleCloudPlatform/container-engine-accelerators, gpudirect-rdma/).  Without it a multi-node NCCL job
finds no gIB plugin under /home/kubernetes/bin/gib and runs over the gVNIC at a fraction of the fabric's
bandwidth; nothing fails loudly.  The Slurm path installs the same plugin from apt at boot
(components/gcp/startup.py); GKE's Container-Optimized OS nodes have no apt, so an installer image copies it onto
the host.

`gib_installer(cluster, catalog)` is that DaemonSet for the cluster's gIB pools: in kube-system (a
`system-node-critical` pod is only admitted there), only on those node pools (`cloud.google.com/gke-nodepool`),
tolerating every taint (the GPU, spot and gpu-fleet taints), the installer image pinned in the catalog
(`fabric_software.gib.gke_installer_image`, the nccl-gib version the Slurm path installs) as an init container,
then a pause container pinned by digest.  Upstream's extra init container, which only silences the kernel's
martian-packet log on the RDMA interfaces, runs an unpinned `alpine:latest` and is left out.

A workload uses the plugin by mounting /home/kubernetes/bin/gib (and /home/kubernetes/bin/nvidia/lib64 in its
library path) and sourcing `/usr/local/gib/scripts/set_nccl_env.sh` from the gib mount (docs/kubernetes.md).

Pools of GPUDirect-TCPX(O) machines (A3 High 8g, A3 Mega) on GKE would need GKE's TCPX(O) installer, its NRI
device injector and an RxDM sidecar in every pod; the stack sets none of them up, so their multi-node NCCL runs
over the gVNIC.  `tcpx_pools` names them and the stack says so at `pulumi up` (a warning: single-node work on
them is unaffected)."""

from __future__ import annotations

from typing import Any

from fleet.catalog import Catalog
from fleet.spec.model import ClusterSpec

NAMESPACE = "kube-system"
NAME = "gpu-fleet-nccl-gib-installer"
#: where the installer leaves the plugin on the host, and where workloads mount it from
HOST_GIB = "/home/kubernetes/bin/gib"
HOST_NVIDIA_LIB = "/home/kubernetes/bin/nvidia/lib64"
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


def gib_pools(cluster: ClusterSpec, catalog: Catalog) -> list[str]:
    """The cluster's node pools whose machines use the gIB NCCL plugin (A3 Ultra, A4), in spec order."""
    return [p.name for p in cluster.pools if catalog.machine(p.machine_type).software.fabric == "gib"]


def tcpx_pools(cluster: ClusterSpec, catalog: Catalog) -> list[str]:
    """The cluster's node pools of GPUDirect-TCPX(O) machines (their fabric software is not set up on GKE), where
    they can hold a multi-node job: [] when those pools hold one node in all (nothing to warn about)."""
    pools = [p for p in cluster.pools if catalog.machine(p.machine_type).fabric_not_set_up_on_gke]
    return [p.name for p in pools] if sum(p.max_nodes for p in pools) > 1 else []


def gib_installer(cluster: ClusterSpec, catalog: Catalog) -> list[dict[str, Any]]:
    """The installer DaemonSet for the gIB pools of a GKE cluster ([] when it has none, or is not on GKE)."""
    pools = gib_pools(cluster, catalog) if cluster.platform == "gke" else []
    if not pools:
        return []
    image = catalog.fabric_software("gib").gke_installer_image
    if not image:
        raise ValueError("catalog fabric_software.gib.gke_installer_image: required for gIB pools on GKE")
    labels = {"app.kubernetes.io/name": NAME, "app.kubernetes.io/managed-by": "gpu-fleet"}
    selector = {"matchLabels": {"app.kubernetes.io/name": NAME}}
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "cloud.google.com/gke-nodepool", "operator": "In", "values": pools}]}
                ]
            }
        }
    }
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
    pause = {"name": "pause", "image": PAUSE_IMAGE, "resources": {"requests": {"cpu": "1m", "memory": "8Mi"}}}
    return [
        {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": {"name": NAME, "namespace": NAMESPACE, "labels": labels},
            "spec": {
                "selector": selector,
                "updateStrategy": {"type": "RollingUpdate"},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "priorityClassName": "system-node-critical",
                        "affinity": affinity,
                        "tolerations": [{"operator": "Exists"}],
                        "hostNetwork": True,
                        "hostPID": True,
                        "volumes": [
                            {"name": "nvidia-lib", "hostPath": {"path": HOST_NVIDIA_LIB, "type": "DirectoryOrCreate"}},
                            {"name": "gib", "hostPath": {"path": HOST_GIB, "type": "DirectoryOrCreate"}},
                        ],
                        "initContainers": [install],
                        "containers": [pause],
                    },
                },
            },
        }
    ]
