"""GpuNodePool: instance template (NICs, accelerators, scheduling, reservation, security) and autoscaler-owned MIGs."""

from __future__ import annotations

import pytest

from components.gcp.node_pool import (
    FLEX_START_MAX_RUN_SECONDS,
    RESERVATION_KEY,
    GpuNodePool,
    GpuNodePoolArgs,
    NicArgs,
    service_account_id,
)
from fleet.catalog import CapacityType

SYSTEM = ("projects/my-proj/global/networks/sys", "projects/my-proj/regions/us-east4/subnetworks/sys-sub")
GPU = [
    (f"projects/my-proj/global/networks/gpu-{i}", f"projects/my-proj/regions/us-east4/subnetworks/gpu-{i}-sub")
    for i in range(8)
]


def pool_args(**overrides) -> GpuNodePoolArgs:
    base = dict(
        project="my-proj",
        region="us-east4",
        zones=["us-east4-a"],
        instance_group="a3mega-resv",
        base_instance_name="a3mega-resv",
        machine_type="a3-megagpu-8g",
        accelerator_type="nvidia-h100-mega-80gb",
        accelerator_count=8,
        capacity=CapacityType.RESERVATION,
        reservation="a3mega-resv",
        nics=[NicArgs(*SYSTEM)] + [NicArgs(n, s) for n, s in GPU],
        account_id="a3mega-resv-node",
        secret_ids=["a3mega-slurm-munge-key"],
        bucket_names=["ckpt-bucket"],
        sa_users=["serviceAccount:ctl@my-proj.iam.gserviceaccount.com"],
    )
    base.update(overrides)
    return GpuNodePoolArgs(**base)


def test_template_has_nine_nics_in_order_and_no_external_ip(declare):
    d = declare(lambda: GpuNodePool("resv", pool_args()))
    tpl = d.one("compute/instanceTemplate:InstanceTemplate").inputs
    nics = tpl["networkInterfaces"]
    assert len(nics) == 9
    assert [(n["network"], n["subnetwork"]) for n in nics] == [SYSTEM, *GPU]
    assert all(n["nicType"] == "GVNIC" for n in nics)
    assert all("accessConfigs" not in n and "ipv6AccessConfigs" not in n for n in nics)
    assert tpl["guestAccelerators"] == [{"type": "nvidia-h100-mega-80gb", "count": 8}]
    assert tpl["machineType"] == "a3-megagpu-8g"
    assert tpl["shieldedInstanceConfig"] == {
        "enableSecureBoot": True,
        "enableVtpm": True,
        "enableIntegrityMonitoring": True,
    }
    assert tpl["metadata"]["enable-oslogin"] == "TRUE"
    assert tpl["canIpForward"] is False


def test_reservation_pool_targets_its_reservation(declare):
    d = declare(lambda: GpuNodePool("resv", pool_args()))
    tpl = d.one("InstanceTemplate").inputs
    assert tpl["reservationAffinity"] == {
        "type": "SPECIFIC_RESERVATION",
        "specificReservation": {"key": RESERVATION_KEY, "values": ["a3mega-resv"]},
    }
    assert tpl["scheduling"]["provisioningModel"] == "STANDARD"
    assert tpl["scheduling"]["onHostMaintenance"] == "TERMINATE"


def test_spot_pool_is_spot_stopped_on_preemption_and_never_eats_reservations(declare):
    """STOP, not DELETE: the MIG repairs nothing (DO_NOTHING), so a preempted VM that GCE deleted would leave no
    TERMINATED trace, and the daemon could not tell the preemption (slurm-gcp's model: TERMINATED and preemptible).
    The daemon deletes the stopped VM once Slurm has let it go."""
    args = pool_args(capacity=CapacityType.SPOT, reservation=None, zones=["us-east4-b", "us-east4-c"])
    d = declare(lambda: GpuNodePool("spot", args))
    tpl = d.one("InstanceTemplate").inputs
    sched = tpl["scheduling"]
    assert sched["provisioningModel"] == "SPOT"
    assert sched["instanceTerminationAction"] == "STOP"
    assert sched["automaticRestart"] is False
    assert sched["onHostMaintenance"] == "TERMINATE"
    assert tpl["reservationAffinity"] == {"type": "NO_RESERVATION"}


