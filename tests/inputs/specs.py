"""Malformed stack files (fleet specs and project-bootstrap specs): each case is a file and the place the error
must name (`field.path`, or `LINE:COL` for what the YAML reader refuses), with a fragment of the reason."""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import yaml

FLEET: dict[str, Any] = {
    "project": "my-gpu-project",
    "region": "us-east4",
    "zones": ["us-east4-a", "us-east4-b"],
    "labels": {"team": "ml"},
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
            "storage": {"home": {"tier": "BASIC_SSD", "capacity_gb": 2560, "share_name": "home"}},
            "slurm": {
                "extra_config": {"PriorityType": "priority/multifactor"},
                "autoscaler": {
                    "source": "https://github.com/your-org/gpu-fleet.git",
                    "ref": "v0.1.0@0123456789abcdef0123456789abcdef01234567",  # a pinned release (b1: never a branch)
                    "policy": {"budget_usd_per_hour": 1000, "spot_queues": ["pre"]},
                },
                "partitions": [
                    {"name": "main", "pools": ["resv"], "default": True},
                    {"name": "pre", "pools": ["spot"], "spot_tolerant": True, "max_time": "2-00:00:00"},
                ],
            },
        }
    ],
}
BOOTSTRAP: dict[str, Any] = {
    "kind": "project-bootstrap",
    "project": "my-gpu-project",
    "region": "us-east4",
    "state_bucket": {"location": "US"},
    "labels": {"team": "ml-platform"},
}


def stack_text(spec: dict[str, Any]) -> str:
    return yaml.safe_dump({"config": {"gpu-fleet:fleet": spec}}, sort_keys=False)


@dataclass(frozen=True)
class SpecCase:
    id: str
    text: str | bytes  # the stack file
    where: str  # field path, LINE or LINE:COL, or "" for the file as a whole
    reason: str  # a fragment of the reason

    def __str__(self) -> str:
        return self.id


def _c1(d: dict[str, Any]) -> dict[str, Any]:
    return d["clusters"][0]


def _pool(d: dict[str, Any], i: int = 0) -> dict[str, Any]:
    return d["clusters"][0]["pools"][i]


def _slurm(d: dict[str, Any]) -> dict[str, Any]:
    return d["clusters"][0]["slurm"]


def _auto(d: dict[str, Any]) -> dict[str, Any]:
    return d["clusters"][0]["slurm"]["autoscaler"]


def _policy(d: dict[str, Any]) -> dict[str, Any]:
    return d["clusters"][0]["slurm"]["autoscaler"]["policy"]


Mutation = Callable[[dict[str, Any]], Any]
P0 = "clusters[0].pools[0]"
P1 = "clusters[0].pools[1]"
SL = "clusters[0].slurm"
AU = "clusters[0].slurm.autoscaler"
PO = "clusters[0].slurm.autoscaler.policy"

