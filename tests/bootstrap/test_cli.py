"""`fleet bootstrap-region` end to end: stack files written into a stacks directory, validated, non-overlapping."""

from __future__ import annotations

from collections.abc import Callable
from ipaddress import IPv4Network
from itertools import combinations
from pathlib import Path

import yaml

from fleet.catalog import load_catalog
from fleet.spec.load import load_stack_file
from tests.bootstrap.conftest import LABELS

IMAGE = "us-docker.pkg.dev/my-gpu-project/gpu-fleet/autoscaler@sha256:" + "ab" * 32
KUEUE = ("--scheduler", "kueue", "--autoscaler-image", IMAGE)
HAND_WRITTEN = """\
config:
  gcp:project: my-gpu-project
  gcp:region: us-east4
  gpu-fleet:fleet:
    project: my-gpu-project
    region: us-east4
    zones: [us-east4-a]
    labels: {team: ml-platform, cost-center: cc-gpu}
    clusters:
      - name: legacy
        pools:
          - {name: a3, machine_type: a3-highgpu-8g, max_nodes: 4}
        slurm:
          partitions: [{name: gpu, pools: [a3]}]
"""
PROJECT_BOOTSTRAP = """\
config:
  gpu-fleet:fleet: {kind: project-bootstrap, project: my-gpu-project, region: us-east4}
"""


def ranges(path: Path) -> list[IPv4Network]:
    """Every range a stack file uses, schema defaults included (the hand-written file omits them)."""
    spec = load_stack_file(path)
    return [spec.network.system_cidr, spec.network.gpu_cidr, *spec.network.reserved_cidrs]


def test_two_regions_in_turn_and_a_hand_written_stack_never_overlap(bootstrap: Callable, stacks_dir: Path) -> None:
    (stacks_dir / "Pulumi.legacy.yaml").write_text(HAND_WRITTEN)  # uses the defaults 10.0.0.0/20, 10.128.0.0/16
    (stacks_dir / "Pulumi.project.yaml").write_text(PROJECT_BOOTSTRAP)  # another kind: no ranges, skipped
    code, first = bootstrap("--project", "my-gpu-project", "--region", "europe-west4", "--gpu", "h200", "--gpus", "64")
    assert code == 0, first
    code, second = bootstrap(
        "--project", "my-gpu-project", "--region", "us-central1", "--gpu", "h100", "--gpus", "128",
        "--capacity", "spot", "--name", "usc1-h100",
    )  # fmt: skip
    assert code == 0, second
    files = [stacks_dir / "Pulumi.legacy.yaml", Path(first["stack_file"]), Path(second["stack_file"])]
    assert files[1].name == "Pulumi.gcp-europe-west4-h200.yaml" and files[2].name == "Pulumi.usc1-h100.yaml"
    cat = load_catalog()
    for path in files:
        load_stack_file(path, cat)  # schema + every cross-field rule (zones offer the type, CIDRs, ...)
    by_file = {p.name: ranges(p) for p in files}
    for (a, ra), (b, rb) in combinations(by_file.items(), 2):
        for x in ra:
            for y in rb:
                assert not x.overlaps(y), f"{a} {x} overlaps {b} {y}"
    # the second run saw the first run's file
    avoided = {u["cidr"] for u in second["cidrs"]["avoided"]}
    assert {first["cidrs"]["system"], first["cidrs"]["gpu"]} <= avoided


