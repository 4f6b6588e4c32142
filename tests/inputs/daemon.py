"""Malformed daemon configs, inventories, traces and hostlists: each case is a file (or argument) and the place
the error must name (`field.path`, `LINE` / `LINE:COL`, or "" for the file as a whole), with a reason fragment."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import yaml

from tests.e2e.env import inventory


@dataclass(frozen=True)
class FileCase:
    id: str
    text: str | bytes
    where: str
    reason: str

    def __str__(self) -> str:
        return self.id


CONFIG: dict[str, Any] = {
    "inventory": "inv.json",
    "state_path": "state/autoscaler.db",
    "policy": {"idle_timeout_s": 600, "budget_usd_per_hour": 2000, "spot_queues": ["batch"]},
    "slurm": {"mode": "cli", "timeout_s": 10},
    "metrics": {"host": "127.0.0.1", "port": 9464},
    "loop": {"interval_s": 10},
}
INVENTORY: list[dict[str, Any]] = [p.model_dump(mode="json") for p in inventory()]


def config_text(cfg: dict[str, Any]) -> str:
    return yaml.safe_dump(cfg, sort_keys=False)


def inventory_text(pools: Any) -> str:
    return json.dumps({"autoscaler_inventory": pools}, indent=2)


VALID_CONFIG = config_text(CONFIG)
VALID_INVENTORY = inventory_text(INVENTORY)
Mutation = Callable[[Any], Any]


def _line(text: str, needle: str, nth: int = 1) -> str:
    return f"{[i + 1 for i, ln in enumerate(text.splitlines()) if needle in ln][nth - 1]}:"


def _cfg(mutate: Mutation) -> str:
    cfg = copy.deepcopy(CONFIG)
    mutate(cfg)
    return config_text(cfg)


def _raw_cfg(old: str, new: str) -> str:
    assert old in VALID_CONFIG, old
    return VALID_CONFIG.replace(old, new, 1)


CONFIG_BOMB = VALID_CONFIG + "\n".join(
    ["x0: &x0 [a, a, a, a, a, a, a, a, a, a]"]
    + [f"x{i + 1}: &x{i + 1} [" + ", ".join([f"*x{i}"] * 10) + "]" for i in range(7)]
)
DUP_CONFIG = _raw_cfg("loop:\n", "loop:\n  interval_s: 5\n")

CONFIG_CASES: list[FileCase] = [
    FileCase("nan-budget", _raw_cfg("budget_usd_per_hour: 2000", "budget_usd_per_hour: .nan"),
             _line(VALID_CONFIG, "budget_usd_per_hour"), "not a finite number"),
    FileCase("inf-interval", _raw_cfg("interval_s: 10", "interval_s: .inf"), _line(VALID_CONFIG, "interval_s"),
             "not a finite number"),
    FileCase("budget-string", _cfg(lambda c: c["policy"].update(budget_usd_per_hour="2000")),
             "policy.budget_usd_per_hour", "valid number"),
    FileCase("budget-bool", _cfg(lambda c: c["policy"].update(budget_usd_per_hour=True)),
             "policy.budget_usd_per_hour", "valid number"),
    FileCase("spot-queues-nested", _cfg(lambda c: c["policy"].update(spot_queues=[["batch"]])),
             "policy.spot_queues[0]", "valid string"),
    FileCase("pool-max-nodes-list", _cfg(lambda c: c["policy"].update(pool_max_nodes=[3])),
             "policy.pool_max_nodes", "valid dictionary"),
    FileCase("policy-typo", _cfg(lambda c: c["policy"].update(idle_timout_s=3)), "policy.idle_timout_s",
             "unknown policy field"),
    FileCase("metrics-all-interfaces", _cfg(lambda c: c["metrics"].update(host="0.0.0.0")), "metrics",
             "not a loopback address"),
    FileCase("metrics-nic-address", _cfg(lambda c: c["metrics"].update(host="10.0.0.5")), "metrics",
             "allow_remote: true"),
    FileCase("metrics-host-newline", _cfg(lambda c: c["metrics"].update(host="127.0.0.1\nx")), "metrics.host",
             "host name"),
    FileCase("metrics-port-string", _cfg(lambda c: c["metrics"].update(port="9464")), "metrics.port",
             "valid integer"),
    FileCase("interval-bool", _cfg(lambda c: c["loop"].update(interval_s=True)), "loop.interval_s", "valid number"),
    FileCase("interval-a-year", _cfg(lambda c: c["loop"].update(interval_s=31_536_000)), "loop.interval_s",
             "less than or equal to 86400"),
    FileCase("timeout-string", _cfg(lambda c: c["slurm"].update(timeout_s="10")), "slurm.timeout_s", "valid number"),
    FileCase("rest-url-newline", _cfg(lambda c: c["slurm"].update(mode="rest", rest_url="http://x\nHost: y")),
             "slurm.rest_url", "http(s)://"),
    FileCase("rest-user-shell", _cfg(lambda c: c["slurm"].update(rest_user="slurm;id")), "slurm.rest_user",
             "Slurm name"),
    FileCase("partitions-space", _cfg(lambda c: c["slurm"].update(partitions=["a b"])), "slurm.partitions[0]",
             "Slurm name"),
    FileCase("endpoint-ftp", _cfg(lambda c: c.update(provider={"endpoint": "ftp://127.0.0.1"})),
             "provider.endpoint", "http(s)://"),
    FileCase("pools-nested", _cfg(lambda c: c.update(pools=[["od"]])), "pools[0]", "valid string"),
    FileCase("inventory-int", _cfg(lambda c: c.update(inventory=5)), "inventory", "must be a string"),
    FileCase("state-path-list", _cfg(lambda c: c.update(state_path=["a"])), "state_path", "must be a string"),
    FileCase("unknown-key", _cfg(lambda c: c.update(typo=1)), "typo", "unknown field"),
    FileCase("duplicate-key", DUP_CONFIG, _line(DUP_CONFIG, "interval_s", 2), "duplicate key 'interval_s'"),
    FileCase("alias-bomb", CONFIG_BOMB, "20:", "expands to more than"),
    FileCase("number-5000-digits", _raw_cfg("port: 9464", "port: " + "9" * 5000), _line(VALID_CONFIG, "port:"),
             "number of 5,000 characters"),
    FileCase("non-utf8", _raw_cfg("mode: cli", "mode: cli\udcff").encode("utf-8", "surrogateescape"),
             _line(VALID_CONFIG, "mode: cli"), "not valid UTF-8"),
    FileCase("not-a-mapping", "- inventory\n", "(root)", "must be a mapping"),
    FileCase("yaml-syntax", "inventory: [x\n", "2:", "not valid YAML"),
    FileCase("too-large", VALID_CONFIG + "#" * (1024 * 1024 + 1), "", "larger than the 1.0 MiB limit"),
]  # fmt: skip


def _inv(mutate: Mutation) -> str:
    pools = copy.deepcopy(INVENTORY)
    mutate(pools)
    return inventory_text(pools)


def _raw_inv(old: str, new: str) -> str:
    assert old in VALID_INVENTORY, old
    return VALID_INVENTORY.replace(old, new, 1)


I0, I1 = "autoscaler_inventory[0]", "autoscaler_inventory[1]"  # paths as in the file
DUP_INV = _raw_inv('"max_nodes": 4,', '"max_nodes": 4, "max_nodes": 400,')
INVENTORY_CASES: list[FileCase] = [
    FileCase("max-nodes-string", _inv(lambda p: p[0].update(max_nodes="4")), f"{I0}.max_nodes", "valid integer"),
    FileCase("max-nodes-bool", _inv(lambda p: p[1].update(max_nodes=True)), f"{I1}.max_nodes", "valid integer"),
    FileCase("max-nodes-16m", _inv(lambda p: p[0].update(max_nodes=16_000_000)), f"{I0}.max_nodes",
             "less than or equal to 2000"),
    FileCase("min-above-max", _inv(lambda p: p[0].update(min_nodes=5)), I0, "min_nodes 5 is greater"),
    FileCase("prefix-shell", _inv(lambda p: p[0].update(node_name_prefix="e2e;reboot")), f"{I0}.node_name_prefix",
             "GCE resource name"),
    FileCase("zone-newline", _inv(lambda p: p[0].update(zones=["us-central1-a\n"])), f"{I0}.zones[0]", "GCE zone"),
    FileCase("mig-upper", _inv(lambda p: p[0].update(instance_group="E2E")), f"{I0}.instance_group",
             "GCE resource name"),
    FileCase("gpus-bool", _inv(lambda p: p[0].update(gpus_per_node=True)), f"{I0}.gpus_per_node", "valid integer"),
    FileCase("capacity-unknown", _inv(lambda p: p[0].update(capacity_type="free")), f"{I0}.capacity_type",
             "Input should be"),
    FileCase("machine-type-space", _inv(lambda p: p[0].update(machine_type="a3 highgpu")), f"{I0}.machine_type",
             "must be a machine type"),
    FileCase("partitions-nested", _inv(lambda p: p[0].update(slurm_partitions=[["x"]])), f"{I0}.slurm_partitions[0]",
             "valid string"),
    FileCase("nan", _raw_inv('"max_nodes": 4,', '"max_nodes": NaN,'), _line(VALID_INVENTORY, '"max_nodes": 4'),
             "NaN is not a finite number"),
    FileCase("huge-number", _raw_inv('"max_nodes": 4,', '"max_nodes": ' + "9" * 5000 + ","),
             _line(VALID_INVENTORY, '"max_nodes": 4'), "number of 5,000 characters"),
    FileCase("duplicate-key", DUP_INV, _line(DUP_INV, '"max_nodes": 4'), "duplicate key 'max_nodes'"),
    FileCase("non-utf8", VALID_INVENTORY.encode().replace(b'"e2e"', b'"e2e\xff"', 1), _line(VALID_INVENTORY, '"e2e"'),
             "not valid UTF-8"),
    FileCase("not-json", "{autoscaler_inventory: []}", "1:2", "not valid JSON"),
    FileCase("deep", "[" * 200 + "]" * 200, "", "nested more than 64 levels"),
]  # fmt: skip

TRACE_HEADER = "job_id,submission_time,duration,num_gpu\n"
TRACE_OK = TRACE_HEADER + "j1,0,600,8\nj2,10,1200,16\n"


def _trace(row: str) -> str:
    return TRACE_OK + row + "\n"


TRACE_CASES: list[FileCase] = [
    FileCase("field-200k", _trace("j3," + "1" * 200_000 + ",10,1"), "4", "line longer than"),
    FileCase("job-id-300", _trace("j" * 300 + ",1,10,1"), "4", "column job_id: 300 characters"),
    FileCase("non-utf8", (TRACE_OK + "j3,1,10,1\n").encode().replace(b"j3", b"j\xff3"), "4:2", "not valid UTF-8"),
    FileCase("duration-1e18", _trace("j3,1,1e18,1"), "4", "column duration: 1e18 s is more than ten years"),
    FileCase("submit-1e18", _trace("j3,1e18,10,1"), "4", "column submission_time"),
    FileCase("duration-nan", _trace("j3,1,nan,1"), "4", "column duration: 'nan' is not a number"),
    FileCase("duration-inf", _trace("j3,1,inf,1"), "4", "column duration: 'inf' is not a number"),
    FileCase("duration-overflow", _trace("j3,1,1e400,1"), "4", "column duration: '1e400' is not finite"),
    FileCase("duration-100-digits", _trace("j3,1," + "9" * 100 + ",1"), "4", "is not a number"),
    FileCase("gpus-exponent", _trace("j3,1,10,1e3"), "4", "column num_gpu: must be an integer"),
    FileCase("gpus-bool", _trace("j3,1,10,true"), "4", "column num_gpu: 'true' is not a number"),
    FileCase("gpus-float", _trace("j3,1,10,8.0"), "4", "column num_gpu: must be an integer"),
    FileCase("gpus-too-many", _trace("j3,1,10,100000"), "4", "column num_gpu: must be an integer in 1..4096"),
    FileCase("duration-negative", _trace("j3,1,-5,1"), "4", "column duration: must be > 0"),
    FileCase("extra-fields", _trace("j3,1,10,1,x"), "4", "5 fields but the header has 4"),
    FileCase("job-id-control", _trace("j\x073,1,10,1"), "4", "control characters"),
    FileCase("duplicate-header", "num_gpu,submission_time,duration,num_gpu\n1,2,3,4\n", "1", "column twice"),
    FileCase("missing-column", "submission_time,duration\n1,2\n", "1", "header lacks column(s) num_gpu"),
    FileCase("empty", "", "", "empty file"),
]  # fmt: skip

# (id, hostlist, reason)
HOSTLIST_CASES: list[tuple[str, str, str]] = [
    ("product-billion", "a[0-999]b[0-999]c[0-999]", "expands to 1,000,000,000 names"),
    ("million", "n-[0-999999]", "expands to 1,000,000 names"),
    ("sum-over-parts", ",".join(f"p{i}-[0-9999]" for i in range(7)), "expands to 70,000 names"),
    ("shell", "a-1;reboot", "a character a node name cannot have"),
    ("subshell", "a-$(reboot)", "a character a node name cannot have"),
    ("newline", "a-1\na-2", "a character a node name cannot have"),
    ("space", "a 1", "a character a node name cannot have"),
    ("nested", "a[[1-2]]", "nested '['"),
    ("unbalanced-open", "a-[0-2", "unbalanced '['"),
    ("unbalanced-close", "a-0]", "unbalanced ']'"),
    ("backwards", "a-[3-1]", "runs backwards"),
    ("long-bound", "a-[0-99999999999]", "up to 9 digits"),
    ("letters-in-range", "a-[x-y]", "bad range"),
    ("too-long", "a," * 140_000, "characters (at most 262,144)"),
    ("name-too-long", "a" * 64, "longer than 63 characters"),
    ("empty", ",", "empty hostlist"),
]