# (id, mutation of FLEET, field path, reason fragment)
MUTATIONS: list[tuple[str, Mutation, str, str]] = [
    # values that reach slurm.conf
    ("slurm-conf-newline", lambda d: _slurm(d)["extra_config"].update(PriorityType="a\nNodeName=evil"),
     f"{SL}.extra_config.PriorityType", "one non-empty line"),
    ("slurm-conf-cr", lambda d: _slurm(d)["extra_config"].update(PriorityType="a\rb"),
     f"{SL}.extra_config.PriorityType", "one non-empty line"),
    ("slurm-conf-hash", lambda d: _slurm(d)["extra_config"].update(PriorityType="a#b"),
     f"{SL}.extra_config.PriorityType", "no white space, '#'"),
    ("slurm-conf-space", lambda d: _slurm(d)["extra_config"].update(PriorityType="a b"),
     f"{SL}.extra_config.PriorityType", "one non-empty line"),
    ("slurm-conf-int-value", lambda d: _slurm(d)["extra_config"].update(PriorityWeightAge=1000),
     f"{SL}.extra_config.PriorityWeightAge", "valid string"),
    ("slurm-conf-bad-key", lambda d: _slurm(d)["extra_config"].update({"Bad\nKey": "1"}),
     f"{SL}.extra_config.Bad\nKey", "not a slurm.conf key"),
    ("max-time-newline", lambda d: _slurm(d)["partitions"][1].update(max_time="1:00:00\nNodeName=x"),
     f"{SL}.partitions[1].max_time", "not a Slurm time"),
    ("partition-pool-newline", lambda d: _slurm(d)["partitions"][0].update(pools=["resv\nx"]),
     f"{SL}.partitions[0].pools[0]", "GCE resource name"),
    # values that reach the startup script / fstab
    ("share-name-fstab-line", lambda d: _c1(d)["storage"]["home"].update(share_name="home\n10.0.0.9:/x /etc nfs"),
     "clusters[0].storage.home.share_name", "Filestore share name"),
    ("share-name-space", lambda d: _c1(d)["storage"]["home"].update(share_name="home x"),
     "clusters[0].storage.home.share_name", "Filestore share name"),
    ("share-name-basic-17", lambda d: _c1(d)["storage"]["home"].update(share_name="a" * 17),
     "clusters[0].storage.home", "at most 16 characters"),
    ("mount-point-newline", lambda d: _c1(d)["storage"].update(scratch={"mount_point": "/scratch\n/etc"}),
     "clusters[0].storage.scratch.mount_point", "absolute path"),
    ("mount-point-dotdot", lambda d: _c1(d)["storage"].update(scratch={"mount_point": "/scratch/../etc"}),
     "clusters[0].storage.scratch.mount_point", "'..'"),
    # git source / ref: never an option, never a shell word
    ("source-dash", lambda d: _auto(d).update(source="--upload-pack=touch /tmp/x"), f"{AU}.source", "git URL"),
    ("source-semicolon", lambda d: _auto(d).update(source="https://x.org/r.git;reboot"), f"{AU}.source", "git URL"),
    ("source-newline", lambda d: _auto(d).update(source="https://x.org/r.git\nreboot"), f"{AU}.source", "git URL"),
    ("ref-dash", lambda d: _auto(d).update(ref="--exec=reboot"), f"{AU}.ref", "pattern"),
    ("ref-dotdot", lambda d: _auto(d).update(ref="main..x"), f"{AU}.ref", "pattern"),
    ("ref-space", lambda d: _auto(d).update(ref="main x"), f"{AU}.ref", "pattern"),
    ("ref-branch", lambda d: _auto(d).update(ref="main"), f"{AU}.ref", "pattern"),
    # GCE names and resources
    ("machine-type-semicolon", lambda d: _pool(d).update(machine_type="a3-megagpu-8g;reboot"),
     f"{P0}.machine_type", "must be a machine type"),
    ("machine-type-subshell", lambda d: _pool(d, 1).update(machine_type="$(reboot)"),
     f"{P1}.machine_type", "must be a machine type"),
    ("controller-type-newline", lambda d: _slurm(d).update(controller_machine_type="n2-standard-8\nx"),
     f"{SL}.controller_machine_type", "must be a machine type"),
    ("image-backtick", lambda d: _pool(d).update(image="`reboot`"), f"{P0}.image", "GCE image"),
    ("image-space", lambda d: _pool(d).update(image="projects/x y/global/images/a"), f"{P0}.image", "GCE image"),
    ("reservation-semicolon", lambda d: _pool(d).update(reservation="r1;rm"), f"{P0}.reservation", "reservation"),
    ("reservation-newline", lambda d: _pool(d).update(reservation="r1\nr2"), f"{P0}.reservation", "reservation"),
    ("zone-newline", lambda d: d["zones"].__setitem__(1, "us-east4-b\n"), "zones[1]", "GCE zone"),
    ("zones-mixed-types", lambda d: d["zones"].__setitem__(1, 5), "zones[1]", "valid string"),
    ("zones-nested-list", lambda d: d["zones"].__setitem__(1, ["us-east4-b"]), "zones[1]", "valid string"),
    ("project-newline", lambda d: d.update(project="my-gpu-project\n"), "project", "GCP project id"),
    ("region-int", lambda d: d.update(region=4), "region", "valid string"),
    ("pool-name-upper", lambda d: _pool(d).update(name="Resv"), f"{P0}.name", "RFC 1035"),
    ("bucket-location-shell", lambda d: _c1(d)["storage"].update(checkpoints={"location": "US;rm"}),
     "clusters[0].storage.checkpoints.location", "GCS location"),
    # labels
    ("label-key-upper", lambda d: d["labels"].update(Team="x"), "labels.Team", "label key"),
    ("label-value-space", lambda d: d["labels"].update(team="ML Platform"), "labels.team", "label value"),
    ("label-value-newline", lambda d: _pool(d).update(labels={"team": "a\nb"}), f"{P0}.labels.team", "label value"),
    ("label-value-int", lambda d: d["labels"].update(team=5), "labels.team", "valid string"),
    ("labels-65", lambda d: d.update(labels={f"k{i}": "v" for i in range(65)}), "labels", "at most 64"),
    # strict numbers: no coercion
    ("max-nodes-string", lambda d: _pool(d).update(max_nodes="4"), f"{P0}.max_nodes", "valid integer"),
    ("max-nodes-bool", lambda d: _pool(d).update(max_nodes=True), f"{P0}.max_nodes", "valid integer"),
    ("max-nodes-float", lambda d: _pool(d).update(max_nodes=4.0), f"{P0}.max_nodes", "valid integer"),
    ("min-nodes-string", lambda d: _pool(d, 1).update(min_nodes="0"), f"{P1}.min_nodes", "valid integer"),
    ("max-nodes-16m", lambda d: _pool(d, 1).update(max_nodes=16_000_000), f"{P1}.max_nodes",
     "less than or equal to 2000"),
    ("max-nodes-list", lambda d: _pool(d, 1).update(max_nodes=[4]), f"{P1}.max_nodes", "valid integer"),
    ("boot-disk-string", lambda d: _pool(d).update(boot_disk_gb="200"), f"{P0}.boot_disk_gb", "valid integer"),
    ("login-nodes-bool", lambda d: _slurm(d).update(login_nodes=True), f"{SL}.login_nodes", "valid integer"),
    ("suspend-time-string", lambda d: _slurm(d).update(suspend_time="300"), f"{SL}.suspend_time", "valid integer"),
    ("resume-timeout-huge", lambda d: _slurm(d).update(resume_timeout=10**12), f"{SL}.resume_timeout", "less than"),
    ("snapshots-daily-off-window", lambda d: _slurm(d).update(state_snapshots={"start_time": "03:00"}),
     f"{SL}.state_snapshots", "a daily snapshot schedule starts at 00:00, 04:00"),
    ("snapshots-half-hour", lambda d: _slurm(d).update(state_snapshots={"interval_hours": 6, "start_time": "01:30"}),
     f"{SL}.state_snapshots.start_time", "should match pattern"),
    ("snapshots-keep-string", lambda d: _slurm(d).update(state_snapshots={"keep_days": "14"}),
     f"{SL}.state_snapshots.keep_days", "valid integer"),
    ("snapshots-every-48h", lambda d: _slurm(d).update(state_snapshots={"interval_hours": 48}),
     f"{SL}.state_snapshots.interval_hours", "less than or equal to 24"),
    ("compact-placement-string", lambda d: _pool(d).update(compact_placement="yes"), f"{P0}.compact_placement",
     "valid boolean"),
    ("capacity-int", lambda d: _pool(d, 1).update(capacity=3), f"{P1}.capacity", "must be a string"),
    ("capacity-gb-string", lambda d: _c1(d)["storage"]["home"].update(capacity_gb="2560"),
     "clusters[0].storage.home.capacity_gb", "valid integer"),
    ("soft-delete-string", lambda d: _c1(d)["storage"].update(checkpoints={"soft_delete_days": "7"}),
     "clusters[0].storage.checkpoints.soft_delete_days", "valid integer"),
    ("lustre-throughput-string", lambda d: _c1(d)["storage"].update(scratch={"per_unit_storage_throughput": "500"}),
     "clusters[0].storage.scratch.per_unit_storage_throughput", "Input should be"),
    ("metrics-port-string", lambda d: _auto(d).update(metrics_port="9464"), f"{AU}.metrics_port", "valid integer"),
    ("cidr-int", lambda d: d.update(network={"system_cidr": 167772160}), "network.system_cidr", "must be a string"),
    ("cidr-list", lambda d: d.update(network={"gpu_cidr": ["10.128.0.0/16"]}), "network.gpu_cidr", "must be a string"),
    # the autoscaler policy
    ("budget-string", lambda d: _policy(d).update(budget_usd_per_hour="1000"), f"{PO}.budget_usd_per_hour",
     "valid number"),
    ("budget-bool", lambda d: _policy(d).update(budget_usd_per_hour=True), f"{PO}.budget_usd_per_hour",
     "valid number"),
    ("spot-queues-nested", lambda d: _policy(d).update(spot_queues=[["pre"]]), f"{PO}.spot_queues[0]",
     "valid string"),
    ("spot-queues-string", lambda d: _policy(d).update(spot_queues="pre"), f"{PO}.spot_queues", "valid list"),
    ("pool-max-nodes-list", lambda d: _policy(d).update(pool_max_nodes=[4]), f"{PO}.pool_max_nodes",
     "valid dictionary"),
    ("pool-max-nodes-string", lambda d: _policy(d).update(pool_max_nodes={"spot": "3"}), f"{PO}.pool_max_nodes.spot",
     "valid integer"),
    ("idle-timeout-bool", lambda d: _policy(d).update(idle_timeout_s=False), f"{PO}.idle_timeout_s", "valid number"),
    ("policy-typo", lambda d: _policy(d).update(idle_timout_s=30), f"{PO}.idle_timout_s", "unknown policy field"),
    # structure
    ("clusters-mapping", lambda d: d.update(clusters={"c1": {}}), "clusters", "valid list"),
    ("pools-null", lambda d: _c1(d).update(pools=None), "clusters[0].pools", "valid list"),
    ("unknown-field", lambda d: _pool(d).update(maxnodes=3), f"{P0}.maxnodes", "unknown field"),
]  # fmt: skip