def test_json_holds_every_decision(bootstrap: Callable, stacks_dir: Path) -> None:
    code, out = bootstrap(
        "--project", "my-gpu-project", "--region", "us-central1", "--gpu", "h100", "--gpus", "64", *LABELS
    )  # fmt: skip
    assert code == 0
    assert out["machine_type"] == "a3-megagpu-8g" and out["nodes"] == 8
    assert out["zones"] == ["us-central1-a", "us-central1-b", "us-central1-c"]
    assert {"system", "gpu"} <= set(out["cidrs"])
    assert {q["metric"] for q in out["quotas"]} >= {"NVIDIA_H100_MEGA_GPUS", "CPUS", "IN_USE_ADDRESSES"}
    price = out["price_per_hour"]
    assert price["at_min"] == 0 and price["at_max"] > 0
    assert set(price["by_capacity_type"]) >= {"reservation", "spot", "flex-start", "on-demand"}
    assert out["next_steps"][0].startswith("once per project: fleet bootstrap-project --project my-gpu-project")
    assert out["next_steps"][1].startswith("pulumi stack init gcp-us-central1-h100")
    assert any(step.startswith("pulumi config set gcp:project my-gpu-project") for step in out["next_steps"])
    assert any(step.startswith("pulumi up") for step in out["next_steps"])
    # the Slurm path sets the fabric up on the nodes and in its prolog: no pod template to render
    assert not any("gpudirect-pod" in step for step in out["next_steps"])
    written = yaml.safe_load(Path(out["stack_file"]).read_text())["config"]
    assert written["gpu-fleet:fleet"] == out["spec"]
    assert (written["gcp:project"], written["gcp:region"]) == ("my-gpu-project", "us-central1")
    assert out["warnings"] == []  # A3 Mega's fabric is set up, and the stacks directory is a Pulumi project


def test_a_stacks_directory_outside_a_pulumi_project_is_warned_about(bootstrap: Callable, stacks_dir: Path) -> None:
    """pulumi reads Pulumi.<stack>.yaml beside Pulumi.yaml: a file written anywhere else is written, and said to be
    in the wrong place, instead of a next step that says "run in X, next to Pulumi.yaml" where there is none."""
    (stacks_dir / "Pulumi.yaml").unlink()
    code, out = bootstrap(
        "--project", "my-gpu-project", "--region", "us-central1", "--gpu", "h100", "--gpus", "64", *LABELS
    )  # fmt: skip
    assert code == 0 and Path(out["stack_file"]).exists()
    (warning,) = out["warnings"]
    assert f"{stacks_dir} holds no Pulumi.yaml: pulumi reads Pulumi.gcp-us-central1-h100.yaml" in warning
    assert not any("next to Pulumi.yaml" in step for step in out["next_steps"]), out["next_steps"]
    move = out["next_steps"].index(f"mv {out['stack_file']} <your gpu-fleet checkout>/   # beside its Pulumi.yaml;"
                                   " run what follows there")  # fmt: skip
    assert out["next_steps"][move + 1] == "pulumi stack init gcp-us-central1-h100"


def test_refuses_to_overwrite_unless_forced(bootstrap: Callable, stacks_dir: Path) -> None:
    args = ("--project", "my-gpu-project", "--region", "us-central1", "--gpu", "l4", "--gpus", "4")
    assert bootstrap(*args)[0] == 0
    path = stacks_dir / "Pulumi.gcp-us-central1-l4.yaml"
    before = path.read_text()
    code, out = bootstrap(*args[:-1], "16")
    assert code == 2 and out["argument"] == "--name" and "--force" in out["message"]
    assert path.read_text() == before
    code, out = bootstrap(*args[:-1], "16", "--force")
    assert code == 0 and out["nodes"] == 2
    # forced rewrite does not avoid its own old ranges: same plan, same addresses
    assert out["cidrs"]["system"] == yaml.safe_load(before)["config"]["gpu-fleet:fleet"]["network"]["system_cidr"]


def test_no_zone_exits_3_with_nearest_regions(bootstrap: Callable, stacks_dir: Path) -> None:
    code, out = bootstrap("--project", "my-gpu-project", "--region", "europe-west2", "--gpu", "b200", "--gpus", "8")
    assert code == 3
    assert out["nearest_regions"][0]["region"] == "europe-west4"
    assert all(r["on_demand_usd_per_node_hour"] for r in out["nearest_regions"])
    assert list(stacks_dir.glob("Pulumi.*.yaml")) == []
    code, text = bootstrap(
        "--project", "my-gpu-project", "--region", "europe-west2", "--gpu", "b200", "--gpus", "8", as_json=False
    )
    assert code == 3 and "europe-west4" in text and "nearest regions" in text


