"""Declare a cluster's Kueue objects (manifests built by stacks.kueue_objects), after checking each against the
real CRDs.

Nothing is declared when any object would be refused by the API server: `fleet.schemas.check_objects`
raises SchemaError naming the object and field first.  Team namespaces come first; every Kueue object
waits for the Kueue install (CRDs, webhook).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi

from components.kubernetes.objects import KubeObject, declare
from fleet.schemas import check_objects


@dataclass(frozen=True)
class KueueQueuesArgs:
    namespaces: list[dict[str, Any]]  # the teams' Namespaces
    objects: list[dict[str, Any]]  # Kueue objects, in creation order


class KueueQueues(pulumi.ComponentResource):
    objects: dict[tuple[str, str | None, str], KubeObject]

    def __init__(
        self,
        name: str,
        args: KueueQueuesArgs,
        install: pulumi.Resource | None,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("gpufleet:kueue:Queues", name, None, opts)
        check_objects(args.objects)  # before anything is declared
        child = pulumi.ResourceOptions(parent=self, depends_on=opts.depends_on if opts else None)
        self.objects = declare(name, args.namespaces, child)
        self.objects.update(
            declare(name, args.objects, child, after=[*([install] if install else []), *self.objects.values()])
        )
        self.register_outputs({"objects": [f"{k}/{n}" for k, _, n in self.objects]})
