"""SlurmCluster: VMs without public IPs, keys as secrets in Secret Manager, config by metadata, narrow IAM."""

from __future__ import annotations

import json
import re

import pytest

from components.gcp.slurm_cluster import SlurmCluster, SlurmClusterArgs
from components.gcp.snapshots import SnapshotSchedule
from components.gcp.startup import STATE_DISK_DEVICE, SlurmHostConfig, startup_script
from fleet.bootstrap.iam import COMPUTE_CONDITION_TYPES, PERMISSION_TYPES, autoscaler_permission_names

CONF = "ClusterName=a3mega\nNodeSet=resv Nodes=a3mega-resv-[0-15]\n"
GRES = "NodeName=a3mega-resv-[0-15] Name=gpu File=/dev/nvidia[0-7]\n"


def args(**overrides) -> SlurmClusterArgs:
    base = dict(
        name="a3mega",
        project="my-proj",
        zone="us-east4-a",
        network="projects/my-proj/global/networks/sys",
        subnetwork="projects/my-proj/regions/us-east4/subnetworks/sys-sub",
        slurm_conf=CONF,
        gres_conf=GRES,
        node_name_prefixes=["a3mega-resv", "a3mega-spot"],
        login_nodes=2,
        home="10.0.15.2:/home",
    )
    base.update(overrides)
    return SlurmClusterArgs(**base)


def test_controller_and_logins_are_private_shielded_os_login_vms(declare):
    d = declare(lambda: SlurmCluster("slurm", args()))
    vms = {r.inputs["name"]: r.inputs for r in d.of_type("compute/instance:Instance")}
    assert sorted(vms) == ["a3mega-controller", "a3mega-login-0", "a3mega-login-1"]
    for name, vm in vms.items():
        assert [("accessConfigs" in n) for n in vm["networkInterfaces"]] == [False], name
        assert vm["shieldedInstanceConfig"]["enableSecureBoot"] is True
        assert vm["metadata"]["enable-oslogin"] == "TRUE"
        assert vm["metadata"]["slurm-conf"] == CONF and vm["metadata"]["gres-conf"] == GRES
        assert "10.0.15.2:/home /home nfs" in vm["metadata"]["startup-script"]
    assert vms["a3mega-controller"]["machineType"] == "n2-standard-8"
    assert "slurmctld" in vms["a3mega-controller"]["metadata"]["startup-script"]


def test_keys_are_random_secrets_in_secret_manager(declare):
    d = declare(lambda: SlurmCluster("slurm", args()))
    keys = {r.name: r.inputs["length"] for r in d.of_type("randomBytes:RandomBytes")}
    assert keys == {"slurm-munge-key": 1024, "slurm-jwt-key": 32}
    secrets = sorted(r.inputs["secretId"] for r in d.of_type("secretmanager/secret:Secret"))
    assert secrets == ["a3mega-slurm-jwt-key", "a3mega-slurm-munge-key"]
    versions = d.of_type("secretmanager/secretVersion:SecretVersion")
    assert len(versions) == 2 and all(v.inputs["secretData"] == "[secret]" for v in versions)
    # the key material appears nowhere in what was registered, and never in VM metadata
    dumped = json.dumps([r.inputs for r in d.resources])
    assert "[secret]" in dumped
    for vm in d.of_type("compute/instance:Instance"):
        assert "munge.key" in vm.inputs["metadata"]["startup-script"]  # fetched at boot, by the VM's SA


CTL = "serviceAccount:a3mega-ctl@my-proj.iam.gserviceaccount.com"
AUTOSCALER = "serviceAccount:a3mega-autoscaler@my-proj.iam.gserviceaccount.com"
LOGIN = "serviceAccount:a3mega-login@my-proj.iam.gserviceaccount.com"