def test_bad_arguments_exit_2_and_write_nothing(bootstrap: Callable, stacks_dir: Path) -> None:
    base = {"--project": "my-gpu-project", "--region": "us-central1", "--gpu": "h100", "--gpus": "8"}
    for key, value, needle in [
        ("--project", "X", "--project"),
        ("--gpu", "h300", "--gpu"),
        ("--gpus", "-8", "--gpus"),
        ("--capacity", "reservation", "reservation:NAME"),
        ("--region", "us-central9", "--region"),
        ("--scheduler", "gke", "--scheduler"),
        ("--label", "team", "KEY=VALUE"),
        ("--label", "Team=ml", "--label"),
        ("--label", "managed-by=me", "gpu-fleet sets it"),
        ("--team", "research", "only with --scheduler kueue"),
        ("--autoscaler-image", IMAGE, "only with --scheduler kueue"),
    ]:
        args = [x for k, v in (base | {key: value}).items() for x in (k, v)]
        code, out = bootstrap(*args)
        assert code == 2, (key, out)
        assert needle in out["message"], out
    code, text = bootstrap(*[x for k, v in (base | {"--gpus": "many"}).items() for x in (k, v)], as_json=False)
    assert code == 2 and "--gpus" in text
    assert list(stacks_dir.glob("Pulumi.*.yaml")) == []


def test_human_output_says_what_and_why(bootstrap: Callable) -> None:
    code, text = bootstrap(
        "--project", "my-gpu-project", "--region", "us-east4", "--gpu", "h100", "--gpus", "16", as_json=False
    )
    assert code == 0
    for needle in ("a3-megagpu-8g", "Why", "Quotas at max size", "NVIDIA_H100_MEGA", "Price per hour", "pulumi up"):
        assert needle in text, needle


def test_dry_run_writes_nothing(bootstrap: Callable, stacks_dir: Path) -> None:
    code, out = bootstrap(
        "--project", "my-gpu-project", "--region", "us-east4", "--gpu", "h100", "--gpus", "16", "--dry-run"
    )
    assert code == 0 and out["written"] is False
    assert list(stacks_dir.glob("Pulumi.*.yaml")) == []


def test_cluster_names_stay_unique_within_a_project(bootstrap: Callable, stacks_dir: Path) -> None:
    """GCE names (VPCs are global) derive from the cluster name: a second stack must not reuse it."""
    (stacks_dir / "Pulumi.project.yaml").write_text(PROJECT_BOOTSTRAP)
    args = ("--project", "my-gpu-project", "--region", "us-east4", "--gpu", "h100", "--gpus", "16")
    code, first = bootstrap(*args, "--name", "one")
    assert code == 0 and first["cluster"] == "h100-use4"
    assert first["next_steps"][0].startswith("pulumi login gs://")  # the project already has its bootstrap stack
    code, second = bootstrap(*args, "--name", "two")
    assert code == 0 and second["cluster"] == "h100-use4-2"
    code, out = bootstrap(*args, "--name", "three", "--cluster", "h100-use4")
    assert code == 2 and out["argument"] == "--cluster"
    code, other = bootstrap("--project", "other-project", *args[2:], "--name", "four")
    assert code == 0 and other["cluster"] == "h100-use4"  # another project: no clash


