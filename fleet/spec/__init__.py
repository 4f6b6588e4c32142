"""The fleet spec: one typed, validated description of a stack's GPU clusters.

`model` holds the schema (pydantic, field-level checks), `rules` the cross-field rules that need
the machine catalog, `load` reading a spec out of a Pulumi stack file with readable errors, and
`derive` the values (node names, zones, fabric subnets, bucket names) everyone must agree on.
"""

from fleet.spec.load import (
    SpecError,
    load_spec,
    load_stack_file,
    read_stack_config,
    spec_kind,
    stack_file,
)
from fleet.spec.model import (
    AutoscalerSpec,
    BucketSpec,
    ClusterSpec,
    FilestoreSpec,
    FleetSpec,
    LustreSpec,
    NetworkSpec,
    NodePoolSpec,
    SlurmPartitionSpec,
    SlurmSpec,
    StorageSpec,
)

__all__ = [
    "AutoscalerSpec",
    "BucketSpec",
    "ClusterSpec",
    "FilestoreSpec",
    "FleetSpec",
    "LustreSpec",
    "NetworkSpec",
    "NodePoolSpec",
    "SlurmPartitionSpec",
    "SlurmSpec",
    "SpecError",
    "StorageSpec",
    "load_spec",
    "load_stack_file",
    "read_stack_config",
    "spec_kind",
    "stack_file",
]
