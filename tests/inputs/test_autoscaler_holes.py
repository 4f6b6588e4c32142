"""Holes an audit found in the daemon's inputs, closed: `fleet autoscaler init` runs the checks `run` makes
(`autoscaler.daemon.build.check_config`) before it creates the store; the inventory is checked whole (duplicate
pools and node name spaces, the catalog's machine types, regions, zones and GPUs, reservations, unknown keys);
`policy.pool_max_nodes` names managed pools; and a node name is managed only with its index in canonical decimal
(`autoscaler.node_names`), in the Slurm hooks, `NameIndex` and the GCE actuator alike.  Each refusal: exit 2, the
file and the field, no traceback, no state store created."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.inputs.cli import Outcome, assert_refused, fleet
from tests.inputs.daemon import CONFIG, INVENTORY, VALID_CONFIG, VALID_INVENTORY, config_text, inventory_text

I0, I1 = "autoscaler_inventory[0]", "autoscaler_inventory[1]"
Mutation = Callable[[Any], Any]


def _inv(mutate: Mutation) -> str:
    pools = copy.deepcopy(INVENTORY)
    mutate(pools)
    return inventory_text(pools)


def _cfg(mutate: Mutation) -> str:
    cfg = copy.deepcopy(CONFIG)
    mutate(cfg)
    return config_text(cfg)


def _set(i: int, **fields: Any) -> Mutation:
    return lambda pools: pools[i].update(fields)


# (id, inventory text, field path, reason fragment)
INVENTORY_HOLES: list[tuple[str, str, str, str]] = [
    ("duplicate-pool", _inv(_set(1, name="od")), f"{I1}.name", "duplicate pool e2e/od (also autoscaler_inventory[0])"),
    ("duplicate-prefix", _inv(_set(1, node_name_prefix="e2e-od")), f"{I1}.node_name_prefix",
     "'e2e-od' is also the prefix of pool e2e/od"),
    ("gpus-zero", _inv(_set(0, gpus_per_node=0)), f"{I0}.gpus_per_node", "greater than or equal to 1"),
    ("gpus-not-the-machines", _inv(_set(0, gpus_per_node=3)), f"{I0}.gpus_per_node", "a3-highgpu-8g has 8 GPUs, not 3"),
    ("gpu-type-not-the-machines", _inv(_set(0, gpu_type="nvidia-l4")), f"{I0}.gpu_type",
     "a3-highgpu-8g carries nvidia-h100-80gb, not nvidia-l4"),
    ("machine-type-unknown", _inv(_set(0, machine_type="nope-1")), f"{I0}.machine_type",
     "unknown machine type 'nope-1'"),
    ("zones-empty", _inv(_set(0, zones=[], instance_groups={})), f"{I0}.zones", "lists no zone"),
    ("zone-of-another-region", _inv(_set(0, zones=["europe-west4-a"], instance_groups={})), f"{I0}.zones[0]",
     "zone 'europe-west4-a' is not in the pool's region 'us-central1'"),
    ("zone-not-offered", _inv(_set(0, zones=["us-central1-z"], instance_groups={})), f"{I0}.zones[0]",
     "a3-highgpu-8g is not offered in us-central1-z"),
    ("region-unknown", _inv(_set(0, region="mars-central1")), f"{I0}.region",
     "a3-highgpu-8g is not offered in 'mars-central1'"),
    ("reservation-unnamed", _inv(_set(0, capacity_type="reservation")), f"{I0}.reservation",
     "required with capacity_type: reservation"),
    ("reservation-on-on-demand", _inv(_set(0, reservation="r1")), f"{I0}.reservation",
     "capacity_type is on-demand: only a reservation pool has one"),
    ("mig-of-a-foreign-zone", _inv(_set(0, instance_groups={"europe-west4-a": "x"})),
     f"{I0}.instance_groups.europe-west4-a", "is not one of the pool's zones"),
    ("provider-aws", _inv(_set(0, provider="aws")), f"{I0}.provider", "must be 'gcp' for a platform: gce pool"),
    ("unknown-key", _inv(_set(0, extra=1)), f"{I0}.extra", "unknown field of an inventory pool"),
    ("empty", inventory_text([]), "autoscaler_inventory", "lists no pool"),
]  # fmt: skip

# (id, config text, field path, reason fragment): what `run` refused and `init` accepted, or nothing refused
CONFIG_HOLES: list[tuple[str, str, str, str]] = [
    ("idle-timeout-negative", _cfg(lambda c: c["policy"].update(idle_timeout_s=-1)), "policy.idle_timeout_s",
     "must be >= 0, got -1"),
    ("budget-negative", _cfg(lambda c: c["policy"].update(budget_usd_per_hour=-5)), "policy.budget_usd_per_hour",
     "must be >= 0, got -5"),
    ("pool-cap-negative", _cfg(lambda c: c["policy"].update(pool_max_nodes={"od": -3})),
     "policy.pool_max_nodes['od']", "must be >= 0, got -3"),
    ("pool-cap-misspelt", _cfg(lambda c: c["policy"].update(pool_max_nodes={"nosuchpool": 2})),
     "policy.pool_max_nodes", "'nosuchpool' is not a pool the daemon manages (its pools: od, spot)"),
    ("pool-gpu-cap-misspelt", _cfg(lambda c: c["policy"].update(pool_max_gpus={"od-": 8})),
     "policy.pool_max_gpus", "'od-' is not a pool the daemon manages"),
    ("provider-sim", _cfg(lambda c: c.update(provider={"kind": "sim"})), "provider.kind", "`fleet simulate`"),
    ("pools-unknown", _cfg(lambda c: c.update(pools=["nosuch"])), "pools", "not in the inventory: ['nosuch']"),
]  # fmt: skip


def _write(tmp_path: Path, inventory: str = VALID_INVENTORY, config: str = VALID_CONFIG) -> tuple[Path, Path]:
    inv, cfg = tmp_path / "inv.json", tmp_path / "autoscaler.yaml"
    inv.write_text(inventory)
    cfg.write_text(config)
    return inv, cfg


def _init(cfg: Path) -> Outcome:
    return fleet("autoscaler", "init", "--config", cfg)


def _run(cfg: Path) -> Outcome:
    return fleet("autoscaler", "run", "--config", cfg, "--once", "--dry-run")


@pytest.mark.parametrize(("name", "text", "where", "reason"), INVENTORY_HOLES, ids=[c[0] for c in INVENTORY_HOLES])
def test_inventory_hole_refused_by_init_and_run_creating_nothing(
    tmp_path: Path, name: str, text: str, where: str, reason: str
) -> None:
    inv, cfg = _write(tmp_path, inventory=text)
    for out in (_init(cfg), _run(cfg)):
        assert_refused(out, inv, where, reason)
        assert not (tmp_path / "state").exists()


@pytest.mark.parametrize(("name", "text", "where", "reason"), CONFIG_HOLES, ids=[c[0] for c in CONFIG_HOLES])
def test_config_hole_refused_by_init_and_run_naming_the_config(
    tmp_path: Path, name: str, text: str, where: str, reason: str
) -> None:
    _, cfg = _write(tmp_path, config=text)
    for out in (_init(cfg), _run(cfg)):
        assert_refused(out, cfg, where, reason)
        assert not out.stderr.startswith("config: "), out.stderr
        assert not (tmp_path / "state").exists()


def test_init_accepts_the_base_files_and_records_the_pools(tmp_path: Path) -> None:
    _, cfg = _write(tmp_path)
    out = _init(cfg)
    assert out.code == 0, out.stderr
    assert "2 managed pool(s) recorded" in out.stderr and (tmp_path / "state" / "autoscaler.db").is_file()


def test_prefixes_one_extending_another_do_not_clash(tmp_path: Path) -> None:
    """`e2e-od` and `e2e-od-x`: an index has no '-', so `e2e-od-x-1` is pool spot's and never pool od's."""
    from autoscaler.daemon.snapshot import NameIndex
    from autoscaler.model import Pool
    from fleet.inventory import parse_inventory

    text = _inv(_set(1, node_name_prefix="e2e-od-x"))
    _write(tmp_path, inventory=text)
    assert _init(tmp_path / "autoscaler.yaml").code == 0
    index = NameIndex([Pool.from_inventory(p) for p in parse_inventory(json.loads(text))])
    assert [getattr(index.pool_of(n), "name", None) for n in ("e2e-od-1", "e2e-od-x-1", "e2e-od-x")] == [
        "od",
        "spot",
        None,
    ]


# ---------------------------------------------------------------- node names: canonical indices only


def _queued(state: Path) -> list[tuple[str, str]]:
    from autoscaler.daemon.state import StateStore

    store = StateStore.read_only_copy(state)
    try:
        return [(r.action, r.name) for r in store.open_power()]
    finally:
        store.close()


@pytest.fixture
def state(tmp_path: Path) -> Path:
    """A store `fleet autoscaler init` made for pools od (`e2e-od-0..3`) and spot (`e2e-spot-0..3`)."""
    _, cfg = _write(tmp_path)
    assert _init(cfg).code == 0
    return tmp_path / "state" / "autoscaler.db"


def test_resume_of_a_zero_padded_name_is_refused_and_queues_nothing(state: Path) -> None:
    out = fleet("slurm", "resume", "--state", state, "e2e-od-0003")
    assert out.code == 2 and "Traceback" not in out.stderr, out.stderr
    assert "refused 1 node name(s) in no pool the autoscaler manages (e2e-od-0003)" in out.stderr
    assert _queued(state) == []


def test_suspend_of_a_padded_range_queues_only_canonical_names(state: Path) -> None:
    out = fleet("slurm", "suspend", "--state", state, "e2e-od-[01-1]")  # a padded range: e2e-od-01
    assert out.code == 2 and "refused 1 node name(s)" in out.stderr and "(e2e-od-01)" in out.stderr, out.stderr
    assert _queued(state) == []
    out = fleet("slurm", "suspend", "--state", state, "e2e-od-[01-02],e2e-od-2")
    assert out.code == 0 and "(e2e-od-01, e2e-od-02)" in out.stderr, out.stderr
    assert _queued(state) == [("suspend", "e2e-od-2")]


@pytest.mark.parametrize(
    ("name", "parsed"),
    [
        ("e2e-od-0", ("e2e-od", 0)),
        ("e2e-od-12", ("e2e-od", 12)),
        ("e2e-od-0003", None),
        ("e2e-od-00", None),
        ("e2e-od-+3", None),
        ("e2e-od-٣", None),  # an Arabic-Indic 3: str.isdigit() and int() take it
        ("e2e-od-", None),
        ("-3", None),
        ("e2e-od-1234567890", None),
    ],
)
def test_one_parser_reads_only_canonical_indices(name: str, parsed: tuple[str, int] | None) -> None:
    from autoscaler.gce.translate import invalid_names
    from autoscaler.node_names import split_node_name
    from autoscaler.planner.scale_down import name_index
    from autoscaler.slurm.handoff import managed

    assert split_node_name(name) == parsed
    assert managed(name, {"e2e-od": ("od", 10**10)}) is (parsed is not None)
    assert (invalid_names([name], "e2e-od") == []) is (parsed is not None and name.isascii())
    assert name_index(name) == (parsed[1] if parsed else 1 << 30)
