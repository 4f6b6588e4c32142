"""GPU machine catalog: hardware facts, zones and list prices, loaded from versioned data files.

The data lives next to this module (``data/``): ``gcp_machines.yaml`` (hand-kept hardware facts,
sources in its header), ``gcp_prices.csv`` and ``gcp_zones.csv`` (derived from public price lists
by ``scripts/derive_catalog.py``, which cites them).  Everything else reads the catalog through
:func:`load_catalog`.
"""

from fleet.catalog.model import (
    DEFAULT_READY_S,
    CapacityType,
    Catalog,
    FabricSoftware,
    GpuSoftware,
    GpuSpec,
    MachineType,
    NicLayout,
    Price,
    UnknownMachineType,
    load_catalog,
    machine_family,
)

__all__ = [
    "DEFAULT_READY_S",
    "CapacityType",
    "Catalog",
    "FabricSoftware",
    "GpuSoftware",
    "GpuSpec",
    "MachineType",
    "NicLayout",
    "Price",
    "UnknownMachineType",
    "load_catalog",
    "machine_family",
]
