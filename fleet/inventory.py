"""The autoscaler inventory: every pool the autoscaler may resize, as the stacks export it.

`stacks/` builds one `InventoryPool` per node pool and exports the list as the stack output
`autoscaler_inventory`; the daemon reads it back (from `pulumi stack output autoscaler_inventory
--json` or the `outputs` of `fleet synth --json`) with `load_inventory`.  This module is the one
definition of that JSON shape.
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from fleet.catalog import CapacityType


class InventoryPool(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)

    name: str  # pool name, unique within its cluster
    cluster: str
    provider: str  # "gcp" today
    project: str
    region: str
    zones: list[str]
    machine_type: str
    gpu_type: str  # accelerator type, e.g. nvidia-h100-mega-80gb
    gpus_per_node: int
    capacity_type: CapacityType
    reservation: str | None = None
    min_nodes: int
    max_nodes: int
    instance_group: str  # MIG name stem; the zonal MIG in zone Z is instance_groups[Z]
    instance_groups: dict[str, str] = Field(default_factory=dict)  # zone -> zonal MIG name
    instance_template: str | None = None
    node_name_prefix: str  # Slurm node / GCE instance names are f"{node_name_prefix}-{index}"
    slurm_nodeset: str | None = None
    slurm_partitions: list[str] = Field(default_factory=list)
    spot_tolerant: bool = False  # true when every partition this pool backs is spot-tolerant
    compact_placement: bool = False
    placement_policy: str | None = None


_LIST = TypeAdapter(list[InventoryPool])


def parse_inventory(data: object) -> list[InventoryPool]:
    """Accept the bare list, `{"autoscaler_inventory": [...]}` or a whole `fleet synth --json`."""
    if isinstance(data, dict):
        if "outputs" in data:
            data = data["outputs"]
        data = data.get("autoscaler_inventory", data)
    return _LIST.validate_python(data)


def load_inventory(path: Path) -> list[InventoryPool]:
    return parse_inventory(json.loads(Path(path).read_text()))
