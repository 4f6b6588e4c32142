"""Kueue installed from its official Helm chart at a pinned version (the spec's `kueue.version`).

The chart (oci://registry.k8s.io/kueue/charts/kueue) carries the CRDs, the controller and its webhooks; the
provider fetches it at `pulumi up`, nothing is fetched at synth or test time.  Values: two controller
replicas on the system nodes, and the Configuration given (stacks.kueue_objects.manager_config: fair
sharing, job frameworks, waitForPodsReady).  The Kueue objects wait for this release (its CRDs and webhook)
before they are created.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pulumi
import pulumi_kubernetes as k8s

CHART = "oci://registry.k8s.io/kueue/charts/kueue"
KUEUE_NAMESPACE = "kueue-system"


@dataclass(frozen=True)
class KueueInstallArgs:
    version: str  # chart version == Kueue release, e.g. 0.14.3
    manager_config: str  # controller_manager_config.yaml
    node_selector: dict[str, str] = field(default_factory=dict)
    replicas: int = 2


class KueueInstall(pulumi.ComponentResource):
    release: k8s.helm.v3.Release

    def __init__(self, name: str, args: KueueInstallArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpufleet:kueue:Install", name, None, opts)
        controller: dict[str, object] = {"replicas": args.replicas}
        if args.node_selector:
            controller["nodeSelector"] = dict(args.node_selector)
        self.release = k8s.helm.v3.Release(
            name,
            name="kueue",
            chart=CHART,
            version=args.version,
            namespace=KUEUE_NAMESPACE,
            create_namespace=True,
            atomic=True,
            values={
                "controllerManager": controller,
                "managerConfig": {"controllerManagerConfigYaml": args.manager_config},
            },
            # the release waits for what the component waits for (e.g. the nodes it is scheduled on)
            opts=pulumi.ResourceOptions(parent=self, depends_on=opts.depends_on if opts else None),
        )
        self.register_outputs({"version": args.version})