def test_flex_start_pool_has_a_max_run_duration(declare):
    args = pool_args(capacity=CapacityType.FLEX_START, reservation=None)
    d = declare(lambda: GpuNodePool("flex", args))
    sched = d.one("InstanceTemplate").inputs["scheduling"]
    assert sched["provisioningModel"] == "FLEX_START"
    assert sched["instanceTerminationAction"] == "DELETE"
    assert sched["maxRunDuration"] == {"seconds": FLEX_START_MAX_RUN_SECONDS}
    assert d.one("InstanceTemplate").inputs["reservationAffinity"] == {"type": "NO_RESERVATION"}


def test_one_zonal_mig_per_zone_sized_by_the_autoscaler(declare):
    args = pool_args(capacity=CapacityType.SPOT, reservation=None, zones=["us-east4-b", "us-east4-c"])
    d = declare(lambda: GpuNodePool("spot", args))
    migs = d.of_type("compute/instanceGroupManager:InstanceGroupManager")
    assert {m.inputs["zone"]: m.inputs["name"] for m in migs} == {
        "us-east4-b": "a3mega-resv-us-east4-b",
        "us-east4-c": "a3mega-resv-us-east4-c",
    }
    tpl = d.one("InstanceTemplate")
    for mig in migs:
        assert mig.ignore_changes == ["targetSize"]  # `pulumi up` never resets the daemon's size
        assert mig.inputs["targetSize"] == 0
        assert mig.inputs["versions"][0]["instanceTemplate"].startswith(
            "https://www.googleapis.com/compute/v1/projects/my-proj/global/instanceTemplates/a3mega-resv-"
        )
        assert mig.inputs["instanceLifecyclePolicy"]["defaultActionOnFailure"] == "DO_NOTHING"
        assert mig.inputs["updatePolicy"]["type"] == "OPPORTUNISTIC"
    assert tpl.ignore_changes == []


def test_compact_placement_attaches_a_collocated_policy(declare):
    d = declare(lambda: GpuNodePool("od", pool_args(compact_placement=True, capacity=CapacityType.ON_DEMAND,
                                                     reservation=None, instance_group="a3mega-od")))  # fmt: skip
    policy = d.one("compute/resourcePolicy:ResourcePolicy")
    assert policy.inputs["groupPlacementPolicy"] == {"collocation": "COLLOCATED"}
    assert policy.inputs["name"] == "a3mega-od-compact"
    assert d.one("InstanceTemplate").inputs["resourcePolicies"].endswith("/resourcePolicies/a3mega-od-compact")


def test_a_reservation_pool_never_brings_its_own_placement_policy(declare):
    # a specific reservation refuses an external placement policy: it is placed by its own (RESERVATION_BOUND)
    d = declare(lambda: GpuNodePool("resv", pool_args(compact_placement=True)))
    assert d.of_type("ResourcePolicy") == []
    assert "resourcePolicies" not in d.one("InstanceTemplate").inputs


def test_compact_flex_start_uses_a_workload_policy_on_the_migs(declare):
    d = declare(lambda: GpuNodePool("flex", pool_args(compact_placement=True, capacity=CapacityType.FLEX_START,
                                                       reservation=None, instance_group="a3u-flex")))  # fmt: skip
    policy = d.one("compute/resourcePolicy:ResourcePolicy")
    assert (
        policy.inputs["workloadPolicy"] == {"type": "HIGH_THROUGHPUT"} and "groupPlacementPolicy" not in policy.inputs
    )
    assert "resourcePolicies" not in d.one("InstanceTemplate").inputs
    for mig in d.of_type("InstanceGroupManager"):
        assert mig.inputs["resourcePolicies"]["workloadPolicy"].endswith("/resourcePolicies/a3u-flex-workload")


