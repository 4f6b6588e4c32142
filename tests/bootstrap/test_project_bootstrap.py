"""The project-bootstrap stack kind under Pulumi mocks: APIs, state bucket, least-privilege identities."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from fleet.bootstrap.iam import API_CALLS, AUTOSCALER_PERMISSIONS, autoscaler_permission_names
from fleet.spec.project import ProjectSpecError, load_project_spec
from fleet.synth.engine import SynthResult, run_program

REPO = Path(__file__).resolve().parents[2]
SPEC = {"kind": "project-bootstrap", "project": "my-gpu-project", "region": "us-east4"}
BASIC_ROLES = {"roles/owner", "roles/editor", "roles/viewer"}


def synth(spec: dict) -> SynthResult:
    from stacks.program import main

    return run_program(main, stack="boot", config={"gpu-fleet:fleet": spec, "gcp:project": spec["project"]})


@pytest.fixture(scope="module")
def result() -> SynthResult:
    return synth(SPEC)


def test_custom_role_holds_exactly_the_listed_permissions(result: SynthResult) -> None:
    (role,) = result.by_type("gcp:projects/iAMCustomRole:IAMCustomRole")
    assert sorted(role.inputs["permissions"]) == sorted(autoscaler_permission_names())
    assert len(set(autoscaler_permission_names())) == len(AUTOSCALER_PERMISSIONS)
    assert role.inputs["roleId"] == "gpuFleetAutoscaler" and role.inputs["stage"] == "GA"
    assert all(p.reason for p in AUTOSCALER_PERMISSIONS)


def test_no_binding_uses_a_basic_role(result: SynthResult) -> None:
    bindings = result.by_type("gcp:projects/iAMMember:IAMMember")
    roles = {b.inputs["role"] for b in bindings}
    assert not roles & BASIC_ROLES
    # the autoscaler's role is defined here and bound by no one project-wide: each Slurm cluster binds it to
    # its own account with a condition naming its pools' resources (tests/components/test_slurm_cluster.py)
    # and nothing else project-wide: no account of its own (each fleet pool creates its nodes' account)
    assert bindings == [] and result.by_type("gcp:serviceaccount/account:Account") == []
    assert result.by_type("gcp:serviceaccount/key:Key") == []  # no long-lived keys
    for kind in ("iAMBinding", "iAMPolicy"):  # authoritative bindings would strip others' access
        assert result.by_type(f"gcp:projects/{kind}:{kind.replace('iAM', 'IAM')}") == []


def test_every_actuator_call_is_covered_and_nothing_more() -> None:
    """Two ways: every Compute call autoscaler/gce/client.py makes has its permission in the role (a new call
    fails this test), and every permission of the role is needed by a call the actuator makes today (a
    removed call fails it too, so the role never keeps a right nobody uses)."""
    from autoscaler.gce.compute_lite import SERVICES

    source = (REPO / "autoscaler" / "gce" / "client.py").read_text()
    clients = dict(re.findall(r"self\.(\w+) = compute_v1\.(\w+Client)\(", source))
    assert set(clients.values()) == {c for cs in SERVICES.values() for c in cs}, "client.py and compute_lite differ"
    assert {"migs", "regions"} <= set(clients), f"Compute clients not found (has the actuator moved?): {clients}"
    calls = set(re.findall(rf"self\.({'|'.join(clients)})\.(\w+)\b", source))
    assert calls, "no Compute client calls found: has the actuator moved?"
    assert calls <= set(API_CALLS), (
        f"calls without a permission in fleet.bootstrap.iam.API_CALLS: {calls - set(API_CALLS)}"
    )
    assert set(API_CALLS) <= calls, f"API_CALLS lists calls the actuator no longer makes: {set(API_CALLS) - calls}"
    needed = {API_CALLS[c] for c in calls}
    assert needed == set(autoscaler_permission_names())
    assert all(p.on for p in AUTOSCALER_PERMISSIONS)  # each says which resources the condition must name


def test_state_bucket_is_private_versioned_and_protected(result: SynthResult) -> None:
    (bucket,) = result.by_type("gcp:storage/bucket:Bucket")
    i = bucket.inputs
    assert i["name"] == "my-gpu-project-pulumi-state" and i["location"] == "US-EAST4"
    assert i["uniformBucketLevelAccess"] is True and i["publicAccessPrevention"] == "enforced"
    assert i["versioning"] == {"enabled": True}
    assert i["lifecycleRules"][0]["condition"]["numNewerVersions"] == 20
    assert i["forceDestroy"] is False and bucket.protect is True
    assert result.outputs["state_backend_url"] == "gs://my-gpu-project-pulumi-state"


def test_apis_enabled_and_left_on_at_destroy(result: SynthResult) -> None:
    services = {s.inputs["service"]: s for s in result.by_type("gcp:projects/service:Service")}
    assert {"compute", "container", "file", "secretmanager", "storage"} <= {s.split(".")[0] for s in services}
    assert all(s.inputs["disableOnDestroy"] is False for s in services.values())


def test_the_api_the_autoscalers_tokens_come_from_is_enabled(result: SynthResult) -> None:
    """The Slurm daemon calls Compute as its `<cluster>-autoscaler` account through impersonation (the stack's
    generated config sets `provider.impersonate_service_account`), and the GKE daemon through Workload Identity:
    both mint tokens with the IAM Service Account Credentials API.  Before, the bootstrap did not enable it and the
    daemon's first Compute call was refused (403 SERVICE_DISABLED)."""
    services = {s.inputs["service"] for s in result.by_type("gcp:projects/service:Service")}
    assert "iamcredentials.googleapis.com" in services


def test_outputs_and_component_convention(result: SynthResult) -> None:
    (comp,) = result.by_type("gpufleet:gcp:ProjectBootstrap")
    children = result.children_of(comp.urn)
    assert len(children) == len(result.resources) - 1  # every resource is the component's child
    assert all(c.name.startswith("bootstrap-") for c in children)
    assert "autoscaler_service_account" not in result.outputs  # per cluster now (the fleet stack's outputs)
    assert result.outputs["autoscaler_role"] == "projects/my-gpu-project/roles/gpuFleetAutoscaler"
    assert "nodes_service_account" not in result.outputs  # no account nobody uses


@pytest.mark.parametrize(
    ("change", "path"),
    [
        ({"autoscaler_account_id": "A"}, "autoscaler_account_id"),
        ({"apis": ["compute"]}, "apis[0]"),
        ({"state_bucket": {"name": "Bad.Name"}}, "state_bucket.name"),
        ({"nodes_account_id": "gpu-fleet-nodes"}, "nodes_account_id"),  # removed: no account nobody uses
        ({"owner": "me"}, "owner"),
    ],
)
def test_bad_spec_names_the_field_and_declares_nothing(change: dict, path: str) -> None:
    with pytest.raises(ProjectSpecError) as info:
        load_project_spec(SPEC | change)
    assert path in [p for p, _ in info.value.errors]
    with pytest.raises(ProjectSpecError):
        synth(SPEC | change)


def test_example_stack_file_is_valid() -> None:
    doc = yaml.safe_load((REPO / "Pulumi.gcp-project-bootstrap.yaml").read_text())["config"]
    spec = load_project_spec(doc["gpu-fleet:fleet"])
    assert (spec.project, spec.region) == (doc["gcp:project"], doc["gcp:region"])


def test_docs_list_exactly_the_permissions() -> None:
    docs = (REPO / "docs" / "bootstrap.md").read_text()
    listed = set(re.findall(r"`(compute\.[A-Za-z]+\.[A-Za-z]+)`", docs))
    assert listed == set(autoscaler_permission_names())
