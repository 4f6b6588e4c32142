"""Kueue installed from its official Helm chart at a pinned version (the spec's `kueue.version`).

The chart (oci://registry.k8s.io/kueue/charts/kueue) carries the CRDs, the controller and its webhooks; the
provider fetches it at `pulumi up`, nothing is fetched at synth or test time.  Values: two controller
replicas on the system nodes, and the Configuration given (stacks.kueue_objects.manager_config: fair
sharing, job frameworks, waitForPodsReady).  The Kueue objects wait for this release (its CRDs and webhook)
before they are created.

JobSet (`jobset_version`, its official chart oci://registry.k8s.io/jobset/charts/jobset in jobset-system), which
multi-node training is submitted as, is installed first: Kueue releases of 2024 set a job integration up only if
its API was there when the manager started (newer ones, 0.14 included, defer it until the API appears).

`crds` are CustomResourceDefinitions Kueue needs from elsewhere, declared before the release: the
ProvisioningRequest API on a cluster that does not serve it.  Kueue's manager looks for that API once, when it
starts ("Skipping admission check controller setup: Provisioning Requests not supported", Kueue's
`SetupIndexes`), and without it the ProvisioningRequest admission check never becomes active, and with it every
ClusterQueue that uses the check.  They are kept on delete: deleting a CRD deletes every object of its kind.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from components.kubernetes.objects import KubeObject

CHART = "oci://registry.k8s.io/kueue/charts/kueue"
KUEUE_NAMESPACE = "kueue-system"
JOBSET_CHART = "oci://registry.k8s.io/jobset/charts/jobset"
JOBSET_NAMESPACE = "jobset-system"


@dataclass(frozen=True)
class KueueInstallArgs:
    version: str  # chart version == Kueue release, e.g. 0.14.8
    manager_config: str  # controller_manager_config.yaml
    node_selector: dict[str, str] = field(default_factory=dict)
    replicas: int = 2
    crds: list[dict[str, Any]] = field(default_factory=list)  # declared before the release, kept on delete
    jobset_version: str | None = None  # JobSet's chart, installed before Kueue (None: not installed)


class KueueInstall(pulumi.ComponentResource):
    release: k8s.helm.v3.Release
    crds: list[KubeObject]
    jobset: k8s.helm.v3.Release | None

    def __init__(self, name: str, args: KueueInstallArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpufleet:kueue:Install", name, None, opts)
        self.crds = [
            KubeObject(
                f"{name}-crd-{crd['metadata']['name']}",
                crd,
                pulumi.ResourceOptions(parent=self, retain_on_delete=True, depends_on=self._after(opts)),
            )
            for crd in args.crds
        ]
        self.jobset = None
        if args.jobset_version:
            self.jobset = self._chart(
                f"{name}-jobset", "jobset", JOBSET_CHART, args.jobset_version, JOBSET_NAMESPACE, {}, self._after(opts)
            )
        controller: dict[str, object] = {"replicas": args.replicas}
        if args.node_selector:
            controller["nodeSelector"] = dict(args.node_selector)
        values = {
            "controllerManager": controller,
            "managerConfig": {"controllerManagerConfigYaml": args.manager_config},
        }
        # the release waits for what the component waits for (e.g. the nodes it is scheduled on), the CRDs and JobSet
        after = [*self._after(opts), *self.crds, *([self.jobset] if self.jobset else [])]
        self.release = self._chart(name, "kueue", CHART, args.version, KUEUE_NAMESPACE, values, after)
        self.register_outputs(
            {
                "version": args.version,
                "jobset_version": args.jobset_version,
                "crds": [c["metadata"]["name"] for c in args.crds],
            }
        )

    def _chart(
        self,
        name: str,
        release: str,
        chart: str,
        version: str,
        namespace: str,
        values: dict[str, Any],
        after: list[Any],
    ) -> k8s.helm.v3.Release:
        """An official chart at a pinned version, atomic (a failed install is rolled back), in its own namespace."""
        return k8s.helm.v3.Release(
            name,
            name=release,
            chart=chart,
            version=version,
            namespace=namespace,
            create_namespace=True,
            atomic=True,
            values=values,
            opts=pulumi.ResourceOptions(parent=self, depends_on=after),
        )

    @staticmethod
    def _after(opts: pulumi.ResourceOptions | None) -> list[Any]:
        deps = opts.depends_on if opts else None
        if deps is None:
            return []
        return list(deps) if isinstance(deps, list | tuple) else [deps]
