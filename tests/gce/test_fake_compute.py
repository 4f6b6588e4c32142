"""The fake Compute server behaves like Compute Engine where the actuator depends on it, as seen
through the real google-cloud-compute client (no provider code involved)."""

from __future__ import annotations

import sys
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest
from google.api_core import exceptions
from google.cloud import compute_v1

from tests.fakes.compute_api import FakeCompute
from tests.fakes.fixtures import compute_client_kwargs

pytestmark = pytest.mark.gce

P, R, Z = "test-project", "us-central1", "us-central1-a"
DONE = compute_v1.Operation.Status.DONE


def seed(fake: FakeCompute) -> None:
    fake.add_region(R, [Z], quotas={"NVIDIA_H100_MEGA_GPUS": 32})
    fake.add_mig(Z, "mig", "a3-megagpu-8g", accelerator="nvidia-h100-mega-80gb", gpu_count=8)


def create(fake: FakeCompute, names: list[str], request_id: str | None = None) -> compute_v1.Operation:
    migs = compute_v1.InstanceGroupManagersClient(**compute_client_kwargs(fake))
    body = compute_v1.InstanceGroupManagersCreateInstancesRequest(
        instances=[compute_v1.PerInstanceConfig(name=n) for n in names]
    )
    request = compute_v1.CreateInstancesInstanceGroupManagerRequest(
        project=P,
        zone=Z,
        instance_group_manager="mig",
        instance_group_managers_create_instances_request_resource=body,
        request_id=request_id or str(uuid.uuid4()),
    )
    return migs.create_instances_unary(request=request)


def managed(fake: FakeCompute, **kw: Any) -> dict[str, compute_v1.ManagedInstance]:
    migs = compute_v1.InstanceGroupManagersClient(**compute_client_kwargs(fake))
    pager = migs.list_managed_instances(request={"project": P, "zone": Z, "instance_group_manager": "mig", **kw})
    return {m.name: m for m in pager}


def test_request_id_deduplicates_and_must_be_a_uuid(fake_compute: FakeCompute) -> None:
    seed(fake_compute)
    rid = str(uuid.uuid4())
    first, again = create(fake_compute, ["n-0"], rid), create(fake_compute, ["n-0"], rid)
    assert first.name == again.name and first.status == DONE
    assert fake_compute.create_counts() == {"n-0": 1}
    with pytest.raises(exceptions.BadRequest, match="requestId"):
        create(fake_compute, ["n-1"], "not-a-uuid")


def test_existing_name_is_409_and_nothing_changes(fake_compute: FakeCompute) -> None:
    seed(fake_compute)
    create(fake_compute, ["n-0"])
    with pytest.raises(exceptions.Conflict, match="already exists") as err:
        create(fake_compute, ["n-1", "n-0"])
    assert err.value.errors[0]["reason"] == "alreadyExists"
    assert set(managed(fake_compute)) == {"n-0"}


def test_stockout_is_reported_per_instance_like_gce(fake_compute: FakeCompute) -> None:
    seed(fake_compute)
    fake_compute.stockout(Z, "a3-megagpu-8g")
    op = create(fake_compute, ["n-0"])
    assert op.status == DONE and not op.error.errors  # the operation succeeds; the instance does not
    (mi,) = managed(fake_compute).values()
    assert (mi.current_action, mi.instance_status) == ("CREATING", "")
    assert [e.code for e in mi.last_attempt.errors.errors] == ["ZONE_RESOURCE_POOL_EXHAUSTED"]
    migs = compute_v1.InstanceGroupManagersClient(**compute_client_kwargs(fake_compute))
    (err,) = migs.list_errors(project=P, zone=Z, instance_group_manager="mig")
    assert err.error.code == "ZONE_RESOURCE_POOL_EXHAUSTED"
    assert err.instance_action_details.instance.endswith("/instances/n-0")
    fake_compute.clear_stockouts()  # the MIG's next attempt succeeds
    fake_compute.wait_idle()
    (mi,) = managed(fake_compute).values()
    assert (mi.current_action, mi.instance_status) == ("NONE", "RUNNING")
    assert not mi.last_attempt.errors.errors


def test_gpu_quota_is_enforced_and_usage_is_visible(fake_compute: FakeCompute) -> None:
    seed(fake_compute)
    create(fake_compute, [f"n-{i}" for i in range(5)])  # 40 GPUs against a limit of 32
    failed = [m.name for m in managed(fake_compute).values() if m.last_attempt.errors.errors]
    assert failed == ["n-4"]
    region = compute_v1.RegionsClient(**compute_client_kwargs(fake_compute)).get(project=P, region=R)
    assert {q.metric: q.usage for q in region.quotas} == {"NVIDIA_H100_MEGA_GPUS": 32.0}


