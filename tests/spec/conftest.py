"""A minimal valid fleet spec (raw dict) that every rule test mutates once."""

from __future__ import annotations

import copy
from typing import Any

import pytest

BASE: dict[str, Any] = {
    "project": "my-gpu-project",
    "region": "us-east4",
    "zones": ["us-east4-a", "us-east4-b"],
    "clusters": [
        {
            "name": "c1",
            "pools": [
                {
                    "name": "resv",
                    "machine_type": "a3-megagpu-8g",
                    "capacity": "reservation",
                    "reservation": "r1",
                    "zones": ["us-east4-a"],
                    "compact_placement": True,
                    "max_nodes": 4,
                },
                {"name": "spot", "machine_type": "a3-megagpu-8g", "capacity": "spot", "max_nodes": 4},
            ],
            "slurm": {
                "partitions": [
                    {"name": "main", "pools": ["resv"], "default": True},
                    {"name": "pre", "pools": ["spot"], "spot_tolerant": True},
                ]
            },
        }
    ],
}


@pytest.fixture
def base() -> dict[str, Any]:
    """A fresh deep copy of the minimal valid spec."""
    return copy.deepcopy(BASE)