def test_the_daemon_runs_as_its_own_account_with_the_custom_role_and_nothing_else(declare):
    d = declare(lambda: SlurmCluster("slurm", args()))
    members = [r.inputs for r in d.of_type("projects/iAMMember:IAMMember")]
    by_member: dict[str, list[dict]] = {}
    for m in members:
        by_member.setdefault(m["member"], []).append(m)
    # the controller VM's own account: logs, metrics, keys; no Compute role at all
    assert sorted(m["role"] for m in by_member[CTL]) == ["roles/logging.logWriter", "roles/monitoring.metricWriter"]
    (binding,) = by_member[AUTOSCALER]
    assert binding["role"] == "projects/my-proj/roles/gpuFleetAutoscaler"
    assert not [m for m in members if m["role"].startswith("roles/compute.")]
    # the controller may mint the autoscaler's tokens (a binding on that one account), nobody else may
    (imp,) = [r.inputs for r in d.of_type("serviceaccount/iAMMember:IAMMember")]
    assert (imp["role"], imp["member"]) == ("roles/iam.serviceAccountTokenCreator", CTL)
    vms = {r.inputs["name"]: r.inputs for r in d.of_type("compute/instance:Instance")}
    assert {vm["serviceAccount"]["email"] for vm in vms.values()} == {
        "a3mega-ctl@my-proj.iam.gserviceaccount.com",
        "a3mega-login@my-proj.iam.gserviceaccount.com",
    }  # no VM runs as the autoscaler
    # keys: munge for controller and login (nodes get it from their pools), JWT for the controller only
    accessors = {(a["secretId"], a["member"]) for a in (r.inputs for r in d.of_type("SecretIamMember"))}
    assert accessors == {
        ("a3mega-slurm-munge-key", CTL),
        ("a3mega-slurm-jwt-key", CTL),
        ("a3mega-slurm-munge-key", LOGIN),
    }


def test_the_autoscalers_binding_has_no_condition_iam_would_never_grant(declare):
    """Every permission of the autoscaler's role is checked on a Compute resource type whose `resource.name` IAM
    does not evaluate (Google, "Resource attributes for IAM Conditions"), and a condition part on an attribute a
    resource lacks "is never interpreted as granting access": the binding's `resource.name` condition, which
    named the cluster's MIGs until the thirty-fifth round, granted nothing, and the daemon could not list a MIG."""
    assert {PERMISSION_TYPES[p] for p in autoscaler_permission_names()}.isdisjoint(COMPUTE_CONDITION_TYPES)
    d = declare(lambda: SlurmCluster("slurm", args()))
    (binding,) = [m for m in (r.inputs for r in d.of_type("projects/iAMMember:IAMMember")) if m["member"] == AUTOSCALER]
    assert "condition" not in binding


def test_startup_scripts_per_role():
    compute = startup_script(SlurmHostConfig(role="compute", munge_secret="k", home="1.2.3.4:/home"))
    assert "slurmd" in compute and "SLURMD_OPTIONS=-N $(hostname -s)" in compute
    assert "jwt_hs256.key" not in compute and "put_key k /etc/munge/munge.key munge" in compute
    ctl = startup_script(SlurmHostConfig(role="controller", munge_secret="k", jwt_secret="j"))
    assert "put_key j /var/spool/slurmctld/jwt_hs256.key slurm" in ctl and "slurmctld" in ctl and "/home" not in ctl
    with pytest.raises(ValueError, match="role"):
        startup_script(SlurmHostConfig(role="worker", munge_secret="k"))


def test_bad_cluster_args_are_refused():
    with pytest.raises(ValueError, match="node_name_prefixes"):
        args(node_name_prefixes=[])
    with pytest.raises(ValueError, match="login_nodes"):
        args(login_nodes=9)


def test_controller_sits_on_a_reserved_internal_address(declare):
    d = declare(lambda: SlurmCluster("slurm", args(controller_ip="10.0.15.253")))
    addr = d.one("compute/address:Address").inputs
    assert (addr["addressType"], addr["address"], addr["region"]) == ("INTERNAL", "10.0.15.253", "us-east4")
    assert addr["subnetwork"] == "projects/my-proj/regions/us-east4/subnetworks/sys-sub"
    vms = {r.inputs["name"]: r.inputs for r in d.of_type("compute/instance:Instance")}
    assert vms["a3mega-controller"]["networkInterfaces"][0]["networkIp"] == "10.0.15.253"
    assert all("networkIp" not in vms[f"a3mega-login-{i}"]["networkInterfaces"][0] for i in range(2))
    # controller and logins boot the Ubuntu release of the GPU image (slurmctld never older than slurmd)
    assert {vm["bootDisk"]["initializeParams"]["image"] for vm in vms.values()} == {
        "projects/ubuntu-os-cloud/global/images/family/ubuntu-2404-lts-amd64"
    }
    assert "put_key" in vms["a3mega-login-0"]["metadata"]["startup-script"]
    assert "jwt" not in vms["a3mega-login-0"]["metadata"]["startup-script"].replace("slurm-wlm-jwt-plugin", "")