def test_list_managed_instances_pages(fake_compute: FakeCompute) -> None:
    seed(fake_compute)
    create(fake_compute, [f"n-{i}" for i in range(5)])
    assert sorted(managed(fake_compute, max_results=2)) == [f"n-{i}" for i in range(5)]
    assert fake_compute.request_counts()[("listManagedInstances", 200)] == 3


def test_delete_instances_by_url_and_resize_are_honoured_and_logged(fake_compute: FakeCompute) -> None:
    seed(fake_compute)
    create(fake_compute, ["n-0", "n-1", "n-2"])
    migs = compute_v1.InstanceGroupManagersClient(**compute_client_kwargs(fake_compute))
    body = compute_v1.InstanceGroupManagersDeleteInstancesRequest(
        instances=[f"projects/{P}/zones/{Z}/instances/n-1", f"projects/{P}/zones/{Z}/instances/ghost"],
        skip_instances_on_validation_error=True,
    )
    migs.delete_instances_unary(
        project=P, zone=Z, instance_group_manager="mig", instance_group_managers_delete_instances_request_resource=body
    )
    fake_compute.wait_idle()
    assert set(managed(fake_compute)) == {"n-0", "n-2"}
    body.skip_instances_on_validation_error = False
    with pytest.raises(exceptions.BadRequest, match="not members"):
        migs.delete_instances_unary(
            project=P,
            zone=Z,
            instance_group_manager="mig",
            instance_group_managers_delete_instances_request_resource=body,
        )
    migs.resize_unary(project=P, zone=Z, instance_group_manager="mig", size=1)
    fake_compute.wait_idle()
    assert [e.detail for e in fake_compute.events_of("resize")] == ["1"]
    assert set(managed(fake_compute)) == {"n-0"}  # the cloud picked the victim
    mig = migs.get(project=P, zone=Z, instance_group_manager="mig")
    assert (mig.target_size, mig.current_actions.none, mig.status.is_stable) == (1, 1, True)


def test_instances_insert_get_list_delete_and_synchronous_stockout(fake_compute: FakeCompute) -> None:
    seed(fake_compute)
    instances = compute_v1.InstancesClient(**compute_client_kwargs(fake_compute))
    vm = compute_v1.Instance(
        name="solo-0",
        machine_type=f"zones/{Z}/machineTypes/a3-megagpu-8g",
        scheduling=compute_v1.Scheduling(provisioning_model="SPOT"),
        labels={"team": "ml"},
    )
    op = instances.insert_unary(project=P, zone=Z, instance_resource=vm)
    assert op.status == DONE and not op.error.errors
    fake_compute.wait_idle()
    got = instances.get(project=P, zone=Z, instance="solo-0")
    assert (got.status, got.scheduling.provisioning_model, got.labels["team"]) == ("RUNNING", "SPOT", "ml")
    assert [i.name for i in instances.list(project=P, zone=Z)] == ["solo-0"]
    fake_compute.stockout(Z, "a3-megagpu-8g", "SPOT")
    vm.name = "solo-1"
    failed = instances.insert_unary(project=P, zone=Z, instance_resource=vm)
    assert [e.code for e in failed.error.errors] == ["ZONE_RESOURCE_POOL_EXHAUSTED"]
    instances.delete_unary(project=P, zone=Z, instance="solo-0")
    fake_compute.wait_idle()
    with pytest.raises(exceptions.NotFound):
        instances.get(project=P, zone=Z, instance="solo-0")


def test_operations_run_until_done_and_wait_blocks(fake_compute_factory: Any) -> None:
    fake = fake_compute_factory(operation_delay=0.3)
    seed(fake)
    op = create(fake, ["n-0"])
    assert op.status != DONE
    ops = compute_v1.ZoneOperationsClient(**compute_client_kwargs(fake))
    assert ops.get(project=P, zone=Z, operation=op.name).status != DONE
    assert ops.wait(project=P, zone=Z, operation=op.name).status == DONE


def test_reservations_report_count_and_in_use(fake_compute: FakeCompute) -> None:
    seed(fake_compute)
    fake_compute.add_reservation(Z, "resv", "a3-megagpu-8g", count=6, in_use=2)
    client = compute_v1.ReservationsClient(**compute_client_kwargs(fake_compute))
    res = client.get(project=P, zone=Z, reservation="resv")
    assert (res.specific_reservation.count, res.specific_reservation.in_use_count) == (6, 2)
    assert [r.name for r in client.list(project=P, zone=Z)] == ["resv"]