def test_bootstrap_project_writes_a_valid_project_stack(stacks_dir: Path) -> None:
    from typer.testing import CliRunner

    from fleet.cli.main import app
    from fleet.spec.project import load_project_spec

    argv = ["bootstrap-project", "--project", "my-gpu-project", "--region", "us-east4", "--stacks-dir", str(stacks_dir)]
    result = CliRunner().invoke(app, [*argv, "--bucket-location", "US", "--json"])
    assert result.exit_code == 0, result.output
    path = stacks_dir / "Pulumi.gcp-my-gpu-project-bootstrap.yaml"
    spec = load_project_spec(yaml.safe_load(path.read_text())["config"]["gpu-fleet:fleet"])
    assert spec.bucket_location() == "US" and spec.bucket_name() == "my-gpu-project-pulumi-state"
    assert CliRunner().invoke(app, argv).exit_code == 2  # exists: not overwritten without --force
    bad = CliRunner().invoke(app, [*argv[:2], "X", *argv[3:], "--name", "other", "--json"])
    assert bad.exit_code == 2 and '"argument": "--project"' in bad.output


def test_a_kueue_region_is_a_gke_cluster_with_its_teams_and_the_pinned_autoscaler(
    bootstrap: Callable, stacks_dir: Path
) -> None:
    """`--scheduler kueue` writes a GKE cluster: Kueue teams with equal shares in one cohort, the autoscaler's image
    as given, the upgrade exclusion from the instant it is written, the API server open to the system range and
    the given networks; no Slurm, no Filestore; GKE's system pool in the quotas."""
    code, out = bootstrap(
        "--project", "my-gpu-project", "--region", "europe-west4", "--gpu", "h200", "--gpus", "32", *KUEUE,
        "--team", "research", "--team", "product", "--authorized-network", "203.0.113.7/32", *LABELS,
    )  # fmt: skip
    assert code == 0, out
    assert out["stack"] == "gke-europe-west4-h200" and out["slurm"] is None
    (cluster,) = out["spec"]["clusters"]
    assert cluster["platform"] == "gke" and cluster["scheduler"] == "kueue" and "slurm" not in cluster
    assert cluster["storage"] == {"home": None, "checkpoints": {}}
    gke = cluster["gke"]
    assert gke["master_authorized_networks"] == [out["cidrs"]["system"], "203.0.113.7/32"]
    assert gke["upgrade_exclusion_start"].endswith("Z")
    kueue = out["kueue"]
    assert kueue["autoscaler"] == {"image": IMAGE}
    pool = cluster["pools"][0]["name"]
    assert [(t["name"], t["quotas"], t["cohort"]) for t in kueue["teams"]] == [
        ("research", {pool: 0.5}, "gpu"),
        ("product", {pool: 0.5}, "gpu"),
    ]
    assert {q["metric"]: q["needed"] for q in out["quotas"]}["E2_CPUS"] == 8  # one e2-standard-8 in its one zone
    assert out["warnings"] == []  # RDMA's plugin is installed on GKE, the API server is reachable, labels given
    assert any(s.startswith("gcloud components install gke-gcloud-auth-plugin") for s in out["next_steps"])
    render = f"fleet render gpudirect-pod --config {out['stack_file']} --pool {pool} --image <your training image>"
    assert any(s.startswith(render) for s in out["next_steps"]), out["next_steps"]  # A3 Ultra: the gIB mounts
    written = yaml.safe_load(Path(out["stack_file"]).read_text())
    assert written["config"]["gpu-fleet:fleet"] == out["spec"]
    assert load_stack_file(Path(out["stack_file"])).clusters[0].kueue.autoscaler.image == IMAGE
    # the file says how it was made, down to the instant its upgrade exclusion starts: running that again rewrites it
    header = Path(out["stack_file"]).read_text().splitlines()[0]
    assert f"--upgrade-exclusion-start {gke['upgrade_exclusion_start']}" in header and "--team research" in header