def test_secure_boot_follows_the_image(declare):
    d = declare(lambda: GpuNodePool("resv", pool_args(image="projects/p/global/images/mine", secure_boot=False)))
    tpl = d.one("InstanceTemplate").inputs
    assert tpl["disks"][0]["sourceImage"] == "projects/p/global/images/mine"
    assert tpl["shieldedInstanceConfig"]["enableSecureBoot"] is False


def test_no_placement_policy_unless_asked(declare):
    d = declare(lambda: GpuNodePool("resv", pool_args()))
    assert d.of_type("ResourcePolicy") == []
    assert "resourcePolicies" not in d.one("InstanceTemplate").inputs


def test_dedicated_service_account_with_least_privilege(declare):
    d = declare(lambda: GpuNodePool("resv", pool_args()))
    sa = d.one("serviceaccount/account:Account")
    assert sa.inputs["accountId"] == "a3mega-resv-node"
    project_roles = sorted(r.inputs["role"] for r in d.of_type("projects/iAMMember:IAMMember"))
    assert project_roles == ["roles/logging.logWriter", "roles/monitoring.metricWriter"]
    secret = d.one("SecretIamMember").inputs
    assert (secret["secretId"], secret["role"]) == ("a3mega-slurm-munge-key", "roles/secretmanager.secretAccessor")
    bucket = d.one("BucketIAMMember").inputs
    assert (bucket["bucket"], bucket["role"]) == ("ckpt-bucket", "roles/storage.objectUser")
    user = d.one("serviceaccount/iAMMember:IAMMember").inputs
    assert user["role"] == "roles/iam.serviceAccountUser"
    assert user["member"] == "serviceAccount:ctl@my-proj.iam.gserviceaccount.com"
    email = "a3mega-resv-node@my-proj.iam.gserviceaccount.com"
    assert d.one("InstanceTemplate").inputs["serviceAccount"]["email"] == email


@pytest.mark.parametrize(
    ("overrides", "needle"),
    [
        ({"reservation": None}, "reservation"),
        ({"capacity": CapacityType.SPOT}, "reservation"),
        ({"compact_placement": True, "zones": ["us-east4-a", "us-east4-b"]}, "zones"),
        ({"zones": []}, "zones"),
        ({"nics": []}, "nics"),
        ({"account_id": "a" * 31}, "account_id"),
    ],
)
def test_bad_pool_args_are_refused(overrides, needle):
    with pytest.raises(ValueError, match=needle):
        pool_args(**overrides)


def test_service_account_ids_stay_within_gce_limits_and_distinct():
    long_a = service_account_id("a" * 20, "b" * 20, "node")
    long_b = service_account_id("a" * 20, "c" * 20, "node")
    assert 6 <= len(long_a) <= 30 and 6 <= len(long_b) <= 30
    assert long_a != long_b
    assert service_account_id("l4", "dev") == "l4-dev"


def test_the_fake_compute_api_s_groups_preempt_as_the_stack_s_templates_and_groups_declare(declare):
    """tests/fakes/compute_api.py builds the stack's MIGs with the templates' termination actions and the groups'
    failure action, and its preemption follows them: both must stay what this component declares."""
    from components.gcp.node_pool import scheduling_for
    from tests.fakes.compute_api import CAPACITY_TO_PROVISIONING, STACK_MIG_ON_FAILURE, STACK_TERMINATION_ACTION

    for capacity, model in CAPACITY_TO_PROVISIONING.items():
        declared = scheduling_for(CapacityType(capacity)).get("instance_termination_action")
        assert STACK_TERMINATION_ACTION.get(model) == declared, capacity
    d = declare(lambda: GpuNodePool("spot", pool_args(capacity=CapacityType.SPOT, reservation=None)))
    (mig,) = d.of_type("compute/instanceGroupManager:InstanceGroupManager")
    assert mig.inputs["instanceLifecyclePolicy"]["defaultActionOnFailure"] == STACK_MIG_ON_FAILURE