def test_vms_boot_after_the_nat_their_key_versions_and_their_accessor_bindings(declare):
    """The first boot runs once under set -e: apt-get needs the NAT, put_key a key version its account may read.
    None of these flows into the VMs' inputs, so only an explicit dependency makes GCE create the VMs after them."""
    import pulumi_gcp as gcp

    def program():
        nat = gcp.compute.RouterNat(
            "nat", router="r", region="us-east4", nat_ip_allocate_option="AUTO_ONLY",
            source_subnetwork_ip_ranges_to_nat="ALL_SUBNETWORKS_ALL_IP_RANGES",
        )  # fmt: skip
        SlurmCluster("slurm", args(boot_after=[nat]))

    d = declare(program)
    urn = {r.name: r.urn for r in d.resources}
    vms = {r.inputs["name"]: r for r in d.of_type("compute/instance:Instance")}
    versions = {r.name: r.urn for r in d.of_type("secretmanager/secretVersion:SecretVersion")}
    assert set(versions) == {"slurm-munge-key-v", "slurm-jwt-key-v"}
    ctl = set(vms["a3mega-controller"].dependencies)
    assert {urn["nat"], *versions.values(), urn["slurm-ctl-munge"], urn["slurm-ctl-jwt"]} <= ctl
    for login in ("a3mega-login-0", "a3mega-login-1"):
        deps = set(vms[login].dependencies)
        assert {urn["nat"], versions["slurm-munge-key-v"], urn["slurm-login-munge"]} <= deps, login
        assert urn["slurm-controller-ip"] in deps  # and after the controller's address is reserved


@pytest.mark.parametrize(
    ("machine_type", "disk_type", "boot_type"),
    [("n2-standard-8", "pd-ssd", "pd-balanced"), ("c4-standard-8", "hyperdisk-balanced", "hyperdisk-balanced")],
)
def test_the_controller_keeps_its_state_on_its_own_protected_disk(declare, machine_type, disk_type, boot_type):
    """StateSaveLocation and the autoscaler's store outlive the controller VM: a disk of its own (as the Toolkit's
    controller_state_disk), in its zone, of a type its machine series attaches, attached by a device name the
    script mounts, never deleted with the VM, and protected against `pulumi up` / `destroy`."""
    d = declare(lambda: SlurmCluster("slurm", args(controller_machine_type=machine_type)))
    disk = d.one("compute/disk:Disk")
    assert (disk.inputs["zone"], disk.inputs["type"], disk.inputs["size"]) == ("us-east4-a", disk_type, 50)
    assert disk.protect and disk.inputs["labels"]["gpu-fleet-cluster"] == "a3mega"
    vms = {r.inputs["name"]: r.inputs for r in d.of_type("compute/instance:Instance")}
    ctl = vms["a3mega-controller"]
    (attached,) = ctl["attachedDisks"]
    assert attached["source"].endswith(f"/zones/us-east4-a/disks/{disk.inputs['name']}")
    assert attached["deviceName"] == STATE_DISK_DEVICE and attached.get("autoDelete", False) is False
    assert f"/dev/disk/by-id/google-{STATE_DISK_DEVICE}" in ctl["metadata"]["startup-script"]
    assert not vms["a3mega-login-0"].get("attachedDisks")  # the logins keep no state
    assert ctl["bootDisk"]["initializeParams"]["type"] == boot_type


def test_the_state_disk_is_snapshotted_daily_and_its_snapshots_outlive_it(declare):
    """The job records, the queue and the autoscaler's store are on one zonal disk: by default a snapshot schedule in
    its region takes a crash-consistent snapshot daily at 04:00 UTC, keeps each 14 days and keeps them when the disk
    is deleted; a changed schedule detaches the old one first (a disk takes one schedule at a time)."""
    d = declare(lambda: SlurmCluster("slurm", args()))
    disk = d.one("compute/disk:Disk")
    policy = d.one("compute/resourcePolicy:ResourcePolicy")
    attachment = d.one("compute/diskResourcePolicyAttachment:DiskResourcePolicyAttachment")
    assert (policy.inputs["region"], policy.inputs["project"]) == ("us-east4", "my-proj")
    schedule = policy.inputs["snapshotSchedulePolicy"]
    assert schedule["schedule"] == {"dailySchedule": {"daysInCycle": 1, "startTime": "04:00"}}
    assert schedule["retentionPolicy"] == {"maxRetentionDays": 14, "onSourceDiskDelete": "KEEP_AUTO_SNAPSHOTS"}
    assert schedule["snapshotProperties"]["labels"]["gpu-fleet-cluster"] == "a3mega"
    assert (attachment.inputs["disk"], attachment.inputs["zone"]) == (disk.inputs["name"], "us-east4-a")
    assert attachment.inputs["name"].startswith("slurm-controller-state-snapshots")  # the policy's auto-name
    assert attachment.delete_before_replace