def test_kueue_bad_arguments_exit_2_and_write_nothing(bootstrap: Callable, stacks_dir: Path) -> None:
    base = ["--project", "my-gpu-project", "--region", "europe-west4", "--gpu", "h200", "--gpus", "16"]
    for extra, needle in [
        (["--scheduler", "kueue"], "--autoscaler-image: required with --scheduler kueue"),
        ([*KUEUE[:3], IMAGE.split("@")[0] + ":v1"], "not pinned by digest"),
        ([*KUEUE, "--team", "kube-system"], "a namespace Kubernetes or the stack owns"),
        ([*KUEUE, "--team", "a", "--team", "a"], "each team once"),
        ([*KUEUE, "--team", "Research"], "DNS-1123"),
        ([*KUEUE, "--authorized-network", "203.0.113.7/33"], "--authorized-network"),
        ([*KUEUE, "--upgrade-exclusion-start", "2026-12-01"], "RFC 3339"),
        ([*KUEUE, *(a for i in range(17) for a in ("--team", f"t{i}"))], "17 teams share 16 GPUs"),
    ]:
        code, out = bootstrap(*base, *extra)
        assert code == 2, (extra, out)
        assert needle in out["message"], out
    assert list(stacks_dir.glob("Pulumi.*.yaml")) == []


def test_without_the_required_labels_or_an_authorized_network_it_says_what_pulumi_up_will_meet(
    bootstrap: Callable,
) -> None:
    """The file is written, and the warnings name what would stop `pulumi up`: the policy pack's required labels
    (every bootstrapped stack), and an API server only the VPC reaches (a GKE cluster)."""
    code, out = bootstrap(
        "--project", "my-gpu-project", "--region", "europe-west4", "--gpu", "h200", "--gpus", "16", *KUEUE
    )  # fmt: skip
    assert code == 0
    labels, network = sorted(out["warnings"])
    assert "--label team=<value> --label cost-center=<value>" in labels, labels
    assert f"accepts only {out['cidrs']['system']}" in network and "--authorized-network" in network, network


def test_two_kueue_regions_in_turn_get_gke_ranges_that_do_not_overlap(bootstrap: Callable) -> None:
    """The second GKE cluster's pod, service and control-plane ranges keep clear of the first's, as its system and
    GPU ranges do."""
    outs = []
    for region in ("europe-west4", "us-central1"):
        code, out = bootstrap(
            "--project", "my-gpu-project", "--region", region, "--gpu", "h200", "--gpus", "16", *KUEUE, *LABELS
        )  # fmt: skip
        assert code == 0, out
        outs.append(out["spec"]["clusters"][0]["gke"])
    fields = ("pods_cidr", "services_cidr", "master_cidr")
    first, second = ([IPv4Network(gke[f]) for f in fields] for gke in outs)
    assert not any(a.overlaps(b) for a in first for b in second), (first, second)


def test_the_command_in_the_files_header_writes_the_same_spec_again(bootstrap: Callable, stacks_dir: Path) -> None:
    """A stack file says how it was made: the command in its header, run again (with --force), writes the same
    spec, whatever flags shaped it (zones, reserved ranges, cluster name, labels; a Kueue region's teams, networks
    and the upgrade exclusion's instant)."""
    import shlex

    for args in (
        ["--region", "us-central1", "--gpu", "h100", "--gpus", "16", "--zones", "us-central1-b", "--reserve",
         "10.0.0.0/16", "--cluster", "h100-a", *LABELS],
        ["--region", "europe-west4", "--gpu", "h200", "--gpus", "16", *KUEUE, "--team", "research", "--team", "ops",
         "--authorized-network", "203.0.113.7/32", *LABELS],
    ):  # fmt: skip
        code, out = bootstrap("--project", "my-gpu-project", *args)
        assert code == 0, out
        header = Path(out["stack_file"]).read_text().splitlines()[0]
        command = shlex.split(header.split("`")[1])
        assert command[:2] == ["fleet", "bootstrap-region"]
        code, again = bootstrap(*command[2:], "--force")
        assert code == 0, again
        assert again["spec"] == out["spec"] and again["stack_file"] == out["stack_file"]
