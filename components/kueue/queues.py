"""Declare a cluster's Kueue objects (components.kueue.objects), after checking each against the real CRDs.

Nothing is declared when any object would be refused by the API server: `fleet.schemas.check_objects`
raises SchemaError naming the object and field first.  Team namespaces come first; every Kueue object
waits for the Kueue install (CRDs, webhook).
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi

from components.kubernetes.objects import KubeObject, declare
from components.kueue.objects import namespaces, queue_objects
from fleet.catalog import Catalog
from fleet.schemas import check_objects
from fleet.spec.model import ClusterSpec


@dataclass(frozen=True)
class KueueQueuesArgs:
    cluster: ClusterSpec
    catalog: Catalog


class KueueQueues(pulumi.ComponentResource):
    objects: dict[tuple[str, str | None, str], KubeObject]

    def __init__(
        self, name: str, args: KueueQueuesArgs, install: pulumi.Resource, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("gpufleet:kueue:Queues", name, None, opts)
        objs = queue_objects(args.cluster, args.catalog)
        check_objects(objs)  # before anything is declared
        child = pulumi.ResourceOptions(parent=self)
        self.objects = declare(name, namespaces(args.cluster), child)
        self.objects.update(declare(name, objs, child, after=[install, *self.objects.values()]))
        self.register_outputs({"objects": [f"{k}/{n}" for k, _, n in self.objects]})