BOOTSTRAP_MUTATIONS: list[tuple[str, Mutation, str, str]] = [
    ("bootstrap-label-key", lambda d: d["labels"].update(Team="x"), "labels.Team", "label key"),
    ("bootstrap-label-value", lambda d: d["labels"].update(team="a\nb"), "labels.team", "label value"),
    ("bootstrap-location", lambda d: d["state_bucket"].update(location="US\nEU"), "state_bucket.location",
     "GCS location"),
    ("bootstrap-versions-string", lambda d: d["state_bucket"].update(keep_noncurrent_versions="20"),
     "state_bucket.keep_noncurrent_versions", "valid integer"),
    ("bootstrap-force-string", lambda d: d["state_bucket"].update(force_destroy="true"),
     "state_bucket.force_destroy", "valid boolean"),
    ("bootstrap-api", lambda d: d.update(apis=["compute.googleapis.com; rm"]), "apis[0]", "Google API"),
    ("bootstrap-project", lambda d: d.update(project="-x"), "project", "pattern"),
]  # fmt: skip


def _mutated(base: dict[str, Any], mutate: Mutation) -> str:
    spec = copy.deepcopy(base)
    mutate(spec)
    return stack_text(spec)


VALID = stack_text(FLEET)
_GOOD = VALID.splitlines()