def test_an_hourly_schedule_or_none(declare):
    hourly = declare(lambda: SlurmCluster("slurm", args(state_snapshots=SnapshotSchedule(6, "01:00", 3))))
    schedule = hourly.one("compute/resourcePolicy:ResourcePolicy").inputs["snapshotSchedulePolicy"]
    assert schedule["schedule"] == {"hourlySchedule": {"hoursInCycle": 6, "startTime": "01:00"}}
    assert schedule["retentionPolicy"]["maxRetentionDays"] == 3
    none = declare(lambda: SlurmCluster("slurm", args(state_snapshots=None)))
    assert not none.of_type("compute/resourcePolicy:ResourcePolicy")
    assert not none.of_type("compute/diskResourcePolicyAttachment:DiskResourcePolicyAttachment")


@pytest.mark.parametrize(
    ("schedule", "error"),
    [
        (
            dict(start_time="03:00"),
            "start_time: a daily snapshot schedule starts at 00:00, 04:00, 08:00, 12:00, 16:00 or 20:00 UTC (GCE's"
            " windows), got '03:00'",
        ),
        (dict(start_time="04:30"), "start_time: a snapshot schedule starts on the hour"),
        (dict(interval_hours=0), "interval_hours: 1-23 (hourly) or 24 (daily), got 0"),
        (dict(keep_days=0), "keep_days: 1-3650, got 0"),
    ],
)
def test_a_schedule_gce_would_refuse_is_refused_before_any_resource(schedule, error):
    with pytest.raises(ValueError, match=re.escape(error)):
        SnapshotSchedule(**schedule)


def test_a_changed_script_updates_the_metadata_of_the_running_vms(declare):
    """The script travels as the `startup-script` metadata key, which GCE updates in place; pulumi-gcp's
    `metadata_startup_script` replaces the VM on every change (a new autoscaler ref replaced the controller, and
    its boot disk with it)."""
    d = declare(lambda: SlurmCluster("slurm", args()))
    for vm in d.of_type("compute/instance:Instance"):
        assert "metadataStartupScript" not in vm.inputs, vm.name
        assert vm.inputs["metadata"]["startup-script"].startswith("#!/bin/bash\n"), vm.name


def test_login_vms_mount_the_checkpoint_bucket_with_a_role_on_that_bucket_alone(declare):
    """Users on a login VM see the checkpoints their jobs wrote: the login VMs mount the bucket as the GPU nodes do,
    their account gets `storage.objectUser` on that bucket (no project-wide storage role), and they boot after the
    binding exists; the controller mounts nothing."""
    d = declare(lambda: SlurmCluster("slurm", args(checkpoint_bucket="ckpt-bucket")))
    (binding,) = d.of_type("storage/bucketIAMMember:BucketIAMMember")
    assert (binding.inputs["bucket"], binding.inputs["role"]) == ("ckpt-bucket", "roles/storage.objectUser")
    assert binding.inputs["member"] == LOGIN
    assert not [r for r in d.of_type("projects/iAMMember:IAMMember") if "storage" in r.inputs["role"]]
    vms = {r.inputs["name"]: r for r in d.of_type("compute/instance:Instance")}
    for login in ("a3mega-login-0", "a3mega-login-1"):
        script = vms[login].inputs["metadata"]["startup-script"]
        assert "gcsfuse --config-file /etc/gpu-fleet/gcsfuse-checkpoints.yaml ckpt-bucket /checkpoints" in script
        assert binding.urn in set(vms[login].dependencies)
    assert "gcsfuse" not in vms["a3mega-controller"].inputs["metadata"]["startup-script"]
    plain = declare(lambda: SlurmCluster("slurm", args()))
    assert not plain.of_type("storage/bucketIAMMember:BucketIAMMember")
