"""A stack spec whose autoscaler policy caps a pool that does not exist (`pool_max_nodes: {nosuchpool: 2}`) was
rendered and synthesized with the cap silently ignored: now every command that reads the spec refuses it (exit 2,
the file, the field, no traceback), as it refuses an unknown partition in `spot_queues`."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from tests.inputs.cli import assert_refused, fleet
from tests.inputs.specs import FLEET, stack_text
from tests.spec.test_kube_rules import GKE

SLURM_POLICY = "clusters[0].slurm.autoscaler.policy"
KUEUE_POLICY = "clusters[0].kueue.autoscaler.policy"


def _slurm_spec(field: str) -> dict:
    spec = copy.deepcopy(FLEET)
    spec["clusters"][0]["slurm"]["autoscaler"]["policy"][field] = {"nosuchpool": 2}
    return spec


def _kueue_spec() -> dict:
    spec = copy.deepcopy(GKE)
    spec["clusters"][0]["kueue"]["autoscaler"]["policy"] = {"pool_max_nodes": {"nosuchpool": 2}}
    return spec


@pytest.mark.parametrize("command", [("render", "spec"), ("synth",), ("policy", "check")], ids=" ".join)
@pytest.mark.parametrize(
    ("spec", "where"),
    [
        (_slurm_spec("pool_max_nodes"), f"{SLURM_POLICY}.pool_max_nodes"),
        (_slurm_spec("pool_max_gpus"), f"{SLURM_POLICY}.pool_max_gpus"),
        (_kueue_spec(), f"{KUEUE_POLICY}.pool_max_nodes"),
    ],
    ids=["slurm-nodes", "slurm-gpus", "kueue-nodes"],
)
def test_a_cap_on_an_unknown_pool_is_refused(tmp_path: Path, command: tuple[str, ...], spec: dict, where: str) -> None:
    path = tmp_path / "Pulumi.bad.yaml"
    path.write_text(stack_text(spec))
    out = fleet(*command, "--config", path)
    reason = "'nosuchpool' is not a pool of this cluster (its pools: "
    assert_refused(out, path, where, reason)  # policy check names the file too, as every command does


def test_a_cap_on_a_pool_of_the_cluster_passes(tmp_path: Path) -> None:
    spec = copy.deepcopy(FLEET)
    spec["clusters"][0]["slurm"]["autoscaler"]["policy"]["pool_max_nodes"] = {"spot": 2}
    path = tmp_path / "Pulumi.ok.yaml"
    path.write_text(stack_text(spec))
    out = fleet("render", "spec", "--config", path)
    assert out.code == 0, out.stderr