def test_boot_and_delete_hooks_run_with_name_and_zone(fake_compute_factory: Any, tmp_path: Path) -> None:
    booted: list[tuple[str, str]] = []
    done = threading.Event()
    log = tmp_path / "deleted.txt"
    script = "import sys; open(sys.argv[1], 'a').write(' '.join(sys.argv[2:]) + '\\n')"
    fake = fake_compute_factory(
        boot_delay=0.05,
        on_boot=lambda name, zone: (booted.append((name, zone)), done.set()),
        on_delete=[sys.executable, "-c", script, str(log)],
    )
    seed(fake)
    create(fake, ["n-0"])
    assert done.wait(5)
    assert booted == [("n-0", Z)]
    migs = compute_v1.InstanceGroupManagersClient(**compute_client_kwargs(fake))
    body = compute_v1.InstanceGroupManagersDeleteInstancesRequest(instances=[f"projects/{P}/zones/{Z}/instances/n-0"])
    migs.delete_instances_unary(
        project=P, zone=Z, instance_group_manager="mig", instance_group_managers_delete_instances_request_resource=body
    )
    fake.wait_idle()
    assert log.read_text() == f"n-0 {Z}\n"
    assert fake.events_of("hook-error") == []


def test_unknown_resources_are_404(fake_compute: FakeCompute) -> None:
    seed(fake_compute)
    migs = compute_v1.InstanceGroupManagersClient(**compute_client_kwargs(fake_compute))
    with pytest.raises(exceptions.NotFound, match="instanceGroupManagers/nope"):
        migs.get(project=P, zone=Z, instance_group_manager="nope")
    with pytest.raises(exceptions.NotFound, match="zones/mars-1a"):
        migs.get(project=P, zone="mars-1a", instance_group_manager="mig")


def test_reserved_capacity_needs_no_quota_and_counts_as_in_use(fake_compute: FakeCompute) -> None:
    fake_compute.add_region(R, [Z], quotas={"NVIDIA_H100_MEGA_GPUS": 0})
    fake_compute.add_mig(
        Z, "mig", "a3-megagpu-8g", accelerator="nvidia-h100-mega-80gb", gpu_count=8, reservation="resv"
    )
    fake_compute.add_reservation(Z, "resv", "a3-megagpu-8g", count=2)
    create(fake_compute, ["n-0"])
    assert not managed(fake_compute)["n-0"].last_attempt.errors.errors
    res = compute_v1.ReservationsClient(**compute_client_kwargs(fake_compute)).get(
        project=P, zone=Z, reservation="resv"
    )
    assert res.specific_reservation.in_use_count == 1


def test_preemption_follows_the_template_s_termination_action_and_the_mig_s_repair_policy(
    fake_compute: FakeCompute,
) -> None:
    """A preempted spot VM with termination action STOP is TERMINATED; its member shows `RECREATING` only in a MIG
    that repairs (GCE's default), `NONE` in one with `default_action_on_failure: DO_NOTHING` (the stack's).  What
    listManagedInstances shows once a DELETE-action VM is gone is not documented: the fake refuses to make it up."""
    fake_compute.add_region(R, [Z], quotas={"PREEMPTIBLE_NVIDIA_H100_MEGA_GPUS": 32})
    spot = {"provisioning_model": "SPOT", "accelerator": "nvidia-h100-mega-80gb", "gpu_count": 8}
    fake_compute.add_mig(Z, "stop", "a3-megagpu-8g", **spot, instance_termination_action="STOP",
                         default_action_on_failure="DO_NOTHING")  # fmt: skip
    fake_compute.add_mig(Z, "repair", "a3-megagpu-8g", **spot)  # GCE's defaults: STOP, REPAIR
    fake_compute.add_mig(Z, "gone", "a3-megagpu-8g", **spot, instance_termination_action="DELETE",
                         default_action_on_failure="DO_NOTHING")  # fmt: skip
    for i, mig in enumerate(("stop", "repair", "gone")):
        fake_compute.state.create_instances(P, Z, mig, {"instances": [{"name": f"n-{i}"}]}, None)
    fake_compute.wait_idle()
    fake_compute.preempt(Z, "n-0")
    fake_compute.preempt(Z, "n-1")
    members = {m: fake_compute.state.migs[(P, Z, m)].members for m in ("stop", "repair")}
    assert (fake_compute.instance_status(Z, "n-0"), members["stop"]["n-0"].current_action) == ("TERMINATED", "NONE")
    assert (fake_compute.instance_status(Z, "n-1"), members["repair"]["n-1"].current_action) == (
        "TERMINATED",
        "RECREATING",
    )
    with pytest.raises(ValueError, match="DELETE"):
        fake_compute.preempt(Z, "n-2")
    assert fake_compute.instance_status(Z, "n-2") == "RUNNING"