def _raw(replace: str, by: str) -> str:
    assert replace in VALID, replace
    return VALID.replace(replace, by, 1)


def _line_of(text: str, needle: str, nth: int = 1) -> int:
    lines = [i + 1 for i, ln in enumerate(text.splitlines()) if needle in ln]
    return lines[nth - 1]


BOMB = "\n".join(
    ["config:", "  gpu-fleet:fleet:", "    a: &a [x, x, x, x, x, x, x, x, x, x]"]
    + [f"    {chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, "
       f"*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}]"
       for i in range(8)]
)  # fmt: skip
DUP_TOP = VALID.replace("  gpu-fleet:fleet:\n", "  gpu-fleet:fleet:\n    region: us-west1\n", 1)
DUP_POOL = _raw("      - name: spot\n", "      - name: spot\n        name: spot2\n")
HUGE_INT = _raw("max_nodes: 4\n", "max_nodes: " + "9" * 5000 + "\n")
NON_UTF8 = _raw("team: ml", "team: ml\xff").encode("utf-8").replace("ml\xc3\xbf".encode("latin-1"), b"ml\xff")
DEEP = "config:\n  gpu-fleet:fleet:\n    project: " + "[" * 100 + "]" * 100 + "\n"

RAW: list[SpecCase] = [
    SpecCase("duplicate-key-top", DUP_TOP, f"{_line_of(DUP_TOP, 'region:', 2)}:", "duplicate key 'region'"),
    SpecCase("duplicate-key-pool", DUP_POOL, f"{_line_of(DUP_POOL, 'name: spot2')}:", "duplicate key 'name'"),
    SpecCase("alias-bomb", BOMB, "7:", "expands to more than"),
    SpecCase("alias-recursive", "config:\n  gpu-fleet:fleet: &a\n    x: *a\n", "2:", "recursive alias"),
    SpecCase("number-5000-digits", HUGE_INT, f"{_line_of(HUGE_INT, '9999')}:", "number of 5,000 characters"),
    SpecCase("nan-budget", _raw("budget_usd_per_hour: 1000", "budget_usd_per_hour: .nan"),
             f"{_line_of(VALID, 'budget_usd_per_hour')}:", "'.nan' is not a finite number"),
    SpecCase("inf-budget", _raw("budget_usd_per_hour: 1000", "budget_usd_per_hour: .inf"),
             f"{_line_of(VALID, 'budget_usd_per_hour')}:", "not a finite number"),
    SpecCase("overflow-float", _raw("budget_usd_per_hour: 1000", "budget_usd_per_hour: 1.0e+999"),
             f"{_line_of(VALID, 'budget_usd_per_hour')}:", "not a finite number"),
    SpecCase("non-utf8", NON_UTF8, f"{_line_of(VALID, 'team: ml')}:", "not valid UTF-8"),
    SpecCase("yaml-syntax", _raw("max_nodes: 4\n", "max_nodes: [4\n"), "21:", "not valid YAML"),
    SpecCase("control-char", _raw("team: ml", "team: ml\x07"), f"{_line_of(VALID, 'team: ml')}:", "not allowed"),
    SpecCase("two-documents", VALID + "---\nconfig: {}\n", "50:", "single document"),
    SpecCase("bool-key", "config:\n  gpu-fleet:fleet:\n    yes: 1\n", "3:", "is not a string"),
    SpecCase("python-tag", "config:\n  gpu-fleet:fleet: !!python/object/apply:os.system [reboot]\n", "2:",
             "could not determine a constructor"),
    SpecCase("deep-nesting", DEEP, "3:", "nested more than 64 levels"),
    SpecCase("top-level-list", "- config\n", "", "not a Pulumi stack file"),
    SpecCase("no-config", "encryptionsalt: x\n", "config", "missing"),
    SpecCase("empty-file", "", "", "not a Pulumi stack file"),
    SpecCase("spec-not-mapping", "config:\n  gpu-fleet:fleet: [1, 2]\n", "config.gpu-fleet:fleet", "must be a mapping"),
    SpecCase("provider-mismatch", VALID.replace("config:\n", "config:\n  gcp:region: us-west1\n", 1), "gcp:region",
             "must agree"),
]  # fmt: skip

FLEET_CASES: list[SpecCase] = [SpecCase(i, _mutated(FLEET, m), w, r) for i, m, w, r in MUTATIONS] + RAW
BOOTSTRAP_CASES: list[SpecCase] = [SpecCase(i, _mutated(BOOTSTRAP, m), w, r) for i, m, w, r in BOOTSTRAP_MUTATIONS]
