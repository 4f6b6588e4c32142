"""NVIDIA's GPU Operator from its official Helm chart at a pinned version: what gives the GPU nodes of an existing
cluster their driver, container toolkit and device plugin, so that a node shows `nvidia.com/gpu` in allocatable.

Source: NVIDIA, "Installing the NVIDIA GPU Operator" (docs.nvidia.com/datacenter/cloud-native/gpu-operator/latest/
getting-started.html; NVIDIA/cloud-native-docs gpu-operator/getting-started.rst, whose `${version}` is v26.7.0 in
its repo.toml): chart `gpu-operator` of the repository https://helm.ngc.nvidia.com/nvidia, version `v<YY.MM.PP>`,
operator and operands in one namespace, `gpu-operator`.  The provider fetches the chart at `pulumi up`; nothing
is fetched at synth or test time.  Every value set here is a key of the chart's values.yaml (NVIDIA/gpu-operator
deployments/gpu-operator/values.yaml at tag v26.7.0), the rest is the chart's default:

- `driver.enabled`, `toolkit.enabled`: the driver container and the NVIDIA Container Toolkit (both true by
  default).  A driver container on a node whose image already has a driver stands down by itself (its init
  container finds the driver and labels the node; "Pre-Installed NVIDIA GPU Drivers"), so the default works on
  either kind of image; `driver: false` never deploys it.  `toolkit: false` is for images that carry the toolkit
  with containerd set up for it (NVIDIA DGX OS).
- `nfd.enabled`: the chart bundles Node Feature Discovery, which labels NVIDIA nodes
  `feature.node.kubernetes.io/pci-10de.present=true`, the label the operator deploys its operands by.  NVIDIA: a
  cluster already running NFD must not get a second one (`nfd: false`); its NFD workers must then tolerate the
  pools' taints themselves.
- `daemonsets.tolerations`: the operands' DaemonSets (driver, toolkit, device plugin, GPU Feature Discovery, DCGM
  exporter, MIG manager, validator).  The chart's default tolerates `nvidia.com/gpu` only: the nodes of a spot pool,
  also tainted `gpu-fleet/spot=true:NoSchedule`, would get no device plugin.  The list replaces the default (Helm
  replaces lists), so it holds every taint a pool's nodes carry (`fleet.spec.kube.pool_tolerations`).
- `node-feature-discovery.worker.tolerations`: likewise for the NFD worker (the chart's default: the control plane
  and `nvidia.com/gpu`), kept with the control-plane toleration.

The operator's controller keeps the chart's placement (`operator.nodeSelector` kubernetes.io/os: linux, a
toleration and a preference for the control plane): it never lands on a GPU node, which it does not tolerate.
The namespace is declared here, labelled Pod Security `privileged` (enforce, audit, warn): the operands are
privileged, and NVIDIA asks for the label on a cluster that enforces Pod Security Admission (a harmless label on
one that does not).  `disable_openapi_validation`: a later `version` is upgraded through the chart's pre-upgrade
hook, which updates the CRDs; without the flag Helm checks the new ClusterPolicy against the old CRD first
(NVIDIA, "Upgrading the NVIDIA GPU Operator").

Ordering: nothing waits for the operator (the MachineDeployments, Kueue and the autoscaler go in beside it).
Until its operands run on a new node (the driver container builds the driver on first boot, minutes), the node is
Ready without `nvidia.com/gpu`: the autoscaler does not count it (`autoscaler/kube/source.py` node_ready), and the
ProvisioningRequest it was launched for waits, neither Provisioned nor Failed, until the GPUs show; Kueue admits
nothing onto it meanwhile.  Were the operator never Ready, that wait would never end.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from components.kubernetes.objects import KubeObject

CHART = "gpu-operator"
REPOSITORY = "https://helm.ngc.nvidia.com/nvidia"
NAMESPACE = "gpu-operator"
PRIVILEGED = {f"pod-security.kubernetes.io/{mode}": "privileged" for mode in ("enforce", "audit", "warn")}
#: the chart's own first NFD worker toleration (values.yaml node-feature-discovery.worker.tolerations)
CONTROL_PLANE_TOLERATION = {
    "key": "node-role.kubernetes.io/control-plane",
    "operator": "Equal",
    "value": "",
    "effect": "NoSchedule",
}


@dataclass(frozen=True)
class GpuOperatorArgs:
    version: str  # chart version == GPU Operator release, e.g. v26.7.0
    tolerations: list[dict[str, str]]  # every taint of the GPU nodes
    driver: bool = True
    toolkit: bool = True
    nfd: bool = True


def namespace_manifest() -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE, "labels": dict(PRIVILEGED)}}


def chart_values(args: GpuOperatorArgs) -> dict[str, Any]:
    """The chart values: the operands asked for, and tolerations of every GPU node taint (module docstring)."""
    values: dict[str, Any] = {
        "driver": {"enabled": args.driver},
        "toolkit": {"enabled": args.toolkit},
        "nfd": {"enabled": args.nfd},
        "daemonsets": {"tolerations": [dict(t) for t in args.tolerations]},
    }
    if args.nfd:
        worker = [dict(CONTROL_PLANE_TOLERATION), *(dict(t) for t in args.tolerations)]
        values["node-feature-discovery"] = {"worker": {"tolerations": worker}}
    return values


class GpuOperator(pulumi.ComponentResource):
    namespace: KubeObject
    release: k8s.helm.v3.Release

    def __init__(self, name: str, args: GpuOperatorArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpufleet:kubernetes:GpuOperator", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        self.namespace = KubeObject(f"{name}-namespace", namespace_manifest(), child)
        self.release = k8s.helm.v3.Release(
            name,
            name="gpu-operator",
            chart=CHART,
            repository_opts=k8s.helm.v3.RepositoryOptsArgs(repo=REPOSITORY),
            version=args.version,
            namespace=NAMESPACE,
            atomic=True,  # a failed install is rolled back
            disable_openapi_validation=True,  # upgrades go through the chart's CRD hook (module docstring)
            values=chart_values(args),
            opts=pulumi.ResourceOptions(parent=self, depends_on=[self.namespace]),
        )
        self.register_outputs({"version": args.version, "namespace": NAMESPACE})
